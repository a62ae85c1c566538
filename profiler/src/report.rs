//! Rendering of statistics, diffs and gate results: aligned text tables for people, Markdown for a
//! CI job summary, JSON for machines (the serde form of the result types).

use std::fmt::Write as _;

use serde::Serialize;

use crate::diff::{Change, Diff, LabelOverlap, OpDiff, PerToken, PhaseDiff};
use crate::gates::{GateReport, Status};
use crate::speedup::{Better, fmt_speedup};
use crate::stats::{CaptureInfo, OpRow, PhaseStats, Statistic, TraceStats};
use crate::trace::Phase;
use crate::units::{fmt_signed_us, fmt_us};

/// Output format of `stats` and `diff`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text tables.
    #[default]
    Human,
    /// GitHub-flavoured Markdown (for a CI job summary).
    Markdown,
    /// The result structures as JSON.
    Json,
}

/// A value as shown in tables: integers exactly, others with precision by magnitude.
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "n/a".to_owned()
        } else if v > 0.0 {
            "inf".to_owned()
        } else {
            "-inf".to_owned()
        };
    }
    let a = v.abs();
    if v.fract() == 0.0 && a < 1e15 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// A share in 0..=1 as a percentage.
pub fn fmt_pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// A relative change as a signed percentage, `-` when there is none.
pub fn fmt_rel(rel: Option<f64>) -> String {
    match rel {
        Some(r) => {
            let s = format!("{:.1}%", r * 100.0);
            if r > 0.0 { format!("+{s}") } else { s }
        }
        None => "-".to_owned(),
    }
}

/// `+1.50`, `-3`, `0`.
pub fn fmt_signed(v: f64) -> String {
    if v > 0.0 {
        format!("+{}", fmt_value(v))
    } else {
        fmt_value(v)
    }
}

