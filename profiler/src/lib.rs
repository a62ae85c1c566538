//! decodescope's profiler: the trace format, per-token statistics, A/B diffs with CI gates, and
//! Chrome/Perfetto export. No GPU and no GUI dependencies; the decoder writes traces with
//! [`write_trace`], the viewer and the `profiler` binary read them with [`read_trace`].
//!
//! ```no_run
//! use std::path::Path;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let a = profiler::read_trace(Path::new("generic.json"))?;
//! let b = profiler::read_trace(Path::new("fused.json"))?;
//! let stats = profiler::compute_stats(&a, "generic.json", &profiler::StatsOptions::default());
//! print!("{}", profiler::render_stats(&stats, profiler::Format::Human));
//! let diff = profiler::compute_diff(&a, "generic.json", &b, "fused.json", &Default::default());
//! let gates = profiler::load_gates(Path::new("gates.toml"))?;
//! let report = profiler::evaluate_gates(&gates, &diff);
//! print!("{}", profiler::render_diff(&diff, Some(&report), profiler::Format::Markdown));
//! std::process::exit(if report.failed() { 1 } else { 0 });
//! # }
//! ```
//!
//! The file format is documented in `profiler/TRACE_FORMAT.md`, the gate file in
//! `profiler/gates.example.toml` and the [`gates`] module, the op-kind rules that give a foreign
//! program's dispatches the decoder's kinds in the [`kinds`] module.

pub mod bootstrap;
pub mod capture;
pub mod diff;
pub mod export;
#[doc(hidden)]
pub mod fuzzing;
pub mod gates;
pub mod io;
pub mod kinds;
pub mod record;
pub mod report;
#[doc(hidden)]
pub mod rng;
pub mod speedup;
pub mod stats;
pub mod synth;
pub mod trace;
pub mod units;
pub mod vulkan;

pub use bootstrap::{MedianDiffCi, median_difference_ci};
pub use diff::{
    Change, CounterDiff, Diff, DiffOptions, LabelOverlap, Mismatch, OpDiff, PerToken, PhaseDiff,
    TimingDiff, TokenComparison, compute_diff, label_overlap,
};
pub use export::{ChromeTrace, ExportError, chrome_trace, export_chrome};
pub use gates::{
    Capture, Direction, Gate, GateError, GateFile, GateReport, GateResult, Severity, Status,
    evaluate_gates, load_gates, parse_gates,
};
pub use io::{
    OutputError, OutputTarget, StagedDir, StagedOutput, TraceError, TraceWriter, check_output,
    from_reader, from_slice, from_slice_named, open_regular_file, output_target, read_trace,
    read_trace_for_analysis, stage_output, to_vec, to_writer, validate, write_output, write_trace,
};
pub use kinds::{DISPATCH_KINDS, KindRule, KindRules, KindsError};
pub use report::{
    Format, fmt_bytes, fmt_ci_us, fmt_metric, fmt_pct, fmt_rel, fmt_signed, fmt_value,
    median_speedup, op_speedup, render_diff, render_stats, unit_cell,
};
pub use speedup::{Better, Speedup, Verdict, fmt_speedup};
pub use stats::{
    CaptureInfo, DEFAULT_SKIP, MetricStats, OpRow, PhaseStats, Statistic, StatsOptions, Summary,
    TIME_METRICS, TraceStats, Untimed, compute_stats, fold_label,
};
pub use synth::{SynthKernels, SynthOptions, SynthSubmit, SynthTimestamps, synthetic_trace};
pub use trace::{
    CaptureMeta, ClockMeta, Counters, DeviceMeta, FORMAT_NAME, FORMAT_VERSION, GpuSpan,
    HOST_SPAN_NAMES, HostSpan, Knobs, Meta, ModelMeta, OpInfo, Phase, RunMeta, TokenRecord,
    ToolMeta, Trace, UNKNOWN,
};
pub use units::{TimeUnit, fmt_ns, fmt_signed_us, fmt_tick_ns, fmt_us};
