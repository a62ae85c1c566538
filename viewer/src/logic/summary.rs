//! The Summary panel's content: the tables of `profiler diff` (or `profiler stats` for one trace),
//! with the same numbers, and a tone per row so the panel can colour deltas by direction and
//! significance.
//!
//! Direction: for every counter and time in a trace, lower is better (fewer submits, less time),
//! so a decrease of B against A is [`Tone::Better`] and an increase [`Tone::Worse`]; the "B vs A"
//! column says by how much, oriented the same way (`profiler::Speedup`: `88.0x better`).
//! Significance: counters are exact, so any change is significant; a timing is significant only
//! when the bootstrap interval of the median difference excludes zero (`profiler diff`'s verdict).
//! Times are written in the unit that suits each value (`profiler::fmt_us`), as `profiler diff`
//! writes them.

use profiler::{
    CaptureInfo, Change, Diff, OpDiff, OpRow, PerToken, Phase, PhaseDiff, PhaseStats, TraceStats,
};

use crate::logic::format::{
    fmt_bytes, fmt_ci_us, fmt_metric, fmt_pct, fmt_rel, fmt_signed, fmt_signed_us, fmt_us,
    fmt_value, median_speedup, op_speedup, unit_cell,
};

/// How a row's delta reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// B is lower than A.
    Better,
    /// B is higher than A.
    Worse,
    /// No change (or noise).
    Neutral,
    /// Nothing to compare.
    Unavailable,
}

/// One table row.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryRow {
    pub cells: Vec<String>,
    pub tone: Tone,
    /// The change is real: exact for counters, the interval excludes zero for timings.
    pub significant: bool,
}

/// One table.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryTable {
    pub title: String,
    pub columns: Vec<String>,
    /// Right-aligned (numeric) columns.
    pub right: Vec<bool>,
    /// Columns coloured by the row's tone (delta, delta %, B vs A, verdict).
    pub toned: Vec<usize>,
    pub rows: Vec<SummaryRow>,
}

/// How loud a warning is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Worth knowing (the knobs that differ are what the comparison measures).
    Info,
    /// The captures may not be comparable, or the outputs differ.
    Warning,
}

/// One line shown above the tables.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    pub level: Level,
    pub text: String,
}

/// Everything the Summary panel shows.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryModel {
    pub title: String,
    /// `("A", lines)`, `("B", lines)`, or one capture.
    pub captures: Vec<(String, Vec<String>)>,
    /// Comparability warnings and notes, shown on top.
    pub warnings: Vec<Warning>,
    /// Plain facts (skip, token comparison).
    pub notes: Vec<String>,
    pub tables: Vec<SummaryTable>,
}

fn capture_lines(c: &CaptureInfo) -> Vec<String> {
    vec![
        c.source.clone(),
        format!(
            "model {} ({}, {} layers) on {}{}",
            c.model,
            c.architecture,
            c.layers,
            c.device,
            if c.driver.is_empty() {
                String::new()
            } else {
                format!(", driver {}", c.driver)
            }
        ),
        format!("mode {}: {}", c.mode, c.knobs),
        format!(
            "kv {} · timestamps {} · GPU clock {}",
            c.kv_layout, c.timestamps, c.clock
        ),
    ]
}

fn phase_title(p: Phase) -> &'static str {
    match p {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The tone of a change of a lower-is-better quantity.
pub fn tone_of(change: Change) -> Tone {
    match change {
        Change::Decrease => Tone::Better,
        Change::Increase => Tone::Worse,
        Change::Same => Tone::Neutral,
        Change::Unavailable => Tone::Unavailable,
    }
}

fn counter_change_text(c: Change) -> &'static str {
    match c {
        Change::Same => "same",
        Change::Increase => "increase",
        Change::Decrease => "decrease",
        Change::Unavailable => "n/a",
    }
}

fn timing_change_text(c: Change) -> &'static str {
    match c {
        Change::Same => "~ no significant change",
        Change::Increase => "increase",
        Change::Decrease => "decrease",
        Change::Unavailable => "n/a (too few samples)",
    }
}

fn per_token_text(p: &PerToken) -> String {
    match p {
        PerToken::Identical => "identical".to_owned(),
        PerToken::Differs { tokens, of, first } => {
            format!("differs on {tokens}/{of} (first: {first})")
        }
        PerToken::Unpaired { a, b } => format!("unpaired ({a} vs {b} tokens)"),
    }
}

