//! Per-token statistics of one trace.
//!
//! Every counter of [`Counters::NAMES`] and every time ([`TIME_METRICS`]) is summarized over the
//! steps of one phase: min, median, mean, p90, p99, max, standard deviation and coefficient of
//! variation. Prefill and decode are kept apart, and the first decode tokens (warm-up: first
//! recording, pipeline creation, cold caches) are skipped. The per-op table aggregates dispatch
//! spans by label over the analysed decode tokens, the per-kind table the same spans by op kind
//! (`matvec`, `norm`, ...; see [`crate::kinds`] for a foreign program's dispatches).
//!
//! Definitions (also in TRACE_FORMAT.md):
//! - percentiles interpolate linearly between the two nearest ranks (`numpy.percentile`'s default);
//! - the standard deviation is the sample one (n - 1 in the denominator, 0 for one sample);
//! - the coefficient of variation is std dev / mean (0 when the mean is 0).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::trace::{Counters, GpuSpan, OpInfo, Phase, TokenRecord, Trace};

/// Times summarized per token, in microseconds. `gpu_gap_us` is the GPU's idle time before a
/// step: from the previous step's last GPU span to this step's first, on the host timeline (only
/// where the GPU clock was calibrated against it).
pub const TIME_METRICS: [&str; 5] = [
    "host_enqueue_us",
    "host_wait_us",
    "gpu_us",
    "wall_us",
    "gpu_gap_us",
];

/// The number of decode tokens skipped when the user does not say.
pub const DEFAULT_SKIP: usize = 2;

/// The per-step metric of dispatches without a GPU span (`TokenRecord::gpu_untimed`), listed
/// after the counters in traces that have any.
pub const GPU_UNTIMED: &str = "gpu_untimed";

/// A statistic over per-token samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    Min,
    Median,
    Mean,
    P90,
    P99,
    Max,
    StdDev,
    Cv,
}

impl Statistic {
    pub const ALL: [Statistic; 8] = [
        Statistic::Min,
        Statistic::Median,
        Statistic::Mean,
        Statistic::P90,
        Statistic::P99,
        Statistic::Max,
        Statistic::StdDev,
        Statistic::Cv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Statistic::Min => "min",
            Statistic::Median => "median",
            Statistic::Mean => "mean",
            Statistic::P90 => "p90",
            Statistic::P99 => "p99",
            Statistic::Max => "max",
            Statistic::StdDev => "std_dev",
            Statistic::Cv => "cv",
        }
    }
}

/// Summary of per-token samples. All zero when there are no samples (`n == 0`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub std_dev: f64,
    pub cv: f64,
}

impl Summary {
    /// Summarizes `values` (any order).
    pub fn of(values: &[f64]) -> Summary {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Summary::of_sorted(&sorted)
    }

    /// Summarizes values already sorted ascending.
    pub fn of_sorted(sorted: &[f64]) -> Summary {
        let n = sorted.len();
        if n == 0 {
            return Summary::default();
        }
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            sorted.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let std_dev = var.sqrt();
        Summary {
            n,
            min: sorted[0],
            median: percentile_sorted(sorted, 50.0),
            mean,
            p90: percentile_sorted(sorted, 90.0),
            p99: percentile_sorted(sorted, 99.0),
            max: sorted[n - 1],
            std_dev,
            cv: if mean != 0.0 {
                std_dev / mean.abs()
            } else {
                0.0
            },
        }
    }

    pub fn get(&self, stat: Statistic) -> f64 {
        match stat {
            Statistic::Min => self.min,
            Statistic::Median => self.median,
            Statistic::Mean => self.mean,
            Statistic::P90 => self.p90,
            Statistic::P99 => self.p99,
            Statistic::Max => self.max,
            Statistic::StdDev => self.std_dev,
            Statistic::Cv => self.cv,
        }
    }
}

/// The `p`-th percentile (0..=100) of ascending `sorted`, interpolating linearly between ranks
/// (a rank that falls on a value is that value); 0 when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = (p / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            let frac = rank - lo as f64;
            if frac == 0.0 {
                sorted[lo]
            } else {
                sorted[lo] + (sorted[hi] - sorted[lo]) * frac
            }
        }
    }
}

