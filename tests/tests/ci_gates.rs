//! The CI gates of issue 9, end to end through the two binaries: a capture with a deliberately
//! worse knob fails the baseline gates with exit code 1 naming the metric, and a trace of another
//! model is flagged as not comparable.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{built, root};

/// Runs `decoder capture` with the CI's capture arguments (traces/capture.env) plus `extra`.
fn capture(out: &Path, extra: &str) {
    let script = format!(
        "source traces/capture.env && \"$DECODER\" capture --out '{}' \"${{CAPTURE_ARGS[@]}}\" {extra}",
        out.display()
    );
    let o = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(root())
        .env("DECODER", built("decoder"))
        .output()
        .expect("run decoder capture");
    assert!(
        o.status.success(),
        "capture failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn diff(a: &Path, b: &Path, args: &[&str]) -> Output {
    Command::new(built("profiler"))
        .arg("diff")
        .arg(a)
        .arg(b)
        .args(args)
        .current_dir(root())
        .output()
        .expect("run profiler diff")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_worse_knob_fails_the_baseline_gates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worse = dir.path().join("fused-submit-every-1.json");
    capture(&worse, "--mode fused --submit every:1");
    let baseline = root().join("traces/fused.json");
    let o = diff(&baseline, &worse, &["--gates", "traces/gates.toml"]);
    let t = text(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected a failed gate (exit 1):\n{t}"
    );
    let failed: Vec<&str> = t.lines().filter(|l| l.contains("FAIL")).collect();
    assert!(
        failed.iter().any(|l| l.contains("submits")),
        "no failed gate names `submits`:\n{t}"
    );

    // The unchanged preset passes the same gates.
    let same = dir.path().join("fused.json");
    capture(&same, "--mode fused");
    let o = diff(&baseline, &same, &["--gates", "traces/gates.toml"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the fused preset fails its own baseline:\n{}",
        text(&o)
    );
}

#[test]
fn another_model_is_not_comparable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("tiny-llama.json");
    capture(&other, "--mode fused --model tiny-llama");
    let baseline = root().join("traces/fused.json");
    let strict = diff(&baseline, &other, &["--strict"]);
    let t = text(&strict);
    assert_eq!(
        strict.status.code(),
        Some(2),
        "--strict must refuse another model:\n{t}"
    );
    assert!(
        t.contains("model"),
        "the refusal must name the model field:\n{t}"
    );
    let gated = diff(&baseline, &other, &["--gates", "traces/gates.toml"]);
    let t = text(&gated);
    assert_eq!(
        gated.status.code(),
        Some(1),
        "the `comparable` gate must fail:\n{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("FAIL") && l.contains("comparable")),
        "{t}"
    );
}

#[test]
fn a_trace_of_another_device_is_not_comparable() {
    let baseline = root().join("traces/fused.json");
    let mut trace = profiler::io::read_trace(&baseline).expect("read the baseline");
    trace.meta.device.name = "NVIDIA H100 80GB HBM3".into();
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("other-device.json");
    profiler::io::write_trace(&other, &trace).expect("write");
    let o = diff(&baseline, &other, &["--strict"]);
    let t = text(&o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "--strict must refuse another device:\n{t}"
    );
    assert!(t.contains("device"), "{t}");
}
