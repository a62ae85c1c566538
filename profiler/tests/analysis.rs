//! Statistics, diffs, gates and the Chrome export on traces with known numbers.

mod common;

use std::collections::{BTreeSet, HashMap};

use profiler::{
    Change, Counters, DiffOptions, GateError, GpuSpan, HostSpan, OpInfo, PerToken, Phase,
    StatsOptions, Status, SynthOptions, TokenRecord, Trace, compute_diff, compute_stats,
    evaluate_gates, parse_gates, synthetic_trace,
};
use serde_json::Value;

/// A prefill and five decode steps with round numbers. Decode step `d` (1..=5) has
/// host_enqueue `10 * (d - 2)` us for d >= 3, two dispatches (`L0.q`: 1 us, `L1.q`: 3 us), GPU
/// busy 5 us, kv_len 4 + d.
fn known_trace() -> Trace {
    let mut t = synthetic_trace(&SynthOptions {
        layers: 1,
        decode_tokens: 1,
        ..SynthOptions::default()
    });
    t.meta.device.memory_bandwidth_gbps = Some(1.0);
    let q = |label: &str| OpInfo {
        label: label.into(),
        kind: "matvec".into(),
        bytes_read: 1000,
        bytes_read_per_kv: 10,
        ..OpInfo::default()
    };
    t.ops = vec![
        q("L0.q"),
        q("L1.q"),
        OpInfo {
            label: "token".into(),
            kind: "token".into(),
            ..OpInfo::default()
        },
    ];
    t.tokens = (0..6u32)
        .map(|i| {
            let start = 1_000_000 * (i as u64 + 1);
            let enqueue_us = if i >= 3 { 10 * (i as u64 - 2) } else { 99 };
            TokenRecord {
                index: i,
                phase: if i == 0 {
                    Phase::Prefill
                } else {
                    Phase::Decode
                },
                position: if i == 0 { 0 } else { 3 + i },
                n_tokens: if i == 0 { 4 } else { 1 },
                kv_len: 4 + i,
                token_id: Some(100 + i),
                start_ns: start,
                wall_ns: 100_000,
                host_enqueue_ns: enqueue_us * 1_000,
                host_wait_ns: 50_000,
                gpu_busy_ns: Some(5_000),
                counters: Counters {
                    submits_compute: 1,
                    dispatches: 2,
                    descriptor_writes: 6,
                    ..Counters::default()
                },
                host_spans: vec![
                    HostSpan("token".into(), start, 100_000, 0),
                    HostSpan("submit".into(), start + 1_000, 2_000, 1),
                ],
                gpu_spans: vec![
                    GpuSpan(2, start + 10_000, 5_000, 0, 0, 1),
                    GpuSpan(0, start + 10_000, 1_000, 0, 0, 1),
                    GpuSpan(1, start + 11_000, 3_000, 0, 0, 1),
                ],
                gpu_untimed: 0,
            }
        })
        .collect();
    t.meta.run.generated_ids = t.tokens.iter().filter_map(|r| r.token_id).collect();
    t
}

#[test]
fn stats_of_known_numbers() {
    let s = compute_stats(&known_trace(), "known", &StatsOptions::default());
    assert_eq!(s.skip_applied, 2);
    let d = s.decode.as_ref().expect("decode");
    assert_eq!(d.steps, 3);
    let e = d.metric("host_enqueue_us").expect("enqueue").summary;
    assert_eq!((e.min, e.median, e.mean, e.max), (10.0, 20.0, 20.0, 30.0));
    assert!((e.p90 - 28.0).abs() < 1e-9 && (e.p99 - 29.8).abs() < 1e-9);
    assert!((e.std_dev - 10.0).abs() < 1e-9 && (e.cv - 0.5).abs() < 1e-9);
    assert_eq!(d.metric("submits").expect("submits").summary.median, 1.0);
    assert_eq!(d.metric("gpu_us").expect("gpu").summary.median, 5.0);
    let p = s.prefill.as_ref().expect("prefill");
    assert_eq!((p.steps, p.tokens), (1, 4));
    assert_eq!(
        p.metric("host_enqueue_us").expect("enqueue").summary.max,
        99.0
    );

    // One folded row for both layers.
    assert_eq!(s.ops.len(), 1);
    let op = &s.ops[0];
    assert_eq!(op.label, "L*.q");
    assert_eq!(op.dispatches_per_token, 2.0);
    assert_eq!(op.gpu_us_median, 4.0);
    assert!((op.gpu_share - 0.8).abs() < 1e-12);
    // kv_len 7, 8, 9: bytes 2 * (1000 + 10 * kv); median at kv 8.
    assert_eq!(op.bytes_per_token, 2160.0);
    let gbps = op.achieved_gbps.expect("GB/s");
    assert!((gbps - (2.0 * (1070.0 + 1080.0 + 1090.0)) / 12_000.0).abs() < 1e-12);
    assert!((op.bandwidth_share.expect("share") - gbps).abs() < 1e-12);
    // The token span is a region row, not a dispatch.
    assert_eq!(s.regions.len(), 1);
    assert_eq!(s.regions[0].label, "token");

    let raw = compute_stats(
        &known_trace(),
        "known",
        &StatsOptions {
            skip: 0,
            fold_labels: false,
        },
    );
    let labels: Vec<&str> = raw.ops.iter().map(|o| o.label.as_str()).collect();
    assert_eq!(labels, ["L1.q", "L0.q"], "sorted by GPU time");
    assert_eq!(raw.decode.as_ref().expect("decode").steps, 5);
}