/// The median of `values` in any order ([`percentile_sorted`] at 50: the middle value, or the
/// mean of the middle two for an even count); 0 when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile_sorted(&values, 50.0)
}

/// The length of the union of spans' `[start, start + dur)` intervals, ns.
pub fn union_ns(spans: &[GpuSpan]) -> u64 {
    let mut iv: Vec<(u64, u64)> = spans
        .iter()
        .map(|s| (s.start_ns(), s.start_ns().saturating_add(s.dur_ns())))
        .collect();
    iv.sort_unstable();
    let mut total = 0u64;
    let mut cur: Option<(u64, u64)> = None;
    for (s, e) in iv {
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total = total.saturating_add(ce - cs);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = cur {
        total = total.saturating_add(ce - cs);
    }
    total
}

/// [`OpInfo::bytes_at`] without overflow: a trace's numbers come from a file.
pub fn bytes_at(op: &OpInfo, kv_len: u64) -> u64 {
    let per_kv = op.bytes_read_per_kv.saturating_add(op.bytes_written_per_kv);
    op.bytes_read
        .saturating_add(op.bytes_written)
        .saturating_add(per_kv.saturating_mul(kv_len))
}

/// Whether spans of this op kind are regions or whole tokens rather than single dispatches.
pub fn is_region_kind(kind: &str) -> bool {
    kind == "token" || kind == "region"
}

/// Folds the layer number out of a label so that one row covers every layer: in each dot-, slash-
/// or colon-separated component made of ASCII letters followed by digits (or digits alone), the
/// digits become `*`. `layer.3.q_proj` -> `layer.*.q_proj`, `L17.attn` -> `L*.attn`; `q4_1`,
/// `attn_2` and `lm_head` stay as they are.
pub fn fold_label(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    let mut part_start = 0;
    let ends = label
        .char_indices()
        .filter(|(_, c)| matches!(c, '.' | '/' | ':'))
        .map(|(i, c)| (i, Some(c)))
        .chain(std::iter::once((label.len(), None)));
    for (i, sep) in ends {
        let part = &label[part_start..i];
        let letters = part.bytes().take_while(u8::is_ascii_alphabetic).count();
        let digits = &part[letters..];
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&part[..letters]);
            out.push('*');
        } else {
            out.push_str(part);
        }
        if let Some(c) = sep {
            out.push(c);
            part_start = i + c.len_utf8();
        }
    }
    out
}

/// Options of [`compute_stats`] and [`crate::diff::compute_diff`].
#[derive(Clone, Debug, PartialEq)]
pub struct StatsOptions {
    /// Decode tokens to skip at the start (clamped so at least half the decode tokens remain).
    pub skip: usize,
    /// Fold numeric label components (`L3.q_proj` -> `L*.q_proj`) in the op tables.
    pub fold_labels: bool,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            skip: DEFAULT_SKIP,
            fold_labels: true,
        }
    }
}

/// The skip actually applied to `decode_steps` decode steps: at most half of them, so that a short
/// trace still has samples.
pub fn effective_skip(requested: usize, decode_steps: usize) -> usize {
    requested.min(decode_steps / 2)
}

/// Identity of a capture, for report headers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureInfo {
    /// File the trace was read from (or what the caller named it).
    pub source: String,
    pub model: String,
    pub architecture: String,
    pub layers: u32,
    pub device: String,
    pub driver: String,
    pub mode: String,
    pub knobs: String,
    pub kv_layout: String,
    pub timestamps: String,
    pub clock: String,
    pub prompt_tokens: u32,
    pub decode_steps: usize,
}