/// Bytes in B, kB, MB or GB (powers of 10).
pub fn fmt_bytes(b: f64) -> String {
    let a = b.abs();
    if a >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// A table rendered as aligned text or Markdown.
struct Table {
    header: Vec<String>,
    /// Right-align this column (numbers).
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(cols: &[(&str, bool)]) -> Table {
        Table {
            header: cols.iter().map(|c| c.0.to_owned()).collect(),
            right: cols.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn text(&self, out: &mut String) {
        let n = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut String| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = width[i].saturating_sub(c.chars().count());
                if self.right[i] {
                    s.extend(std::iter::repeat_n(' ', pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if i + 1 < n {
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out.push_str("  ");
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&self.header, out);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, out);
        for r in &self.rows {
            line(r, out);
        }
    }

    fn markdown(&self, out: &mut String) {
        let esc = |s: &str| s.replace('|', "\\|");
        out.push('|');
        for h in &self.header {
            let _ = write!(out, " {} |", esc(h));
        }
        out.push_str("\n|");
        for r in &self.right {
            out.push_str(if *r { "---:|" } else { "---|" });
        }
        out.push('\n');
        for row in &self.rows {
            out.push('|');
            for c in row {
                let _ = write!(out, " {} |", esc(c));
            }
            out.push('\n');
        }
    }

    fn render(&self, format: Format, out: &mut String) {
        match format {
            Format::Markdown => self.markdown(out),
            _ => self.text(out),
        }
    }
}

fn heading(format: Format, title: &str, out: &mut String) {
    match format {
        Format::Markdown => {
            let _ = write!(out, "\n#### {title}\n\n");
        }
        _ => {
            let _ = write!(out, "\n{title}\n");
        }
    }
}

fn para(format: Format, text: &str, out: &mut String) {
    match format {
        Format::Markdown => {
            let _ = writeln!(out, "{text}  ");
        }
        _ => {
            let _ = writeln!(out, "  {text}");
        }
    }
}

fn to_json<T: Serialize>(v: &T) -> String {
    match serde_json::to_string_pretty(v) {
        Ok(s) => s + "\n",
        // Serializing plain data structs cannot fail; keep the output valid JSON if it ever does.
        Err(e) => format!("{{\"error\": {:?}}}\n", e.to_string()),
    }
}

fn capture_lines(c: &CaptureInfo, format: Format, out: &mut String) {
    para(
        format,
        &format!(
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
        out,
    );
    para(format, &format!("mode {}: {}", c.mode, c.knobs), out);
    para(
        format,
        &format!(
            "kv {} · timestamps {} · GPU clock {}",
            c.kv_layout, c.timestamps, c.clock
        ),
        out,
    );
}

fn phase_title(p: Phase) -> &'static str {
    match p {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    }
}

/// The unit column of a metric (`count`, `bytes`); `time` for a time, whose cells carry their
/// own unit.
pub fn unit_cell(unit: &str) -> String {
    if unit == "us" {
        "time".to_owned()
    } else {
        unit.to_owned()
    }
}

/// A value of a metric in `unit`: a time in the unit that suits it (`1.23 ms`), else a number.
pub fn fmt_metric(v: f64, unit: &str) -> String {
    if unit == "us" {
        fmt_us(v)
    } else {
        fmt_value(v)
    }
}

fn metric_table(p: &PhaseStats, format: Format, out: &mut String) {
    if p.steps == 1 {
        let mut t = Table::new(&[("metric", false), ("unit", false), ("value", true)]);
        for m in &p.metrics {
            t.row(vec![
                m.name.clone(),
                unit_cell(&m.unit),
                fmt_metric(m.summary.median, &m.unit),
            ]);
        }
        t.render(format, out);
        return;
    }
    let mut cols: Vec<(&str, bool)> = vec![("metric", false), ("unit", false)];
    for s in Statistic::ALL {
        cols.push((
            match s {
                Statistic::StdDev => "std dev",
                Statistic::Cv => "cv",
                other => other.name(),
            },
            true,
        ));
    }
    let mut t = Table::new(&cols);
    for m in &p.metrics {
        let mut row = vec![m.name.clone(), unit_cell(&m.unit)];
        for s in Statistic::ALL {
            let v = m.summary.get(s);
            row.push(if s == Statistic::Cv {
                fmt_pct(v)
            } else {
                fmt_metric(v, &m.unit)
            });
        }
        t.row(row);
    }
    t.render(format, out);
}

/// What the rows of an op table stand for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rows {
    Ops,
    Regions,
    Kinds,
}

fn op_table(rows: &[OpRow], of: Rows, format: Format, out: &mut String) {
    let mut cols = vec![("label", false), ("kind", false)];
    if of == Rows::Kinds {
        // A kind row's label is its kind.
        cols.remove(0);
    }
    cols.extend([
        (
            if of == Rows::Regions {
                "spans/token"
            } else {
                "dispatches/token"
            },
            true,
        ),
        ("GPU time/token (median)", true),
        ("share of GPU time", true),
        ("bytes/token", true),
        ("GB/s", true),
        ("of bandwidth", true),
    ]);
    let mut t = Table::new(&cols);
    for r in rows {
        let mut cells = vec![r.label.clone(), r.kind.clone()];
        if of == Rows::Kinds {
            cells.remove(0);
        }
        cells.extend([
            fmt_value(r.dispatches_per_token),
            fmt_us(r.gpu_us_median),
            fmt_pct(r.gpu_share),
            if r.bytes_per_token > 0.0 {
                fmt_bytes(r.bytes_per_token)
            } else {
                "-".to_owned()
            },
            r.achieved_gbps.map_or("-".to_owned(), fmt_value),
            r.bandwidth_share.map_or("-".to_owned(), fmt_pct),
        ]);
        t.row(cells);
    }
    t.render(format, out);
}

/// Renders the statistics of one trace.
pub fn render_stats(s: &TraceStats, format: Format) -> String {
    if format == Format::Json {
        return to_json(s);
    }
    let mut out = String::new();
    match format {
        Format::Markdown => {
            let _ = writeln!(out, "### Trace statistics: `{}`\n", s.capture.source);
        }
        _ => {
            let _ = writeln!(out, "stats of {}", s.capture.source);
        }
    }
    capture_lines(&s.capture, format, &mut out);
    let analysed = s.decode.as_ref().map_or(0, |d| d.steps);
    para(
        format,
        &format!(
            "decode tokens {}: first {} skipped, {analysed} analysed",
            s.capture.decode_steps, s.skip_applied
        ),
        &mut out,
    );
    if let Some(u) = &s.untimed {
        para(format, &format!("untimed: {}", u.sentence()), &mut out);
    }
    for n in &s.notes {
        para(format, &format!("note: {n}"), &mut out);
    }
    for p in [s.decode.as_ref(), s.prefill.as_ref()]
        .into_iter()
        .flatten()
    {
        let title = if p.steps == 1 {
            format!("{}: 1 step, {} tokens", phase_title(p.phase), p.tokens)
        } else {
            format!("{}: per step over {} steps", phase_title(p.phase), p.steps)
        };
        heading(format, &title, &mut out);
        metric_table(p, format, &mut out);
    }
    if !s.ops.is_empty() {
        heading(
            format,
            &format!(
                "ops: decode, per token{}",
                if s.folded_labels {
                    " (numeric label parts folded into *)"
                } else {
                    ""
                }
            ),
            &mut out,
        );
        op_table(&s.ops, Rows::Ops, format, &mut out);
        if s.memory_bandwidth_gbps.is_none() {
            para(
                format,
                "the trace records no device bandwidth, so no share of it is shown",
                &mut out,
            );
        }
    }
    if !s.kinds.is_empty() {
        heading(format, "op kinds: decode, per token", &mut out);
        op_table(&s.kinds, Rows::Kinds, format, &mut out);
    }
    if !s.regions.is_empty() {
        heading(format, "regions: decode, per token", &mut out);
        op_table(&s.regions, Rows::Regions, format, &mut out);
    }
    out
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

fn change_text(c: Change, counter: bool) -> &'static str {
    match (c, counter) {
        (Change::Same, true) => "same",
        (Change::Same, false) => "~ no significant change",
        (Change::Increase, _) => "increase",
        (Change::Decrease, _) => "decrease",
        (Change::Unavailable, true) => "n/a",
        (Change::Unavailable, false) => "n/a (too few samples)",
    }
}

fn phase_diff_tables(p: &PhaseDiff, d: &Diff, format: Format, out: &mut String) {
    let name = phase_title(p.phase);
    heading(
        format,
        &format!(
            "{name} counters (median per step; A {}, B {})",
            plural(p.a_steps, "step"),
            plural(p.b_steps, "step")
        ),
        out,
    );
    let mut t = Table::new(&[
        ("counter", false),
        ("A", true),
        ("B", true),
        ("delta", true),
        ("delta %", true),
        ("B vs A", true),
        ("change", false),
        ("per token", false),
    ]);
    for c in &p.counters {
        t.row(vec![
            c.name.clone(),
            fmt_value(c.a.median),
            fmt_value(c.b.median),
            fmt_signed(c.delta),
            fmt_rel(c.rel),
            median_speedup(c.a.n, c.a.median, c.b.n, c.b.median, &c.name),
            change_text(c.change, true).to_owned(),
            per_token_text(&c.per_token),
        ]);
    }
    t.render(format, out);
    if p.timings.is_empty() {
        return;
    }
    heading(
        format,
        &format!(
            "{name} timings (median per step; {:.0}% bootstrap CI of B - A, {} resamples)",
            d.confidence * 100.0,
            d.resamples
        ),
        out,
    );
    let mut t = Table::new(&[
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
    ]);
    for m in &p.timings {
        t.row(vec![
            m.name.clone(),
            fmt_us(m.a.median),
            fmt_us(m.b.median),
            fmt_signed_us(m.delta),
            fmt_rel(m.rel),
            median_speedup(m.a.n, m.a.median, m.b.n, m.b.median, &m.name),
            fmt_ci_us(m.ci),
            fmt_us(m.a.p90),
            fmt_us(m.b.p90),
            change_text(m.change, false).to_owned(),
        ]);
    }
    t.render(format, out);
}

/// A bootstrap interval of a difference in µs: `[-274.3 µs, -259.7 µs]`, `-` without one.
pub fn fmt_ci_us(ci: Option<crate::bootstrap::MedianDiffCi>) -> String {
    ci.map_or("-".to_owned(), |c| {
        format!("[{}, {}]", fmt_signed_us(c.low), fmt_signed_us(c.high))
    })
}

/// The "B vs A" cell of a metric's medians (`-` when a side has no samples), oriented by the
/// metric's direction.
pub fn median_speedup(a_n: usize, a: f64, b_n: usize, b: f64, metric: &str) -> String {
    fmt_speedup(
        (a_n > 0).then_some(a),
        (b_n > 0).then_some(b),
        Better::of_metric(metric),
    )
}

/// The "B vs A" cell of an op's median GPU time per token.
pub fn op_speedup(o: &OpDiff) -> String {
    fmt_speedup(
        o.a.as_ref().map(|r| r.gpu_us_median),
        o.b.as_ref().map(|r| r.gpu_us_median),
        Better::Lower,
    )
}

fn op_diff_table(rows: &[OpDiff], of: Rows, format: Format, out: &mut String) {
    let mut cols = vec![("label", false), ("kind", false)];
    if of == Rows::Kinds {
        cols.remove(0);
    }
    cols.extend([
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
    ]);
    let mut t = Table::new(&cols);
    let opt =
        |r: &Option<OpRow>, f: &dyn Fn(&OpRow) -> String| r.as_ref().map_or("-".to_owned(), f);
    for o in rows {
        let delta = match (&o.a, &o.b) {
            (Some(a), Some(b)) => fmt_signed_us(b.gpu_us_median - a.gpu_us_median),
            _ => "-".to_owned(),
        };
        let verdict = match (&o.a, &o.b) {
            (Some(_), None) => "only in A",
            (None, Some(_)) => "only in B",
            _ => change_text(o.change, false),
        };
        let gbps = |r: &OpRow| r.achieved_gbps.map_or("-".to_owned(), fmt_value);
        let mut cells = vec![o.label.clone(), o.kind.clone()];
        if of == Rows::Kinds {
            cells.remove(0);
        }
        cells.extend([
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
        ]);
        t.row(cells);
    }
    t.render(format, out);
}

/// The by-kind table of a diff, with what the labels' overlap says about it.
fn kind_diff_section(d: &Diff, format: Format, out: &mut String) {
    heading(
        format,
        "op kinds: decode, GPU time per token (median), every dispatch of a kind summed",
        out,
    );
    op_diff_table(&d.kinds, Rows::Kinds, format, out);
}

/// The sentence on labels of A and B that do not line up.
fn overlap_sentence(o: &LabelOverlap) -> String {
    let what = if o.weight == "gpu_time" {
        "GPU time"
    } else {
        "dispatches"
    };
    format!(
        "op labels do not line up (only {} of A's {what} and {} of B's is in labels both have): \
         ops are compared by kind first",
        fmt_pct(o.a_shared),
        fmt_pct(o.b_shared)
    )
}

fn gate_table(g: &GateReport, format: Format, out: &mut String) {
    heading(
        format,
        &format!(
            "gates: {} passed, {} warned, {} failed",
            g.count(Status::Pass),
            g.count(Status::Warn),
            g.count(Status::Fail)
        ),
        out,
    );
    let mut t = Table::new(&[
        ("status", false),
        ("gate", false),
        ("metric", false),
        ("statistic", false),
        ("A", true),
        ("B", true),
        ("rule", false),
        ("details", false),
    ]);
    for r in &g.results {
        let status = match (r.status, format) {
            (Status::Pass, _) => "PASS",
            (Status::Warn, _) => "WARN",
            (Status::Fail, _) => "FAIL",
        };
        t.row(vec![
            status.to_owned(),
            r.name.clone(),
            match &r.op {
                Some(op) => format!("{op}: {}", r.metric),
                None => r.metric.clone(),
            },
            format!("{} {}", r.statistic, r.phase).trim().to_owned(),
            r.a.map_or("-".to_owned(), fmt_value),
            r.b.map_or("-".to_owned(), fmt_value),
            r.rule.clone(),
            r.message.clone(),
        ]);
    }
    t.render(format, out);
}

/// What `profiler diff --format json` prints.
#[derive(Serialize)]
struct DiffJson<'a> {
    diff: &'a Diff,
    gates: Option<&'a GateReport>,
}

/// Renders a diff and, when given, the gate results.
pub fn render_diff(d: &Diff, gates: Option<&GateReport>, format: Format) -> String {
    if format == Format::Json {
        return to_json(&DiffJson { diff: d, gates });
    }
    let mut out = String::new();
    match format {
        Format::Markdown => {
            let _ = writeln!(
                out,
                "### Trace diff: A `{}` vs B `{}`\n",
                d.a.source, d.b.source
            );
        }
        _ => {
            let _ = writeln!(out, "diff A {} vs B {}", d.a.source, d.b.source);
        }
    }
    para(format, "A:", &mut out);
    capture_lines(&d.a, format, &mut out);
    para(format, "B:", &mut out);
    capture_lines(&d.b, format, &mut out);
    para(
        format,
        &format!(
            "decode tokens: A {} (first {} skipped), B {} (first {} skipped)",
            d.a.decode_steps, d.skip_a, d.b.decode_steps, d.skip_b
        ),
        &mut out,
    );
    let t = &d.tokens;
    para(
        format,
        &match t.first_difference {
            _ if (t.a_count == 0) != (t.b_count == 0) => format!(
                "generated tokens: not compared (A {} ids, B {} ids: a capture of a foreign \
                 program records none)",
                t.a_count, t.b_count
            ),
            None => format!("generated tokens: identical ({} ids)", t.a_count),
            Some(i) => format!(
                "generated tokens: DIFFER from index {i} (A {} ids, B {} ids)",
                t.a_count, t.b_count
            ),
        },
        &mut out,
    );
    for (side, u) in [("A", &d.a_untimed), ("B", &d.b_untimed)] {
        if let Some(u) = u {
            para(
                format,
                &format!("untimed in {side}: {}", u.sentence()),
                &mut out,
            );
        }
    }
    if let Some(o) = d.label_overlap.as_ref().filter(|o| !o.lines_up()) {
        para(format, &overlap_sentence(o), &mut out);
    }
    if d.comparability.is_empty() {
        para(
            format,
            "comparability: every identity field matches",
            &mut out,
        );
    } else {
        heading(
            format,
            &format!(
                "comparability: {} field(s) differ ({} expected via --ignore); --strict makes the others an error",
                d.comparability.len(),
                d.comparability.iter().filter(|m| m.ignored).count()
            ),
            &mut out,
        );
        let mut tb = Table::new(&[("field", false), ("A", false), ("B", false), ("", false)]);
        for m in &d.comparability {
            tb.row(vec![
                m.field.clone(),
                m.a.clone(),
                m.b.clone(),
                if m.ignored { "expected" } else { "WARNING" }.to_owned(),
            ]);
        }
        tb.render(format, &mut out);
    }
    for p in d.phases.iter().rev() {
        phase_diff_tables(p, d, format, &mut out);
    }
    // By kind first where the labels do not line up; after the labels where both sides have
    // kinds (a cheap second view).
    let kinds_first = !d.labels_line_up() && !d.kinds.is_empty();
    if kinds_first {
        kind_diff_section(d, format, &mut out);
    }
    if !d.ops.is_empty() {
        heading(
            format,
            &format!(
                "ops: decode, GPU time per token (median){}",
                if d.folded_labels {
                    ", numeric label parts folded into *"
                } else {
                    ""
                }
            ),
            &mut out,
        );
        op_diff_table(&d.ops, Rows::Ops, format, &mut out);
    }
    if !kinds_first && d.both_have_kinds() {
        kind_diff_section(d, format, &mut out);
    }
    if !d.regions.is_empty() {
        heading(
            format,
            "regions: decode, GPU time per token (median)",
            &mut out,
        );
        op_diff_table(&d.regions, Rows::Regions, format, &mut out);
    }
    if let Some(g) = gates {
        gate_table(g, format, &mut out);
        for r in g.results.iter().filter(|r| r.status == Status::Fail) {
            para(
                format,
                &format!(
                    "FAILED gate \"{}\": {} {} {}: A {} B {}, required {}; {}",
                    r.name,
                    r.metric,
                    r.statistic,
                    r.phase,
                    r.a.map_or("-".to_owned(), fmt_value),
                    r.b.map_or("-".to_owned(), fmt_value),
                    r.rule,
                    r.message
                ),
                &mut out,
            );
        }
    }
    out
}
