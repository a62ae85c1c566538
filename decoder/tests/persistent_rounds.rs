//! The persistent kernel's attention with many splits per (row, KV head), so its merge gives a
//! lane several splits and the lane rescales its running max between them (and the subgroups
//! meet at the largest of their maxima). A GPU grid gets there past 32 splits a workgroup; a
//! one-workgroup CPU grid only with the `persistent_wg` and `persistent_splits` tuning
//! overrides, which are an environment variable, so this runs the CLI: 300 greedy steps on tiny
//! against the CPU reference, identical tokens, logits within a relative RMS of 5e-3 at every
//! step, and nothing from the validation layer.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::path::Path;
use std::process::Command;

use decoder::generate::read_dump;

const STEPS: &str = "300";

fn run(cache: &Path, dump: &Path, args: &[&str], tuning: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_decoder"));
    cmd.arg("run")
        .args(["--model", "tiny", "--max-tokens", STEPS, "--ignore-eos"])
        .args(["--dump", dump.to_str().unwrap()])
        .args(args)
        .env("DECODESCOPE_CACHE", cache);
    if let Some(t) = tuning {
        cmd.env("DECODESCOPE_TUNING", t);
    }
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "decoder run {args:?} failed:\n{stderr}");
    stderr
}

#[test]
fn merge_rounds_match_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let (cpu, gpu) = (tmp.path().join("cpu.st"), tmp.path().join("gpu.st"));
    run(tmp.path(), &cpu, &["--backend", "cpu"], None);
    // Workgroups of 32 on 8 lanes: 4 subgroups of 8 lanes, 32 splits a round; one split per
    // block of 8 positions (up to 64), so from position 256 on some lanes take two splits.
    let stderr = run(
        tmp.path(),
        &gpu,
        &[
            "--backend",
            "vulkan",
            "--kernels",
            "persistent",
            "--validation",
        ],
        Some("persistent_wg=32,persistent_splits=64"),
    );
    let validation: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("validation"))
        .collect();
    assert!(
        validation.is_empty(),
        "validation layer:\n{}",
        validation.join("\n")
    );
    let (want, got) = (read_dump(&cpu).unwrap(), read_dump(&gpu).unwrap());
    assert_eq!(
        got.ids, want.ids,
        "greedy tokens differ from the CPU reference"
    );
    assert!(want.ids.len() >= 150, "only {} steps", want.ids.len());
    let v = want.vocab;
    for (step, (g, w)) in got.logits.chunks(v).zip(want.logits.chunks(v)).enumerate() {
        let num: f64 = g.iter().zip(w).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let den: f64 = w.iter().map(|y| (*y as f64).powi(2)).sum();
        let e = (num / den.max(1e-30)).sqrt();
        assert!(e < 5e-3, "step {step}: logits relative RMS {e:.3e}");
    }
}