impl CaptureInfo {
    pub fn of(trace: &Trace, source: &str) -> CaptureInfo {
        let m = &trace.meta;
        let k = &m.knobs;
        CaptureInfo {
            source: source.to_owned(),
            model: m.model.name.clone(),
            architecture: m.model.architecture.clone(),
            layers: m.model.layers,
            device: m.device.name.clone(),
            driver: m.device.driver.clone(),
            mode: k.mode.clone(),
            knobs: format!(
                "submit={} sync={} descriptors={} barriers={} kernels={} recording={}",
                k.submit, k.sync, k.descriptors, k.barriers, k.kernels, k.recording
            ),
            kv_layout: m.run.kv_layout.clone(),
            timestamps: m.run.timestamps.clone(),
            clock: if m.clock.calibrated {
                format!("calibrated ({})", m.clock.method)
            } else if m.clock.method.is_empty() {
                "uncalibrated".to_owned()
            } else {
                format!("uncalibrated ({})", m.clock.method)
            },
            prompt_tokens: m.run.prompt_tokens,
            decode_steps: trace
                .tokens
                .iter()
                .filter(|t| t.phase == Phase::Decode)
                .count(),
        }
    }
}

/// Summary of one metric over the steps of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricStats {
    /// A counter name ([`Counters::NAMES`]) or a time ([`TIME_METRICS`]).
    pub name: String,
    /// `count`, `bytes` or `us`.
    pub unit: String,
    pub summary: Summary,
}

/// Statistics of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    pub phase: Phase,
    /// Steps summarized (after the skip for decode).
    pub steps: usize,
    /// Tokens those steps processed.
    pub tokens: u64,
    /// Every counter, then every time that the trace has.
    pub metrics: Vec<MetricStats>,
}

impl PhaseStats {
    pub fn metric(&self, name: &str) -> Option<&MetricStats> {
        self.metrics.iter().find(|m| m.name == name)
    }
}

/// One row of the per-op (or per-region) table, over the analysed decode tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpRow {
    /// The label, folded unless the caller asked for raw labels.
    pub label: String,
    pub kind: String,
    /// Spans with this label per token (mean).
    pub dispatches_per_token: f64,
    /// Median over tokens of the GPU time of this label's spans in the token, us.
    pub gpu_us_median: f64,
    /// Mean of the same, us.
    pub gpu_us_mean: f64,
    /// This label's GPU time over the tokens' GPU busy time (sums over the analysed tokens).
    pub gpu_share: f64,
    /// Median over tokens of the bytes this label's spans read and write (OpInfo facts at the
    /// token's `kv_len`).
    pub bytes_per_token: f64,
    /// Total bytes over total GPU time of this label, GB/s (10^9 bytes/s); `None` without time.
    pub achieved_gbps: Option<f64>,
    /// `achieved_gbps` over the device's measured bandwidth, when the trace records it.
    pub bandwidth_share: Option<f64>,
    /// Per-token GPU us samples, for the diff's confidence intervals.
    #[serde(skip)]
    pub gpu_us_samples: Vec<f64>,
}

/// Statistics of one trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceStats {
    pub capture: CaptureInfo,
    pub skip_requested: usize,
    pub skip_applied: usize,
    pub prefill: Option<PhaseStats>,
    pub decode: Option<PhaseStats>,
    /// Dispatch labels over the analysed decode tokens, by GPU time, largest first.
    pub ops: Vec<OpRow>,
    /// `region` and `token` spans over the analysed decode tokens, by GPU time, largest first.
    pub regions: Vec<OpRow>,
    /// The dispatch spans of `ops` by op kind (`OpRow::label` and `kind` are the kind), by GPU
    /// time, largest first.
    pub kinds: Vec<OpRow>,
    /// Dispatches without a GPU span (a foreign program's capture); `None` when every dispatch
    /// of the capture was timed, or when nothing was (timestamps `off`).
    pub untimed: Option<Untimed>,
    /// Whether op labels were folded (`L*.q_proj`).
    pub folded_labels: bool,
    pub memory_bandwidth_gbps: Option<f64>,
    /// Things the reader should know (skip clamped, no GPU timestamps, ...).
    pub notes: Vec<String>,
}

/// Dispatches that ran without a GPU span (`TokenRecord::gpu_untimed`,
/// `meta.capture.untimed_dispatches`): the GPU time and the per-op table cover only the others.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Untimed {
    /// Median over the analysed decode steps of their untimed dispatches.
    pub decode_untimed_per_token: f64,
    /// Median over the same steps of the `dispatches` counter.
    pub decode_dispatches_per_token: f64,
    /// Analysed decode steps with at least one untimed dispatch.
    pub decode_steps_with_untimed: usize,
    /// Analysed decode steps.
    pub decode_steps: usize,
    /// Untimed dispatches of the whole capture (steps, epilogue and tail), from `meta.capture`.
    pub capture_untimed_dispatches: u64,
}

