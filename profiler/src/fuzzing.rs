//! The bodies of the fuzz targets (`profiler/fuzz`), shared with the stable tests that run them in
//! CI: [`exercise_reader`] over the corpus and its byte mutations (`tests/fuzz_corpus.rs`), and
//! [`exercise_mutated`] over structured mutations of the golden traces, which reach the
//! statistics and the diff with huge, zero and overflowing values that still parse
//! (`tests/analysis_never_panics.rs`). Not part of the supported API.

use serde_json::Value;

use crate::diff::{DiffOptions, compute_diff};
use crate::export::chrome_trace;
use crate::gates::{evaluate_gates, parse_gates};
use crate::io::{from_slice, to_vec};
use crate::report::{Format, render_diff, render_stats};
use crate::rng::Rng;
use crate::stats::{StatsOptions, compute_stats};
use crate::trace::Trace;

/// Gates of every kind, evaluated on each accepted input.
const GATES: &str = r#"
[[gate]]
metric = "submits"
direction = "no-increase"
[[gate]]
metric = "gpu_us"
statistic = "p99"
direction = "max"
limit = 1000
capture = "both"
[[gate]]
metric = "wall_us"
direction = "decrease"
ratio_at_least = 2
[[gate]]
metric = "descriptor_writes"
direction = "equal"
per_token = true
[[gate]]
metric = "host_enqueue_us"
phase = "prefill"
direction = "no-decrease"
rel = 0.1
[[gate]]
op = "lm_head"
metric = "achieved_gbps"
direction = "min"
limit = 1
[[gate]]
metric = "tokens_identical"
[[gate]]
metric = "counters_identical"
"#;

/// Reads `data` as a trace; when it is accepted, runs every analysis and rendering on it. Returns
/// whether the input was accepted. Panics only on a bug.
pub fn exercise_reader(data: &[u8]) -> bool {
    let Ok(trace) = from_slice(data) else {
        return false;
    };
    exercise_analysis(&trace, &trace);
    // What was read can be written and read again.
    match to_vec(&trace) {
        Ok(bytes) => {
            if let Err(e) = from_slice(&bytes) {
                panic!("a trace that was read could not be read back after writing: {e}");
            }
        }
        Err(e) => panic!("a trace that was read could not be written: {e}"),
    }
    true
}

/// Runs the statistics of `a` and `b`, the diff of `a` against `b` with the gates of every kind,
/// every rendering and the Chrome export. Panics only on a bug.
pub fn exercise_analysis(a: &Trace, b: &Trace) {
    for t in [a, b] {
        let stats = compute_stats(t, "fuzz", &StatsOptions::default());
        let raw = compute_stats(
            t,
            "fuzz",
            &StatsOptions {
                skip: 0,
                fold_labels: false,
            },
        );
        for f in [Format::Human, Format::Markdown, Format::Json] {
            let _ = render_stats(&stats, f);
        }
        let _ = render_stats(&raw, Format::Human);
    }
    let opts = DiffOptions {
        resamples: 50,
        ..DiffOptions::default()
    };
    let diff = compute_diff(a, "a", b, "b", &opts);
    let gates = match parse_gates(GATES, "fuzz") {
        Ok(g) => g,
        Err(e) => panic!("the fuzz gate file is invalid: {e}"),
    };
    let report = evaluate_gates(&gates, &diff);
    for f in [Format::Human, Format::Markdown, Format::Json] {
        let _ = render_diff(&diff, Some(&report), f);
    }
    let _ = chrome_trace(a);
}

/// The traces the structured mutations start from: golden traces of both presets, a decoder
/// capture, an uncalibrated one and small corpus files (token, off and dispatch timestamps).
/// Embedded, so the fuzz target needs no files.
const SEEDS: [&str; 7] = [
    include_str!("../tests/data/v1/fused.json"),
    include_str!("../tests/data/v1/generic.json"),
    include_str!("../tests/data/v1/fused_region_uncalibrated.json"),
    include_str!("../tests/data/v1/decoder_fused.json"),
    include_str!("../fuzz/corpus/read_trace/minimal.json"),
    include_str!("../fuzz/corpus/read_trace/tiny_token.json"),
    include_str!("../fuzz/corpus/read_trace/tiny_off.json"),
];

