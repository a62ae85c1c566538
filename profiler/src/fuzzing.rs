//! The body of the reader's fuzz target (`profiler/fuzz`), shared with the stable test that runs
//! it over the corpus (`tests/fuzz_corpus.rs`). Not part of the supported API.

use crate::diff::{DiffOptions, compute_diff};
use crate::export::chrome_trace;
use crate::gates::{evaluate_gates, parse_gates};
use crate::io::{from_slice, to_vec};
use crate::report::{Format, render_diff, render_stats};
use crate::stats::{StatsOptions, compute_stats};

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
    let stats = compute_stats(&trace, "fuzz", &StatsOptions::default());
    let raw = compute_stats(
        &trace,
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
    let opts = DiffOptions {
        resamples: 50,
        ..DiffOptions::default()
    };
    let diff = compute_diff(&trace, "a", &trace, "b", &opts);
    let gates = match parse_gates(GATES, "fuzz") {
        Ok(g) => g,
        Err(e) => panic!("the fuzz gate file is invalid: {e}"),
    };
    let report = evaluate_gates(&gates, &diff);
    for f in [Format::Human, Format::Markdown, Format::Json] {
        let _ = render_diff(&diff, Some(&report), f);
    }
    let _ = chrome_trace(&trace);
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
