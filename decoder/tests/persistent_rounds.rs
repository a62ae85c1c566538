//! The persistent kernel under tuning overrides (`--tuning`) that a one-workgroup CPU grid does not
//! reach by itself, through the CLI: greedy steps on tiny against the CPU reference, identical
//! tokens, logits within a relative RMS of 5e-3 at every step, and nothing from the validation
//! layer.
//! - Many splits per (row, KV head), so the merge gives a lane several splits and the lane
//!   rescales its running max between them (and the subgroups meet at the largest of their
//!   maxima). A GPU grid gets there past 32 splits a workgroup; the CPU grid with the
//!   `persistent_wg` and `persistent_splits` overrides.
//! - Head groups (`persistent_head_groups=2`): a subgroup per query head of each attention unit
//!   (tiny has 4 query heads per KV head). A GPU grid takes them at short contexts; the CPU
//!   grid's 8 subgroups only with the override. With each KV layout the kernel reads.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::path::Path;
use std::process::Command;

use decoder::generate::read_dump;

fn run(cache: &Path, dump: &Path, steps: u32, args: &[&str], tuning: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_decoder"));
    cmd.arg("run")
        .args([
            "--model",
            "tiny",
            "--max-tokens",
            &steps.to_string(),
            "--ignore-eos",
        ])
        .args(["--dump", dump.to_str().unwrap()])
        .args(args)
        .env("DECODESCOPE_CACHE", cache)
        .env_remove("DECODESCOPE_TUNING");
    if let Some(t) = tuning {
        cmd.args(["--tuning", t]);
    }
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "decoder run {args:?} failed:\n{stderr}");
    stderr
}

/// `steps` greedy steps of the persistent kernel with `kv` (the cache flags) under `tuning`
/// against the CPU reference on the same cache layout.
fn check(steps: u32, kv: &[&str], tuning: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (cpu, gpu) = (tmp.path().join("cpu.st"), tmp.path().join("gpu.st"));
    let mut args = vec!["--backend", "cpu"];
    args.extend_from_slice(kv);
    run(tmp.path(), &cpu, steps, &args, None);
    let mut args = vec![
        "--backend",
        "vulkan",
        "--kernels",
        "persistent",
        "--validation",
    ];
    args.extend_from_slice(kv);
    let stderr = run(tmp.path(), &gpu, steps, &args, Some(tuning));
    let validation: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("validation"))
        .collect();
    assert!(
        validation.is_empty(),
        "{tuning} {kv:?}: validation layer:\n{}",
        validation.join("\n")
    );
    let (want, got) = (read_dump(&cpu).unwrap(), read_dump(&gpu).unwrap());
    assert_eq!(
        got.ids, want.ids,
        "{tuning} {kv:?}: greedy tokens differ from the CPU reference"
    );
    assert!(
        want.ids.len() >= steps as usize / 2,
        "only {} steps",
        want.ids.len()
    );
    let v = want.vocab;
    for (step, (g, w)) in got.logits.chunks(v).zip(want.logits.chunks(v)).enumerate() {
        let num: f64 = g.iter().zip(w).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let den: f64 = w.iter().map(|y| (*y as f64).powi(2)).sum();
        let e = (num / den.max(1e-30)).sqrt();
        assert!(
            e < 5e-3,
            "{tuning} {kv:?}: step {step}: logits relative RMS {e:.3e}"
        );
    }
}

// Workgroups of 32 on 8 lanes: 4 subgroups of 8 lanes, 32 splits a round; one split per block of
// 8 positions (up to 64), so from position 256 on some lanes take two splits.
const ROUNDS: &str = "persistent_wg=32,persistent_splits=64";

#[test]
fn merge_rounds_match_the_reference() {
    check(300, &[], &format!("{ROUNDS},persistent_head_groups=1"));
}

/// The same with a subgroup per query head (the grid's rule takes them here: a unit per block).
#[test]
fn merge_rounds_with_head_groups_match_the_reference() {
    check(300, &[], ROUNDS);
}

/// Head groups with one split per KV head (the default split plan on one workgroup), so each
/// unit scores many blocks, its first one staged; on the contiguous f32 cache, a paged f16 one
/// read in place, and a rotating window. (A window of 64 meets a near tie at step 129: the top two
/// logits 0.002 apart, which round-off of either kernel order flips.)
#[test]
fn head_groups_match_the_reference_on_each_kv_layout() {
    for kv in [
        &[][..],
        &[
            "--kv",
            "paged",
            "--block-size",
            "16",
            "--paged-attention",
            "fused",
            "--kv-dtype",
            "f16",
        ][..],
        &["--kv", "rotating", "--window", "48"][..],
    ] {
        check(200, kv, "persistent_head_groups=2");
    }
}
