//! `--tuning` end to end: two captures of the persistent kernel that differ in one tuning key
//! record it in their traces, and `profiler diff` names the key; a wrong key or value is refused
//! with the list of keys.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{built, root};

fn decoder(args: &[&str]) -> Output {
    Command::new(built("decoder"))
        .args(args)
        .current_dir(root())
        .env_remove("DECODESCOPE_TUNING")
        .output()
        .expect("run decoder")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The persistent kernel on tiny, 4 decode tokens, under `tuning`.
fn capture(out: &Path, tuning: &str) {
    let o = decoder(&[
        "capture",
        "--model",
        "tiny",
        "--mode",
        "fused",
        "--kernels",
        "persistent",
        "--max-tokens",
        "4",
        "--no-probe",
        "--tuning",
        tuning,
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(
        o.status.success(),
        "capture --tuning {tuning}:\n{}",
        text(&o)
    );
}

#[test]
fn diff_names_the_tuning_that_differs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    capture(&a, "persistent_head_groups=1");
    capture(&b, "persistent_head_groups=2");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&b).expect("read b")).expect("json");
    let tuning = &trace["meta"]["run"]["tuning"];
    for k in &decoder::exec::program::tuning::TUNING_KEYS {
        assert!(
            tuning["keys"][k.name].is_u64(),
            "{} missing: {tuning}",
            k.name
        );
    }
    assert_eq!(tuning["keys"]["persistent_head_groups"], 2);
    assert_eq!(tuning["overrides"], "persistent_head_groups=2");
    assert!(
        tuning["persistent_grid"]["workgroups"].as_u64() >= Some(1),
        "{tuning}"
    );
    let o = Command::new(built("profiler"))
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .output()
        .expect("run profiler diff");
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let line = t
        .lines()
        .find(|l| l.contains("tuning.persistent_head_groups"))
        .unwrap_or_else(|| panic!("diff does not name the tuning key:\n{t}"));
    assert!(line.contains('1') && line.contains('2'), "{line}");
    // The other keys are equal and not listed.
    assert!(!t.contains("tuning.attn_wg"), "{t}");
}

#[test]
fn a_wrong_tuning_key_or_value_is_refused_with_the_keys() {
    for (spec, says) in [
        ("persistent_head_grups=1", "is not a tuning key"),
        (
            "persistent_head_groups=3",
            "takes 0 (by the grid), 1 (off), 2 (on)",
        ),
    ] {
        let o = decoder(&[
            "capture",
            "--model",
            "tiny",
            "--out",
            "/nonexistent/x",
            "--tuning",
            spec,
        ]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "--tuning {spec}:\n{t}");
        assert!(t.contains(says), "--tuning {spec}:\n{t}");
        for k in &decoder::exec::program::tuning::TUNING_KEYS {
            assert!(
                t.contains(k.name),
                "--tuning {spec}: {} not listed:\n{t}",
                k.name
            );
        }
    }
}
