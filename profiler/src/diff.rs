//! A against B: every metric of two traces in one table.
//!
//! Counters are exact, so they compare exactly: medians, their delta, and whether every analysed
//! token has the same value in both captures. Timings are noisy, so their per-token samples compare
//! through a bootstrap confidence interval of the median difference (deterministic seed): a change
//! whose interval contains zero is reported as noise. Ops are matched by (folded) label, and also
//! by op kind (`matvec` against `matvec`): where the labels of A and B do not line up (a foreign
//! program against the decoder, see [`LabelOverlap`]) the kinds are what compares. A
//! comparability check lists every identity field that differs.

use serde::{Deserialize, Serialize};

use crate::bootstrap::{MedianDiffCi, median_difference_ci, metric_seed};
use crate::stats::{
    CaptureInfo, Grouping, OpRow, StatsOptions, Summary, TIME_METRICS, Untimed, effective_skip,
    op_rows, phase_samples, untimed,
};
use crate::trace::{Counters, Phase, Trace};

/// Fewer samples than this on either side give no confidence interval (a bootstrap of two or
/// three values says nothing); the change is then reported as unavailable and gates use the
/// point estimate.
pub const MIN_CI_SAMPLES: usize = 5;

/// Options of [`compute_diff`].
#[derive(Clone, Debug, PartialEq)]
pub struct DiffOptions {
    pub stats: StatsOptions,
    /// Bootstrap resamples per timing metric.
    pub resamples: usize,
    /// Confidence level of the intervals (0.95).
    pub confidence: f64,
    /// Seed of the bootstrap; the same seed gives the same intervals.
    pub seed: u64,
    /// Comparability fields (or prefixes such as `knobs`) whose mismatch is expected.
    pub ignore: Vec<String>,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            stats: StatsOptions::default(),
            resamples: 2_000,
            confidence: 0.95,
            seed: 0x00de_c0de,
            ignore: Vec::new(),
        }
    }
}

/// How B compares with A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Counters: equal. Timings: the interval contains zero (noise).
    Same,
    Increase,
    Decrease,
    /// One side has no samples.
    Unavailable,
}

/// One identity field that differs between A and B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// Dotted field name (`model.name`, `knobs.submit`, `run.decode_tokens`, ...).
    pub field: String,
    pub a: String,
    pub b: String,
    /// Whether the caller declared this mismatch expected (`--ignore`).
    pub ignored: bool,
}

/// Whether the generated token ids are identical.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenComparison {
    pub identical: bool,
    pub a_count: usize,
    pub b_count: usize,
    /// Index of the first differing id (or the shorter length when one is a prefix of the other).
    pub first_difference: Option<usize>,
}

/// Whether a counter matches token by token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum PerToken {
    /// Every analysed token has the same value in A and B.
    Identical,
    /// `tokens` of `of` analysed tokens differ; `first` is the first (0-based among them).
    Differs {
        tokens: usize,
        of: usize,
        first: usize,
    },
    /// The captures analyse different numbers of tokens, so tokens cannot be paired.
    Unpaired { a: usize, b: usize },
}

/// One counter, A against B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterDiff {
    pub name: String,
    pub unit: String,
    pub a: Summary,
    pub b: Summary,
    /// `median(B) - median(A)`.
    pub delta: f64,
    /// `delta / median(A)`; `None` when A's median is 0.
    pub rel: Option<f64>,
    pub change: Change,
    pub per_token: PerToken,
}

/// One timing, A against B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimingDiff {
    pub name: String,
    pub unit: String,
    pub a: Summary,
    pub b: Summary,
    pub delta: f64,
    pub rel: Option<f64>,
    /// Bootstrap interval of `median(B) - median(A)`.
    pub ci: Option<MedianDiffCi>,
    pub change: Change,
}

/// One phase, A against B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseDiff {
    pub phase: Phase,
    pub a_steps: usize,
    pub b_steps: usize,
    pub counters: Vec<CounterDiff>,
    pub timings: Vec<TimingDiff>,
}

impl PhaseDiff {
    pub fn counter(&self, name: &str) -> Option<&CounterDiff> {
        self.counters.iter().find(|c| c.name == name)
    }
    pub fn timing(&self, name: &str) -> Option<&TimingDiff> {
        self.timings.iter().find(|c| c.name == name)
    }
}

