//! Long runs hold their memory flat: `decoder capture` at `--timestamps dispatch` and
//! `profiler record` of the decoder stream their traces (each step's record goes to the file as
//! it is made), so a run ten times as long grows its trace file, not its process. Each test runs
//! 2,000 and then 20,000 decode tokens and asserts that the long run's peak resident memory is
//! within 1.5x of the short one's. Peak resident memory comes from GNU time (`/usr/bin/time`,
//! the `time` package), which reports the largest of the process and every child it waited for;
//! the profiler's own peak is sampled from `/proc/PID/status` (`VmHWM`) while it runs.
//!
//! The 1.5x alone does not tell streaming from keeping every record here: about 100 MiB of each
//! decoder process is the driver, and 18,000 whole records of this small model come to less
//! than half of that. So the growth is also bounded per step, for the decoder's capture and for
//! the profiler alone: at most 1 KiB a step beyond 2 MiB, where a kept dispatch-level record
//! costs kilobytes and what streaming keeps per step (the record without its spans, for the
//! summary; a head of every wait group in the profiler) is a few hundred bytes.
//!
//! The parameters keep 44,000 lavapipe steps within a few minutes on 2 cores:
//! - The model is written by the test: Qwen3-shaped like `tiny`, but one layer of hidden 64 and
//!   a vocabulary of 384. On lavapipe every workgroup costs microseconds, so `tiny`'s 31
//!   dispatches and 4096-row lm_head take about 55 ms a step (20 minutes for 20,000 tokens);
//!   this model's 10 dispatches take about 3 ms. A dispatch-level step's record still carries
//!   one span per dispatch, so a capture that kept every record would grow by kilobytes a step.
//! - A rotating KV cache with a 32-position window, and `n_splits` fixed at 2, so every step's
//!   attention reads the same few positions and every run (short, long and warm-up) has the
//!   same kernels and KV geometry: the ring is `--window` + `--prefill-chunk` positions
//!   whatever the length, where `tiny`'s positions up to 20,000 would make each step slower
//!   than the last and the default `n_splits` grow with the context.
//! - The driver's shader cache is a directory of the test's own, filled by a short warm-up run
//!   with the same flags: a run that compiles its shaders peaks at about 80 MiB above one that
//!   finds them, which would hide the growth the test looks for (or fake it).
//! - The embedding rows of the bytes 0x80 to 0xFF are zero, so the random model never emits
//!   them: a stream of bytes that never completes a UTF-8 character keeps the decoder's
//!   detokenizer decoding an ever longer window, a cost per step that grows with the run.
//! - The validation layer stays off: the decoder's GPU tests run under it; here it would only
//!   slow the steps.
//!
//! `DECODESCOPE_LONG_RUN_TOKENS=SHORT,LONG` sets other lengths.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use decoder::model::synth::{byte_level_bpe_json, write_weights};
use decoder::model::weights::tensor_names_and_shapes;
use decoder::model::{ModelConfig, Tensor, WeightDtype, Weights};
use profiler::rng::Rng;
use serde_json::json;

mod common;
use common::{assert_stats_list_dispatches, built};

/// The short and the long run's decode tokens.
fn token_counts() -> (usize, usize) {
    let Ok(v) = std::env::var("DECODESCOPE_LONG_RUN_TOKENS") else {
        return (2_000, 20_000);
    };
    let parsed: Vec<usize> = v
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("DECODESCOPE_LONG_RUN_TOKENS=SHORT,LONG")
        })
        .collect();
    match parsed[..] {
        [short, long] if short < long => (short, long),
        _ => panic!("DECODESCOPE_LONG_RUN_TOKENS={v}: give SHORT,LONG with SHORT < LONG"),
    }
}

/// Decode tokens of the warm-up run that fills the shader cache: enough positions that its KV
/// ring has the full `WINDOW + PREFILL_CHUNK` slots, as the measured runs' does.
const WARM_UP_TOKENS: usize = 64;

/// The rotating cache's window and the prompt's chunk (the ring holds both).
const WINDOW: usize = 32;
const PREFILL_CHUNK: usize = 16;

/// The vocabulary of the test's model: the 256 byte tokens, merges and 3 specials.
const VOCAB: usize = 384;
const HIDDEN: usize = 64;