impl Untimed {
    /// The sentence reports print: how many dispatches have no span, and what that means.
    pub fn sentence(&self) -> String {
        let why = "(a queue without timestamps, a secondary command buffer, a full query pool or \
                   results never read back)";
        if self.decode_steps_with_untimed > 0 {
            let mut s = format!(
                "{} of {} dispatches per decode token (median) have no GPU span {why}: GPU time \
                 and the op table cover the rest",
                crate::report::fmt_value(self.decode_untimed_per_token),
                crate::report::fmt_value(self.decode_dispatches_per_token),
            );
            if self.decode_steps_with_untimed < self.decode_steps {
                s += &format!(
                    " ({} of {} analysed decode steps have any)",
                    self.decode_steps_with_untimed, self.decode_steps
                );
            }
            if self.capture_untimed_dispatches > 0 {
                s += &format!("; {} in the whole capture", self.capture_untimed_dispatches);
            }
            s
        } else {
            format!(
                "every analysed decode dispatch has a GPU span, but {} dispatches elsewhere in the \
                 capture (prefill, epilogue or after the last step) have none {why}",
                self.capture_untimed_dispatches
            )
        }
    }
}

impl TraceStats {
    pub fn phase(&self, phase: Phase) -> Option<&PhaseStats> {
        match phase {
            Phase::Prefill => self.prefill.as_ref(),
            Phase::Decode => self.decode.as_ref(),
        }
    }
}

/// Per-step samples of one phase, columnar.
#[derive(Clone, Debug, Default)]
pub(crate) struct PhaseSamples {
    pub steps: Vec<usize>,
    pub tokens: u64,
    /// `counters[c][t]`: counter `c` (order of [`Counters::NAMES`]) at step `t`.
    pub counters: Vec<Vec<u64>>,
    /// `times[m][t]` for each of [`TIME_METRICS`]; empty for a time the trace lacks.
    pub times: Vec<Vec<f64>>,
    /// `untimed[t]`: the step's dispatches without a GPU span (`TokenRecord::gpu_untimed`).
    pub untimed: Vec<u64>,
}

/// Selects the steps of a phase (skipping warm-up decode tokens) and extracts their samples.
pub(crate) fn phase_samples(trace: &Trace, phase: Phase, skip: usize) -> PhaseSamples {
    let steps: Vec<usize> = trace
        .tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| t.phase == phase)
        .map(|(i, _)| i)
        .skip(if phase == Phase::Decode { skip } else { 0 })
        .collect();
    let records: Vec<&TokenRecord> = steps.iter().map(|&i| &trace.tokens[i]).collect();
    let mut counters = vec![Vec::with_capacity(records.len()); Counters::NAMES.len()];
    for r in &records {
        for (c, v) in r.counters.values().into_iter().enumerate() {
            counters[c].push(v);
        }
    }
    let us = |ns: u64| ns as f64 / 1_000.0;
    let gpu: Option<Vec<f64>> = records
        .iter()
        .map(|r| gpu_busy_ns(trace, r).map(us))
        .collect();
    let gaps: Option<Vec<f64>> = if trace.meta.clock.calibrated {
        steps
            .iter()
            .map(|&i| gpu_gap_ns(&trace.tokens, i).map(us))
            .collect()
    } else {
        None
    };
    let times = vec![
        records.iter().map(|r| us(r.host_enqueue_ns)).collect(),
        records.iter().map(|r| us(r.host_wait_ns)).collect(),
        gpu.unwrap_or_default(),
        records.iter().map(|r| us(r.wall_ns)).collect(),
        gaps.unwrap_or_default(),
    ];
    PhaseSamples {
        tokens: records.iter().map(|r| r.n_tokens as u64).sum(),
        untimed: records.iter().map(|r| r.gpu_untimed).collect(),
        steps,
        counters,
        times,
    }
}

