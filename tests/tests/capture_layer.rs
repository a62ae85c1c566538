//! The capture layer end to end on lavapipe: `profiler record -- decoder capture ...` writes a
//! trace of the decoder as a foreign program, and its decode steps carry the same counters as
//! the decoder's own trace of the same run, for both presets and single-knob settings, at every
//! timestamp level of the layer. Then the bad inputs of `profiler record`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use profiler::{Phase, Trace};

mod common;
use common::built;

const PROMPT: &str = "The capital of France is";
const DECODE_TOKENS: &str = "6";

/// `profiler record [record_args] --out OUT -- PROGRAM ARGS`.
fn record(record_args: &[&str], out: &Path, program: &Path, args: &[&str]) -> Output {
    record_with(&[], record_args, out, program, args)
}

/// [`record`] with `env` set for the profiler, the program and the layer.
fn record_with(
    env: &[(&str, &str)],
    record_args: &[&str],
    out: &Path,
    program: &Path,
    args: &[&str],
) -> Output {
    Command::new(built("profiler"))
        .envs(env.iter().copied())
        .arg("record")
        .args(record_args)
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run profiler record")
}

/// The arguments of a `decoder capture` of `tiny` into `out` with `knobs`.
fn capture_args(out: &Path, mode: &str, knobs: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "capture",
        "--model",
        "tiny",
        "--prompt",
        PROMPT,
        "--max-tokens",
        DECODE_TOKENS,
        "--timestamps",
        "off",
        "--mode",
        mode,
        // Khronos validation, below the layer, checks what the layer adds too.
        "--validation",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(knobs.iter().map(|s| s.to_string()));
    v.push("--out".into());
    v.push(out.display().to_string());
    v
}

fn read(path: &Path) -> Trace {
    profiler::read_trace(path).unwrap_or_else(|e| panic!("{e}"))
}

fn decode_steps(t: &Trace) -> Vec<&profiler::TokenRecord> {
    t.tokens
        .iter()
        .filter(|r| r.phase == Phase::Decode)
        .collect()
}

/// The decode steps' counters of the layer's trace equal the decoder's own, except the byte
/// counters, which the layer cannot see in host-coherent memory (the trace says so).
fn assert_same_decode_counters(layer: &Trace, own: &Trace, what: &str) {
    let (l, o) = (decode_steps(layer), decode_steps(own));
    assert_eq!(
        l.len(),
        o.len(),
        "{what}: the layer found {} decode steps, the decoder ran {} ({})",
        l.len(),
        o.len(),
        layer
            .meta
            .capture
            .as_ref()
            .map_or("", |c| c.step_rule_detail.as_str())
    );
    let c = layer.meta.capture.as_ref().expect("meta.capture");
    assert_eq!(c.step_rule, "auto");
    for name in ["bytes_to_device", "bytes_from_device"] {
        assert!(c.unknown_counters.iter().any(|u| u == name), "{what}");
    }
    for (i, (a, b)) in l.iter().zip(&o).enumerate() {
        let mut a = a.counters;
        let mut b = b.counters;
        a.bytes_to_device = 0;
        a.bytes_from_device = 0;
        b.bytes_to_device = 0;
        b.bytes_from_device = 0;
        assert_eq!(a, b, "{what}: decode step {i}");
    }
}

fn run_under_layer(
    dir: &Path,
    name: &str,
    mode: &str,
    knobs: &[&str],
    level: &str,
    reset: &str,
) -> (Trace, Trace) {
    let (how, level) = match level {
        "dispatch-interval" => ("interval", "dispatch"),
        l => ("clock", l),
    };
    // `dispatch-mixed`: shader clocks for the dispatches of one workgroup, intervals for the
    // wider ones (which push the instrumented shader's skip word), in the same recordings.
    let (env, level): (&[(&str, &str)], &str) = match level {
        "dispatch-mixed" => (&[("DECODESCOPE_CLOCK_MAX_GROUPS", "1")], "dispatch"),
        l => (&[], l),
    };
    let own = dir.join(format!("{name}.own.json"));
    let layer = dir.join(format!("{name}.layer.json"));
    let args = capture_args(&own, mode, knobs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = record_with(
        env,
        &[
            "--timestamps",
            level,
            "--dispatch-timing",
            how,
            "--query-reset",
            reset,
        ],
        &layer,
        &built("decoder"),
        &args,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{name}: profiler record failed:\n{stderr}"
    );
    // The layer's queries, resets, timestamps and instrumented pipelines are valid usage.
    let invalid: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("validation error"))
        .collect();
    assert!(invalid.is_empty(), "{name}: {}", invalid.join("\n"));
    (read(&layer), read(&own))
}