/// Writes the test's model into `dir`: Qwen3 (as `tiny`) with one layer, hidden 64, 2 query
/// heads and 1 KV head of 32, an MLP of 128 and a vocabulary of 384, tied embeddings, bf16
/// weights drawn uniformly from +-0.1 (norms 1). The embedding rows of the bytes 0x80 to 0xFF
/// are zero: their logits are 0 while some of the others' are positive, so the model emits
/// ASCII and the detokenizer never waits on an incomplete character.
fn write_model(dir: &Path) -> PathBuf {
    let model = dir.join("model");
    std::fs::create_dir_all(&model).expect("model directory");
    let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from);
    let config = json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": false,
        "bos_token_id": VOCAB - 3,
        "eos_token_id": VOCAB - 1,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "max_position_embeddings": 32768,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "num_key_value_heads": 1,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": true,
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
    });
    for (name, value) in [
        ("config.json", config),
        (
            "tokenizer.json",
            byte_level_bpe_json(VOCAB, &specials, None),
        ),
    ] {
        let text = serde_json::to_string_pretty(&value).expect("json");
        std::fs::write(model.join(name), text).expect("write the model's files");
    }
    let cfg = ModelConfig::from_dir(&model).unwrap_or_else(|e| panic!("{e}"));
    let tensors = tensor_names_and_shapes(&cfg)
        .into_iter()
        .map(|(name, shape)| {
            let n = shape.iter().product();
            let data = if name.ends_with("norm.weight") {
                vec![1.0; n]
            } else {
                let mut rng = Rng::for_label(1, &name);
                let mut v: Vec<f32> = (0..n).map(|_| 0.1 * rng.pair_symmetric().0).collect();
                if name == "model.embed_tokens.weight" {
                    v[0x80 * HIDDEN..0x100 * HIDDEN].fill(0.0);
                }
                v
            };
            Tensor::new(name, &shape, data)
        })
        .collect();
    let weights = Weights::from_tensors(&cfg, tensors).unwrap_or_else(|e| panic!("{e}"));
    write_weights(&model, &weights, WeightDtype::Bf16, 1).unwrap_or_else(|e| panic!("{e}"));
    model
}

/// Peak resident memory of one run, in KiB.
#[derive(Clone, Copy, Debug)]
struct Peaks {
    /// The process and every child it waited for (GNU time's `%M`).
    whole_kib: u64,
    /// The process alone, sampled while it ran (a lower bound of its peak).
    own_kib: u64,
}

