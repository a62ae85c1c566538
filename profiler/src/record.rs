//! `profiler record`: run a program with the capture layer enabled through the Vulkan loader's
//! environment (nothing is installed anywhere), then turn the layer's raw records into a trace.
//!
//! The layer is found at `--layer PATH`, else `$DECODESCOPE_LAYER`, else beside the running
//! `profiler` executable (cargo builds both into `target/<profile>/`). Its manifest is written
//! into a temporary folder named by `VK_ADD_LAYER_PATH`; `VK_INSTANCE_LAYERS` and
//! `VK_LOADER_LAYERS_ENABLE` enable it; `DECODESCOPE_CAPTURE_DIR`, `DECODESCOPE_TIMESTAMPS`,
//! `DECODESCOPE_DISPATCH_TIMING`, `DECODESCOPE_CLOCK_EXCLUDE` and (with `--clock-max-groups`)
//! `DECODESCOPE_CLOCK_MAX_GROUPS` pass the options to it.
//!
//! Ctrl-C reaches the program (it shares the terminal's process group) and `profiler record`
//! outlives it: once the program has exited, the trace is written (atomically) and says that the
//! program was stopped. A SIGINT or SIGTERM sent to `profiler record` alone is passed on to the
//! program as SIGINT after a second's grace (time for it to arrive from the terminal as well).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::capture::{self, CaptureError, ProgramRun, StepRule};
use crate::trace::{Meta, TokenRecord};

/// The layer's name in its manifest and in `VK_INSTANCE_LAYERS`.
pub const LAYER_NAME: &str = "VK_LAYER_DECODESCOPE_capture";
/// The library cargo builds from `layer/`.
pub const LAYER_FILE: &str = "libdecodescope_layer.so";

/// What to record and how.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub out: PathBuf,
    /// `off`, `submit`, `command-buffer` or `dispatch`.
    pub timestamps: String,
    /// At `dispatch`: `clock` (shader clocks where the device has them) or `interval`.
    pub dispatch_timing: String,
    /// `host` or `command-buffer`: where the layer resets its queries.
    pub query_reset: String,
    /// Parts of pipeline names (`entry@HASH`) left uninstrumented, timed by interval.
    pub clock_exclude: Vec<String>,
    /// The most workgroups a dispatch reads the shader clock with; `None`: the layer's default
    /// (or `$DECODESCOPE_CLOCK_MAX_GROUPS` where it is set).
    pub clock_max_groups: Option<u32>,
    pub steps: StepRule,
    /// `--layer`; else `$DECODESCOPE_LAYER`; else beside the executable.
    pub layer: Option<PathBuf>,
    /// Op kinds for the program's dispatches (`--op-kinds FILE`, then the built-in rules).
    pub op_kinds: crate::kinds::KindRules,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// How the recording went.
#[derive(Debug)]
pub struct Recorded {
    pub run: ProgramRun,
    /// What was written to `out`, or why nothing was.
    pub trace: Result<RecordedTrace, CaptureError>,
}

/// A trace that `profiler record` wrote: its metadata and how many steps it holds.
#[derive(Debug)]
pub struct RecordedTrace {
    pub meta: Meta,
    pub steps: u64,
}

