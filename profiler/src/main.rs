//! The `profiler` command: statistics, A/B diffs with CI gates, and Chrome/Perfetto export of
//! decodescope traces.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use profiler::{
    DiffOptions, Format, KindRules, StatsOptions, SynthKernels, SynthOptions, SynthSubmit,
    SynthTimestamps,
};

const EXIT_CODES: &str = "\
Exit codes:
  0  success; with --gates, every gate passed (warnings allowed)
  1  a gate with severity \"fail\" failed
  2  unreadable input (trace or gate file), a bad command line, or, with --strict, captures
     that are not comparable
  record passes on the program's exit status (128 + N when signal N ended it); it exits 2 when
  it cannot run the program (none given, no layer library) or when a program that exited 0
  left no trace (it used no Vulkan device)";

#[derive(Parser)]
#[command(
    name = "profiler",
    version,
    about = "Statistics, A/B diffs with CI gates, and Chrome/Perfetto export of decodescope traces",
    long_about = "Statistics, A/B diffs with CI gates, and Chrome/Perfetto export of decodescope \
                  traces.\n\nA trace is the JSON file that `decoder capture` writes \
                  (profiler/TRACE_FORMAT.md documents it).",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Per-token statistics of one trace: every counter and time (min, median, mean, p90, p99,
    /// max, std dev, cv) for prefill and decode, the per-op GPU table and the same by op kind
    /// (matvec, norm, attention, ...).
    Stats {
        /// The trace file.
        trace: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Compare trace A (baseline) with trace B: every metric in one table, counters exactly,
    /// timings with bootstrap confidence intervals, ops by label and by kind (first by kind when
    /// the labels do not line up, e.g. llama.cpp against the decoder); optionally check CI
    /// gates.
    #[command(after_help = EXIT_CODES)]
    Diff {
        /// The baseline trace.
        a: PathBuf,
        /// The trace compared with it.
        b: PathBuf,
        /// A TOML file of gates (see profiler/gates.example.toml); exit 1 when one fails.
        #[arg(long, value_name = "FILE")]
        gates: Option<PathBuf>,
        /// Exit 2 when the captures differ in model, shape, device, knobs, lengths, KV layout or
        /// timestamp level (otherwise such differences are only warnings).
        #[arg(long)]
        strict: bool,
        /// A comparability field (e.g. `knobs.submit`, `tuning.attn_wg`) or group (`knobs`,
        /// `device`, `run`, `model`, `tuning`) whose difference is expected; repeatable.
        #[arg(long, value_name = "FIELD")]
        ignore: Vec<String>,
        /// Bootstrap resamples per timing.
        #[arg(long, default_value_t = 2000)]
        resamples: usize,
        /// Confidence level of the intervals.
        #[arg(long, default_value_t = 0.95)]
        confidence: f64,
        /// Bootstrap seed (the same seed gives the same intervals).
        #[arg(long, default_value_t = 0x00de_c0de)]
        seed: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Export a trace for Perfetto (ui.perfetto.dev) or chrome://tracing.
    Export {
        /// Output format.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// The trace file.
        trace: PathBuf,
        /// Where to write the export (written atomically).
        out: PathBuf,
    },
    /// Run a Vulkan program with the capture layer and write its trace: per-step counters,
    /// host spans and GPU timestamps of an unmodified program (llama.cpp, MLX, ... or the
    /// decoder itself). The program's exit status is passed on.
    #[command(
        after_help = "Steps: a foreign program does not mark its tokens. The layer records every \
                      host wait (fence, queue or device idle, timeline semaphore) and the work \
                      since the previous one; `--steps auto` finds the repeating pattern of these \
                      wait groups after the prompt and makes each period one decode step, \
                      `--steps wait` keeps every wait group as a step. meta.capture in the trace \
                      says which rule made the steps and what it found."
    )]
    Record {
        /// Where to write the trace (atomically; also when the program fails or is stopped).
        #[arg(long, value_name = "TRACE")]
        out: PathBuf,
        /// GPU timestamps the layer inserts in its own query pool.
        #[arg(long, value_enum, default_value_t = LayerTimestamps::Off)]
        timestamps: LayerTimestamps,
        /// At `--timestamps dispatch`: how dispatches are timed.
        #[arg(long, value_enum, default_value_t = DispatchTiming::Clock)]
        dispatch_timing: DispatchTiming,
        /// Where the layer resets its timestamp queries before they are written.
        #[arg(long, value_enum, default_value_t = QueryReset::Host)]
        query_reset: QueryReset,
        /// With shader clocks: leave the pipelines whose stable name (`entry@HASH`, as the trace
        /// names unlabelled dispatches) contains PART uninstrumented, timed by interval
        /// (repeatable, or comma-separated).
        #[arg(long, value_name = "PART", value_delimiter = ',')]
        clock_exclude: Vec<String>,
        /// With shader clocks: the most workgroups a dispatch reads the clock with (default
        /// 32768); a wider one, such as a language model's output matvec, and an indirect one
        /// are timed by interval, since their workgroups' atomics would cost more than two
        /// timestamps do.
        #[arg(long, value_name = "N")]
        clock_max_groups: Option<u32>,
        /// How host waits become steps.
        #[arg(long, value_enum, default_value_t = profiler::capture::StepRule::Auto)]
        steps: profiler::capture::StepRule,
        /// The capture layer library (default: $DECODESCOPE_LAYER, else libdecodescope_layer.so
        /// beside this executable).
        #[arg(long, value_name = "PATH")]
        layer: Option<PathBuf>,
        /// Kinds for the program's dispatches, written into the trace's ops (`matvec`, `norm`,
        /// ...; `dispatch` where no rule matches). `stats` and `diff` apply the rules again when
        /// they read the trace, so a rule file can also be given later.
        #[command(flatten)]
        kinds: KindArgs,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
        command: Vec<String>,
    },
    /// Write a synthetic trace (deterministic, no GPU) for tests, benchmarks and the viewer.
    /// Its numbers are modelled, not measured.
    SynthTrace {
        /// Where to write the trace.
        out: PathBuf,
        #[arg(long, default_value_t = 64)]
        decode_tokens: u32,
        #[arg(long, default_value_t = 8)]
        prompt_tokens: u32,
        #[arg(long, default_value_t = 14)]
        layers: u32,
        #[arg(long, value_enum, default_value_t = SynthKernels::Primitive)]
        kernels: SynthKernels,
        #[arg(long, value_enum, default_value_t = SynthSubmit::PerLayer)]
        submit: SynthSubmit,
        #[arg(long, value_enum, default_value_t = SynthTimestamps::Dispatch)]
        timestamps: SynthTimestamps,
        /// Empty submits added to every step.
        #[arg(long, default_value_t = 0)]
        extra_submits: u32,
        /// Multiplies every GPU duration.
        #[arg(long, default_value_t = 1.0)]
        gpu_scale: f64,
        /// Seed of the timing noise.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Model the fence-fallback GPU clock instead of calibrated timestamps.
        #[arg(long)]
        uncalibrated: bool,
    },
}