#[test]
fn skip_is_clamped_for_short_traces() {
    let t = synthetic_trace(&SynthOptions {
        layers: 1,
        decode_tokens: 3,
        ..SynthOptions::default()
    });
    let s = compute_stats(
        &t,
        "short",
        &StatsOptions {
            skip: 10,
            fold_labels: true,
        },
    );
    assert_eq!(s.skip_applied, 1);
    assert_eq!(s.decode.as_ref().expect("decode").steps, 2);
    assert!(s.notes.iter().any(|n| n.contains("instead of 10")));
}

#[test]
fn diff_of_a_trace_with_itself_is_all_same() {
    let t = common::fixture("generic");
    let d = compute_diff(&t, "a", &t, "b", &DiffOptions::default());
    assert!(d.comparability.is_empty() && d.tokens.identical && d.counters_identical());
    for p in &d.phases {
        for c in &p.counters {
            assert_eq!(c.change, Change::Same, "{}", c.name);
        }
    }
    let decode = d.phase(Phase::Decode).expect("decode");
    for m in &decode.timings {
        assert_eq!(m.change, Change::Same, "{}", m.name);
        // A and B are resampled independently, so the interval has width, around zero.
        let ci = m.ci.expect("ci");
        assert!(ci.delta == 0.0 && ci.low <= 0.0 && ci.high >= 0.0, "{ci:?}");
    }
}

#[test]
fn diff_reports_counter_changes_per_token_and_timing_changes_beyond_noise() {
    let a = known_trace();
    let mut b = known_trace();
    b.tokens[4].counters.descriptor_writes = 9;
    b.meta.run.generated_ids[3] = 7;
    let d = compute_diff(&a, "a", &b, "b", &DiffOptions::default());
    let c = d
        .phase(Phase::Decode)
        .and_then(|p| p.counter("descriptor_writes"))
        .expect("c");
    assert_eq!(
        c.per_token,
        PerToken::Differs {
            tokens: 1,
            of: 3,
            first: 1
        }
    );
    assert_eq!(c.change, Change::Same, "the median did not move");
    assert!(!d.counters_identical());
    assert_eq!(d.tokens.first_difference, Some(3));

    // Noisy timings: same distribution is noise, 30 % slower GPU work is not.
    let opts = |seed| SynthOptions {
        layers: 2,
        decode_tokens: 60,
        seed,
        ..SynthOptions::default()
    };
    let base = synthetic_trace(&opts(1));
    let same = synthetic_trace(&opts(2));
    let slow = synthetic_trace(&SynthOptions {
        gpu_scale: 1.3,
        ..opts(3)
    });
    let d = compute_diff(&base, "a", &same, "b", &DiffOptions::default());
    let gpu = d
        .phase(Phase::Decode)
        .and_then(|p| p.timing("gpu_us"))
        .expect("gpu");
    assert_eq!(gpu.change, Change::Same, "{gpu:?}");
    let d = compute_diff(&base, "a", &slow, "b", &DiffOptions::default());
    let gpu = d
        .phase(Phase::Decode)
        .and_then(|p| p.timing("gpu_us"))
        .expect("gpu");
    assert_eq!(gpu.change, Change::Increase, "{gpu:?}");
    assert!(gpu.rel.expect("rel") > 0.2);
    // Deterministic: the same seed gives the same interval.
    let again = compute_diff(&base, "a", &slow, "b", &DiffOptions::default());
    assert_eq!(again, d);
    // Ops are matched by label.
    let lm = d
        .ops
        .iter()
        .find(|o| o.label == "lm_head")
        .expect("lm_head");
    assert!(lm.a.is_some() && lm.b.is_some());
    assert_eq!(lm.change, Change::Increase);
}