#[test]
fn decode_counters_match_the_decoders_own_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings: [(&str, &str, &[&str]); 5] = [
        ("generic", "generic", &[]),
        ("fused", "fused", &[]),
        ("fused-push", "fused", &["--descriptors", "push"]),
        (
            "fused-every-token",
            "fused",
            &["--recording", "every-token"],
        ),
        ("generic-sync-token", "generic", &["--sync", "token"]),
    ];
    for (name, mode, knobs) in settings {
        let (layer, own) = run_under_layer(dir.path(), name, mode, knobs, "off", "host");
        assert_same_decode_counters(&layer, &own, name);
        let c = layer.meta.capture.as_ref().expect("capture");
        assert!(c.complete, "{name}: {:?}", c.notes);
        assert_eq!(c.exit_code, Some(0));
        assert_eq!(layer.meta.knobs.mode, profiler::UNKNOWN);
        assert_eq!(layer.meta.device.name, own.meta.device.name);
        assert_eq!(layer.meta.run.timestamps, "off");
        assert!(layer.tokens.iter().all(|t| t.gpu_spans.is_empty()));
    }
}

#[test]
fn timestamp_levels_time_the_gpu_and_leave_the_counters_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Both presets at every level, with queries reset from the host and in command buffers:
    // the fused preset records once and replays one region per token, the generic preset
    // records, submits and waits for every dispatch. `dispatch` reads lavapipe's shader clock
    // in each dispatch (the layer instruments the decoder's SPIR-V); `dispatch-mixed` only in
    // dispatches of one workgroup, the others' by interval; `dispatch-interval` times every
    // dispatch by intervals between barriers.
    let runs = ["fused", "generic"].into_iter().flat_map(|m| {
        ["submit", "command-buffer", "dispatch", "dispatch-interval"]
            .into_iter()
            .flat_map(move |l| ["host", "command-buffer"].map(move |r| (m, l, r)))
            .chain([(m, "dispatch-mixed", "host")])
    });
    for (mode, level, reset) in runs {
        let name = match (mode, reset) {
            ("fused", "host") => level.to_owned(),
            ("fused", r) => format!("{level}-{r}-resets"),
            (m, "host") => format!("{m}-{level}"),
            (m, r) => format!("{m}-{level}-{r}-resets"),
        };
        let (layer, own) = run_under_layer(dir.path(), &name, mode, &[], level, reset);
        assert_same_decode_counters(&layer, &own, &name);
        let c = layer.meta.capture.as_ref().expect("capture");
        assert_eq!(c.untimed_dispatches, 0, "{name}: {:?}", c.notes);
        let mixed = level == "dispatch-mixed";
        let (level, how) = match level {
            "dispatch" | "dispatch-mixed" => ("dispatch", "shader-clock"),
            "dispatch-interval" => ("dispatch", "interval"),
            l => (l, ""),
        };
        assert_eq!(c.dispatch_timing, how, "{name}");
        // lavapipe has hostQueryReset.
        assert_eq!(c.query_reset, reset, "{name}");
        assert_eq!(layer.meta.run.timestamps, level);
        assert!(
            [
                "VK_KHR_calibrated_timestamps",
                "VK_EXT_calibrated_timestamps",
                "fence-fallback"
            ]
            .contains(&layer.meta.clock.method.as_str()),
            "{}",
            layer.meta.clock.method
        );
        let own_labels: Vec<&str> = own.ops.iter().map(|o| o.label.as_str()).collect();
        for step in decode_steps(&layer) {
            assert!(
                !step.gpu_spans.is_empty(),
                "{name}: a decode step without GPU spans"
            );
            assert!(step.gpu_busy_ns.is_some());
            assert_eq!(step.gpu_untimed, 0, "{name}");
            for s in &step.gpu_spans {
                // Spans lie inside their step and name a known op.
                assert!(s.start_ns() >= step.start_ns, "{name}: {s:?}");
                let op = &layer.ops[s.op() as usize];
                match level {
                    "submit" => assert_eq!(op.label, "submit"),
                    "command-buffer" => assert_eq!(op.label, "command buffer"),
                    // The decoder's debug-utils labels name the dispatches.
                    _ => assert!(own_labels.contains(&op.label.as_str()), "{}", op.label),
                }
            }
        }
        if level == "dispatch" {
            // A span for every dispatch of every step, the prefill's included; with shader
            // clocks, each its own (no interval shared between dispatches), none empty.
            for step in &layer.tokens {
                assert_eq!(
                    step.gpu_spans.len() as u64,
                    step.counters.dispatches,
                    "{name}: decode step {}",
                    step.position
                );
                if how == "shader-clock" {
                    for s in &step.gpu_spans {
                        // Intervals may be shared by dispatches the program lets overlap.
                        assert!(mixed || s.shared() == 1, "{name}: {s:?}");
                        assert!(s.dur_ns() > 0, "{name}: {s:?}");
                    }
                }
            }
        }
    }
    // stats and diff against the decoder's own trace print their tables; the viewer's logic
    // opens both and lays out a decode step of each.
    let (layer, own) = (
        dir.path().join("dispatch.layer.json"),
        dir.path().join("dispatch.own.json"),
    );
    common::assert_stats_list_dispatches(&layer);
    let diff = Command::new(built("profiler"))
        .arg("diff")
        .arg(&own)
        .arg(&layer)
        .args(["--strict", "--ignore", "run.timestamps"])
        .output()
        .expect("diff");
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(
        diff.status.success(),
        "diff --strict: foreign knobs and model are not compared, yet:\n{text}{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(text.contains("decode counters"), "{text}");
    assert!(text.contains("generated tokens: not compared"), "{text}");
    for p in [&layer, &own] {
        let t = viewer::logic::load_trace(p).expect("viewer loads the trace");
        let first_decode = t
            .trace
            .tokens
            .iter()
            .position(|r| r.phase == Phase::Decode)
            .expect("a decode step");
        let l = viewer::logic::layout_token(&t.trace, first_decode).expect("a layout");
        // The decoder's own capture ran with its timestamps off; the layer wrote its own.
        assert_eq!(
            l.lanes.iter().any(|l| l.name == "GPU compute"),
            p == &layer,
            "{}",
            p.display()
        );
    }
}