/// `--op-kinds FILE` and `--no-builtin-kinds`: how a foreign program's dispatches get kinds.
#[derive(clap::Args)]
struct KindArgs {
    /// A TOML file of op-kind rules for a foreign program's dispatch names (`[[rule]]` tables
    /// with a glob `pattern` and a `kind`), tried in order before the built-in rules, which know
    /// the decoder's labels and llama.cpp's ggml-vulkan pipelines. See TRACE_FORMAT.md, "Op
    /// kinds".
    #[arg(long, value_name = "FILE")]
    op_kinds: Option<PathBuf>,
    /// Use only the rules of --op-kinds (without it: none), not the built-in ones.
    #[arg(long)]
    no_builtin_kinds: bool,
}

impl KindArgs {
    fn rules(&self) -> Result<KindRules> {
        Ok(KindRules::from_options(
            self.op_kinds.as_deref(),
            !self.no_builtin_kinds,
        )?)
    }
}

#[derive(clap::Args)]
struct Common {
    /// Decode tokens to skip at the start (warm-up); clamped to half the decode tokens.
    #[arg(long, default_value_t = profiler::DEFAULT_SKIP)]
    skip: usize,
    /// Keep every op label as is instead of folding numeric parts (`L3.q_proj` -> `L*.q_proj`).
    #[arg(long)]
    per_label: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Dispatches of a foreign program's trace (`profiler record`) still of kind `dispatch` are
    /// given kinds when read, so that the per-kind tables compare them with the decoder's.
    #[command(flatten)]
    kinds: KindArgs,
}

