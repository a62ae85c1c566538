//! Long runs hold their memory flat: `decoder capture` at `--timestamps dispatch` and
//! `profiler record` of the decoder stream their traces (each step's record goes to the file as
//! it is made), so a run ten times as long grows its trace file, not its process. Peak resident
//! memory comes from GNU time (`/usr/bin/time`, the `time` package), which reports the largest
//! of the process and every child it waited for; the profiler's own peak is sampled from
//! `/proc/PID/status` (`VmHWM`) while it runs, and its growth is bounded per step.
//!
//! On lavapipe a tiny-model decode step at `--timestamps dispatch` takes about 0.1 s, so the
//! default lengths are 40 and 400 decode tokens (about three minutes for both tests on 2 cores);
//! `DECODESCOPE_LONG_RUN_TOKENS=2000,20000` runs the lengths the issue names (on a GPU, or with
//! an hour to spare on lavapipe).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{assert_stats_list_dispatches, built};

/// The short and the long run's decode tokens.
fn token_counts() -> (usize, usize) {
    let Ok(v) = std::env::var("DECODESCOPE_LONG_RUN_TOKENS") else {
        return (40, 400);
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

/// How long a run of `tokens` decode tokens may take: ten times lavapipe's 0.1 s a step, and a
/// minute to start.
fn time_limit(tokens: usize) -> Duration {
    Duration::from_secs(60 + tokens as u64)
}

/// Runs `program args` under GNU time and returns its peaks; panics with its output if it fails
/// or has not ended after `limit`.
fn run_measured(dir: &Path, program: &Path, args: &[OsString], limit: Duration) -> Peaks {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.exists(),
        "/usr/bin/time (GNU time) measures the peak memory; install it (apt-get install time, \
         as scripts/setup.sh does)"
    );
    let report = dir.join("time.txt");
    let log = dir.join("run.log");
    let mut child = Command::new(time)
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.join("run.err")).expect("log"))
        .spawn()
        .expect("run /usr/bin/time");
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let mut own_kib = 0;
    let what = format!("the end of {} {args:?}", program.display());
    let status = common::poll(&mut child, &what, limit, Duration::from_millis(20), |c| {
        if let Some(s) = c.try_wait().expect("wait") {
            return Some(s);
        }
        if let Ok(pids) = std::fs::read_to_string(&children)
            && let Some(pid) = pids.split_whitespace().next()
        {
            own_kib = own_kib.max(vm_hwm_kib(pid));
        }
        None
    });
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
    Peaks { whole_kib, own_kib }
}

/// `decoder capture` of the tiny model, fused preset, into `out`.
fn capture_args(tokens: usize, timestamps: &str, out: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = [
        "capture",
        "--model",
        "tiny",
        "--mode",
        "fused",
        "--timestamps",
        timestamps,
        "--max-tokens",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    v.push(tokens.to_string().into());
    v.push("--out".into());
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

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("decodescope-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn a_long_dispatch_level_capture_keeps_its_memory_flat() {
    let (short, long) = token_counts();
    let dir = temp_dir("long-capture");
    let decoder = built("decoder");
    let mut runs = Vec::new();
    for n in [short, long] {
        let out = dir.join(format!("capture-{n}.json"));
        let peaks = run_measured(
            &dir,
            &decoder,
            &capture_args(n, "dispatch", &out),
            time_limit(n),
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_long_record_of_the_decoder_keeps_its_memory_flat() {
    let (short, long) = token_counts();
    let dir = temp_dir("long-record");
    let profiler = built("profiler");
    let decoder = built("decoder");
    let mut runs = Vec::new();
    for n in [short, long] {
        let out = dir.join(format!("record-{n}.json"));
        let own = dir.join(format!("own-{n}.json"));
        let mut args: Vec<OsString> = ["record", "--timestamps", "dispatch", "--out"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push(out.clone().into());
        args.push("--".into());
        args.push(decoder.clone().into());
        args.extend(capture_args(n, "off", &own));
        let peaks = run_measured(&dir, &profiler, &args, time_limit(n));
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
    let (a, b) = (runs[0].1.own_kib, runs[1].1.own_kib);
    eprintln!(
        "profiler record, the profiler alone: peak RSS {a} KiB at {short} decode tokens, {b} KiB \
         at {long}"
    );
    let bound = a + (long - short) as u64 + 2048;
    assert!(
        b <= bound,
        "the profiler's own peak grew from {a} KiB at {short} tokens to {b} KiB at {long}, past \
         {bound} KiB (1 KiB a step beyond 2 MiB): it keeps the steps' spans"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