fn table(title: String, cols: &[(&str, bool)], toned: &[usize]) -> SummaryTable {
    SummaryTable {
        title,
        columns: cols.iter().map(|c| c.0.to_owned()).collect(),
        right: cols.iter().map(|c| c.1).collect(),
        toned: toned.to_vec(),
        rows: Vec::new(),
    }
}

fn phase_tables(p: &PhaseDiff, d: &Diff) -> Vec<SummaryTable> {
    let name = phase_title(p.phase);
    let mut counters = table(
        format!(
            "{name} counters (median per step; A {}, B {})",
            plural(p.a_steps, "step"),
            plural(p.b_steps, "step")
        ),
        &[
            ("counter", false),
            ("A", true),
            ("B", true),
            ("delta", true),
            ("delta %", true),
            ("B vs A", true),
            ("change", false),
            ("per token", false),
        ],
        &[3, 4, 5, 6],
    );
    for c in &p.counters {
        counters.rows.push(SummaryRow {
            cells: vec![
                c.name.clone(),
                fmt_value(c.a.median),
                fmt_value(c.b.median),
                fmt_signed(c.delta),
                fmt_rel(c.rel),
                median_speedup(c.a.n, c.a.median, c.b.n, c.b.median, &c.name),
                counter_change_text(c.change).to_owned(),
                per_token_text(&c.per_token),
            ],
            tone: tone_of(c.change),
            significant: matches!(c.change, Change::Increase | Change::Decrease),
        });
    }
    let mut out = vec![counters];
    if p.timings.is_empty() {
        return out;
    }
    let mut timings = table(
        format!(
            "{name} timings (median per step; {:.0}% bootstrap CI of B - A, {} resamples)",
            d.confidence * 100.0,
            d.resamples
        ),
        &[
            ("metric", false),
            ("A", true),
            ("B", true),
            ("delta", true),
            ("delta %", true),
            ("B vs A", true),
            ("CI", true),
            ("A p90", true),
            ("B p90", true),
            ("verdict", false),
        ],
        &[3, 4, 5, 6, 9],
    );
    for m in &p.timings {
        let tone = match m.change {
            // Too few samples for an interval: show the direction, but not as significant.
            Change::Unavailable if m.a.n > 0 && m.b.n > 0 => {
                if m.delta < 0.0 {
                    Tone::Better
                } else if m.delta > 0.0 {
                    Tone::Worse
                } else {
                    Tone::Neutral
                }
            }
            c => tone_of(c),
        };
        timings.rows.push(SummaryRow {
            cells: vec![
                m.name.clone(),
                fmt_us(m.a.median),
                fmt_us(m.b.median),
                fmt_signed_us(m.delta),
                fmt_rel(m.rel),
                median_speedup(m.a.n, m.a.median, m.b.n, m.b.median, &m.name),
                fmt_ci_us(m.ci),
                fmt_us(m.a.p90),
                fmt_us(m.b.p90),
                timing_change_text(m.change).to_owned(),
            ],
            tone,
            significant: matches!(m.change, Change::Increase | Change::Decrease),
        });
    }
    out.push(timings);
    out
}

fn op_diff_table(title: String, rows: &[OpDiff]) -> SummaryTable {
    let mut t = table(
        title,
        &[
            ("label", false),
            ("kind", false),
            ("A n/token", true),
            ("B n/token", true),
            ("A time/token", true),
            ("B time/token", true),
            ("delta", true),
            ("B vs A", true),
            ("CI", true),
            ("A GB/s", true),
            ("B GB/s", true),
            ("verdict", false),
        ],
        &[6, 7, 8, 11],
    );
    let opt =
        |r: &Option<OpRow>, f: &dyn Fn(&OpRow) -> String| r.as_ref().map_or("-".to_owned(), f);
    let gbps = |r: &OpRow| {
        r.achieved_gbps
            .map_or("-".to_owned(), |v| format!("{v:.1}"))
    };
    for o in rows {
        let (delta, verdict, tone) = match (&o.a, &o.b) {
            (Some(a), Some(b)) => (
                fmt_signed_us(b.gpu_us_median - a.gpu_us_median),
                timing_change_text(o.change),
                tone_of(o.change),
            ),
            (Some(_), None) => ("-".to_owned(), "only in A", Tone::Neutral),
            _ => ("-".to_owned(), "only in B", Tone::Neutral),
        };
        t.rows.push(SummaryRow {
            cells: vec![
                o.label.clone(),
                o.kind.clone(),
                opt(&o.a, &|r| fmt_value(r.dispatches_per_token)),
                opt(&o.b, &|r| fmt_value(r.dispatches_per_token)),
                opt(&o.a, &|r| fmt_us(r.gpu_us_median)),
                opt(&o.b, &|r| fmt_us(r.gpu_us_median)),
                delta,
                op_speedup(o),
                fmt_ci_us(o.ci),
                opt(&o.a, &gbps),
                opt(&o.b, &gbps),
                verdict.to_owned(),
            ],
            tone,
            significant: matches!(o.change, Change::Increase | Change::Decrease),
        });
    }
    t
}

