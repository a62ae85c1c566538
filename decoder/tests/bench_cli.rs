//! `decoder bench` end to end on the local Vulkan device: one process sweeps contexts, batch
//! sizes, layouts and paged attention paths on shared prompts, and every point generates what a
//! sweep of that point alone generates.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use profiler::trace::Phase;

fn bench(cache: &Path, out: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_decoder"))
        .arg("bench")
        .args([
            "--model",
            "tiny",
            "--max-tokens",
            "6",
            "--warmup",
            "1",
            "--breakdown",
            "2",
            "--prefill-chunk",
            "16",
            "--mode",
            "fused",
            "--out",
            out.to_str().unwrap(),
        ])
        .args(args)
        .env("DECODESCOPE_CACHE", cache)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "decoder bench {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The trace of the point whose file name ends with `suffix`.
fn trace_ending(dir: &Path, suffix: &str) -> PathBuf {
    let hits: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(hits.len(), 1, "traces ending {suffix} in {}", dir.display());
    hits[0].clone()
}

fn decode_tokens(path: &Path) -> Vec<u32> {
    let t = profiler::io::read_trace(path).unwrap();
    t.tokens
        .iter()
        .filter(|r| r.phase == Phase::Decode)
        .filter_map(|r| r.token_id)
        .collect()
}

#[test]
fn one_sweep_shares_prompts_and_matches_points_run_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (sweep, alone) = (tmp.path().join("sweep"), tmp.path().join("alone"));
    bench(
        tmp.path(),
        &sweep,
        &[
            "--context",
            "90,40",
            "--batch",
            "1,2",
            "--kv",
            "contiguous,paged",
            "--paged-attention",
            "gather,fused",
        ],
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweep.join("bench.json")).unwrap()).unwrap();
    assert_eq!(json["complete"], true);
    let rows = json["rows"].as_array().unwrap();
    // 2 contexts x 2 batch sizes x (contiguous, paged gather, paged fused).
    assert_eq!(rows.len(), 12);
    for r in rows {
        assert_eq!(r["tokens_match"], true, "{r}");
        let gathers = r["paged_attention"] == "gather";
        assert_eq!(r["kv_bytes_copied"].as_f64().unwrap() > 0.0, gathers, "{r}");
        assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let contexts: Vec<u64> = rows
        .iter()
        .map(|r| r["context"].as_u64().unwrap())
        .collect();
    assert!(contexts.windows(2).all(|w| w[0] <= w[1]), "{contexts:?}");

    // The second context's prompt ran on top of the first's, after decode steps of two paths:
    // the same point measured alone generates the same tokens.
    bench(
        tmp.path(),
        &alone,
        &[
            "--context",
            "90",
            "--batch",
            "2",
            "--kv",
            "paged",
            "--paged-attention",
            "gather",
        ],
    );
    let a = decode_tokens(&trace_ending(&sweep, "paged16-gather-b2-c90.json"));
    let b = decode_tokens(&trace_ending(&alone, "paged16-gather-b2-c90.json"));
    assert_eq!(a.len(), 1 + 6, "warm-up and timed steps");
    assert_eq!(a, b);
}
