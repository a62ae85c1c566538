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
            "--out",
            out.to_str().unwrap(),
        ])
        .args(args)
        .args(if args.contains(&"--mode") {
            &[][..]
        } else {
            &["--mode", "fused"][..]
        })
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

/// PNG width and height from the IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{} is a PNG", path.display());
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

#[test]
fn timestamp_levels_roofline_and_plots() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    bench(
        tmp.path(),
        &out,
        &[
            "--context",
            "40,24",
            "--timestamps",
            "off,dispatch",
            "--mode",
            "generic,fused",
        ],
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("bench.json")).unwrap()).unwrap();
    let read = json["bandwidth"]["read_gbps"].as_f64().unwrap();
    assert!(read > 0.0, "{}", json["bandwidth"]);
    assert_eq!(
        json["device_type"].as_str(),
        Some("cpu"),
        "lavapipe is a CPU device"
    );
    let rows = json["rows"].as_array().unwrap();
    // 2 contexts x 2 presets x 2 timestamp levels.
    assert_eq!(rows.len(), 8);
    for r in rows {
        let share = r["roofline_share"].as_f64().unwrap();
        let want = r["achieved_gbps"].as_f64().unwrap() / read;
        assert!((share - want).abs() <= 1e-9 * want.max(1.0), "{r}");
        assert_eq!(r["tokens_match"], true, "{r}");
        let gpu = r["gpu_us"].as_f64();
        match r["timestamps"].as_str().unwrap() {
            "off" => assert_eq!(gpu, None, "{r}"),
            "dispatch" => assert!(gpu.unwrap() > 0.0, "{r}"),
            other => panic!("timestamps {other}"),
        }
    }
    // Every trace carries the probe's read figure.
    let t =
        profiler::io::read_trace(&trace_ending(&out, "fused-contiguous-b1-c40-toff.json")).unwrap();
    assert_eq!(t.meta.device.memory_bandwidth_gbps, Some(read));
    for name in [
        "tokens-per-s.png",
        "roofline.png",
        "attention.png",
        "settings-c24.png",
        "settings-c40.png",
    ] {
        assert_eq!(png_size(&out.join(name)), (1100, 680), "{name}");
    }
    // `decoder plot` draws the same files from bench.json alone.
    let again = tmp.path().join("again");
    let o = Command::new(env!("CARGO_BIN_EXE_decoder"))
        .args([
            "plot",
            out.join("bench.json").to_str().unwrap(),
            "--out",
            again.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(png_size(&again.join("tokens-per-s.png")), (1100, 680));
    // A file that is not a bench result is named in the error.
    let bad = tmp.path().join("notes.txt");
    std::fs::write(&bad, "not json").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_decoder"))
        .args(["plot", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("notes.txt") && err.contains("bench.json"),
        "{err}"
    );
}

/// `--also` adds a named setting beside the presets: the persistent kernel runs the paths it has
/// (not the paged gather, which the sweep lists as refused with the reason), generates the fused
/// preset's tokens, and a malformed setting is refused before any work with the flag named.
#[test]
fn also_adds_a_named_setting_and_refuses_what_it_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("also");
    bench(
        tmp.path(),
        &out,
        &[
            "--context",
            "40",
            "--kv",
            "paged",
            "--paged-attention",
            "gather,fused",
            "--also",
            "fused:kernels=persistent",
        ],
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("bench.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let persistent: Vec<_> = rows
        .iter()
        .filter(|r| r["setting"] == "fused --kernels persistent")
        .collect();
    assert_eq!(persistent.len(), 1, "{rows:?}");
    assert_eq!(persistent[0]["paged_attention"], "fused");
    assert_eq!(persistent[0]["dispatches"].as_f64(), Some(1.0));
    assert_eq!(persistent[0]["tokens_match"], true);
    let refused = json["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|r| r["setting"].as_str().unwrap().contains("gather")
                && r["reason"].as_str().unwrap().contains("in place")),
        "{refused:?}"
    );
    // A refused bench: fails before its sweep, with its error on stderr and no result written.
    let refused = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(env!("CARGO_BIN_EXE_decoder"))
            .args(["bench", "--model", "tiny", "--no-probe"])
            .args(args)
            .args(["--out", tmp.path().join("bad").to_str().unwrap()])
            .env("DECODESCOPE_CACHE", tmp.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(!err.contains("bench on"), "the sweep ran first: {err}");
        assert!(!tmp.path().join("bad").join("bench.json").exists());
        err
    };
    for bad in ["fused:kernels=warp", "turbo:kernels=persistent", "fused"] {
        let err = refused(&["--also".as_ref(), bad.as_ref()]);
        assert!(err.contains("--also"), "{bad}: {err}");
    }
    // A --llama-server with no runnable binary is refused before the sweep, not after it.
    let plain = tmp.path().join("llama-server");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let missing = tmp.path().join("nowhere");
    for (path, why) in [
        (&missing, "no llama-server binary"),
        (&plain, "not executable"),
    ] {
        let err = refused(&["--llama-server".as_ref(), path.as_os_str()]);
        assert!(err.contains("--llama-server") && err.contains(why), "{err}");
    }
}