/// Whether a mismatched identity field is an execution knob: knobs differing is what an A/B of
/// two modes measures, so those are shown as information rather than as a warning.
pub fn is_knob_field(field: &str) -> bool {
    field.starts_with("knobs.")
}

/// The Summary of two traces compared by `profiler::compute_diff`.
pub fn summarize_diff(d: &Diff) -> SummaryModel {
    let mut warnings = Vec::new();
    let knobs: Vec<String> = d
        .comparability
        .iter()
        .filter(|m| is_knob_field(&m.field))
        .map(|m| format!("{} {} -> {}", &m.field["knobs.".len()..], m.a, m.b))
        .collect();
    for m in d.comparability.iter().filter(|m| !is_knob_field(&m.field)) {
        warnings.push(Warning {
            level: if m.ignored {
                Level::Info
            } else {
                Level::Warning
            },
            text: format!(
                "{} differs: A {}, B {}{}",
                m.field,
                m.a,
                m.b,
                if m.ignored { " (expected)" } else { "" }
            ),
        });
    }
    if !knobs.is_empty() {
        warnings.push(Warning {
            level: Level::Info,
            text: format!(
                "execution knobs differ (what this A/B measures): {}",
                knobs.join(", ")
            ),
        });
    }
    let t = &d.tokens;
    if let Some(i) = t.first_difference {
        warnings.push(Warning {
            level: Level::Warning,
            text: format!(
                "generated tokens DIFFER from index {i} (A {} ids, B {} ids): the captures did \
                 different work",
                t.a_count, t.b_count
            ),
        });
    }
    for (side, c) in [("A", &d.a), ("B", &d.b)] {
        if c.clock.starts_with("uncalibrated") && c.clock.contains("fence-fallback") {
            warnings.push(Warning {
                level: Level::Info,
                text: format!(
                    "{side}: GPU clock not calibrated (fence-fallback): GPU spans may sit up to \
                     one fence-wait latency late against host spans; durations are exact"
                ),
            });
        }
    }
    let mut notes = vec![format!(
        "decode tokens: A {} (first {} skipped), B {} (first {} skipped)",
        d.a.decode_steps, d.skip_a, d.b.decode_steps, d.skip_b
    )];
    notes.push(match t.first_difference {
        None => format!("generated tokens: identical ({} ids)", t.a_count),
        Some(i) => format!(
            "generated tokens: DIFFER from index {i} (A {} ids, B {} ids)",
            t.a_count, t.b_count
        ),
    });
    if d.comparability.is_empty() {
        notes.push("comparability: every identity field matches".to_owned());
    }
    let mut tables = Vec::new();
    for p in d.phases.iter().rev() {
        tables.extend(phase_tables(p, d));
    }
    if !d.ops.is_empty() {
        tables.push(op_diff_table(
            format!(
                "ops: decode, GPU time per token (median){}",
                if d.folded_labels {
                    ", numeric label parts folded into *"
                } else {
                    ""
                }
            ),
            &d.ops,
        ));
    }
    if !d.regions.is_empty() {
        tables.push(op_diff_table(
            "regions: decode, GPU time per token (median)".to_owned(),
            &d.regions,
        ));
    }
    SummaryModel {
        title: format!("A {}  vs  B {}", d.a.source, d.b.source),
        captures: vec![
            ("A".to_owned(), capture_lines(&d.a)),
            ("B".to_owned(), capture_lines(&d.b)),
        ],
        warnings,
        notes,
        tables,
    }
}