impl Common {
    fn stats_options(&self) -> StatsOptions {
        StatsOptions {
            skip: self.skip,
            fold_labels: !self.per_label,
        }
    }
}

/// Where `profiler record`'s layer writes GPU timestamps.
#[derive(Clone, Copy, ValueEnum)]
enum LayerTimestamps {
    /// None (no overhead beyond counting).
    Off,
    /// Around each vkQueueSubmit's command buffers.
    Submit,
    /// At the start and end of every primary command buffer.
    CommandBuffer,
    /// Every dispatch gets a GPU span of its own (see --dispatch-timing).
    Dispatch,
}

/// Where the layer resets its timestamp queries (meta.capture.query_reset says which it did).
#[derive(Clone, Copy, ValueEnum)]
enum QueryReset {
    /// From the host at each submit (vkResetQueryPool), where the device has hostQueryReset
    /// (otherwise as `command-buffer`): the program's command buffers get timestamps only.
    Host,
    /// In the command buffers the layer times (vkCmdResetQueryPool), and in its own at
    /// `submit`: what the layer does on a device without hostQueryReset.
    CommandBuffer,
}

/// How `--timestamps dispatch` times each dispatch.
#[derive(Clone, Copy, ValueEnum)]
enum DispatchTiming {
    /// Each dispatch reads the GPU's clock in its own shader (the layer instruments the
    /// program's SPIR-V; VK_KHR_shader_clock): two timestamps a command buffer, every dispatch
    /// timed on its own. Where the device or a pipeline cannot, as `interval` (the trace says
    /// which in meta.capture.dispatch_timing).
    Clock,
    /// One timestamp per barrier between dispatches; dispatches with no barrier between them
    /// share their interval's span.
    Interval,
}

impl LayerTimestamps {
    fn name(self) -> &'static str {
        match self {
            LayerTimestamps::Off => "off",
            LayerTimestamps::Submit => "submit",
            LayerTimestamps::CommandBuffer => "command-buffer",
            LayerTimestamps::Dispatch => "dispatch",
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ExportFormat {
    /// Chrome Trace Event JSON (Perfetto, chrome://tracing).
    Chrome,
}

/// Failures that decide the exit code: everything else is an input error (2).
enum Outcome {
    Ok,
    GateFailed,
    /// `record`: the recorded program's exit status.
    Exit(i32),
}

/// Reads a trace for statistics and diffs (host spans skipped: they are not used there), giving
/// a foreign program's unclassified dispatches their kinds by `kinds`.
fn read(path: &Path, kinds: &KindRules) -> Result<profiler::Trace> {
    let mut t = profiler::read_trace_for_analysis(path)?;
    kinds.classify_foreign(&mut t);
    Ok(t)
}

fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`profiler stats t.json | head`) is not an error worth reporting.
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to standard output"),
    }
}