/// One op label, A against B (decode tokens).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpDiff {
    pub label: String,
    pub kind: String,
    pub a: Option<OpRow>,
    pub b: Option<OpRow>,
    /// Interval of the per-token GPU us median difference, when both sides ran the op.
    pub ci: Option<MedianDiffCi>,
    pub change: Change,
}

/// Below this share of either side's GPU time in labels that both sides have, the labels of A
/// and B do not line up and ops compare by kind.
pub const MIN_SHARED_LABEL_SHARE: f64 = 0.5;

/// How much of each side's dispatch work is in (folded) labels that the other side has too.
/// Weighed by GPU time per token where both sides have it, else by dispatches per token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelOverlap {
    /// Share of A's GPU time (or dispatches) in labels B also has, 0..=1.
    pub a_shared: f64,
    /// Share of B's in labels A also has.
    pub b_shared: f64,
    /// `gpu_time` or `dispatches`: what the shares weigh.
    pub weight: String,
}

impl LabelOverlap {
    /// Whether ops can be compared label by label: at least [`MIN_SHARED_LABEL_SHARE`] of both
    /// sides' work is in shared labels. Otherwise (a foreign program against the decoder, two
    /// runtimes) compare by kind.
    pub fn lines_up(&self) -> bool {
        self.a_shared >= MIN_SHARED_LABEL_SHARE && self.b_shared >= MIN_SHARED_LABEL_SHARE
    }
}

/// The label overlap of two per-op tables (rows of [`crate::stats::TraceStats::ops`] or of the
/// sides of [`Diff::ops`]); `None` when either has no rows (no dispatch spans to compare). The one
/// criterion `diff` and the viewer use to decide whether labels line up.
pub fn label_overlap(a: &[OpRow], b: &[OpRow]) -> Option<LabelOverlap> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let time = |rows: &[OpRow]| rows.iter().map(|r| r.gpu_us_mean).sum::<f64>();
    let by_time = time(a) > 0.0 && time(b) > 0.0;
    let weight = |r: &OpRow| {
        if by_time {
            r.gpu_us_mean
        } else {
            r.dispatches_per_token
        }
    };
    let shared = |side: &[OpRow], other: &[OpRow]| {
        let labels: std::collections::HashSet<&str> =
            other.iter().map(|r| r.label.as_str()).collect();
        // Folds from +0.0: an empty float `sum` is -0.0, which would print as "-0.0%".
        let total = side.iter().map(weight).fold(0.0, |x, y| x + y);
        let inside = side
            .iter()
            .filter(|r| labels.contains(r.label.as_str()))
            .map(weight)
            .fold(0.0, |x, y| x + y);
        if total > 0.0 { inside / total } else { 0.0 }
    };
    Some(LabelOverlap {
        a_shared: shared(a, b),
        b_shared: shared(b, a),
        weight: if by_time { "gpu_time" } else { "dispatches" }.to_owned(),
    })
}

/// Two traces compared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub a: CaptureInfo,
    pub b: CaptureInfo,
    pub skip_a: usize,
    pub skip_b: usize,
    pub comparability: Vec<Mismatch>,
    pub tokens: TokenComparison,
    /// Prefill (when both have one), then decode.
    pub phases: Vec<PhaseDiff>,
    pub ops: Vec<OpDiff>,
    pub regions: Vec<OpDiff>,
    /// Dispatch spans by op kind (`label` and `kind` are the kind), A against B.
    pub kinds: Vec<OpDiff>,
    /// How far the labels of `ops` line up; `None` when a side has no dispatch spans.
    pub label_overlap: Option<LabelOverlap>,
    /// Dispatches without a GPU span in A and in B (foreign captures), as `stats` reports them.
    pub a_untimed: Option<Untimed>,
    pub b_untimed: Option<Untimed>,
    pub folded_labels: bool,
    pub confidence: f64,
    pub resamples: usize,
}

impl Diff {
    pub fn phase(&self, phase: Phase) -> Option<&PhaseDiff> {
        self.phases.iter().find(|p| p.phase == phase)
    }

    /// Mismatches not declared expected: with `--strict` these make the diff an error.
    pub fn blocking_mismatches(&self) -> impl Iterator<Item = &Mismatch> {
        self.comparability.iter().filter(|m| !m.ignored)
    }

