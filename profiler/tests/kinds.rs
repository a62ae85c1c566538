//! Op kinds: a foreign program's dispatches classified by the op-kind rules, the per-kind table of
//! `stats`, the untimed-dispatch line, and `diff` by kind where the labels of A and B do not line
//! up (a llama.cpp-like capture against the decoder's fused preset).

mod common;

use common::{fixture, fixture_path, llama_like, run_profiler};
use profiler::{Format, KindRules, compute_diff, compute_stats, render_diff, render_stats};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn classified(mut t: profiler::Trace) -> profiler::Trace {
    KindRules::builtin().classify_foreign(&mut t);
    t
}

#[test]
fn the_kind_table_sums_the_op_table_by_kind() {
    let t = fixture("generic");
    let s = compute_stats(&t, "generic.json", &Default::default());
    assert!(!s.kinds.is_empty());
    for k in &s.kinds {
        assert_eq!(k.label, k.kind);
        let ops: Vec<_> = s.ops.iter().filter(|o| o.kind == k.kind).collect();
        assert!(!ops.is_empty(), "{}", k.kind);
        let sum = |f: fn(&profiler::OpRow) -> f64| ops.iter().map(|o| f(o)).sum::<f64>();
        // Means and shares add up; the median of the sums is per step, as the op table's is.
        assert!(
            (k.gpu_us_mean - sum(|o| o.gpu_us_mean)).abs() < 1e-6,
            "{}",
            k.kind
        );
        assert!(
            (k.gpu_share - sum(|o| o.gpu_share)).abs() < 1e-9,
            "{}",
            k.kind
        );
        assert!((k.dispatches_per_token - sum(|o| o.dispatches_per_token)).abs() < 1e-9);
        let per_step: Vec<f64> = (0..k.gpu_us_samples.len())
            .map(|i| ops.iter().map(|o| o.gpu_us_samples[i]).sum())
            .collect();
        let median = profiler::Summary::of(&per_step).median;
        assert!((k.gpu_us_median - median).abs() < 1e-6, "{}", k.kind);
    }
    // Largest first, and every dispatch's time is in some kind.
    assert!(
        s.kinds
            .windows(2)
            .all(|w| w[0].gpu_us_mean >= w[1].gpu_us_mean - 1e-9)
    );
    let total: f64 = s.kinds.iter().map(|k| k.gpu_share).sum();
    let ops_total: f64 = s.ops.iter().map(|o| o.gpu_share).sum();
    assert!((total - ops_total).abs() < 1e-9);
    let human = render_stats(&s, Format::Human);
    assert!(human.contains("op kinds: decode, per token"), "{human}");
    // A decoder trace has no untimed dispatches and says nothing about them.
    assert!(s.untimed.is_none());
    assert!(!human.contains("no GPU span"), "{human}");
}

#[test]
fn a_foreign_trace_gets_kinds_when_read() {
    let raw = llama_like(1, 0);
    // Unclassified, every dispatch is one kind `dispatch`, with a note saying what to do.
    let s = compute_stats(&raw, "llama.json", &Default::default());
    assert_eq!(s.kinds.len(), 1);
    assert_eq!(s.kinds[0].kind, "dispatch");
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("match no op-kind rule") && n.contains("--op-kinds FILE")),
        "{:?}",
        s.notes
    );
    let t = classified(raw);
    let s = compute_stats(&t, "llama.json", &Default::default());
    let kinds: Vec<&str> = s.kinds.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(kinds[0], "matvec", "{kinds:?}");
    for k in [
        "norm",
        "rope",
        "attention",
        "kv",
        "elementwise",
        "embed",
        "copy",
    ] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    assert!(!kinds.contains(&"dispatch"));
    assert!(!s.notes.iter().any(|n| n.contains("op-kind rule")));
    // The decoder's own traces are left alone.
    let mut d = fixture("fused");
    assert_eq!(KindRules::builtin().classify_foreign(&mut d), 0);
    assert_eq!(d, fixture("fused"));
}