/// The GPU's idle time before step `i` of a trace's `tokens`: from the end of step `i - 1`'s last
/// GPU span to the start of step `i`'s first (0 where they overlap); `None` for the first step or
/// where either has no GPU spans.
pub fn gpu_gap_ns(tokens: &[TokenRecord], i: usize) -> Option<u64> {
    let prev = tokens.get(i.checked_sub(1)?)?;
    let cur = tokens.get(i)?;
    let end = prev
        .gpu_spans
        .iter()
        .map(|s| s.start_ns().saturating_add(s.dur_ns()))
        .max()?;
    let start = cur.gpu_spans.iter().map(|s| s.start_ns()).min()?;
    Some(start.saturating_sub(end))
}

/// GPU busy time of a step: the recorded value, else the union of its dispatch spans (or of all
/// its spans when it has only region or token spans); `None` without GPU spans.
pub fn gpu_busy_ns(trace: &Trace, r: &TokenRecord) -> Option<u64> {
    if let Some(v) = r.gpu_busy_ns {
        return Some(v);
    }
    if r.gpu_spans.is_empty() {
        return None;
    }
    let dispatch: Vec<GpuSpan> = r
        .gpu_spans
        .iter()
        .filter(|s| {
            trace
                .ops
                .get(s.op() as usize)
                .is_some_and(|o| !is_region_kind(&o.kind))
        })
        .copied()
        .collect();
    Some(if dispatch.is_empty() {
        union_ns(&r.gpu_spans)
    } else {
        union_ns(&dispatch)
    })
}

fn unit_of(name: &str) -> &'static str {
    if name.ends_with("_us") {
        "us"
    } else {
        Counters::unit(name)
    }
}

fn phase_stats(trace: &Trace, phase: Phase, s: &PhaseSamples) -> PhaseStats {
    let mut metrics = Vec::new();
    for (c, name) in Counters::NAMES.iter().enumerate() {
        let v: Vec<f64> = s.counters[c].iter().map(|&x| x as f64).collect();
        metrics.push(MetricStats {
            name: (*name).to_owned(),
            unit: unit_of(name).to_owned(),
            summary: Summary::of(&v),
        });
    }
    // Only a foreign program's capture has untimed dispatches: the row appears where it has.
    if trace.tokens.iter().any(|r| r.gpu_untimed > 0) {
        let v: Vec<f64> = s.untimed.iter().map(|&x| x as f64).collect();
        metrics.push(MetricStats {
            name: GPU_UNTIMED.to_owned(),
            unit: "count".to_owned(),
            summary: Summary::of(&v),
        });
    }
    for (m, name) in TIME_METRICS.iter().enumerate() {
        if s.times[m].is_empty() && !s.steps.is_empty() {
            continue;
        }
        metrics.push(MetricStats {
            name: (*name).to_owned(),
            unit: "us".to_owned(),
            summary: Summary::of(&s.times[m]),
        });
    }
    PhaseStats {
        phase,
        steps: s.steps.len(),
        tokens: s.tokens,
        metrics,
    }
}

/// What the rows of [`op_rows`] stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grouping {
    /// One row per label, numeric parts folded (`L*.q_proj`) when `fold`.
    Label { fold: bool },
    /// One row per op kind (`matvec`, `norm`, ...); the row's label is the kind.
    Kind,
}