fn stats_table(p: &PhaseStats) -> SummaryTable {
    let title = if p.steps == 1 {
        format!("{}: 1 step, {} tokens", phase_title(p.phase), p.tokens)
    } else {
        format!("{}: per step over {} steps", phase_title(p.phase), p.steps)
    };
    let mut t = table(
        title,
        &[
            ("metric", false),
            ("unit", false),
            ("min", true),
            ("median", true),
            ("mean", true),
            ("p90", true),
            ("p99", true),
            ("max", true),
            ("std dev", true),
            ("cv", true),
        ],
        &[],
    );
    for m in &p.metrics {
        let s = &m.summary;
        let v = |x: f64| fmt_metric(x, &m.unit);
        t.rows.push(SummaryRow {
            cells: vec![
                m.name.clone(),
                unit_cell(&m.unit),
                v(s.min),
                v(s.median),
                v(s.mean),
                v(s.p90),
                v(s.p99),
                v(s.max),
                v(s.std_dev),
                fmt_pct(s.cv),
            ],
            tone: Tone::Neutral,
            significant: false,
        });
    }
    t
}

/// The Summary of one trace alone (`profiler stats`); `side` is `A` or `B`.
pub fn summarize_stats(s: &TraceStats, side: &str) -> SummaryModel {
    let analysed = s.decode.as_ref().map_or(0, |d| d.steps);
    let mut tables: Vec<SummaryTable> = [s.decode.as_ref(), s.prefill.as_ref()]
        .into_iter()
        .flatten()
        .map(stats_table)
        .collect();
    if !s.ops.is_empty() {
        let mut t = table(
            "ops: decode, per token".to_owned(),
            &[
                ("label", false),
                ("kind", false),
                ("dispatches/token", true),
                ("GPU time/token (median)", true),
                ("share of GPU time", true),
                ("bytes/token", true),
                ("GB/s", true),
                ("of bandwidth", true),
            ],
            &[],
        );
        for r in &s.ops {
            t.rows.push(SummaryRow {
                cells: vec![
                    r.label.clone(),
                    r.kind.clone(),
                    fmt_value(r.dispatches_per_token),
                    fmt_us(r.gpu_us_median),
                    fmt_pct(r.gpu_share),
                    if r.bytes_per_token > 0.0 {
                        fmt_bytes(r.bytes_per_token)
                    } else {
                        "-".to_owned()
                    },
                    r.achieved_gbps
                        .map_or("-".to_owned(), |v| format!("{v:.1}")),
                    r.bandwidth_share.map_or("-".to_owned(), fmt_pct),
                ],
                tone: Tone::Neutral,
                significant: false,
            });
        }
        tables.push(t);
    }
    SummaryModel {
        title: format!(
            "{side} {} alone (open a second trace to compare)",
            s.capture.source
        ),
        captures: vec![(side.to_owned(), capture_lines(&s.capture))],
        warnings: s
            .notes
            .iter()
            .map(|n| Warning {
                level: Level::Info,
                text: n.clone(),
            })
            .collect(),
        notes: vec![format!(
            "decode tokens {}: first {} skipped, {analysed} analysed",
            s.capture.decode_steps, s.skip_applied
        )],
        tables,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::{SynthKernels, SynthOptions, SynthSubmit, synthetic_trace};

    fn pair() -> Diff {
        let a = synthetic_trace(&SynthOptions {
            layers: 2,
            decode_tokens: 24,
            submit: SynthSubmit::PerDispatch,
            ..SynthOptions::default()
        });
        let b = synthetic_trace(&SynthOptions {
            layers: 2,
            decode_tokens: 24,
            kernels: SynthKernels::Fused,
            submit: SynthSubmit::PerToken,
            ..SynthOptions::default()
        });
        profiler::compute_diff(&a, "a.json", &b, "b.json", &Default::default())
    }

    #[test]
    fn the_diff_tables_carry_the_profiler_numbers() {
        let d = pair();
        let s = summarize_diff(&d);
        let decode = d.phase(Phase::Decode).expect("decode phase");
        let submits = decode.counter("submits").expect("submits");
        let table = s
            .tables
            .iter()
            .find(|t| t.title.starts_with("decode counters"))
            .expect("decode counter table");
        let row = table
            .rows
            .iter()
            .find(|r| r.cells[0] == "submits")
            .expect("submits row");
        assert_eq!(row.cells[1], fmt_value(submits.a.median));
        assert_eq!(row.cells[2], fmt_value(submits.b.median));
        assert_eq!(row.cells[3], fmt_signed(submits.delta));
        // Fused submits once per token instead of once per dispatch: fewer is better, and exact.
        assert!(submits.delta < 0.0);
        assert_eq!(row.tone, Tone::Better);
        assert!(row.significant);
        // The rendered profiler report has the same cells.
        let text = profiler::render_diff(&d, None, profiler::Format::Human);
        for cell in &row.cells[1..5] {
            assert!(text.contains(cell.as_str()), "{cell} not in\n{text}");
        }
        // B against A reads the right way round: fewer submits are better.
        assert_eq!(table.columns[5], "B vs A");
        assert!(table.toned.contains(&5));
        assert!(row.cells[5].ends_with("x better"), "{:?}", row.cells);
        assert!(text.contains(row.cells[5].as_str()), "{text}");
        // Timings carry their unit, and the same cells as the profiler's report.
        let timings = s
            .tables
            .iter()
            .find(|t| t.title.starts_with("decode timings"))
            .expect("decode timing table");
        let wall = decode.timing("wall_us").expect("wall_us");
        let wall_row = timings
            .rows
            .iter()
            .find(|r| r.cells[0] == "wall_us")
            .expect("wall row");
        assert_eq!(wall_row.cells[1], fmt_us(wall.a.median));
        assert!(
            wall_row.cells[1].ends_with(" µs") || wall_row.cells[1].ends_with(" ms"),
            "{:?}",
            wall_row.cells
        );
        assert_eq!(timings.columns[5], "B vs A");
        for cell in &wall_row.cells[1..9] {
            assert!(text.contains(cell.as_str()), "{cell} not in\n{text}");
        }
        // Tables in the profiler's order: decode first.
        assert!(s.tables[0].title.starts_with("decode counters"));
        assert!(s.tables.iter().any(|t| t.title.starts_with("ops: decode")));
    }

    #[test]
    fn knobs_are_information_and_other_mismatches_warnings() {
        let mut d = pair();
        assert!(d.comparability.iter().all(|m| is_knob_field(&m.field)));
        let s = summarize_diff(&d);
        assert!(s.warnings.iter().all(|w| w.level == Level::Info));
        assert!(
            s.warnings
                .iter()
                .any(|w| w.text.contains("submit every-dispatch -> per-token")),
            "{:?}",
            s.warnings
        );
        d.comparability.push(profiler::Mismatch {
            field: "model.name".into(),
            a: "tiny".into(),
            b: "smollm2".into(),
            ignored: false,
        });
        d.tokens.first_difference = Some(3);
        let s = summarize_diff(&d);
        let loud: Vec<&Warning> = s
            .warnings
            .iter()
            .filter(|w| w.level == Level::Warning)
            .collect();
        assert_eq!(loud.len(), 2, "{loud:?}");
        assert!(
            loud[0]
                .text
                .contains("model.name differs: A tiny, B smollm2")
        );
        assert!(loud[1].text.contains("DIFFER from index 3"));
    }

    #[test]
    fn timing_tones_follow_the_interval() {
        let d = pair();
        let s = summarize_diff(&d);
        let decode = d.phase(Phase::Decode).expect("decode");
        let t = s
            .tables
            .iter()
            .find(|t| t.title.starts_with("decode timings"))
            .expect("timings");
        for m in &decode.timings {
            let row = t.rows.iter().find(|r| r.cells[0] == m.name).expect("row");
            assert_eq!(
                row.significant,
                m.ci.is_some_and(|c| c.low > 0.0 || c.high < 0.0)
            );
            if row.significant {
                assert_eq!(row.tone == Tone::Better, m.delta < 0.0);
            }
        }
        assert_eq!(tone_of(Change::Same), Tone::Neutral);
        assert_eq!(tone_of(Change::Increase), Tone::Worse);
    }

    #[test]
    fn one_trace_gives_the_stats_tables() {
        let a = synthetic_trace(&SynthOptions {
            layers: 1,
            decode_tokens: 6,
            ..SynthOptions::default()
        });
        let st = profiler::compute_stats(&a, "a.json", &Default::default());
        let s = summarize_stats(&st, "A");
        assert_eq!(s.captures.len(), 1);
        assert!(
            s.tables[0]
                .title
                .starts_with("decode: per step over 4 steps")
        );
        let wall = s.tables[0]
            .rows
            .iter()
            .find(|r| r.cells[0] == "wall_us")
            .expect("wall row");
        let m = st
            .decode
            .as_ref()
            .and_then(|d| d.metric("wall_us"))
            .expect("wall");
        assert_eq!(wall.cells[3], fmt_us(m.summary.median));
        assert_eq!(wall.cells[1], "time");
    }
}
