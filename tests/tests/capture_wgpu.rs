//! The capture layer on a second Vulkan runtime: `profiler record -- wgpu-step ...` on lavapipe.
//! `wgpu-step` (tests/wgpu-step) is a small wgpu compute program with wgpu's own descriptor,
//! barrier and submission policy: it waits on timeline semaphores (`vkWaitSemaphores`), never
//! on fences, and splits every submit into several command buffers of its own. Its steps must
//! come out of the trace with exactly the program's dispatches at every timestamp level, a
//! program killed mid-run must leave a readable trace whose prefill matches a complete run's,
//! two devices driven by two threads must keep their queues apart, and dispatches without
//! labels must get names that are stable across runs.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use profiler::{Phase, TokenRecord, Trace};

mod common;
use common::built;

/// What `wgpu-step` submits (tests/wgpu-step/src/kernel.rs): the prologue is one submit with one
/// dispatch (`scale`); every step is one submit of `--dispatches` dispatches (`add`); the
/// read-back is one submit of a copy and no dispatch. Each submit is followed by one blocking
/// wait on that submission.
const PROLOGUE_DISPATCHES: u64 = 1;
const PROLOGUE_SUBMITS: u64 = 1;
const STEP_SUBMITS: u64 = 1;
const READBACK_DISPATCHES: u64 = 0;
const READBACK_SUBMITS: u64 = 1;

/// The program's labels with labels on (kernel.rs `label`): the prologue's compute pass and its
/// pipeline, and every step's compute pass and its pipeline.
const PROLOGUE_LABELS: [&str; 2] = ["prologue", "scale"];
const STEP_LABELS: [&str; 2] = ["step", "add"];
/// The entry points of kernels.wgsl behind those pipelines.
const PROLOGUE_ENTRY_POINT: &str = "scale";
const STEP_ENTRY_POINT: &str = "add";

const LEVELS: [&str; 4] = ["off", "submit", "command-buffer", "dispatch"];

/// A `profiler record` of `wgpu-step`, with `record_args` before `--out`.
fn record_cmd(record_args: &[&str], out: &Path, program_args: &[&str]) -> Command {
    let mut c = Command::new(built("profiler"));
    c.arg("record")
        .args(record_args)
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(built("wgpu-step"))
        .args(program_args)
        .stdin(Stdio::null());
    c
}

/// Runs a `profiler record` of `wgpu-step` to the end; it must succeed.
fn record_ok(record_args: &[&str], out: &Path, program_args: &[&str]) -> Trace {
    let o: Output = record_cmd(record_args, out, program_args)
        .output()
        .expect("run profiler record");
    assert!(
        o.status.success(),
        "profiler record {record_args:?} -- wgpu-step {program_args:?} failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    read(out)
}

fn read(path: &Path) -> Trace {
    profiler::read_trace(path).unwrap_or_else(|e| panic!("{e}"))
}

fn decode_steps(t: &Trace) -> Vec<&TokenRecord> {
    t.tokens
        .iter()
        .filter(|r| r.phase == Phase::Decode)
        .collect()
}

fn prefill(t: &Trace) -> &TokenRecord {
    let p: Vec<&TokenRecord> = t
        .tokens
        .iter()
        .filter(|r| r.phase == Phase::Prefill)
        .collect();
    assert_eq!(p.len(), 1, "one prefill step ({})", rule(t));
    p[0]
}

fn capture(t: &Trace) -> &profiler::CaptureMeta {
    t.meta
        .capture
        .as_ref()
        .expect("a recorded trace has meta.capture")
}

/// What the step rule found, for assertion messages.
fn rule(t: &Trace) -> &str {
    t.meta
        .capture
        .as_ref()
        .map_or("no meta.capture", |c| c.step_rule_detail.as_str())
}

/// The labels of the ops that a step's GPU spans name.
fn span_labels<'a>(t: &'a Trace, step: &TokenRecord) -> BTreeSet<&'a str> {
    step.gpu_spans
        .iter()
        .map(|s| t.ops[s.op() as usize].label.as_str())
        .collect()
}