/// Aggregates GPU spans of the given steps by (folded) label or by kind: `(dispatch rows, region
/// rows)`.
pub(crate) fn op_rows(
    trace: &Trace,
    steps: &[usize],
    grouping: Grouping,
    bandwidth_gbps: Option<f64>,
) -> (Vec<OpRow>, Vec<OpRow>) {
    // Map every op index to its row.
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut index: HashMap<(String, bool), usize> = HashMap::new();
    let op_row: Vec<usize> = trace
        .ops
        .iter()
        .map(|o| {
            let label = match grouping {
                Grouping::Label { fold: true } => fold_label(&o.label),
                Grouping::Label { fold: false } => o.label.clone(),
                Grouping::Kind => o.kind.clone(),
            };
            let region = is_region_kind(&o.kind);
            *index.entry((label.clone(), region)).or_insert_with(|| {
                keys.push((label, o.kind.clone()));
                keys.len() - 1
            })
        })
        .collect();
    let n_rows = keys.len();
    let n_steps = steps.len();
    // Columnar per-step accumulators.
    let mut count = vec![0u64; n_rows];
    let mut ns = vec![vec![0u64; n_steps]; n_rows];
    let mut bytes = vec![vec![0u64; n_steps]; n_rows];
    let mut gpu_total_ns = 0u64;
    for (t, &i) in steps.iter().enumerate() {
        let r = &trace.tokens[i];
        gpu_total_ns = gpu_total_ns.saturating_add(gpu_busy_ns(trace, r).unwrap_or(0));
        let kv = r.kv_len as u64;
        for s in &r.gpu_spans {
            let Some(info) = trace.ops.get(s.op() as usize) else {
                continue;
            };
            let row = op_row[s.op() as usize];
            count[row] += 1;
            ns[row][t] = ns[row][t].saturating_add(s.share_ns());
            bytes[row][t] = bytes[row][t].saturating_add(bytes_at(info, kv));
        }
    }
    let mut ops = Vec::new();
    let mut regions = Vec::new();
    for (row, (label, kind)) in keys.into_iter().enumerate() {
        if count[row] == 0 {
            continue;
        }
        let total_ns = ns[row].iter().fold(0u64, |a, &b| a.saturating_add(b));
        let total_bytes = bytes[row].iter().fold(0u64, |a, &b| a.saturating_add(b));
        let mut us: Vec<f64> = ns[row].iter().map(|&v| v as f64 / 1_000.0).collect();
        let samples = us.clone();
        us.sort_by(f64::total_cmp);
        let mut b: Vec<f64> = bytes[row].iter().map(|&v| v as f64).collect();
        b.sort_by(f64::total_cmp);
        let achieved = (total_ns > 0).then(|| total_bytes as f64 / total_ns as f64);
        let out = OpRow {
            dispatches_per_token: count[row] as f64 / n_steps.max(1) as f64,
            gpu_us_median: percentile_sorted(&us, 50.0),
            gpu_us_mean: us.iter().sum::<f64>() / n_steps.max(1) as f64,
            gpu_share: if gpu_total_ns > 0 {
                total_ns as f64 / gpu_total_ns as f64
            } else {
                0.0
            },
            bytes_per_token: percentile_sorted(&b, 50.0),
            achieved_gbps: achieved.filter(|_| total_bytes > 0),
            bandwidth_share: match (achieved, bandwidth_gbps) {
                (Some(a), Some(bw)) if bw > 0.0 && total_bytes > 0 => Some(a / bw),
                _ => None,
            },
            gpu_us_samples: samples,
            kind,
            label,
        };
        if is_region_kind(&out.kind) {
            regions.push((total_ns, out));
        } else {
            ops.push((total_ns, out));
        }
    }
    let sort = |v: &mut Vec<(u64, OpRow)>| {
        v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.label.cmp(&b.1.label)));
    };
    sort(&mut ops);
    sort(&mut regions);
    (
        ops.into_iter().map(|x| x.1).collect(),
        regions.into_iter().map(|x| x.1).collect(),
    )
}

/// The untimed dispatches of a trace's analysed decode steps (`decode`) and of its whole capture;
/// `None` when there are none.
pub(crate) fn untimed(trace: &Trace, decode: &PhaseSamples) -> Option<Untimed> {
    let capture_untimed_dispatches = trace
        .meta
        .capture
        .as_ref()
        .map_or(0, |c| c.untimed_dispatches);
    let with = decode.untimed.iter().filter(|&&n| n > 0).count();
    if with == 0 && capture_untimed_dispatches == 0 {
        return None;
    }
    let median = |v: &[u64]| {
        let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        Summary::of(&f).median
    };
    let dispatches = Counters::NAMES
        .iter()
        .position(|n| *n == "dispatches")
        .map_or(0.0, |c| median(&decode.counters[c]));
    Some(Untimed {
        decode_untimed_per_token: median(&decode.untimed),
        decode_dispatches_per_token: dispatches,
        decode_steps_with_untimed: with,
        decode_steps: decode.steps.len(),
        capture_untimed_dispatches,
    })
}

