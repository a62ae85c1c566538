//! Golden-file tests: `profiler stats`, `diff` and `export` on the committed fixture traces,
//! compared exactly with `tests/data/golden/`. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p profiler --test golden` and review the diff.

mod common;

use common::{check_golden, fixture_dir, fixture_path, run_profiler};

fn stdout_of(args: &[&str], expected_code: i32) -> String {
    for f in common::FIXTURES {
        fixture_path(f);
    }
    let out = run_profiler(args);
    assert_eq!(
        out.status.code(),
        Some(expected_code),
        "profiler {args:?}: stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn stats_generic_human() {
    check_golden(
        "stats_generic.txt",
        &stdout_of(&["stats", "generic.json"], 0),
    );
}

#[test]
fn stats_generic_markdown() {
    check_golden(
        "stats_generic.md",
        &stdout_of(&["stats", "--format", "markdown", "generic.json"], 0),
    );
}

#[test]
fn stats_generic_json() {
    check_golden(
        "stats_generic.json",
        &stdout_of(&["stats", "--format", "json", "generic.json"], 0),
    );
}

#[test]
fn stats_region_uncalibrated_per_label() {
    check_golden(
        "stats_fused_region_uncalibrated.txt",
        &stdout_of(
            &[
                "stats",
                "--per-label",
                "--skip",
                "1",
                "fused_region_uncalibrated.json",
            ],
            0,
        ),
    );
}

#[test]
fn diff_generic_fused_with_example_gates() {
    let gates = "../../../gates.example.toml";
    check_golden(
        "diff_generic_fused.txt",
        &stdout_of(&["diff", "--gates", gates, "generic.json", "fused.json"], 0),
    );
    check_golden(
        "diff_generic_fused.md",
        &stdout_of(
            &[
                "diff",
                "--format",
                "markdown",
                "--gates",
                gates,
                "generic.json",
                "fused.json",
            ],
            0,
        ),
    );
    check_golden(
        "diff_generic_fused.json",
        &stdout_of(
            &[
                "diff",
                "--format",
                "json",
                "--gates",
                gates,
                "generic.json",
                "fused.json",
            ],
            0,
        ),
    );
}

#[test]
fn diff_extra_submit_fails_gate() {
    check_golden(
        "diff_generic_extra_submit.txt",
        &stdout_of(
            &[
                "diff",
                "--gates",
                "../gates/no_extra_submits.toml",
                "generic.json",
                "generic_extra_submit.json",
            ],
            1,
        ),
    );
}

#[test]
fn export_generic_chrome() {
    fixture_path("generic");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("generic.chrome.json");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(["export", "--format", "chrome", "generic.json"])
        .arg(&out)
        .current_dir(fixture_dir())
        .output()
        .expect("run profiler");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("read export");
    let value: serde_json::Value = serde_json::from_str(&text).expect("export is JSON");
    // One event per line keeps the golden file reviewable.
    let mut lines = String::new();
    for e in value["traceEvents"].as_array().expect("traceEvents") {
        lines.push_str(&serde_json::to_string(e).expect("event"));
        lines.push('\n');
    }
    for key in ["displayTimeUnit", "otherData"] {
        lines.push_str(&format!("{key}: {}\n", value[key]));
    }
    check_golden("export_generic.chrome.txt", &lines);
}

/// Real captures by `decoder capture --model tiny --max-tokens 8 --timestamps dispatch` on
/// lavapipe (committed as written).
#[test]
fn decoder_captures() {
    check_golden(
        "stats_decoder_generic.txt",
        &stdout_of(&["stats", "decoder_generic.json"], 0),
    );
    check_golden(
        "diff_decoder_generic_fused.md",
        &stdout_of(
            &[
                "diff",
                "--format",
                "markdown",
                "--gates",
                "../../../gates.example.toml",
                "decoder_generic.json",
                "decoder_fused.json",
            ],
            0,
        ),
    );
}