#[test]
fn gate_file_errors_name_the_problem() {
    let cases = [
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"no-increase\"\ntreshold = 1\n",
            "treshold",
        ),
        (
            "[[gate]]\nmetric = \"submitz\"\ndirection = \"no-increase\"\n",
            "unknown metric `submitz`",
        ),
        ("[[gate]]\nmetric = \"submits\"\n", "missing `direction`"),
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"up\"\n",
            "no-increase",
        ),
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"max\"\n",
            "needs `limit`",
        ),
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"no-increase\"\nabs = 1\nrel = 0.1\n",
            "one threshold",
        ),
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"no-increase\"\nlimit = 1\n",
            "not `limit`",
        ),
        (
            "[[gate]]\nmetric = \"tokens_identical\"\ndirection = \"equal\"\n",
            "takes no direction",
        ),
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"decrease\"\n",
            "ratio_at_least",
        ),
        (
            "[[gate]]\nop = \"lm_head\"\nmetric = \"submits\"\ndirection = \"max\"\nlimit = 1\n",
            "not an op metric",
        ),
        (
            "[[gate]]\nmetric = \"wall_us\"\nstatistic = \"p95\"\ndirection = \"max\"\nlimit = 1\n",
            "p95",
        ),
        (
            "[[gate]]\nmetric = \"submits\"\ndirection = \"no-increase\"\nrel = -1\n",
            "finite number >= 0",
        ),
        ("", "no `[[gate]]` tables"),
        ("[gates]\n", "gates"),
    ];
    for (text, expected) in cases {
        let err = parse_gates(text, "g.toml").expect_err(text);
        let msg = err.to_string();
        assert!(msg.contains("g.toml"), "{msg}");
        assert!(msg.contains(expected), "{text:?}: {msg} lacks {expected:?}");
        assert!(matches!(
            err,
            GateError::Parse { .. } | GateError::Invalid { .. }
        ));
    }
    // The example file in the repository is valid.
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gates.example.toml"),
    )
    .expect("example");
    parse_gates(&example, "gates.example.toml").expect("example parses");
}

#[test]
fn gates_evaluate_directions_limits_and_noise() {
    let opts = |seed| SynthOptions {
        layers: 2,
        decode_tokens: 40,
        seed,
        ..SynthOptions::default()
    };
    let a = synthetic_trace(&opts(1));
    // A capture from the same distribution whose median GPU time is higher by chance, within
    // noise: the point estimate says "slower", the interval says "noise".
    let (b, d) = (2..100)
        .map(|seed| {
            let b = synthetic_trace(&opts(seed));
            let d = compute_diff(&a, "a", &b, "b", &DiffOptions::default());
            (b, d)
        })
        .find(|(_, d)| {
            d.phase(Phase::Decode)
                .and_then(|p| p.timing("gpu_us"))
                .is_some_and(|g| g.delta > 0.0 && g.change == Change::Same)
        })
        .expect("some seed gives a higher median within noise");
    drop(b);
    let gpu = d
        .phase(Phase::Decode)
        .and_then(|p| p.timing("gpu_us"))
        .expect("gpu");
    let file = parse_gates(
        r#"
[[gate]]
name = "noise-aware"
metric = "gpu_us"
direction = "no-increase"

[[gate]]
name = "point estimate"
metric = "gpu_us"
direction = "no-increase"
use_ci = false

[[gate]]
name = "at most five submits"
metric = "submits"
direction = "max"
limit = 5
capture = "both"

[[gate]]
name = "at least one dispatch"
metric = "dispatches"
statistic = "min"
direction = "min"
limit = 1

[[gate]]
metric = "counters_identical"

[[gate]]
metric = "comparable"

[[gate]]
name = "lm_head op"
op = "lm_head"
metric = "dispatches_per_token"
direction = "equal"

[[gate]]
name = "missing op"
op = "nonexistent"
metric = "gpu_us"
direction = "no-increase"
severity = "warn"
"#,
        "inline",
    )
    .expect("parse");
    let r = evaluate_gates(&file, &d);
    let status: HashMap<&str, Status> = r
        .results
        .iter()
        .map(|x| (x.name.as_str(), x.status))
        .collect();
    assert_eq!(status["noise-aware"], Status::Pass);
    assert_eq!(status["point estimate"], Status::Fail);
    assert_eq!(status["at most five submits"], Status::Pass);
    assert_eq!(status["at least one dispatch"], Status::Pass);
    assert_eq!(status["counters_identical"], Status::Pass);
    assert_eq!(status["comparable"], Status::Pass);
    assert_eq!(status["lm_head op"], Status::Pass);
    assert_eq!(status["missing op"], Status::Warn);
    assert!(r.failed());
    let failed = r
        .results
        .iter()
        .find(|x| x.name == "point estimate")
        .expect("result");
    assert_eq!(
        (failed.a, failed.b),
        (Some(gpu.a.median), Some(gpu.b.median))
    );
    assert!(
        failed.message.contains("median gpu_us"),
        "{}",
        failed.message
    );
}

