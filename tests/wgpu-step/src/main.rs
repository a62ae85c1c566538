//! `wgpu-step`: a small compute program written with wgpu, a Vulkan runtime unrelated to the
//! decoder and llama.cpp, with its own descriptor, barrier and submission policy (wgpu waits on
//! timeline semaphores). The capture layer's end-to-end tests (`tests/tests/capture_wgpu.rs`)
//! run it under `profiler record`.
//!
//! The program: a prologue (upload, one dispatch of `scale`, one submit, one wait), then
//! `--steps` steps of one submit of `--dispatches` dispatches of `add` and one blocking wait
//! each, then a read-back (one submit of a copy, one wait) that checks every value.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, Parser};

mod block_on;
mod kernel;

const AFTER_HELP: &str = "\
Output (stdout, one flushed line each): `pid PID` first; `step K` after step K (1-based), or
`device I step K` with --devices above 1; `paused` with --pause-after; `ok` at the end.

Exit codes:
  0  every value read back is what the dispatches must produce
  1  a wrong value, or a wgpu or Vulkan error
  2  a bad command line, or no Vulkan adapter

Labels: by default the shader module, the pipelines (`scale`, `add`), the compute passes
(`prologue`, `step`), the encoders and the buffers carry labels, and wgpu enables
VK_EXT_debug_utils, so a capture sees debug-utils labels; --no-labels gives nothing a label and
leaves the extension off. WGPU_VALIDATION=1 turns on the Khronos validation layer.";

#[derive(Parser)]
#[command(
    name = "wgpu-step",
    version,
    about = "A small wgpu compute program on Vulkan: a prologue, then steps of one submit and \
             one wait each. A second Vulkan runtime for testing decodescope's capture layer \
             (`profiler record -- wgpu-step ...`).",
    after_help = AFTER_HELP
)]
struct Args {
    /// Steps after the prologue: one command encoder, one compute pass, one submit and one
    /// blocking poll each.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Dispatches in each step's compute pass.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    dispatches: u32,
    /// Devices, each with its own queue, driven by one thread each (the same work on each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    devices: u32,
    /// Give nothing a label (no debug-utils names or regions reach Vulkan).
    #[arg(long)]
    no_labels: bool,
    /// After step K (0: after the prologue), print `paused` and sleep until killed.
    #[arg(long, value_name = "K")]
    pause_after: Option<u32>,
    /// Sleep this long after every step.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pause_ms: u64,
}

/// No Vulkan adapter: exit 2.
#[derive(Debug)]
struct NoAdapter;

impl std::fmt::Display for NoAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no Vulkan adapter: wgpu enumerated none on the Vulkan backend (is a Vulkan driver \
             installed? `vulkaninfo --summary` lists what the loader finds; on a machine \
             without a GPU, Mesa's lavapipe is one)",
        )
    }
}

impl std::error::Error for NoAdapter {}

/// Prints one line on stdout and flushes it, so that a test reading the pipe sees it at once.
fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(k) = args.pause_after
        && k > args.steps
    {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "--pause-after {k} is beyond the last step ({}); give a step from 0 to {}",
                    args.steps, args.steps
                ),
            )
            .exit();
    }
    let run = say(&format!("pid {}", std::process::id())).and_then(|()| run(&args));
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wgpu-step: error: {e:#}");
            if e.downcast_ref::<NoAdapter>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn run(args: &Args) -> Result<()> {
    let labels = !args.no_labels;
    // Explicit flags: wgpu's debug-build default also asks for the validation layer.
    let flags = if labels {
        wgpu::InstanceFlags::DEBUG
    } else {
        wgpu::InstanceFlags::empty()
    }
    .with_env();
    let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        flags,
        ..Default::default()
    });
    // The first adapter as enumerated (a CPU adapter such as lavapipe included), not
    // request_adapter's preference.
    let adapter = instance
        .enumerate_adapters(wgpu::Backends::VULKAN)
        .into_iter()
        .next()
        .ok_or(NoAdapter)?;
    let info = adapter.get_info();
    eprintln!(
        "wgpu-step: adapter {} ({:?}, {}), {} device(s), {} steps of {} dispatches",
        info.name, info.device_type, info.driver_info, args.devices, args.steps, args.dispatches
    );
    let works = (0..args.devices)
        .map(|d| {
            let (device, queue) =
                block_on::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
                    label: labels.then_some("wgpu-step"),
                    required_limits: wgpu::Limits::downlevel_defaults(),
                    ..Default::default()
                }))
                .with_context(|| format!("creating device {d} on {}", info.name))?;
            kernel::Work::new(device, queue, args.dispatches, labels)
                .with_context(|| format!("device {d}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let pause = Barrier::new(works.len());
    std::thread::scope(|s| {
        let threads: Vec<_> = works
            .iter()
            .enumerate()
            .map(|(d, work)| {
                let pause = &pause;
                s.spawn(move || drive(args, d, work, pause))
            })
            .collect();
        threads
            .into_iter()
            .enumerate()
            .try_for_each(|(d, t)| match t.join() {
                Ok(r) => r.with_context(|| format!("device {d}")),
                Err(_) => bail!("device {d}: its thread panicked"),
            })
    })?;
    say("ok")
}

/// One device's run, on its own thread: the prologue, the steps, the read-back and its check.
fn drive(args: &Args, device: usize, work: &kernel::Work, pause: &Barrier) -> Result<()> {
    let prefix = if args.devices > 1 {
        format!("device {device} ")
    } else {
        String::new()
    };
    work.prologue()?;
    if args.pause_after == Some(0) {
        pause_forever(pause)?;
    }
    for k in 1..=args.steps {
        work.step().with_context(|| format!("step {k}"))?;
        say(&format!("{prefix}step {k}"))?;
        if args.pause_after == Some(k) {
            pause_forever(pause)?;
        }
        if args.pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.pause_ms));
        }
    }
    let values = work.read_back()?;
    let wrong: Vec<String> = (0..kernel::ELEMENTS)
        .zip(&values)
        .filter(|&(i, &v)| v != kernel::expected(i, args.steps, args.dispatches))
        .take(4)
        .map(|(i, v)| {
            format!(
                "data[{i}] = {v}, expected {}",
                kernel::expected(i, args.steps, args.dispatches)
            )
        })
        .collect();
    if values.len() != kernel::ELEMENTS as usize || !wrong.is_empty() {
        bail!(
            "wrong values after {} steps of {} dispatches ({} read back): {}",
            args.steps,
            args.dispatches,
            values.len(),
            wrong.join("; ")
        );
    }
    Ok(())
}

/// Every device's thread stops here; the last to arrive prints `paused`. Only a signal ends
/// the process from here.
fn pause_forever(pause: &Barrier) -> Result<()> {
    if pause.wait().is_leader() {
        say("paused")?;
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