#[test]
fn untimed_dispatches_are_reported_never_silently() {
    let t = classified(llama_like(1, 3));
    let s = compute_stats(&t, "llama.json", &Default::default());
    let u = s.untimed.as_ref().expect("untimed");
    assert_eq!(u.decode_untimed_per_token, 3.0);
    assert_eq!(u.decode_steps_with_untimed, u.decode_steps);
    assert_eq!(u.capture_untimed_dispatches, 27);
    let dispatches = s
        .decode
        .as_ref()
        .and_then(|d| d.metric("dispatches"))
        .expect("dispatches")
        .summary
        .median;
    assert_eq!(u.decode_dispatches_per_token, dispatches);
    let human = render_stats(&s, Format::Human);
    let line = format!(
        "3 of {} dispatches per decode token (median) have no GPU span",
        profiler::fmt_value(dispatches)
    );
    assert!(human.contains(&line), "{human}");
    assert!(
        human.contains("GPU time and the op table cover the rest"),
        "{human}"
    );
    // The per-step metric, in the decode table of a trace that has any.
    assert!(
        s.decode
            .as_ref()
            .and_then(|d| d.metric("gpu_untimed"))
            .is_some_and(|m| m.summary.median == 3.0)
    );
    let json: serde_json::Value =
        serde_json::from_str(&render_stats(&s, Format::Json)).expect("json");
    assert_eq!(json["untimed"]["decode_untimed_per_token"], 3.0);
    assert_eq!(json["untimed"]["capture_untimed_dispatches"], 27);

    // Untimed only outside the decode steps: still said.
    let mut t = classified(llama_like(1, 0));
    if let Some(c) = t.meta.capture.as_mut() {
        c.untimed_dispatches = 5;
    }
    let s = compute_stats(&t, "llama.json", &Default::default());
    let human = render_stats(&s, Format::Human);
    assert!(
        human.contains("5 dispatches elsewhere in the capture"),
        "{human}"
    );
    // And diff says it for the side that has them.
    let d = compute_diff(
        &fixture("fused"),
        "fused.json",
        &classified(llama_like(1, 3)),
        "llama.json",
        &Default::default(),
    );
    assert!(d.a_untimed.is_none() && d.b_untimed.is_some());
    let human = render_diff(&d, None, Format::Human);
    assert!(human.contains("untimed in B: 3 of"), "{human}");
}

#[test]
fn llama_against_the_fused_preset_compares_matvec_with_matvec() {
    let fused = fixture("fused");
    let llama = classified(llama_like(2, 0));
    let d = compute_diff(
        &llama,
        "llama.json",
        &fused,
        "fused.json",
        &Default::default(),
    );
    // Only embed, argmax and the like share a label: the labels do not line up.
    let o = d.label_overlap.as_ref().expect("overlap");
    assert!(!o.lines_up(), "{o:?}");
    assert!(!d.labels_line_up());
    assert_eq!(o.weight, "gpu_time");
    let matvec = d.kinds.iter().find(|k| k.kind == "matvec").expect("matvec");
    let (a, b) = (
        matvec.a.as_ref().expect("A's matvec"),
        matvec.b.as_ref().expect("B's matvec"),
    );
    assert!(a.gpu_us_median > 0.0 && b.gpu_us_median > 0.0);
    assert!(
        matvec.ci.is_some(),
        "6 analysed tokens a side give an interval"
    );
    // No kind is left unclassified, and the kinds of both sides line up row by row.
    assert!(d.kinds.iter().all(|k| k.kind != "dispatch"));
    assert!(d.both_have_kinds());

    // Human output: the reason, then the kinds before the labels.
    let human = render_diff(&d, None, Format::Human);
    assert!(human.contains("op labels do not line up"), "{human}");
    let kinds_at = human.find("op kinds: decode").expect("kind table");
    let ops_at = human.find("ops: decode").expect("op table");
    assert!(kinds_at < ops_at, "{human}");
    let row = human[kinds_at..]
        .lines()
        .find(|l| l.trim_start().starts_with("matvec"))
        .expect("matvec row");
    assert!(!row.contains("only in"), "{row}");
    // JSON carries both.
    let json: serde_json::Value =
        serde_json::from_str(&render_diff(&d, None, Format::Json)).expect("json");
    assert!(
        json["diff"]["kinds"]
            .as_array()
            .is_some_and(|k| !k.is_empty())
    );
    assert_eq!(json["diff"]["label_overlap"]["weight"], "gpu_time");

    // Without classification the foreign side is one `dispatch` row: nothing to compare by kind.
    let raw = compute_diff(
        &llama_like(2, 0),
        "llama.json",
        &fused,
        "fused.json",
        &Default::default(),
    );
    assert!(!raw.both_have_kinds());

    // Two traces of one preset line up by label; the kind table still follows the op table.
    let same = compute_diff(
        &fixture("generic"),
        "a",
        &fixture("generic_extra_submit"),
        "b",
        &Default::default(),
    );
    assert!(same.labels_line_up());
    let human = render_diff(&same, None, Format::Human);
    assert!(!human.contains("do not line up"), "{human}");
    let kinds_at = human.find("op kinds: decode").expect("kind table");
    assert!(human.find("ops: decode").expect("op table") < kinds_at);
}