    /// Whether ops compare label by label (see [`LabelOverlap::lines_up`]); true when there
    /// are no dispatch spans to compare.
    pub fn labels_line_up(&self) -> bool {
        self.label_overlap
            .as_ref()
            .is_none_or(LabelOverlap::lines_up)
    }

    /// Whether both sides' dispatches carry kinds (anything but a foreign program's
    /// unclassified `dispatch`), so that the by-kind table says something.
    pub fn both_have_kinds(&self) -> bool {
        let has = |side: fn(&OpDiff) -> bool| {
            self.kinds
                .iter()
                .any(|k| side(k) && k.kind != crate::kinds::UNCLASSIFIED)
        };
        has(|k| k.a.is_some()) && has(|k| k.b.is_some())
    }

    /// Whether every counter of every phase matches token by token.
    pub fn counters_identical(&self) -> bool {
        self.phases.iter().all(|p| {
            p.counters
                .iter()
                .all(|c| matches!(c.per_token, PerToken::Identical))
        })
    }
}

/// Every comparability field, in report order; `--ignore` takes one of these or a group before a
/// dot (`knobs`, `device`, `run`, `model`).
pub const COMPARABILITY_FIELDS: [&str; 23] = [
    "model.name",
    "model.architecture",
    "model.shape",
    "model.weight_dtype",
    "device.name",
    "knobs.mode",
    "knobs.submit",
    "knobs.sync",
    "knobs.descriptors",
    "knobs.barriers",
    "knobs.kernels",
    "knobs.recording",
    "run.prompt",
    "run.prompt_tokens",
    "run.decode_tokens",
    "run.context",
    "run.kv_layout",
    "run.kv_dtype",
    "run.kv_block_size",
    "run.kv_window",
    "run.paged_attention",
    "run.batch",
    "run.timestamps",
];

/// Refuses an `--ignore` value that names no comparability field or group (it would silently
/// ignore nothing), with the list of valid ones.
pub fn check_ignore(ignore: &[String]) -> Result<(), String> {
    // The tuning keys are the decoder's (`tuning.KEY`, `tuning.grid.FIELD`): any is taken.
    let names = |i: &str| {
        i == "tuning"
            || i.starts_with("tuning.")
            || COMPARABILITY_FIELDS
                .iter()
                .any(|f| *f == i || (f.starts_with(i) && f[i.len()..].starts_with('.')))
    };
    match ignore.iter().find(|i| !names(i)) {
        None => Ok(()),
        Some(bad) => {
            let mut groups: Vec<&str> = COMPARABILITY_FIELDS
                .iter()
                .filter_map(|f| f.split('.').next())
                .collect();
            groups.dedup();
            groups.push("tuning");
            Err(format!(
                "--ignore {bad} names no comparability field; give a group ({}) or a field ({})",
                groups.join(", "),
                COMPARABILITY_FIELDS.join(", ")
            ))
        }
    }
}