/// Builds two traces from the seeds with `seed`'s mutations (numbers set to extremes such as
/// 2^64 - 1, 2^32 - 1, 0 or 1e308; array elements removed, repeated or cleared; steps taken from
/// another trace), each kept only when the reader still accepts the trace (so every case reaches
/// the analysis), and runs [`exercise_analysis`] on them both ways. Returns how many mutations were
/// kept. Panics only on a bug.
pub fn exercise_mutated(seed: u64) -> usize {
    let mut rng = Rng::new(seed);
    let read = |v: &Value| {
        serde_json::to_vec(v)
            .ok()
            .and_then(|bytes| from_slice(&bytes).ok())
    };
    let mut kept = 0;
    let mut build = |rng: &mut Rng| -> (Value, Trace) {
        let text = SEEDS[rng.below(SEEDS.len() as u64) as usize];
        let parsed = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| read(&v).map(|t| (v, t)));
        let Some((mut v, mut trace)) = parsed else {
            panic!("a seed trace is not a valid trace");
        };
        for _ in 0..=rng.below(4) {
            // A few tries for a mutation the reader accepts.
            for _ in 0..4 {
                let mut m = v.clone();
                mutate(&mut m, rng);
                if let Some(t) = read(&m) {
                    (v, trace) = (m, t);
                    kept += 1;
                    break;
                }
            }
        }
        (v, trace)
    };
    let (mut va, mut a) = build(&mut rng);
    let (vb, b) = build(&mut rng);
    if rng.below(4) == 0 {
        // B's steps in A: ops that A does not list, other lengths and phases.
        if let (Some(ta), Some(tb)) = (va.get_mut("tokens"), vb.get("tokens")) {
            *ta = tb.clone();
        }
        if let Some(t) = read(&va) {
            a = t;
            kept += 1;
        }
    }
    exercise_analysis(&a, &b);
    exercise_analysis(&b, &a);
    kept
}

/// One mutation of a JSON document: most often a number set to an extreme, else an array changed.
fn mutate(v: &mut Value, rng: &mut Rng) {
    if rng.below(5) < 4 {
        let n = count(v, &|x| x.is_number());
        if n > 0 {
            let mut k = rng.below(n as u64) as usize;
            if let Some(x) = nth(v, &|x| x.is_number(), &mut k) {
                *x = extreme(x, rng);
            }
        }
        return;
    }
    let n = count(v, &|x| x.as_array().is_some_and(|a| !a.is_empty()));
    if n == 0 {
        return;
    }
    let mut k = rng.below(n as u64) as usize;
    let Some(Value::Array(arr)) = nth(v, &|x| x.as_array().is_some_and(|a| !a.is_empty()), &mut k)
    else {
        return;
    };
    let i = rng.below(arr.len() as u64) as usize;
    match rng.below(4) {
        0 => {
            arr.remove(i);
        }
        1 => {
            let e = arr[i].clone();
            arr.insert(i, e);
        }
        2 => arr.clear(),
        _ => arr.reverse(),
    }
}

/// A number of the same kind as `x` (unsigned, signed or float) at or near a limit.
fn extreme(x: &Value, rng: &mut Rng) -> Value {
    let u = |n: u64| Value::from(n);
    if x.is_u64() {
        let old = x.as_u64().unwrap_or(0);
        match rng.below(10) {
            0 => u(u64::MAX),
            1 => u(u64::MAX - rng.below(1 << 20)),
            2 => u(1 << 63),
            3 => u(u64::from(u32::MAX)),
            4 => u(u64::from(u32::MAX) + 1),
            5 => u(0),
            6 => u(1),
            7 => u(rng.next_u64()),
            8 => u(old.saturating_mul(1 << 40)),
            _ => u(old.wrapping_sub(1)),
        }
    } else if x.is_i64() {
        match rng.below(3) {
            0 => Value::from(i64::MIN),
            1 => Value::from(i64::MAX),
            _ => Value::from(0),
        }
    } else {
        let f =
            [0.0, -0.0, 1e308, -1e308, f64::MAX, 5e-324, -1.0, 1e-9, 1e18][rng.below(9) as usize];
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

/// How many values in `v` (itself included) satisfy `p`.
fn count(v: &Value, p: &dyn Fn(&Value) -> bool) -> usize {
    let inner = match v {
        Value::Array(a) => a.iter().map(|x| count(x, p)).sum(),
        Value::Object(o) => o.values().map(|x| count(x, p)).sum(),
        _ => 0,
    };
    inner + usize::from(p(v))
}

/// The `k`-th value of `v` (depth first, a container before its contents) that satisfies `p`.
fn nth<'a>(v: &'a mut Value, p: &dyn Fn(&Value) -> bool, k: &mut usize) -> Option<&'a mut Value> {
    if p(v) {
        if *k == 0 {
            return Some(v);
        }
        *k -= 1;
    }
    match v {
        Value::Array(a) => a.iter_mut().find_map(|x| nth(x, p, k)),
        Value::Object(o) => o.values_mut().find_map(|x| nth(x, p, k)),
        _ => None,
    }
}