fn run(cli: Cli) -> Result<Outcome> {
    match cli.command {
        Command::Stats { trace, common } => {
            let kinds = common.kinds.rules()?;
            let t = read(&trace, &kinds)?;
            let s =
                profiler::compute_stats(&t, &trace.display().to_string(), &common.stats_options());
            print(&profiler::render_stats(&s, common.format))?;
            Ok(Outcome::Ok)
        }
        Command::Diff {
            a,
            b,
            gates,
            strict,
            ignore,
            resamples,
            confidence,
            seed,
            common,
        } => {
            if !(confidence > 0.0 && confidence < 1.0) {
                anyhow::bail!("--confidence must be between 0 and 1 (e.g. 0.95), not {confidence}");
            }
            profiler::diff::check_ignore(&ignore).map_err(anyhow::Error::msg)?;
            // A bad gate or rule file is reported before the (possibly large) traces are read.
            let gate_file = gates.as_deref().map(profiler::load_gates).transpose()?;
            let kinds = common.kinds.rules()?;
            // Parse both traces at once: on two cores that halves a large diff's reading time.
            let (ta, tb) = std::thread::scope(|s| {
                let ha = s.spawn(|| read(&a, &kinds));
                let tb = read(&b, &kinds);
                let ta = ha
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("reading {} panicked", a.display())));
                (ta, tb)
            });
            let (ta, tb) = (ta?, tb?);
            let opts = DiffOptions {
                stats: common.stats_options(),
                resamples,
                confidence,
                seed,
                ignore,
            };
            let d = profiler::compute_diff(
                &ta,
                &a.display().to_string(),
                &tb,
                &b.display().to_string(),
                &opts,
            );
            let report = gate_file.as_ref().map(|g| profiler::evaluate_gates(g, &d));
            print(&profiler::render_diff(&d, report.as_ref(), common.format))?;
            let blocking: Vec<String> = d
                .blocking_mismatches()
                .map(|m| format!("{} (A {}, B {})", m.field, m.a, m.b))
                .collect();
            if strict && !blocking.is_empty() {
                anyhow::bail!(
                    "--strict: {} and {} are not comparable: {}; pass --ignore FIELD for an \
                     expected difference",
                    a.display(),
                    b.display(),
                    blocking.join(", ")
                );
            }
            if let Some(r) = report
                && r.failed()
            {
                for f in r
                    .results
                    .iter()
                    .filter(|r| r.status == profiler::Status::Fail)
                {
                    eprintln!(
                        "gate failed: {}: {} {} {}: A {} B {} (required {})",
                        f.name,
                        f.metric,
                        f.statistic,
                        f.phase,
                        f.a.map_or("-".to_owned(), profiler::fmt_value),
                        f.b.map_or("-".to_owned(), profiler::fmt_value),
                        f.rule
                    );
                }
                return Ok(Outcome::GateFailed);
            }
            Ok(Outcome::Ok)
        }
        Command::Export { format, trace, out } => {
            profiler::check_output(&out, "OUT")?;
            let t = profiler::read_trace(&trace)?;
            match format {
                ExportFormat::Chrome => profiler::export_chrome(&t, &out)?,
            }
            eprintln!("wrote {}", out.display());
            Ok(Outcome::Ok)
        }
        Command::Record {
            out,
            timestamps,
            dispatch_timing,
            query_reset,
            clock_exclude,
            clock_max_groups,
            steps,
            layer,
            kinds,
            command,
        } => {
            let opts = profiler::record::RecordOptions {
                out: out.clone(),
                timestamps: timestamps.name().into(),
                dispatch_timing: match dispatch_timing {
                    DispatchTiming::Clock => "clock",
                    DispatchTiming::Interval => "interval",
                }
                .into(),
                query_reset: match query_reset {
                    QueryReset::Host => "host",
                    QueryReset::CommandBuffer => "command-buffer",
                }
                .into(),
                clock_exclude,
                clock_max_groups,
                steps,
                layer,
                op_kinds: kinds.rules()?,
                command,
            };
            let rec = profiler::record::record(&opts)?;
            let code = rec.exit_code();
            match &rec.trace {
                Ok(t) => {
                    let decode = t.meta.run.decode_tokens;
                    let c = t.meta.capture.as_ref();
                    eprintln!(
                        "wrote {}: {} steps ({decode} decode) from {} wait groups on {}; {}",
                        out.display(),
                        t.steps,
                        c.map_or(0, |c| c.wait_groups),
                        t.meta.device.name,
                        c.map_or("", |c| c.step_rule_detail.as_str())
                    );
                    for n in c.map(|c| c.notes.as_slice()).unwrap_or_default() {
                        eprintln!("note: {n}");
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}; no trace was written");
                    return Ok(Outcome::Exit(if code == 0 { 2 } else { code }));
                }
            }
            Ok(Outcome::Exit(code))
        }
        Command::SynthTrace {
            out,
            decode_tokens,
            prompt_tokens,
            layers,
            kernels,
            submit,
            timestamps,
            extra_submits,
            gpu_scale,
            seed,
            uncalibrated,
        } => {
            let t = profiler::synthetic_trace(&SynthOptions {
                layers,
                prompt_tokens,
                decode_tokens,
                kernels,
                submit,
                timestamps,
                extra_submits_per_token: extra_submits,
                gpu_scale,
                seed,
                calibrated: !uncalibrated,
                ..SynthOptions::default()
            });
            profiler::write_trace(&out, &t)?;
            eprintln!("wrote {}", out.display());
            Ok(Outcome::Ok)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::GateFailed) => ExitCode::from(1),
        Ok(Outcome::Exit(code)) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