/// A note on dispatch spans shared by concurrent dispatches (`GpuSpan::shared`) in the analysed
/// decode steps: how many per step, and how the op table counts them.
fn shared_note(trace: &Trace, steps: &[usize]) -> Option<String> {
    let mut shared = Vec::with_capacity(steps.len());
    let mut all = Vec::with_capacity(steps.len());
    for &i in steps {
        let spans = &trace.tokens.get(i)?.gpu_spans;
        let dispatch = |s: &&GpuSpan| {
            trace
                .ops
                .get(s.op() as usize)
                .is_some_and(|o| !is_region_kind(&o.kind))
        };
        all.push(spans.iter().filter(dispatch).count() as f64);
        shared.push(
            spans
                .iter()
                .filter(dispatch)
                .filter(|s| s.shared() > 1)
                .count() as f64,
        );
    }
    let median_shared = Summary::of(&shared).median;
    if shared.iter().all(|&n| n == 0.0) {
        return None;
    }
    Some(format!(
        "{} of {} dispatch spans per decode token (median) are shared by dispatches that ran          concurrently (no barrier between them): each has the interval they ran in, and the op          table counts each for an equal share of it",
        crate::report::fmt_value(median_shared),
        crate::report::fmt_value(Summary::of(&all).median),
    ))
}

/// A note on a foreign trace's dispatch labels that no op-kind rule matched (they keep kind
/// `dispatch` and have a row of their own in the per-kind table).
fn unclassified_note(trace: &Trace, ops: &[OpRow]) -> Option<String> {
    trace.meta.capture.as_ref()?;
    let rows: Vec<&OpRow> = ops
        .iter()
        .filter(|r| r.kind == crate::kinds::UNCLASSIFIED)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let share: f64 = rows.iter().map(|r| r.gpu_share).sum();
    let mut names: Vec<&str> = rows.iter().take(3).map(|r| r.label.as_str()).collect();
    if rows.len() > names.len() {
        names.push("...");
    }
    Some(format!(
        "{} of {} dispatch labels ({} of GPU time) match no op-kind rule and keep kind `dispatch` \
         ({}); name them in a rule file: --op-kinds FILE (TRACE_FORMAT.md, \"Op kinds\")",
        rows.len(),
        ops.len(),
        crate::report::fmt_pct(share),
        names.join(", ")
    ))
}