/// Checks the Chrome trace structure rules on one exported trace.
fn check_chrome_structure(trace: &Trace) {
    let chrome = profiler::chrome_trace(trace);
    let v: Value = serde_json::to_value(&chrome).expect("serialize");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut named_pids = BTreeSet::new();
    let mut named_tids = BTreeSet::new();
    let mut used_pids = BTreeSet::new();
    let mut used_tids = BTreeSet::new();
    let mut starts: HashMap<u64, &Value> = HashMap::new();
    let mut ends: HashMap<u64, &Value> = HashMap::new();
    let mut slices: Vec<(u64, u64, f64, f64, String)> = Vec::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        let pid = e["pid"].as_u64().expect("pid");
        if ph != "M" {
            let ts = e["ts"].as_f64().expect("ts");
            assert!(ts >= 0.0, "negative ts: {e}");
            used_pids.insert(pid);
            used_tids.insert((pid, e["tid"].as_u64().expect("tid")));
        }
        match ph {
            "M" => match e["name"].as_str().expect("name") {
                "process_name" => {
                    assert!(e["args"]["name"].is_string());
                    named_pids.insert(pid);
                }
                "thread_name" => {
                    assert!(e["args"]["name"].is_string());
                    named_tids.insert((pid, e["tid"].as_u64().expect("tid")));
                }
                _ => {}
            },
            "X" => {
                for k in ["ts", "dur", "pid", "tid"] {
                    assert!(e[k].is_number(), "X event without {k}: {e}");
                }
                assert!(e["dur"].as_f64().expect("dur") >= 0.0);
                slices.push((
                    pid,
                    e["tid"].as_u64().expect("tid"),
                    e["ts"].as_f64().expect("ts"),
                    e["ts"].as_f64().expect("ts") + e["dur"].as_f64().expect("dur"),
                    e["name"].as_str().expect("name").to_owned(),
                ));
            }
            "s" => {
                assert!(
                    starts.insert(e["id"].as_u64().expect("id"), e).is_none(),
                    "dup id"
                );
            }
            "f" => {
                assert_eq!(e["bp"], "e", "flow end binds to the enclosing slice");
                assert!(
                    ends.insert(e["id"].as_u64().expect("id"), e).is_none(),
                    "dup id"
                );
            }
            "C" => assert!(e["args"]["value"].is_number(), "{e}"),
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(
        used_pids.is_subset(&named_pids),
        "{used_pids:?} vs {named_pids:?}"
    );
    assert!(
        used_tids.is_subset(&named_tids),
        "{used_tids:?} vs {named_tids:?}"
    );
    assert_eq!(
        starts.keys().collect::<BTreeSet<_>>(),
        ends.keys().collect::<BTreeSet<_>>(),
        "every flow start has its end"
    );
    let inside = |e: &Value, want: Option<&str>| {
        let (pid, tid, ts) = (
            e["pid"].as_u64().expect("pid"),
            e["tid"].as_u64().expect("tid"),
            e["ts"].as_f64().expect("ts"),
        );
        slices.iter().any(|(p, t, a, b, n)| {
            *p == pid && *t == tid && *a <= ts && ts <= *b && want.is_none_or(|w| w == n)
        })
    };
    for (id, s) in &starts {
        assert_eq!(s["cat"], ends[id]["cat"]);
        assert!(
            inside(s, Some("submit")),
            "flow start outside a submit span: {s}"
        );
        assert!(
            inside(ends[id], None),
            "flow end outside a GPU span: {}",
            ends[id]
        );
    }
    // One flow per submit that has GPU work.
    let expected: usize = trace
        .tokens
        .iter()
        .map(|t| {
            let subs = t.host_spans.iter().filter(|h| h.name() == "submit").count() as u32;
            t.gpu_spans
                .iter()
                .filter(|g| {
                    !profiler::stats::is_region_kind(&trace.ops[g.op() as usize].kind)
                        && g.submit() < subs
                })
                .map(|g| g.submit())
                .collect::<BTreeSet<_>>()
                .len()
        })
        .sum();
    assert_eq!(starts.len(), expected);
}

#[test]
fn chrome_export_follows_the_format_rules() {
    for name in common::FIXTURES {
        check_chrome_structure(&common::fixture(name));
    }
    check_chrome_structure(&synthetic_trace(&SynthOptions {
        layers: 1,
        decode_tokens: 3,
        submit: profiler::SynthSubmit::PerDispatch,
        ..SynthOptions::default()
    }));
    check_chrome_structure(&known_trace());
    for name in ["decoder_generic", "decoder_fused"] {
        let path = common::fixture_dir().join(format!("{name}.json"));
        check_chrome_structure(&profiler::read_trace(&path).expect("decoder capture"));
    }
}

#[test]
fn chrome_export_escapes_labels_and_rebases_time() {
    let mut t = known_trace();
    t.ops[0].label = "weird \"label\"\n\t\\ </script>".into();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("c.json");
    profiler::export_chrome(&t, &out).expect("export");
    let v: Value = serde_json::from_slice(&std::fs::read(&out).expect("read")).expect("valid JSON");
    let events = v["traceEvents"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["name"] == "weird \"label\"\n\t\\ </script>")
    );
    // The streamed file is the same document as the in-memory one.
    let in_memory = serde_json::to_value(profiler::chrome_trace(&t)).expect("serialize");
    assert_eq!(v, in_memory);
    let min_ts = events
        .iter()
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(min_ts, 0.0, "rebased to the earliest event");
}

