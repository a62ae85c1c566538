//! The `profiler` binary's exit codes and messages: 0 pass, 1 a gate failed, 2 bad input.

mod common;

use common::{fixture_path, run_profiler};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn extra_submit_per_token_fails_the_gate_with_exit_1_naming_submits() {
    fixture_path("generic");
    fixture_path("generic_extra_submit");
    let out = run_profiler(&[
        "diff",
        "--gates",
        "../gates/no_extra_submits.toml",
        "generic.json",
        "generic_extra_submit.json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("gate failed: no extra submits: submits median decode: A 5 B 6"),
        "{stderr}"
    );
    // The same trace against itself passes.
    let out = run_profiler(&[
        "diff",
        "--gates",
        "../gates/no_extra_submits.toml",
        "generic.json",
        "generic.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn warnings_do_not_fail() {
    fixture_path("generic");
    fixture_path("generic_extra_submit");
    let dir = tempfile::tempdir().expect("tempdir");
    let gates = dir.path().join("warn.toml");
    std::fs::write(
        &gates,
        "[[gate]]\nmetric = \"submits\"\ndirection = \"no-increase\"\nseverity = \"warn\"\n",
    )
    .expect("write gates");
    let out = run_profiler(&[
        "diff",
        "--gates",
        gates.to_str().expect("utf-8 path"),
        "generic.json",
        "generic_extra_submit.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("WARN"), "{}", text(&out));
}

#[test]
fn bad_gate_file_exits_2_naming_the_key() {
    fixture_path("generic");
    let dir = tempfile::tempdir().expect("tempdir");
    let gates = dir.path().join("typo.toml");
    std::fs::write(
        &gates,
        "[[gate]]\nmetric = \"submits\"\ndirection = \"no-increase\"\ntreshold = 3\n",
    )
    .expect("write gates");
    let out = run_profiler(&[
        "diff",
        "--gates",
        gates.to_str().expect("utf-8 path"),
        "generic.json",
        "generic.json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("treshold") && err.contains("typo.toml"),
        "{err}"
    );
}

#[test]
fn missing_gate_file_exits_2() {
    fixture_path("generic");
    let out = run_profiler(&[
        "diff",
        "--gates",
        "nope.toml",
        "generic.json",
        "generic.json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nope.toml"));
}

#[test]
fn unreadable_trace_exits_2_naming_it() {
    let out = run_profiler(&["stats", "does-not-exist.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("does-not-exist.json"), "{}", text(&out));
    let out = run_profiler(&["diff", "does-not-exist.json", "generic.json"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn strict_refuses_incomparable_captures_unless_ignored() {
    fixture_path("generic");
    fixture_path("fused");
    let out = run_profiler(&["diff", "--strict", "generic.json", "fused.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("knobs.submit") && err.contains("not comparable"),
        "{err}"
    );
    let out = run_profiler(&[
        "diff",
        "--strict",
        "--ignore",
        "knobs",
        "generic.json",
        "fused.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Without --strict a mismatch is a warning only.
    let out = run_profiler(&["diff", "generic.json", "fused.json"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).contains("WARNING"));
}

#[test]
fn cross_capture_ratio_gate() {
    fixture_path("generic");
    fixture_path("fused");
    let dir = tempfile::tempdir().expect("tempdir");
    let gates = dir.path().join("ratio.toml");
    // generic: 5 submits per token, fused: 1, so the ratio is 5.
    std::fs::write(
        &gates,
        "[[gate]]\nmetric = \"submits\"\ndirection = \"decrease\"\nratio_at_least = 4\n\n\
         [[gate]]\nname = \"ten times fewer\"\nmetric = \"submits\"\ndirection = \"decrease\"\nratio_at_least = 10\n",
    )
    .expect("write gates");
    let out = run_profiler(&[
        "diff",
        "--gates",
        gates.to_str().expect("utf-8 path"),
        "generic.json",
        "fused.json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("gate failed: ten times fewer"), "{t}");
    assert!(t.contains("A / B >= 10") && t.contains("ratio 5"), "{t}");
    assert!(t.contains("1 passed, 0 warned, 1 failed"), "{t}");
}

#[test]
fn export_writes_a_chrome_trace_and_synth_trace_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.json");
    let out = run_profiler(&[
        "synth-trace",
        trace.to_str().expect("utf-8"),
        "--decode-tokens",
        "3",
        "--layers",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let chrome = dir.path().join("t.chrome.json");
    let out = run_profiler(&[
        "export",
        "--format",
        "chrome",
        trace.to_str().expect("utf-8"),
        chrome.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Exporting its own output back is refused with a pointer to the right input.
    let out = run_profiler(&["stats", chrome.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("Chrome trace-event file"),
        "{}",
        text(&out)
    );
}

/// Runs the profiler on an input that a regression would read forever: the child is killed and
/// the test fails if it has not exited after a generous minute (a guard, not a timing check).
#[cfg(unix)]
fn run_profiler_guarded(args: &[&str]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run profiler");
    for _ in 0..600 {
        if child.try_wait().expect("wait for profiler").is_some() {
            return child.wait_with_output().expect("profiler output");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("profiler {args:?} did not finish: it is reading an input that never ends");
}

/// The one sentence of an error: a single line that names the path and says what it is.
#[cfg(unix)]
fn assert_refused(out: &std::process::Output, path: &str, what: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    assert!(out.stdout.is_empty(), "{}", text(out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(path) && err.contains(what), "{err}");
    assert_eq!(err.matches("not a regular file").count(), 1, "{err}");
}

#[cfg(unix)]
#[test]
fn inputs_that_never_end_are_refused() {
    // A character device that reads zeros forever.
    let out = run_profiler_guarded(&["stats", "/dev/zero"]);
    assert_refused(&out, "/dev/zero", "character device");
    let out = run_profiler_guarded(&["export", "--format", "chrome", "/dev/zero", "/dev/null"]);
    assert_refused(&out, "/dev/zero", "character device");

    // A FIFO with no writer: opening it to read would block for ever.
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("trace.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    let fifo = fifo.to_str().expect("utf-8 path");
    let out = run_profiler_guarded(&["stats", fifo]);
    assert_refused(&out, fifo, "FIFO");
    fixture_path("generic");
    let generic = common::fixture_dir().join("generic.json");
    let generic = generic.to_str().expect("utf-8 path");
    let out = run_profiler_guarded(&["diff", generic, fifo]);
    assert_refused(&out, fifo, "FIFO");
    // A gate file is read the same way.
    let out = run_profiler_guarded(&["diff", "--gates", "/dev/zero", generic, generic]);
    assert_refused(&out, "/dev/zero", "character device");
    // A directory is not a trace either.
    let d = dir.path().to_str().expect("utf-8 path");
    let out = run_profiler_guarded(&["stats", d]);
    assert_refused(&out, d, "directory");
}