fn comparability(a: &Trace, b: &Trace, ignore: &[String]) -> Vec<Mismatch> {
    let (ma, mb) = (&a.meta, &b.meta);
    let fields: Vec<(&str, String, String)> = vec![
        ("model.name", ma.model.name.clone(), mb.model.name.clone()),
        (
            "model.architecture",
            ma.model.architecture.clone(),
            mb.model.architecture.clone(),
        ),
        ("model.shape", shape(&ma.model), shape(&mb.model)),
        (
            "model.weight_dtype",
            ma.model.weight_dtype.clone(),
            mb.model.weight_dtype.clone(),
        ),
        (
            "device.name",
            ma.device.name.clone(),
            mb.device.name.clone(),
        ),
        ("knobs.mode", ma.knobs.mode.clone(), mb.knobs.mode.clone()),
        (
            "knobs.submit",
            ma.knobs.submit.clone(),
            mb.knobs.submit.clone(),
        ),
        ("knobs.sync", ma.knobs.sync.clone(), mb.knobs.sync.clone()),
        (
            "knobs.descriptors",
            ma.knobs.descriptors.clone(),
            mb.knobs.descriptors.clone(),
        ),
        (
            "knobs.barriers",
            ma.knobs.barriers.clone(),
            mb.knobs.barriers.clone(),
        ),
        (
            "knobs.kernels",
            ma.knobs.kernels.clone(),
            mb.knobs.kernels.clone(),
        ),
        (
            "knobs.recording",
            ma.knobs.recording.clone(),
            mb.knobs.recording.clone(),
        ),
        ("run.prompt", ma.run.prompt.clone(), mb.run.prompt.clone()),
        (
            "run.prompt_tokens",
            ma.run.prompt_tokens.to_string(),
            mb.run.prompt_tokens.to_string(),
        ),
        (
            "run.decode_tokens",
            ma.run.decode_tokens.to_string(),
            mb.run.decode_tokens.to_string(),
        ),
        (
            "run.context",
            ma.run.context.to_string(),
            mb.run.context.to_string(),
        ),
        (
            "run.kv_layout",
            ma.run.kv_layout.clone(),
            mb.run.kv_layout.clone(),
        ),
        ("run.kv_dtype", kv_dtype(&ma.run), kv_dtype(&mb.run)),
        (
            "run.kv_block_size",
            ma.run.kv_block_size.to_string(),
            mb.run.kv_block_size.to_string(),
        ),
        (
            "run.kv_window",
            ma.run.kv_window.to_string(),
            mb.run.kv_window.to_string(),
        ),
        (
            "run.paged_attention",
            ma.run.paged_attention.clone(),
            mb.run.paged_attention.clone(),
        ),
        (
            "run.batch",
            ma.run.batch.max(1).to_string(),
            mb.run.batch.max(1).to_string(),
        ),
        (
            "run.timestamps",
            ma.run.timestamps.clone(),
            mb.run.timestamps.clone(),
        ),
    ];
    let fields: Vec<(String, String, String)> = fields
        .into_iter()
        .map(|(f, a, b)| (f.to_owned(), a, b))
        .chain(tuning_fields(&ma.run, &mb.run))
        .collect();
    // A foreign program's capture (`profiler record`) cannot know its knobs or model: a field
    // that is unknown on either side is not compared.
    let unknown = |v: &str| v == crate::trace::UNKNOWN;
    // Nor can it know the model's shape, the prompt or the KV cache: with a foreign capture on
    // either side only the device, the decode length and the timestamp level are compared.
    let foreign = ma.capture.is_some() || mb.capture.is_some();
    let compared = |field: &str| {
        !foreign
            || matches!(
                field,
                "device.name" | "run.decode_tokens" | "run.timestamps"
            )
    };
    fields
        .into_iter()
        .filter(|(f, x, y)| x != y && !unknown(x) && !unknown(y) && compared(f))
        .map(|(field, a, b)| Mismatch {
            ignored: ignore.iter().any(|i| {
                field == *i || (field.starts_with(i.as_str()) && field[i.len()..].starts_with('.'))
            }),
            field,
            a,
            b,
        })
        .collect()
}

/// The tuning keys (`tuning.KEY`) and the persistent kernel's grid (`tuning.grid.FIELD`) where
/// both runs recorded them: a key or a grid only one side has is not compared (an older decoder,
/// or another kernel, which `knobs.kernels` reports).
fn tuning_fields(
    a: &crate::trace::RunMeta,
    b: &crate::trace::RunMeta,
) -> Vec<(String, String, String)> {
    let (Some(ta), Some(tb)) = (&a.tuning, &b.tuning) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String, String)> = ta
        .keys
        .iter()
        .filter_map(|(k, va)| {
            let vb = tb.keys.get(k)?;
            Some((format!("tuning.{k}"), va.to_string(), vb.to_string()))
        })
        .collect();
    if let (Some(ga), Some(gb)) = (&ta.persistent_grid, &tb.persistent_grid) {
        for (f, x, y) in [
            ("workgroups", ga.workgroups, gb.workgroups),
            ("invocations", ga.invocations, gb.invocations),
            ("subgroup_size", ga.subgroup_size, gb.subgroup_size),
            ("head_groups", ga.head_groups, gb.head_groups),
        ] {
            out.push((format!("tuning.grid.{f}"), x.to_string(), y.to_string()));
        }
    }
    out
}

/// The KV element type; traces written before the field existed kept f32 caches.
fn kv_dtype(r: &crate::trace::RunMeta) -> String {
    if r.kv_dtype.is_empty() {
        "f32".into()
    } else {
        r.kv_dtype.clone()
    }
}