impl Recorded {
    /// The exit code `profiler record` passes on: the program's, or 128 + the signal that ended
    /// it (as a shell reports it).
    pub fn exit_code(&self) -> i32 {
        match (self.run.exit_code, self.run.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(
        "the capture layer library {} does not exist ({how}); build it with `cargo build -p \
         decodescope-layer`, or name it with --layer PATH or $DECODESCOPE_LAYER",
        path.display()
    )]
    NoLayer { path: PathBuf, how: String },
    #[error(
        "the capture layer library {} ({how}) is not a shared library (it has no ELF header); \
         give the libdecodescope_layer.so that `cargo build -p decodescope-layer` builds",
        path.display()
    )]
    NotALibrary { path: PathBuf, how: String },
    #[error(
        "no program to record: give it after `--` (profiler record --out T.json -- PROGRAM ARGS...)"
    )]
    NoProgram,
    #[error("cannot run {program}: {err} (is it on PATH, and executable?)")]
    Spawn {
        program: String,
        /// In the message, so not a `#[source]` (the message would repeat it).
        err: std::io::Error,
    },
    #[error("cannot set up the capture folder {}: {err}", path.display())]
    Scratch {
        path: PathBuf,
        /// In the message, so not a `#[source]` (the message would repeat it).
        err: std::io::Error,
    },
    #[error("cannot read the layer's raw capture {}: {err}", path.display())]
    ReadRaw {
        path: PathBuf,
        /// In the message, so not a `#[source]` (the message would repeat it).
        err: std::io::Error,
    },
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Write(#[from] crate::io::TraceError),
    #[error(transparent)]
    Output(#[from] crate::io::OutputError),
}

/// Finds the layer library: `explicit`, else `$DECODESCOPE_LAYER`, else beside `exe`.
pub fn find_layer(explicit: Option<&Path>, exe: Option<&Path>) -> Result<PathBuf, RecordError> {
    let (path, how) = match (explicit, std::env::var_os("DECODESCOPE_LAYER")) {
        (Some(p), _) => (p.to_path_buf(), "given with --layer".to_owned()),
        (None, Some(p)) if !p.is_empty() => (PathBuf::from(p), "from $DECODESCOPE_LAYER".into()),
        _ => match exe.and_then(Path::parent) {
            Some(dir) => (
                dir.join(LAYER_FILE),
                "looked for beside the profiler executable".into(),
            ),
            None => (PathBuf::from(LAYER_FILE), "no executable folder".into()),
        },
    };
    if !path.is_file() {
        return Err(RecordError::NoLayer { path, how });
    }
    // The loader skips a layer library it cannot load, and the program then runs untraced: a
    // file that is no shared library at all is named here instead.
    let mut magic = [0u8; 4];
    let elf = std::fs::File::open(&path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && magic == *b"\x7fELF";
    if !elf {
        return Err(RecordError::NotALibrary { path, how });
    }
    Ok(std::fs::canonicalize(&path).unwrap_or(path))
}

/// The manifest the loader reads (`file_format_version` 1.2.0: the loader negotiates the
/// interface through `vkNegotiateLoaderLayerInterfaceVersion`, the library's only export).
pub fn manifest(library: &Path) -> String {
    let doc = serde_json::json!({
        "file_format_version": "1.2.0",
        "layer": {
            "name": LAYER_NAME,
            "type": "GLOBAL",
            "library_path": library.display().to_string(),
            "api_version": "1.3.0",
            "implementation_version": "1",
            "description": "decodescope capture layer (enabled by profiler record)",
        }
    });
    format!("{doc:#}\n")
}

/// A folder removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch_dir() -> Result<Scratch, RecordError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path =
        std::env::temp_dir().join(format!("decodescope-record.{}.{nanos}", std::process::id()));
    std::fs::create_dir_all(&path).map_err(|err| RecordError::Scratch {
        path: path.clone(),
        err,
    })?;
    Ok(Scratch(path))
}

/// Prepends `value` to a `sep`-separated list in the environment variable `name`.
fn prepend(name: &str, value: &str, sep: &str) -> String {
    match std::env::var(name) {
        Ok(old) if !old.is_empty() => format!("{value}{sep}{old}"),
        _ => value.to_owned(),
    }
}

/// Runs the program under the layer and writes the trace to `opts.out`.
pub fn record(opts: &RecordOptions) -> Result<Recorded, RecordError> {
    let Some((program, args)) = opts.command.split_first() else {
        return Err(RecordError::NoProgram);
    };
    // Before the program runs: an output that cannot be written would lose the whole capture.
    crate::io::check_output(&opts.out, "--out")?;
    let exe = std::env::current_exe().ok();
    let layer = find_layer(opts.layer.as_deref(), exe.as_deref())?;
    let scratch = scratch_dir()?;
    let manifest_path = scratch.0.join("VkLayer_decodescope_capture.json");
    std::fs::write(&manifest_path, manifest(&layer)).map_err(|err| RecordError::Scratch {
        path: manifest_path.clone(),
        err,
    })?;

    // Ctrl-C and SIGTERM: keep running until the program has exited.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|err| {
            RecordError::Scratch {
                path: scratch.0.clone(),
                err,
            }
        })?;
    }

    let dir = scratch.0.display().to_string();
    let created_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut child = Command::new(program);
    if let Some(n) = opts.clock_max_groups {
        child.env("DECODESCOPE_CLOCK_MAX_GROUPS", n.to_string());
    }
    let mut child = child
        .args(args)
        .env("VK_ADD_LAYER_PATH", prepend("VK_ADD_LAYER_PATH", &dir, ":"))
        .env(
            "VK_INSTANCE_LAYERS",
            prepend("VK_INSTANCE_LAYERS", LAYER_NAME, ":"),
        )
        .env(
            "VK_LOADER_LAYERS_ENABLE",
            prepend("VK_LOADER_LAYERS_ENABLE", LAYER_NAME, ","),
        )
        .env("DECODESCOPE_CAPTURE_DIR", &dir)
        .env("DECODESCOPE_TIMESTAMPS", &opts.timestamps)
        .env("DECODESCOPE_DISPATCH_TIMING", &opts.dispatch_timing)
        .env("DECODESCOPE_QUERY_RESET", &opts.query_reset)
        .env("DECODESCOPE_CLOCK_EXCLUDE", opts.clock_exclude.join(","))
        .spawn()
        .map_err(|err| RecordError::Spawn {
            program: program.clone(),
            err,
        })?;
    let mut interrupted_at: Option<Instant> = None;
    let mut forwarded = false;
    let status: ExitStatus = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(err) => {
                return Err(RecordError::Spawn {
                    program: program.clone(),
                    err,
                });
            }
        }
        if stop.load(Ordering::Relaxed) {
            let at = *interrupted_at.get_or_insert_with(Instant::now);
            if !forwarded && at.elapsed() > Duration::from_secs(1) {
                // The signal reached only us (not from the terminal): pass it on.
                let _ = Command::new("kill")
                    .args(["-INT", &child.id().to_string()])
                    .status();
                forwarded = true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    let run = ProgramRun {
        program: program.clone(),
        args: args.to_vec(),
        exit_code: status.code(),
        signal: status.signal(),
        interrupted: interrupted_at.is_some(),
        created_unix_ms,
    };

    let entries = std::fs::read_dir(&scratch.0).map_err(|err| RecordError::ReadRaw {
        path: scratch.0.clone(),
        err,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let trace = convert(&files, &scratch.0, &run, opts)?;
    Ok(Recorded { run, trace })
}

/// Turns the raw files into the trace at `opts.out` in two passes, holding neither file nor trace
/// whole: the first reads every group's head (no spans) and plans the trace
/// ([`capture::Plan::new`]); the second reads the traced file again and writes each step's
/// record as soon as it is complete ([`capture::StepStream`], [`crate::io::TraceWriter`]).
fn convert(
    files: &[PathBuf],
    scratch: &Path,
    run: &ProgramRun,
    opts: &RecordOptions,
) -> Result<Result<RecordedTrace, CaptureError>, RecordError> {
    let open = |f: &Path| {
        crate::io::open_regular_file(f)
            .map(|file| std::io::BufReader::with_capacity(1 << 16, file))
            .map_err(|err| RecordError::ReadRaw {
                path: f.to_owned(),
                err,
            })
    };
    let mut heads = Vec::new();
    for f in files {
        let mut groups = Vec::new();
        let mut raw = capture::read_raw(&f.display().to_string(), open(f)?, |g| {
            groups.push(capture::GroupHead::of(&g));
            Ok::<(), CaptureError>(())
        })?;
        // The process's live file: what it submitted after its last record.
        if let Some(pid) = raw.process.as_ref().map(|p| p.pid)
            && let Ok(bytes) = std::fs::read(scratch.join(format!("live.{pid}")))
        {
            raw.live = capture::parse_live(&bytes);
        }
        heads.push(capture::RawHeads { raw, groups });
    }
    let plan = match capture::Plan::new(&heads, run, opts.steps, &opts.op_kinds) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    drop(heads);
    let mut out = crate::io::TraceWriter::create(&opts.out)?;
    let mut stream = capture::StepStream::new(&plan);
    let mut write = |t: TokenRecord| -> Result<(), RecordError> { Ok(out.push(&t)?) };
    let f = &files[plan.file()];
    capture::read_raw(&f.display().to_string(), open(f)?, |g| {
        stream.feed(&g, &mut write)
    })?;
    stream.finish(&mut write)?;
    let steps = out.tokens();
    out.finish(plan.meta(), plan.ops())?
        .commit()
        .map_err(|err| crate::io::TraceError::Write {
            path: opts.out.clone(),
            err,
        })?;
    let (meta, _) = plan.into_parts();
    Ok(Ok(RecordedTrace { meta, steps }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_layer_is_named() {
        let e = find_layer(Some(Path::new("/nonexistent/libx.so")), None).expect_err("missing");
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/libx.so"), "{msg}");
        assert!(msg.contains("--layer"), "{msg}");
    }

    #[test]
    fn a_layer_that_is_no_shared_library_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, bytes) in [("text.so", &b"not a library"[..]), ("empty.so", &b""[..])] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            let msg = find_layer(Some(&path), None)
                .expect_err("no ELF")
                .to_string();
            assert!(
                msg.contains(name) && msg.contains("not a shared library"),
                "{msg}"
            );
        }
        let elf = dir.path().join("elf.so");
        std::fs::write(&elf, b"\x7fELF\x02\x01\x01").expect("write");
        assert!(find_layer(Some(&elf), None).is_ok());
    }

    #[test]
    fn the_manifest_names_the_library() {
        let m = manifest(Path::new("/x/libdecodescope_layer.so"));
        let v: serde_json::Value = serde_json::from_str(&m).expect("json");
        assert_eq!(v["layer"]["name"], LAYER_NAME);
        assert_eq!(v["layer"]["library_path"], "/x/libdecodescope_layer.so");
    }
}
