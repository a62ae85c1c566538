//! Flags that would have no effect are refused with a sentence naming what would work:
//! `profiler diff --ignore` takes only a comparability field or group.

mod common;

use common::{fixture_path, run_profiler};
use profiler::diff::{COMPARABILITY_FIELDS, check_ignore};

#[test]
fn diff_refuses_an_ignore_that_names_nothing() {
    fixture_path("generic");
    fixture_path("fused");
    let out = run_profiler(&[
        "diff",
        "--ignore",
        "bogusfield",
        "generic.json",
        "fused.json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--ignore bogusfield")
            && stderr.contains("knobs.submit")
            && stderr.contains("knobs, run"),
        "{stderr}"
    );
    for good in ["knobs", "knobs.submit", "run.kv_layout", "device"] {
        let out = run_profiler(&["diff", "--ignore", good, "generic.json", "fused.json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "--ignore {good}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A prefix that is not a whole group is not a group.
    assert!(check_ignore(&["kno".to_owned()]).is_err());
    assert!(check_ignore(&["knobs.".to_owned()]).is_err());
}

/// The list `--ignore` is checked against is the list the diff compares: two captures that
/// differ in every comparability field report exactly these fields.
#[test]
fn the_ignore_list_is_the_compared_list() {
    let a = profiler::synthetic_trace(&profiler::SynthOptions {
        layers: 1,
        prompt_tokens: 2,
        decode_tokens: 4,
        ..profiler::SynthOptions::default()
    });
    let mut v = serde_json::to_value(&a).expect("to json");
    for group in ["model", "device", "knobs", "run"] {
        if let Some(serde_json::Value::Object(o)) = v["meta"].get_mut(group) {
            for x in o.values_mut() {
                match x {
                    serde_json::Value::String(s) => s.push('x'),
                    serde_json::Value::Number(n) => {
                        if let Some(u) = n.as_u64() {
                            *x = (u + 1).into();
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let mut b: profiler::Trace = serde_json::from_value(v).expect("from json");
    // Fields a synthetic trace leaves at their defaults (and out of its JSON).
    let r = &mut b.meta.run;
    r.kv_dtype = "f16".into();
    r.kv_block_size += 16;
    r.kv_window += 64;
    r.paged_attention = "gather".into();
    r.batch = a.meta.run.batch.max(1) + 1;
    let d = profiler::compute_diff(
        &a,
        "a",
        &b,
        "b",
        &profiler::DiffOptions {
            resamples: 10,
            ..profiler::DiffOptions::default()
        },
    );
    let mut found: Vec<&str> = d.comparability.iter().map(|m| m.field.as_str()).collect();
    let mut listed = COMPARABILITY_FIELDS.to_vec();
    found.sort_unstable();
    listed.sort_unstable();
    assert_eq!(found, listed);
}