#[test]
fn every_timestamp_level_gives_the_programs_steps_and_times_every_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (steps, dispatches) = (8usize, 5u64);
    for level in LEVELS {
        let mut decode_counts = Vec::new();
        for run in 0..3 {
            let what = format!("--timestamps {level}, run {run}");
            let out = dir.path().join(format!("{level}.{run}.json"));
            let t = record_ok(
                &["--timestamps", level],
                &out,
                &["--steps", "8", "--dispatches", "5"],
            );
            let c = capture(&t);
            assert!(c.complete, "{what}: {:?}", c.notes);
            assert_eq!(c.exit_code, Some(0), "{what}");
            assert_eq!(t.meta.run.timestamps, level, "{what}");
            let decode = decode_steps(&t);
            // The prologue's wait is the prefill step, each step's wait one decode step, and
            // the read-back's and teardown's waits the epilogue: every step the program ran.
            assert_eq!(
                decode.len(),
                steps,
                "{what}: {} decode steps, the program ran {steps} ({})",
                decode.len(),
                rule(&t)
            );
            decode_counts.push(decode.len());
            for (i, s) in decode.iter().enumerate() {
                assert_eq!(
                    s.counters.dispatches,
                    dispatches,
                    "{what}: decode step {i} ({})",
                    rule(&t)
                );
                assert_eq!(
                    s.counters.submits_compute + s.counters.submits_transfer,
                    STEP_SUBMITS,
                    "{what}: decode step {i}"
                );
                if level == "off" {
                    assert!(s.gpu_spans.is_empty(), "{what}: decode step {i}");
                    continue;
                }
                assert!(
                    s.gpu_busy_ns.is_some_and(|ns| ns > 0),
                    "{what}: decode step {i} has GPU busy time {:?}",
                    s.gpu_busy_ns
                );
                assert_eq!(
                    s.gpu_untimed, 0,
                    "{what}: decode step {i} has dispatches without a GPU span"
                );
                if level == "dispatch" {
                    assert_eq!(
                        s.gpu_spans.len() as u64,
                        s.counters.dispatches,
                        "{what}: decode step {i}: one GPU span per dispatch"
                    );
                    // wgpu's own SPIR-V, instrumented: each dispatch timed on its own, with the
                    // features its device left off turned on for the layer.
                    assert_eq!(c.dispatch_timing, "shader-clock", "{what}");
                    assert!(
                        s.gpu_spans
                            .iter()
                            .all(|g| g.shared() == 1 && g.dur_ns() > 0),
                        "{what}: decode step {i}: {:?}",
                        s.gpu_spans
                    );
                }
            }
            if level != "off" {
                assert_eq!(
                    c.untimed_dispatches, 0,
                    "{what}: dispatches without a GPU span in the capture"
                );
                assert_eq!(c.dropped_timestamps, 0, "{what}");
            }
        }
        assert!(
            decode_counts.windows(2).all(|w| w[0] == w[1]),
            "--timestamps {level}: decode steps differ between runs: {decode_counts:?}"
        );
    }
}

/// The Khronos validation layer's messages (message ids, one per message) about a `profiler
/// record --timestamps LEVEL --query-reset RESET` of `wgpu-step`, the validation layer below the
/// capture layer, so that it checks what the capture layer adds.
fn validation_messages(dir: &Path, level: &str, reset: &str) -> Vec<String> {
    let log = dir.join(format!("validation-{level}-{reset}.txt"));
    let settings = dir.join(format!("vk_layer_settings-{level}-{reset}.txt"));
    // wgpu installs a debug messenger of its own, which would take the messages: the settings
    // file makes the layer log them to a file too.
    std::fs::write(
        &settings,
        format!(
            "khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n\
             khronos_validation.log_filename = {}\n\
             khronos_validation.report_flags = error,warn\n",
            log.display()
        ),
    )
    .expect("write the validation layer's settings");
    let out = dir.join(format!("validation-{level}-{reset}.json"));
    let o = record_cmd(
        &["--timestamps", level, "--query-reset", reset],
        &out,
        &["--steps", "3", "--dispatches", "4"],
    )
    // `profiler record` puts the capture layer first (nearest the program).
    .env("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation")
    .env("VK_LAYER_SETTINGS_PATH", &settings)
    .output()
    .expect("run profiler record");
    assert!(
        o.status.success(),
        "--timestamps {level} --query-reset {reset}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("Validation ")?;
            let start = rest.find("[ ")? + 2;
            let end = start + rest[start..].find(" ]")?;
            Some(rest[start..end].to_owned())
        })
        .collect()
}