/// `VmHWM` of process `pid` in KiB (0 once it has gone).
fn vm_hwm_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `program args` under GNU time, with the driver's shader cache in `dir/shader-cache`,
/// and returns its peaks; panics with its output if it fails or runs past 2 minutes plus 25 ms
/// a decode token (about 7 times a lavapipe step), killing it first.
fn run_measured(dir: &Path, program: &Path, args: &[OsString], tokens: usize) -> Peaks {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.exists(),
        "/usr/bin/time (GNU time) measures the peak memory; install it (apt-get install time, \
         as scripts/setup.sh does)"
    );
    let report = dir.join("time.txt");
    let log = dir.join("run.log");
    let limit = Duration::from_secs(120) + Duration::from_millis(25) * tokens as u32;
    let started = Instant::now();
    let mut child = Command::new(time)
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(program)
        .args(args)
        .env("MESA_SHADER_CACHE_DIR", dir.join("shader-cache"))
        .env_remove("MESA_SHADER_CACHE_DISABLE")
        // Its own process group, so that a run past its limit is killed with its children.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.join("run.err")).expect("log"))
        .spawn()
        .expect("run /usr/bin/time");
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let mut own_kib = 0;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!(
                "{} {:?} ran past {limit:?}; killed (its log: {})",
                program.display(),
                args,
                dir.join("run.err").display()
            );
        }
        if let Ok(pids) = std::fs::read_to_string(&children)
            && let Some(pid) = pids.split_whitespace().next()
        {
            own_kib = own_kib.max(vm_hwm_kib(pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(dir.join("run.err")).unwrap_or_default();
    assert!(
        status.success(),
        "{} {:?} failed: {}",
        program.display(),
        args,
        err
    );
    let whole_kib = std::fs::read_to_string(&report)
        .expect("time's report")
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in {}", report.display()));
    eprintln!(
        "  {} decode tokens: {:.1} s, peak {} KiB",
        tokens,
        started.elapsed().as_secs_f64(),
        whole_kib
    );
    Peaks { whole_kib, own_kib }
}

/// `decoder capture` of `model`, fused preset, rotating KV cache, into `out`.
fn capture_args(model: &Path, tokens: usize, timestamps: &str, out: &Path) -> Vec<OsString> {
    let window = WINDOW.to_string();
    let chunk = PREFILL_CHUNK.to_string();
    let tokens = tokens.to_string();
    let mut v: Vec<OsString> = vec!["capture".into(), "--model".into(), model.into()];
    v.extend(
        [
            "--mode",
            "fused",
            "--timestamps",
            timestamps,
            "--no-probe",
            "--kv",
            "rotating",
            "--window",
            &window,
            "--prefill-chunk",
            &chunk,
            "--tuning",
            "n_splits=2",
            "--max-tokens",
            &tokens,
            "--out",
        ]
        .iter()
        .map(OsString::from),
    );
    v.push(out.into());
    v
}

/// The trace reads back with the decode steps asked for, and `profiler stats` reads it.
fn assert_reads_back(trace: &Path, decode: usize, at_least: usize) {
    let t = profiler::read_trace_for_analysis(trace).unwrap_or_else(|e| panic!("{e}"));
    let steps = t
        .tokens
        .iter()
        .filter(|r| r.phase == profiler::Phase::Decode)
        .count();
    assert!(
        steps >= at_least && steps <= decode,
        "{}: {steps} decode steps, expected {at_least} to {decode}",
        trace.display()
    );
    assert_stats_list_dispatches(trace);
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).expect("trace").len()
}

/// Asserts the long run's peak is within 1.5x of the short run's.
fn assert_flat(what: &str, short: (usize, u64), long: (usize, u64)) {
    eprintln!(
        "{what}: peak RSS {} MiB at {} decode tokens, {} MiB at {}",
        short.1 / 1024,
        short.0,
        long.1 / 1024,
        long.0
    );
    assert!(
        long.1 * 2 <= short.1 * 3,
        "{what}: {} decode tokens peaked at {} KiB, more than 1.5x the {} KiB of {} tokens: the \
         run keeps something per step",
        long.0,
        long.1,
        short.1,
        short.0
    );
}

/// Asserts the peak grew by at most 1 KiB a step, beyond 2 MiB, from `short` to `long` steps.
fn assert_growth_per_step(what: &str, short: usize, a_kib: u64, long: usize, b_kib: u64) {
    eprintln!("{what}: peak RSS {a_kib} KiB at {short} decode tokens, {b_kib} KiB at {long}");
    let bound = a_kib + (long - short) as u64 + 2048;
    assert!(
        b_kib <= bound,
        "{what}: the peak grew from {a_kib} KiB at {short} tokens to {b_kib} KiB at {long}, past \
         {bound} KiB (1 KiB a step beyond 2 MiB): it keeps the steps' spans"
    );
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("decodescope-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn a_long_dispatch_level_capture_keeps_its_memory_flat() {
    let (short, long) = token_counts();
    let dir = temp_dir("long-capture");
    let model = write_model(&dir);
    let decoder = built("decoder");
    let warm = dir.join("warm-up.json");
    run_measured(
        &dir,
        &decoder,
        &capture_args(&model, WARM_UP_TOKENS, "dispatch", &warm),
        WARM_UP_TOKENS,
    );
    let mut runs = Vec::new();
    for n in [short, long] {
        let out = dir.join(format!("capture-{n}.json"));
        let peaks = run_measured(
            &dir,
            &decoder,
            &capture_args(&model, n, "dispatch", &out),
            n,
        );
        runs.push((n, peaks.whole_kib, size(&out)));
        assert_reads_back(&out, n, n);
    }
    assert!(
        runs[1].2 > runs[0].2,
        "the longer capture's trace is not larger: {runs:?}"
    );
    assert_flat(
        "decoder capture --timestamps dispatch",
        (runs[0].0, runs[0].1),
        (runs[1].0, runs[1].1),
    );
    // The bound that tells streaming from keeping the records (see the module's doc): the engine
    // keeps each step's record without its spans, for the summary.
    assert_growth_per_step(
        "decoder capture --timestamps dispatch",
        runs[0].0,
        runs[0].1,
        runs[1].0,
        runs[1].1,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `profiler record --timestamps dispatch` of `decoder capture --timestamps off`.
fn record_args(
    decoder: &Path,
    model: &Path,
    tokens: usize,
    out: &Path,
    own: &Path,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["record", "--timestamps", "dispatch", "--out"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push(out.into());
    args.push("--".into());
    args.push(decoder.into());
    args.extend(capture_args(model, tokens, "off", own));
    args
}

#[test]
fn a_long_record_of_the_decoder_keeps_its_memory_flat() {
    let (short, long) = token_counts();
    let dir = temp_dir("long-record");
    let model = write_model(&dir);
    let profiler = built("profiler");
    let decoder = built("decoder");
    let (warm, warm_own) = (dir.join("warm-up.json"), dir.join("warm-up-own.json"));
    run_measured(
        &dir,
        &profiler,
        &record_args(&decoder, &model, WARM_UP_TOKENS, &warm, &warm_own),
        WARM_UP_TOKENS,
    );
    let mut runs = Vec::new();
    for n in [short, long] {
        let out = dir.join(format!("record-{n}.json"));
        let own = dir.join(format!("own-{n}.json"));
        let args = record_args(&decoder, &model, n, &out, &own);
        let peaks = run_measured(&dir, &profiler, &args, n);
        runs.push((n, peaks, size(&out)));
        // The layer finds every decode step but the first, which may join the prologue.
        assert_reads_back(&out, n, n - 1);
    }
    assert!(
        runs[1].2 > runs[0].2,
        "the longer recording's trace is not larger: {runs:?}"
    );
    // The whole of what record holds (the profiler and the decoder under the layer) ...
    assert_flat(
        "profiler record -- decoder capture, profiler and decoder",
        (runs[0].0, runs[0].1.whole_kib),
        (runs[1].0, runs[1].1.whole_kib),
    );
    // ... and the profiler alone, which reads the raw records and writes the trace. Its baseline
    // is a few MiB, of which the trace writer's 1 MiB buffer is resident only once a trace passes
    // 1 MiB, so its bound is per step: it keeps a head of every wait group to find the steps
    // (counters and signatures, a few hundred bytes) and streams the rest (a dispatch-level
    // step's spans are kilobytes), so it may grow by at most 1 KiB a step beyond 2 MiB.
    assert_growth_per_step(
        "profiler record, the profiler alone",
        short,
        runs[0].1.own_kib,
        long,
        runs[1].1.own_kib,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
