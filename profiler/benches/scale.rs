//! Scale benchmark: `profiler stats` and `profiler diff` on 10,000-token dispatch-level traces.
//!
//! Run with `cargo bench -p profiler --bench scale`. For two scenarios it writes two synthetic
//! traces (10,000 decode tokens, 14 layers of primitive kernels: 299 GPU spans per token, the
//! second capture with 1 % slower GPU work) to a temporary directory, then runs the release
//! `profiler` binary on them under `/usr/bin/time -v` when it exists, and prints wall time and peak
//! resident memory against the budget (5 s, 2 GiB). Scenario `per-layer` submits once per layer
//! (71 host spans per token, 108 MB); `per-dispatch` submits after every dispatch like the generic
//! preset (1,200 host spans per token, 457 MB). `SCALE_TOKENS` and `SCALE_LAYERS` change the size.
//! A benchmark, not a test: it reports, it does not assert.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use profiler::{SynthOptions, synthetic_trace, write_trace};

const BUDGET_S: f64 = 5.0;
const BUDGET_BYTES: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs the binary with `args`, returning (wall seconds, peak RSS bytes if measurable).
fn measure(bin: &str, args: &[&str]) -> Result<(f64, Option<f64>), String> {
    let gnu_time = Path::new("/usr/bin/time").exists();
    let start = Instant::now();
    let out = if gnu_time {
        Command::new("/usr/bin/time")
            .arg("-v")
            .arg(bin)
            .args(args)
            .output()
    } else {
        Command::new(bin).args(args).output()
    }
    .map_err(|e| format!("cannot run {bin}: {e}"))?;
    let wall = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "{bin} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|kb| kb * 1024.0);
    Ok((wall, rss))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that does not name this benchmark skips it.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.iter().any(|a| !"scale".contains(a.as_str())) {
        return;
    }
    let tokens = env_u32("SCALE_TOKENS", 10_000);
    let layers = env_u32("SCALE_LAYERS", 14);
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("scale: cannot create a temporary directory: {e}");
            std::process::exit(1);
        }
    };
    let bin = env!("CARGO_BIN_EXE_profiler");
    println!(
        "{:<44} {:>10} {:>14}  budget (5 s, 2 GiB)",
        "command", "wall s", "peak RSS MiB"
    );
    let mut failed = false;
    // Submits per layer: the scale the issue names (a few dozen host spans per token). Submits per
    // dispatch: the generic preset, whose host spans dominate the file.
    for (scenario, submit) in [
        ("per-layer", profiler::SynthSubmit::PerLayer),
        ("per-dispatch", profiler::SynthSubmit::PerDispatch),
    ] {
        let a = dir.path().join(format!("{scenario}-a.json"));
        let b = dir.path().join(format!("{scenario}-b.json"));
        let t0 = Instant::now();
        for (path, seed, scale) in [(&a, 1, 1.0), (&b, 2, 1.01)] {
            let trace = synthetic_trace(&SynthOptions {
                layers,
                decode_tokens: tokens,
                submit,
                seed,
                gpu_scale: scale,
                ..SynthOptions::default()
            });
            if let Err(e) = write_trace(path, &trace) {
                eprintln!("scale: {e}");
                std::process::exit(1);
            }
        }
        let one = synthetic_trace(&SynthOptions {
            layers,
            decode_tokens: 1,
            submit,
            ..SynthOptions::default()
        });
        let per_token = one
            .tokens
            .last()
            .map_or((0, 0), |t| (t.gpu_spans.len(), t.host_spans.len()));
        let size = std::fs::metadata(&a).map(|m| m.len()).unwrap_or(0);
        println!(
            "{scenario} submits: {tokens} decode tokens x {} GPU spans + {} host spans per token; \
             trace {:.1} MB; both generated in {:.1} s",
            per_token.0,
            per_token.1,
            size as f64 / 1e6,
            t0.elapsed().as_secs_f64()
        );
        let (a, b) = (a.display().to_string(), b.display().to_string());
        let runs: [(&str, Vec<&str>); 3] = [
            ("stats", vec!["stats", &a]),
            ("diff", vec!["diff", &a, &b]),
            (
                "diff --format json",
                vec!["diff", "--format", "json", &a, &b],
            ),
        ];
        for (name, args) in runs {
            let label = format!("{scenario}: {name}");
            match measure(bin, &args) {
                Ok((wall, rss)) => {
                    let within = wall < BUDGET_S && rss.is_none_or(|r| r < BUDGET_BYTES);
                    println!(
                        "{label:<44} {wall:>10.2} {:>14}  {}",
                        rss.map_or("n/a".to_owned(), |r| format!("{:.0}", r / 1024.0 / 1024.0)),
                        if within { "within" } else { "OVER" }
                    );
                }
                Err(e) => {
                    eprintln!("scale: {e}");
                    failed = true;
                }
            }
        }
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
    }
    if failed {
        std::process::exit(1);
    }
}