#[test]
fn diff_lists_the_tuning_that_differs_and_skips_traces_without_it() {
    let tuning = |head_groups: u32| profiler::trace::TuningMeta {
        keys: [("attn_wg", 64), ("persistent_head_groups", head_groups)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        overrides: format!("persistent_head_groups={head_groups}"),
        persistent_grid: Some(profiler::trace::PersistentGridMeta {
            workgroups: 1,
            invocations: 64,
            subgroup_size: 8,
            head_groups: if head_groups == 2 { 4 } else { 1 },
        }),
    };
    let (mut a, mut b) = (known_trace(), known_trace());
    a.meta.run.tuning = Some(tuning(1));
    b.meta.run.tuning = Some(tuning(2));
    let d = compute_diff(&a, "a", &b, "b", &DiffOptions::default());
    let fields: Vec<(&str, &str, &str)> = d
        .comparability
        .iter()
        .map(|m| (m.field.as_str(), m.a.as_str(), m.b.as_str()))
        .collect();
    assert_eq!(
        fields,
        [
            ("tuning.persistent_head_groups", "1", "2"),
            ("tuning.grid.head_groups", "1", "4")
        ]
    );
    // --ignore takes the group and a key.
    let o = DiffOptions {
        ignore: vec!["tuning".into()],
        ..DiffOptions::default()
    };
    assert!(
        compute_diff(&a, "a", &b, "b", &o)
            .comparability
            .iter()
            .all(|m| m.ignored)
    );
    assert!(profiler::diff::check_ignore(&["tuning.persistent_head_groups".into()]).is_ok());
    // A trace written before the field: nothing to compare.
    b.meta.run.tuning = None;
    let d = compute_diff(&a, "a", &b, "b", &DiffOptions::default());
    assert!(d.comparability.is_empty(), "{:?}", d.comparability);
}

#[test]
fn spans_shared_by_concurrent_dispatches_count_once_in_the_op_table() {
    // Both dispatches of each step ran in one 4 us interval (no barrier between them): the op
    // table counts 2 us for each, the step's GPU time stays 4 us, and a note says so.
    let mut t = known_trace();
    for r in &mut t.tokens {
        let start = r.gpu_spans[1].1;
        r.gpu_spans = vec![
            GpuSpan(0, start, 4_000, 0, 0, 2),
            GpuSpan(1, start, 4_000, 0, 0, 2),
        ];
        r.gpu_busy_ns = Some(4_000);
    }
    let s = compute_stats(&t, "shared", &StatsOptions::default());
    assert_eq!(s.ops.len(), 1);
    assert_eq!(s.ops[0].gpu_us_median, 4.0);
    assert!((s.ops[0].gpu_share - 1.0).abs() < 1e-12);
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("2 of 2 dispatch spans per decode token (median) are shared")),
        "{:?}",
        s.notes
    );
    // Without shared spans there is no such note.
    let plain = compute_stats(&known_trace(), "known", &StatsOptions::default());
    assert!(!plain.notes.iter().any(|n| n.contains("are shared")));
}