#[test]
fn the_layer_adds_no_validation_message_to_the_programs_at_any_level() {
    // wgpu splits each submit into several command buffers, so the submit level wraps them
    // in the layer's own: with queries reset from the host, and in command buffers.
    let dir = tempfile::tempdir().expect("tempdir");
    let own: BTreeSet<String> = validation_messages(dir.path(), "off", "host")
        .into_iter()
        .collect();
    for level in ["submit", "command-buffer", "dispatch"] {
        for reset in ["host", "command-buffer"] {
            let added: Vec<String> = validation_messages(dir.path(), level, reset)
                .into_iter()
                .filter(|m| !own.contains(m))
                .collect();
            assert!(
                added.is_empty(),
                "--timestamps {level} --query-reset {reset}: the layer adds {added:?} to the \
                 program's own {own:?}"
            );
        }
    }
}

/// A `profiler record` of `wgpu-step` that is running: the program's stdout lines as they come
/// (through a thread, so a hung program fails the test instead of hanging it) and
/// `profiler record`'s stderr, collected to the end. On every failure path both processes (the
/// test started them) are killed, so none is left paused behind a failed test.
struct Running {
    child: Child,
    /// The program's pid, once it printed it.
    program: Option<u32>,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

/// How long a line of the program, or the end of `profiler record`, may take on a shared 2-core
/// machine.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

impl Running {
    fn start(record_args: &[&str], out: &Path, program_args: &[&str], cwd: &Path) -> Self {
        let mut child = record_cmd(record_args, out, program_args)
            // A core dump of the crashed program, if the machine writes one, lands there.
            .current_dir(cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn profiler record");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (tx, stderr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            let _ = tx.send(s);
        });
        Self {
            child,
            program: None,
            lines,
            stderr: stderr_rx,
        }
    }

    /// The next stdout line of the program; fails when none comes in time or the program ends
    /// first.
    fn next_line(&mut self, waiting_for: &str) -> String {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => line,
            Err(e) => self.fail(&format!("waiting for `{waiting_for}` from wgpu-step: {e}")),
        }
    }

    /// Kills the program and `profiler record` and panics with `what` and the stderr so far.
    fn fail(&mut self, what: &str) -> ! {
        if let Some(pid) = self.program {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("{what}; profiler record's stderr:\n{}", self.stderr_text());
    }

    /// `profiler record`'s stderr, once every writer has closed it (a program that outlives
    /// `profiler record` holds it open: then what is known is said instead).
    fn stderr_text(&mut self) -> String {
        self.stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| "(stderr is still open)".into())
    }

    /// Waits for `profiler record` to exit; its exit status and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + LINE_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for profiler record") {
                return (status, self.stderr_text());
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "profiler record did not exit within {LINE_TIMEOUT:?} of its program's \
                     signal"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Whether process `pid` has a handler for signal `number` (`SigCgt` of /proc/PID/status).
fn catches(pid: u32, number: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (number - 1)) != 0)
}