fn shape(m: &crate::trace::ModelMeta) -> String {
    format!(
        "layers={} hidden={} heads={} kv_heads={} head_dim={} intermediate={} vocab={}",
        m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab
    )
}

fn compare_tokens(a: &[u32], b: &[u32]) -> TokenComparison {
    let first_difference = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())));
    TokenComparison {
        identical: first_difference.is_none(),
        a_count: a.len(),
        b_count: b.len(),
        first_difference,
    }
}

/// `meta.run.generated_ids`, or the steps' `token_id`s when the writer left the list empty.
fn generated_ids(t: &Trace) -> Vec<u32> {
    if t.meta.run.generated_ids.is_empty() {
        t.tokens.iter().filter_map(|r| r.token_id).collect()
    } else {
        t.meta.run.generated_ids.clone()
    }
}

fn rel(delta: f64, base: f64) -> Option<f64> {
    (base != 0.0).then(|| delta / base.abs())
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

fn change_of_ci(ci: &Option<MedianDiffCi>) -> Change {
    match ci {
        None => Change::Unavailable,
        Some(c) if c.low > 0.0 => Change::Increase,
        Some(c) if c.high < 0.0 => Change::Decrease,
        Some(_) => Change::Same,
    }
}

fn phase_diff(
    a: &Trace,
    b: &Trace,
    phase: Phase,
    skips: (usize, usize),
    o: &DiffOptions,
) -> PhaseDiff {
    let sa = phase_samples(a, phase, skips.0);
    let sb = phase_samples(b, phase, skips.1);
    let mut counters = Vec::new();
    for (c, name) in Counters::NAMES.iter().enumerate() {
        let (va, vb) = (&sa.counters[c], &sb.counters[c]);
        let fa: Vec<f64> = va.iter().map(|&x| x as f64).collect();
        let fb: Vec<f64> = vb.iter().map(|&x| x as f64).collect();
        let (sum_a, sum_b) = (Summary::of(&fa), Summary::of(&fb));
        let delta = sum_b.median - sum_a.median;
        let per_token = if va.len() != vb.len() {
            PerToken::Unpaired {
                a: va.len(),
                b: vb.len(),
            }
        } else {
            let differing: Vec<usize> = va
                .iter()
                .zip(vb)
                .enumerate()
                .filter(|(_, (x, y))| x != y)
                .map(|(i, _)| i)
                .collect();
            match differing.first() {
                None => PerToken::Identical,
                Some(&first) => PerToken::Differs {
                    tokens: differing.len(),
                    of: va.len(),
                    first,
                },
            }
        };
        let change = if va.is_empty() || vb.is_empty() {
            Change::Unavailable
        } else if delta > 0.0 {
            Change::Increase
        } else if delta < 0.0 {
            Change::Decrease
        } else {
            Change::Same
        };
        counters.push(CounterDiff {
            name: (*name).to_owned(),
            unit: Counters::unit(name).to_owned(),
            a: sum_a,
            b: sum_b,
            delta,
            rel: rel(delta, sum_a.median),
            change,
            per_token,
        });
    }
    let mut timings = Vec::new();
    for (m, name) in TIME_METRICS.iter().enumerate() {
        let (va, vb) = (sorted(&sa.times[m]), sorted(&sb.times[m]));
        if va.is_empty() && vb.is_empty() {
            continue;
        }
        let (sum_a, sum_b) = (Summary::of_sorted(&va), Summary::of_sorted(&vb));
        let seed = metric_seed(o.seed, &format!("{phase:?}.{name}"));
        let ci = if va.len().min(vb.len()) >= MIN_CI_SAMPLES {
            median_difference_ci(&va, &vb, o.resamples, o.confidence, seed)
        } else {
            None
        };
        let delta = sum_b.median - sum_a.median;
        timings.push(TimingDiff {
            name: (*name).to_owned(),
            unit: "us".to_owned(),
            a: sum_a,
            b: sum_b,
            delta,
            rel: rel(delta, sum_a.median),
            change: change_of_ci(&ci),
            ci,
        });
    }
    PhaseDiff {
        phase,
        a_steps: sa.steps.len(),
        b_steps: sb.steps.len(),
        counters,
        timings,
    }
}

/// Pairs rows of A and B with the same label (or kind, for kind rows). The bootstrap seed
/// follows the row's name, so a kind row with the samples of a label row gets its interval.
fn match_ops(a: Vec<OpRow>, b: Vec<OpRow>, o: &DiffOptions) -> Vec<OpDiff> {
    let mut b: Vec<Option<OpRow>> = b.into_iter().map(Some).collect();
    let mut out = Vec::new();
    let diff_of = |label: String, kind: String, a: Option<OpRow>, b: Option<OpRow>| {
        let ci = match (&a, &b) {
            (Some(x), Some(y))
                if x.gpu_us_samples.len().min(y.gpu_us_samples.len()) >= MIN_CI_SAMPLES =>
            {
                median_difference_ci(
                    &sorted(&x.gpu_us_samples),
                    &sorted(&y.gpu_us_samples),
                    o.resamples,
                    o.confidence,
                    metric_seed(o.seed, &format!("op.{label}")),
                )
            }
            _ => None,
        };
        OpDiff {
            change: change_of_ci(&ci),
            ci,
            label,
            kind,
            a,
            b,
        }
    };
    for row in a {
        let matched = b
            .iter_mut()
            .find(|r| r.as_ref().is_some_and(|r| r.label == row.label))
            .and_then(Option::take);
        out.push(diff_of(
            row.label.clone(),
            row.kind.clone(),
            Some(row),
            matched,
        ));
    }
    for row in b.into_iter().flatten() {
        out.push(diff_of(
            row.label.clone(),
            row.kind.clone(),
            None,
            Some(row),
        ));
    }
    out
}

/// Compares trace `a` (the baseline) with trace `b`; `a_source` and `b_source` name them.
pub fn compute_diff(a: &Trace, a_source: &str, b: &Trace, b_source: &str, o: &DiffOptions) -> Diff {
    let decode_steps = |t: &Trace| t.tokens.iter().filter(|r| r.phase == Phase::Decode).count();
    let skips = (
        effective_skip(o.stats.skip, decode_steps(a)),
        effective_skip(o.stats.skip, decode_steps(b)),
    );
    let has_prefill = |t: &Trace| t.tokens.iter().any(|r| r.phase == Phase::Prefill);
    let mut phases = Vec::new();
    if has_prefill(a) || has_prefill(b) {
        phases.push(phase_diff(a, b, Phase::Prefill, skips, o));
    }
    phases.push(phase_diff(a, b, Phase::Decode, skips, o));

    let decode_a = phase_samples(a, Phase::Decode, skips.0);
    let decode_b = phase_samples(b, Phase::Decode, skips.1);
    let fold = o.stats.fold_labels;
    let rows = |t: &Trace, steps: &[usize], grouping| {
        op_rows(t, steps, grouping, t.meta.device.memory_bandwidth_gbps)
    };
    let by_label = Grouping::Label { fold };
    let (ops_a, regions_a) = rows(a, &decode_a.steps, by_label);
    let (ops_b, regions_b) = rows(b, &decode_b.steps, by_label);
    let (kinds_a, _) = rows(a, &decode_a.steps, Grouping::Kind);
    let (kinds_b, _) = rows(b, &decode_b.steps, Grouping::Kind);
    let label_overlap = label_overlap(&ops_a, &ops_b);

    Diff {
        a: CaptureInfo::of(a, a_source),
        b: CaptureInfo::of(b, b_source),
        skip_a: skips.0,
        skip_b: skips.1,
        comparability: comparability(a, b, &o.ignore),
        tokens: compare_tokens(&generated_ids(a), &generated_ids(b)),
        phases,
        ops: match_ops(ops_a, ops_b, o),
        regions: match_ops(regions_a, regions_b, o),
        kinds: match_ops(kinds_a, kinds_b, o),
        label_overlap,
        a_untimed: untimed(a, &decode_a),
        b_untimed: untimed(b, &decode_b),
        folded_labels: fold,
        confidence: o.confidence,
        resamples: o.resamples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison_finds_first_difference() {
        assert!(compare_tokens(&[1, 2, 3], &[1, 2, 3]).identical);
        assert_eq!(
            compare_tokens(&[1, 2, 3], &[1, 5, 3]).first_difference,
            Some(1)
        );
        assert_eq!(
            compare_tokens(&[1, 2], &[1, 2, 3]).first_difference,
            Some(2)
        );
    }
}