#[test]
fn the_cli_reads_rule_files_and_names_bad_ones() {
    fixture_path("fused");
    let dir = tempfile::tempdir().expect("tempdir");
    let llama = dir.path().join("llama.json");
    let mut t = llama_like(1, 0);
    // A kernel no built-in rule knows.
    for op in t.ops.iter_mut().filter(|o| o.label.starts_with("set_rows")) {
        op.label = "my_cache_write".into();
    }
    profiler::write_trace(&llama, &t).expect("write");
    let llama = llama.to_str().expect("utf-8 path");

    let out = run_profiler(&["stats", "--format", "json", llama]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let kinds: Vec<&str> = json["kinds"]
        .as_array()
        .expect("kinds")
        .iter()
        .filter_map(|k| k["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"matvec") && kinds.contains(&"dispatch"),
        "{kinds:?}"
    );

    let rules = dir.path().join("kinds.toml");
    std::fs::write(
        &rules,
        "# my runtime\n[[rule]]\npattern = \"my_cache_*\"\nkind = \"kv\"\n",
    )
    .expect("write rules");
    let rules = rules.to_str().expect("utf-8 path");
    let out = run_profiler(&["stats", "--op-kinds", rules, "--format", "json", llama]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let kinds: Vec<&str> = json["kinds"]
        .as_array()
        .expect("kinds")
        .iter()
        .filter_map(|k| k["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"kv") && !kinds.contains(&"dispatch"),
        "{kinds:?}"
    );

    // Only the file's rules: everything else stays `dispatch`.
    let out = run_profiler(&[
        "stats",
        "--op-kinds",
        rules,
        "--no-builtin-kinds",
        "--format",
        "json",
        llama,
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let kinds: Vec<&str> = json["kinds"]
        .as_array()
        .expect("kinds")
        .iter()
        .filter_map(|k| k["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["dispatch", "kv"], "{}", text(&out));

    // diff takes them too.
    let out = run_profiler(&["diff", "--op-kinds", rules, "fused.json", llama]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("op kinds: decode"), "{}", text(&out));

    // A bad file: exit 2, the file, the line and the field named, the kinds listed.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[rule]]\npattern = \"my_*\"\nkind = \"gemv\"\n").expect("write");
    let bad = bad.to_str().expect("utf-8 path");
    for cmd in ["stats", "diff"] {
        let mut args = vec![cmd, "--op-kinds", bad, llama];
        if cmd == "diff" {
            args.push(llama);
        }
        let out = run_profiler(&args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(bad) && err.contains("line 3"), "{err}");
        assert!(
            err.contains("`kind`") && err.contains("matvec, rope"),
            "{err}"
        );
    }
}