/// Sends `signal` so that it ends the program the way a crash would. Rust's runtime handles
/// SIGSEGV (to report stack overflows): for a SIGSEGV outside a guard page its handler restores
/// the default action and returns, so that the faulting instruction faults again and the
/// default action ends the process. A SIGSEGV sent by `kill` faults nothing, so the program
/// would go on; once the handler is gone (no longer in `SigCgt`) a second one ends it.
fn send_fatal_signal(pid: u32, signal: &str, number: i32) {
    send_signal(pid, signal);
    if signal != "SEGV" {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while catches(pid, number) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if std::fs::metadata(format!("/proc/{pid}")).is_ok() {
        // Still alive: the first SIGSEGV only removed the runtime's handler.
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status();
    }
}

/// Runs `wgpu-step --steps 8 --pause-after 5` under `profiler record --timestamps level`,
/// waits for it to pause (5 steps done, each wait returned before `step K` was printed), sends
/// it `signal` and returns the trace, after checking what any signal must leave: the exit
/// status, `meta.capture`, a trace `profiler stats` reads, and a tail that is absent or says
/// why it is one.
fn killed_while_paused(dir: &Path, level: &str, signal: &str, number: i32) -> Trace {
    let out = dir.join(format!("{level}.{signal}.json"));
    let mut run = Running::start(
        &["--timestamps", level],
        &out,
        &["--steps", "8", "--pause-after", "5"],
        dir,
    );
    let first = run.next_line("pid N");
    let Some(pid) = first.strip_prefix("pid ").and_then(|p| p.parse().ok()) else {
        run.fail(&format!("wgpu-step's first line is `{first}`, not `pid N`"))
    };
    run.program = Some(pid);
    let mut steps_printed = 0;
    loop {
        let line = run.next_line("paused");
        if line == "paused" {
            break;
        }
        if line.starts_with("step ") {
            steps_printed += 1;
        }
    }
    if steps_printed != 5 {
        run.fail(&format!(
            "wgpu-step paused after {steps_printed} steps, not 5"
        ));
    }
    send_fatal_signal(pid, signal, number);
    let (status, stderr) = run.finish();
    let what = format!("--timestamps {level}, SIG{signal} while paused after step 5");
    assert_eq!(
        status.code(),
        Some(128 + number),
        "{what}: profiler record passes on 128 + the signal; its stderr:\n{stderr}"
    );
    assert!(
        out.exists(),
        "{what}: no trace at {}:\n{stderr}",
        out.display()
    );
    common::assert_stats_list_dispatches(&out);
    let t = read(&out);
    let c = capture(&t);
    assert!(!c.complete, "{what}");
    assert_eq!(c.signal, Some(number), "{what}");
    assert_eq!(c.exit_code, None, "{what}");
    let names_signal =
        |s: &str| s.contains(&format!("signal {number}")) || s.contains(&format!("SIG{signal}"));
    assert!(
        c.notes.iter().any(|n| names_signal(n)),
        "{what}: no note names the signal: {:?}",
        c.notes
    );
    // Nothing was submitted after the 5th step's wait returned: no tail, or one that says the
    // signal ended the program.
    if let Some(tail) = &c.tail {
        assert!(
            names_signal(&tail.reason),
            "{what}: the tail's reason does not name the signal: {tail:?}"
        );
    }
    t
}

/// The killed run's prefill and decode steps against a complete run of the same command line
/// (without `--pause-after`).
fn assert_killed_run_matches_a_complete_one(signal: &str, number: i32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let level = "dispatch";
    let killed = killed_while_paused(dir.path(), level, signal, number);
    let complete = record_ok(
        &["--timestamps", level],
        &dir.path().join("complete.json"),
        &["--steps", "8"],
    );
    let what = format!("SIG{signal} after step 5");
    // Every counter, host-side ones (command buffers begun, descriptor writes, binds) included:
    // the prologue does the same calls whether or not the program is later killed.
    assert_eq!(
        prefill(&killed).counters,
        prefill(&complete).counters,
        "{what}: the killed run's prefill ({}) against the complete run's ({})",
        rule(&killed),
        rule(&complete)
    );
    let decode = decode_steps(&killed);
    // The program printed `step 5` after its 5th wait returned, so all 5 are in the capture.
    assert_eq!(
        decode.len(),
        5,
        "{what}: decode steps of the killed run ({})",
        rule(&killed)
    );
    for (i, s) in decode.iter().enumerate() {
        assert_eq!(s.counters.dispatches, 5, "{what}: decode step {i}");
        assert_eq!(s.gpu_untimed, 0, "{what}: decode step {i}");
        assert_eq!(s.gpu_spans.len(), 5, "{what}: decode step {i}");
    }
}

#[test]
fn sigkill_mid_run_leaves_a_readable_trace_whose_prefill_matches_a_complete_run() {
    assert_killed_run_matches_a_complete_one("KILL", 9);
}

#[test]
fn sigsegv_mid_run_leaves_a_readable_trace_whose_prefill_matches_a_complete_run() {
    assert_killed_run_matches_a_complete_one("SEGV", 11);
}

#[test]
fn a_signal_while_paused_leaves_no_tail_or_one_that_names_it() {
    // The same pause as above with the layer's timestamps off: the tail (work after the last
    // step) is judged by `killed_while_paused`, and the 5 steps are there without timing.
    let dir = tempfile::tempdir().expect("tempdir");
    for (signal, number) in [("KILL", 9), ("SEGV", 11)] {
        let t = killed_while_paused(dir.path(), "off", signal, number);
        let decode = decode_steps(&t);
        assert_eq!(decode.len(), 5, "SIG{signal} ({})", rule(&t));
        assert!(decode.iter().all(|s| s.counters.dispatches == 5));
    }
}

#[test]
fn two_devices_in_two_threads_keep_their_queues_and_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("two.json");
    let (steps, dispatches) = (6u64, 3u64);
    let t = record_ok(
        &["--timestamps", "dispatch"],
        &out,
        &["--devices", "2", "--steps", "6", "--dispatches", "3"],
    );
    let c = capture(&t);
    assert!(c.complete, "{:?}", c.notes);
    let per_device_dispatches = PROLOGUE_DISPATCHES + steps * dispatches + READBACK_DISPATCHES;
    let per_device_submits = PROLOGUE_SUBMITS + steps * STEP_SUBMITS + READBACK_SUBMITS;
    assert_eq!(c.queues.len(), 2, "{:#?}", c.queues);
    let devices: BTreeSet<u32> = c.queues.iter().map(|q| q.device).collect();
    assert_eq!(
        devices.len(),
        2,
        "two queues on two devices: {:#?}",
        c.queues
    );
    for q in &c.queues {
        assert_eq!(q.kind, "compute", "{q:?}");
        assert_eq!(q.dispatches, per_device_dispatches, "{q:?}");
        assert_eq!(q.submits, per_device_submits, "{q:?}");
        assert!(q.command_buffers >= q.submits, "{q:?}");
        assert!(!q.device_name.is_empty(), "{q:?}");
    }
    assert_eq!(
        c.queues[0].command_buffers, c.queues[1].command_buffers,
        "both threads record the same work: {:#?}",
        c.queues
    );
    // A trace's steps are of one device (the busiest; a note names the others): every dispatch
    // and submit of that device is in a step, the epilogue or the tail, and the other device's
    // work is in its queue's line above.
    assert!(
        c.notes.iter().any(|n| n.contains("devices seen")),
        "{:?}",
        c.notes
    );
    let tail = c.tail.as_ref().map(|t| t.counters).unwrap_or_default();
    let in_steps = |f: fn(&profiler::Counters) -> u64| -> u64 {
        t.tokens.iter().map(|r| f(&r.counters)).sum::<u64>() + f(&c.epilogue) + f(&tail)
    };
    assert_eq!(
        in_steps(|k| k.dispatches),
        per_device_dispatches,
        "dispatches of the traced device in the steps, the epilogue and the tail ({}; notes: {:?})",
        rule(&t),
        c.notes
    );
    assert_eq!(
        in_steps(|k| k.submits_compute + k.submits_transfer),
        per_device_submits,
        "submits of the traced device in the steps, the epilogue and the tail ({}; notes: {:?})",
        rule(&t),
        c.notes
    );
    assert_eq!(c.untimed_dispatches, 0);
}