/// Computes the statistics of `trace`; `source` names it in the report.
pub fn compute_stats(trace: &Trace, source: &str, opts: &StatsOptions) -> TraceStats {
    let decode_steps = trace
        .tokens
        .iter()
        .filter(|t| t.phase == Phase::Decode)
        .count();
    let skip = effective_skip(opts.skip, decode_steps);
    let mut notes = Vec::new();
    if skip < opts.skip {
        notes.push(format!(
            "skipping {skip} warm-up decode tokens instead of {} (the trace has only {decode_steps}; \
             at least half are kept)",
            opts.skip
        ));
    }
    let prefill = phase_samples(trace, Phase::Prefill, 0);
    let decode = phase_samples(trace, Phase::Decode, skip);
    if decode.times[2].is_empty() && !decode.steps.is_empty() {
        notes.push(format!(
            "no GPU time: the capture's timestamp level is `{}`",
            trace.meta.run.timestamps
        ));
    }
    if !trace.meta.clock.calibrated && trace.meta.clock.method == "fence-fallback" {
        notes.push(
            "GPU clock not calibrated (fence-fallback): GPU spans may sit up to one fence-wait \
             latency late on the host timeline; durations are exact"
                .to_owned(),
        );
    }
    // A foreign program's capture that is not whole says why (killed, crashed, its tail).
    if let Some(c) = &trace.meta.capture
        && !c.complete
    {
        for n in &c.notes {
            notes.push(format!("incomplete capture: {n}"));
        }
    }
    let bw = trace.meta.device.memory_bandwidth_gbps;
    let (ops, regions) = op_rows(
        trace,
        &decode.steps,
        Grouping::Label {
            fold: opts.fold_labels,
        },
        bw,
    );
    let (kinds, _) = op_rows(trace, &decode.steps, Grouping::Kind, bw);
    if let Some(n) = unclassified_note(trace, &ops) {
        notes.push(n);
    }
    if let Some(n) = shared_note(trace, &decode.steps) {
        notes.push(n);
    }
    TraceStats {
        capture: CaptureInfo::of(trace, source),
        skip_requested: opts.skip,
        skip_applied: skip,
        prefill: (!prefill.steps.is_empty()).then(|| phase_stats(trace, Phase::Prefill, &prefill)),
        decode: (!decode.steps.is_empty()).then(|| phase_stats(trace, Phase::Decode, &decode)),
        untimed: untimed(trace, &decode),
        ops,
        regions,
        kinds,
        folded_labels: opts.fold_labels,
        memory_bandwidth_gbps: bw,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&v, 50.0), 2.5);
        assert_eq!(percentile_sorted(&v, 0.0), 1.0);
        assert_eq!(percentile_sorted(&v, 100.0), 4.0);
        assert!((percentile_sorted(&v, 90.0) - 3.7).abs() < 1e-12);
    }

    #[test]
    fn summary_of_known_values() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.median, 4.5);
        // Sample variance 32/7.
        assert!((s.std_dev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(Summary::of(&[]).n, 0);
        assert_eq!(Summary::of(&[3.0]).std_dev, 0.0);
    }

    #[test]
    fn folding_replaces_numeric_components_only() {
        assert_eq!(fold_label("layer.3.q_proj"), "layer.*.q_proj");
        assert_eq!(fold_label("layers/12/attn:0"), "layers/*/attn:*");
        assert_eq!(fold_label("q4_1.matvec"), "q4_1.matvec");
        assert_eq!(fold_label("L12.q_proj"), "L*.q_proj");
        assert_eq!(fold_label("L3a.x"), "L3a.x");
        assert_eq!(fold_label("lm_head"), "lm_head");
        assert_eq!(fold_label(""), "");
        assert_eq!(fold_label("a..1"), "a..*");
    }

    #[test]
    fn union_merges_overlaps() {
        let s = [
            GpuSpan(0, 0, 10, 0, 0, 1),
            GpuSpan(0, 5, 10, 0, 0, 1),
            GpuSpan(0, 20, 5, 0, 0, 1),
        ];
        assert_eq!(union_ns(&s), 20);
    }

    #[test]
    fn gpu_gap_runs_from_one_steps_last_span_to_the_next_ones_first() {
        let step = |spans: Vec<GpuSpan>| TokenRecord {
            gpu_spans: spans,
            ..Default::default()
        };
        let tokens = [
            step(vec![
                GpuSpan(0, 100, 50, 0, 0, 1),
                GpuSpan(1, 160, 40, 0, 0, 1),
            ]),
            step(vec![
                GpuSpan(0, 230, 10, 0, 0, 1),
                GpuSpan(1, 215, 5, 0, 0, 1),
            ]),
            step(vec![GpuSpan(0, 235, 10, 0, 0, 1)]),
            step(vec![]),
            step(vec![GpuSpan(0, 400, 10, 0, 0, 1)]),
        ];
        // 200 -> 215; overlapping spans give 0; no spans on either side gives none.
        assert_eq!(gpu_gap_ns(&tokens, 0), None);
        assert_eq!(gpu_gap_ns(&tokens, 1), Some(15));
        assert_eq!(gpu_gap_ns(&tokens, 2), Some(0));
        assert_eq!(gpu_gap_ns(&tokens, 3), None);
        assert_eq!(gpu_gap_ns(&tokens, 4), None);
        assert_eq!(gpu_gap_ns(&tokens, 5), None);
    }

    #[test]
    fn skip_keeps_half() {
        assert_eq!(effective_skip(2, 100), 2);
        assert_eq!(effective_skip(2, 3), 1);
        assert_eq!(effective_skip(2, 1), 0);
        assert_eq!(effective_skip(10, 0), 0);
    }
}