#[test]
fn the_wait_rule_keeps_every_wait_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let own = dir.path().join("own.json");
    let out = dir.path().join("layer.json");
    let args = capture_args(&own, "generic", &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = record(&["--steps", "wait"], &out, &built("decoder"), &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = read(&out);
    let own = read(&own);
    let c = t.meta.capture.as_ref().expect("capture");
    assert_eq!(c.step_rule, "wait");
    assert_eq!(t.tokens.len() as u64, c.wait_groups - c.epilogue_waits);
    // One generic decode token waits once per dispatch.
    let per_token = decode_steps(&own)[0].counters.fence_waits;
    assert_eq!(c.period_waits as u64, per_token);
    assert!(t.tokens.iter().all(|r| r.counters.fence_waits <= 1));
}

#[test]
fn bad_input_is_reported_and_a_failing_program_still_leaves_its_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("t.json");
    let profiler_bin = built("profiler");

    // No program.
    let o = Command::new(&profiler_bin)
        .args(["record", "--out"])
        .arg(&out)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("PROGRAM"));

    // A program that never touches Vulkan.
    let o = record(&[], &out, Path::new("true"), &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("never loaded the capture layer"), "{err}");
    assert!(!out.exists());

    // A program that cannot be started.
    let o = record(&[], &out, Path::new("/nonexistent/program"), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot run /nonexistent/program"));

    // A layer library that is not there, by flag and by environment.
    let o = record(
        &["--layer", "/nonexistent/libx.so"],
        &out,
        Path::new("true"),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/libx.so"));
    let o = Command::new(&profiler_bin)
        .args(["record", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .env("DECODESCOPE_LAYER", "/nonexistent/liby.so")
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/liby.so"));

    // A Vulkan program that exits with status 3: the status passes through and the partial
    // trace is written and says so.
    let own = dir.path().join("own.json");
    let args = capture_args(&own, "fused", &[]);
    let script = format!(
        "\"$0\" {} && exit 3",
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let o = record(
        &[],
        &out,
        Path::new("sh"),
        &[
            "-c",
            &script,
            built("decoder").to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = read(&out);
    let c = t.meta.capture.as_ref().expect("capture");
    assert!(!c.complete);
    assert_eq!(c.exit_code, Some(3));
    assert!(
        c.notes.iter().any(|n| n.contains("status 3")),
        "{:?}",
        c.notes
    );
    assert_eq!(decode_steps(&t).len(), decode_steps(&read(&own)).len());
}

#[test]
fn ctrl_c_stops_the_program_and_the_trace_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let own = dir.path().join("own.json");
    let out = dir.path().join("t.json");
    let args = capture_args(&own, "fused", &[]);
    // The program: a capture, then a long sleep that only SIGINT ends.
    let script = format!(
        "\"$0\" {} && exec sleep 600",
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut child = Command::new(built("profiler"))
        .arg("record")
        .arg("--out")
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .arg(built("decoder"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn profiler record");
    // Wait for the capture to finish (its trace appears), then press Ctrl-C on `profiler
    // record` alone: it passes SIGINT on to the program and writes the trace.
    common::poll(
        &mut child,
        "the decoder's own trace under profiler record",
        std::time::Duration::from_secs(300),
        std::time::Duration::from_millis(100),
        |c| {
            if let Ok(Some(s)) = c.try_wait() {
                panic!("profiler record exited early: {s}");
            }
            own.exists().then_some(())
        },
    );
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let t = read(&out);
    let c = t.meta.capture.as_ref().expect("capture");
    assert_eq!(c.signal, Some(2));
    assert!(!c.complete);
    assert!(
        c.notes.iter().any(|n| n.contains("Ctrl-C")),
        "{:?}",
        c.notes
    );
    assert_same_decode_counters(&t, &read(&own), "ctrl-c");
}