/// `profiler diff --format json --per-label A B`, parsed.
fn diff_json(a: &Path, b: &Path) -> serde_json::Value {
    let o = Command::new(built("profiler"))
        .arg("diff")
        .args(["--format", "json", "--per-label"])
        .arg(a)
        .arg(b)
        .output()
        .expect("run profiler diff");
    assert!(
        o.status.success(),
        "profiler diff failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("profiler diff --format json prints JSON")
}

fn is_pipeline_number(label: &str) -> bool {
    label
        .strip_prefix("pipeline ")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

#[test]
fn unlabeled_dispatches_get_stable_names_and_labels_are_the_programs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["--steps", "8", "--no-labels"];
    let paths = [dir.path().join("a.json"), dir.path().join("b.json")];
    let traces: Vec<Trace> = paths
        .iter()
        .map(|p| record_ok(&["--timestamps", "dispatch"], p, &args))
        .collect();
    let labels: Vec<BTreeSet<&str>> = traces
        .iter()
        .map(|t| t.ops.iter().map(|o| o.label.as_str()).collect())
        .collect();
    assert_eq!(
        labels[0], labels[1],
        "the op labels of two runs of the same unlabeled program"
    );
    for (t, l) in traces.iter().zip(&labels) {
        assert!(
            !l.iter().any(|l| is_pipeline_number(l)),
            "labels numbered by creation order are not stable names: {l:?}"
        );
        // The two pipelines get two names, each from its shader module and entry point.
        let pre = span_labels(t, prefill(t));
        let dec: BTreeSet<&str> = decode_steps(t)
            .iter()
            .flat_map(|s| span_labels(t, s))
            .collect();
        assert_eq!(pre.len(), 1, "the prologue's one pipeline: {pre:?}");
        assert_eq!(dec.len(), 1, "the steps' one pipeline: {dec:?}");
        assert_ne!(pre, dec, "two pipelines, one name");
        assert!(
            pre.iter().all(|l| l.contains(PROLOGUE_ENTRY_POINT)),
            "the prologue's dispatch is named without its entry point: {pre:?}"
        );
        assert!(
            dec.iter().all(|l| l.contains(STEP_ENTRY_POINT)),
            "the steps' dispatches are named without their entry point: {dec:?}"
        );
    }
    let d = diff_json(&paths[0], &paths[1]);
    let ops = d["diff"]["ops"].as_array().expect("diff.ops");
    assert!(!ops.is_empty(), "the diff pairs no op: {d}");
    for op in ops {
        assert!(
            !op["a"].is_null() && !op["b"].is_null(),
            "an op of one run is missing in the other: {op}"
        );
    }

    // With labels (the default), the dispatches are named by the program's labels.
    let out = dir.path().join("labeled.json");
    let t = record_ok(&["--timestamps", "dispatch"], &out, &["--steps", "8"]);
    let pre = span_labels(&t, prefill(&t));
    assert!(
        !pre.is_empty() && pre.iter().all(|l| PROLOGUE_LABELS.contains(l)),
        "the prologue's dispatch is named {pre:?}, not by a label of the program \
         {PROLOGUE_LABELS:?}"
    );
    for s in decode_steps(&t) {
        let dec = span_labels(&t, s);
        assert!(
            !dec.is_empty() && dec.iter().all(|l| STEP_LABELS.contains(l)),
            "a step's dispatches are named {dec:?}, not by a label of the program \
             {STEP_LABELS:?}"
        );
    }
}

#[test]
fn a_pipeline_left_uninstrumented_is_timed_by_interval_beside_clocked_ones() {
    // `--clock-exclude scale@` keeps the prologue's `scale` pipeline as the program made it; the
    // steps' `add` dispatches are still clocked. Every dispatch keeps a GPU span either way.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("exclude.json");
    let o = record_cmd(
        &["--timestamps", "dispatch", "--clock-exclude", "scale@"],
        &out,
        &["--steps", "4", "--dispatches", "3"],
    )
    .output()
    .expect("run profiler record");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("excluded by DECODESCOPE_CLOCK_EXCLUDE (scale@)") && err.contains("scale@"),
        "the layer says which pipeline it left alone:\n{err}"
    );
    assert!(!err.contains("add@"), "add is instrumented:\n{err}");
    let t = read(&out);
    let c = capture(&t);
    assert_eq!(c.dispatch_timing, "shader-clock");
    assert_eq!(c.untimed_dispatches, 0, "{:?}", c.notes);
    let pre = prefill(&t);
    assert_eq!(pre.counters.dispatches, 1);
    assert_eq!(
        pre.gpu_spans.len(),
        1,
        "the interval-timed prologue dispatch"
    );
    for s in decode_steps(&t) {
        assert_eq!(s.counters.dispatches, 3);
        assert_eq!(s.gpu_spans.len(), 3);
        assert!(
            s.gpu_spans
                .iter()
                .all(|g| g.shared() == 1 && g.dur_ns() > 0)
        );
    }
}
