//! CI gates: rules over a [`Diff`] read from a TOML file.
//!
//! ```toml
//! [[gate]]
//! name = "no extra submits"      # optional; defaults to a description of the rule
//! metric = "submits"             # a counter, host_enqueue_us, host_wait_us, gpu_us, wall_us,
//!                                # gpu_gap_us, tokens_identical, counters_identical or comparable
//! statistic = "median"           # min, median (default), mean, p90, p99, max, std_dev, cv
//! phase = "decode"               # decode (default) or prefill
//! direction = "no-increase"      # see below
//! abs = 0                        # threshold in the metric's unit ...
//! # rel = 0.05                   # ... or relative to A (0.05 = 5 %)
//! severity = "fail"              # fail (default) or warn
//! ```
//!
//! Directions compare B (the candidate) with A (the baseline) unless noted:
//! - `no-increase`: `B <= A + t`, `no-decrease`: `B >= A - t`, `equal`: `|B - A| <= t`, where the
//!   allowance `t` is `abs`, or `rel * |A|`, or 0. For a timing with the median statistic the
//!   change judged is the most favourable end of the bootstrap interval of `B - A` (its lower
//!   bound for `no-increase`, its upper bound for `no-decrease`, zero for `equal` when the interval
//!   contains zero; `use_ci = true`, the default), so a change within noise never fails a gate. `equal` with `per_token = true` on a counter requires every analysed token
//!   to match.
//! - `decrease` / `increase`: B must be lower / higher than A by at least `abs`, `rel * |A|`, or a
//!   factor (`ratio_at_least = 10`: `A / B >= 10` for `decrease`, `B / A >= 10` for `increase`).
//!   Point estimates, no interval.
//! - `max` / `min`: the value of one capture (`capture = "b"`, the default, `"a"` or `"both"`) is
//!   at most / at least `limit`.
//!
//! Boolean metrics (`tokens_identical`, `counters_identical`, `comparable`) take no direction and
//! pass when true. With `op = "LABEL"` a gate reads the per-op table (decode only): metric
//! `gpu_us` (median or mean), `dispatches_per_token`, `gpu_share`, `achieved_gbps`.
//! A metric that a capture lacks (GPU time with timestamps off, an op that one side never ran)
//! fails the gate at its severity. Unknown keys are errors that name the key.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::diff::{Diff, PerToken};
use crate::stats::{Statistic, TIME_METRICS};
use crate::trace::{Counters, Phase};

/// A gate file that cannot be read or is wrong.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("cannot read gate file {path}: {err}")]
    Read {
        path: String,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
    #[error("gate file {path} is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("gate file {path}, gate {index} ({name}): {message}")]
    Invalid {
        path: String,
        /// 1-based position of the gate in the file.
        index: usize,
        name: String,
        message: String,
    },
}

/// The rule's comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    NoIncrease,
    NoDecrease,
    Equal,
    Decrease,
    Increase,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warn,
    #[default]
    Fail,
}

/// Which capture a `max`/`min` rule reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capture {
    A,
    #[default]
    B,
    Both,
}

/// One `[[gate]]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub name: Option<String>,
    pub metric: String,
    pub op: Option<String>,
    pub statistic: Option<Statistic>,
    pub phase: Option<Phase>,
    pub direction: Option<Direction>,
    pub abs: Option<f64>,
    pub rel: Option<f64>,
    pub ratio_at_least: Option<f64>,
    pub limit: Option<f64>,
    pub capture: Option<Capture>,
    pub per_token: Option<bool>,
    pub use_ci: Option<bool>,
    #[serde(default)]
    pub severity: Severity,
}

/// A parsed and checked gate file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateFile {
    #[serde(rename = "gate", default)]
    pub gates: Vec<Gate>,
}

const BOOLEAN_METRICS: [&str; 3] = ["tokens_identical", "counters_identical", "comparable"];
const OP_METRICS: [&str; 4] = [
    "gpu_us",
    "dispatches_per_token",
    "gpu_share",
    "achieved_gbps",
];

impl Gate {
    /// The name shown in reports.
    pub fn display_name(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        let mut s = match &self.op {
            Some(op) => format!("op {op} {}", self.metric),
            None => self.metric.clone(),
        };
        if let Some(d) = self.direction {
            s.push(' ');
            s.push_str(direction_name(d));
        }
        s
    }

    fn statistic(&self) -> Statistic {
        self.statistic.unwrap_or(Statistic::Median)
    }

    fn phase(&self) -> Phase {
        self.phase.unwrap_or(Phase::Decode)
    }

    fn check(&self) -> Result<(), String> {
        let boolean = BOOLEAN_METRICS.contains(&self.metric.as_str());
        let timing = TIME_METRICS.contains(&self.metric.as_str());
        let counter = Counters::NAMES.contains(&self.metric.as_str());
        fn set(v: bool, key: &'static str) -> Vec<&'static str> {
            if v { vec![key] } else { vec![] }
        }
        let thresholds: Vec<&str> = [
            set(self.abs.is_some(), "abs"),
            set(self.rel.is_some(), "rel"),
            set(self.ratio_at_least.is_some(), "ratio_at_least"),
            set(self.limit.is_some(), "limit"),
        ]
        .concat();
        if let Some(op) = &self.op {
            if !OP_METRICS.contains(&self.metric.as_str()) {
                return Err(format!(
                    "metric `{}` is not an op metric; with `op = \"{op}\"` use one of {}",
                    self.metric,
                    OP_METRICS.join(", ")
                ));
            }
            if self.phase == Some(Phase::Prefill) {
                return Err("op gates read the decode op table; remove `phase`".to_owned());
            }
            match (self.metric.as_str(), self.statistic) {
                ("gpu_us", None | Some(Statistic::Median | Statistic::Mean)) => {}
                ("gpu_us", Some(s)) => {
                    return Err(format!(
                        "op gpu_us has only the median and mean statistics, not `{}`",
                        s.name()
                    ));
                }
                (m, Some(_)) => {
                    return Err(format!(
                        "op metric `{m}` has no statistic; remove `statistic`"
                    ));
                }
                _ => {}
            }
        } else if !(boolean || timing || counter) {
            return Err(format!(
                "unknown metric `{}`; use a counter ({}), a time ({}) or {}",
                self.metric,
                Counters::NAMES.join(", "),
                TIME_METRICS.join(", "),
                BOOLEAN_METRICS.join(", ")
            ));
        }
        if boolean {
            let extra: Vec<&str> = [
                set(self.direction.is_some(), "direction"),
                set(self.statistic.is_some(), "statistic"),
                set(self.phase.is_some(), "phase"),
                set(self.capture.is_some(), "capture"),
                set(self.per_token.is_some(), "per_token"),
                set(self.use_ci.is_some(), "use_ci"),
                thresholds.clone(),
            ]
            .concat();
            if !extra.is_empty() {
                return Err(format!(
                    "`{}` is true or false and takes no {}",
                    self.metric,
                    extra.join(", ")
                ));
            }
            return Ok(());
        }
        let Some(direction) = self.direction else {
            return Err(
                "missing `direction` (no-increase, no-decrease, equal, decrease, increase, max, min)"
                    .to_owned(),
            );
        };
        let allowed: &[&str] = match direction {
            Direction::NoIncrease | Direction::NoDecrease | Direction::Equal => &["abs", "rel"],
            Direction::Decrease | Direction::Increase => &["abs", "rel", "ratio_at_least"],
            Direction::Max | Direction::Min => &["limit"],
        };
        if let Some(bad) = thresholds.iter().find(|t| !allowed.contains(t)) {
            return Err(format!(
                "direction `{}` takes {}, not `{bad}`",
                direction_name(direction),
                allowed.join(" or ")
            ));
        }
        if thresholds.len() > 1 {
            return Err(format!(
                "give one threshold, not {}",
                thresholds.join(" and ")
            ));
        }
        if matches!(direction, Direction::Decrease | Direction::Increase) && thresholds.is_empty() {
            return Err(format!(
                "direction `{}` needs `abs`, `rel` or `ratio_at_least`",
                direction_name(direction)
            ));
        }
        if matches!(direction, Direction::Max | Direction::Min) && thresholds.is_empty() {
            return Err(format!(
                "direction `{}` needs `limit`",
                direction_name(direction)
            ));
        }
        if self.capture.is_some() && !matches!(direction, Direction::Max | Direction::Min) {
            return Err("`capture` applies only to the max and min directions".to_owned());
        }
        if self.per_token.is_some() && (direction != Direction::Equal || !counter) {
            return Err(
                "`per_token` applies only to `direction = \"equal\"` on a counter".to_owned(),
            );
        }
        if self.use_ci.is_some() && !timing {
            return Err("`use_ci` applies only to timing metrics".to_owned());
        }
        for (key, v) in [
            ("abs", self.abs),
            ("rel", self.rel),
            ("ratio_at_least", self.ratio_at_least),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!("`{key}` must be a finite number >= 0, not {v}"));
            }
        }
        if let Some(r) = self.ratio_at_least
            && r <= 0.0
        {
            return Err("`ratio_at_least` must be greater than 0".to_owned());
        }
        if let Some(l) = self.limit
            && !l.is_finite()
        {
            return Err(format!("`limit` must be a finite number, not {l}"));
        }
        Ok(())
    }
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::NoIncrease => "no-increase",
        Direction::NoDecrease => "no-decrease",
        Direction::Equal => "equal",
        Direction::Decrease => "decrease",
        Direction::Increase => "increase",
        Direction::Max => "max",
        Direction::Min => "min",
    }
}

/// Parses and checks gate rules from TOML text; `source` names the file in errors.
pub fn parse_gates(text: &str, source: &str) -> Result<GateFile, GateError> {
    let file: GateFile = toml::from_str(text).map_err(|e| GateError::Parse {
        path: source.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    if file.gates.is_empty() {
        return Err(GateError::Parse {
            path: source.to_owned(),
            message: "no `[[gate]]` tables; see profiler/gates.example.toml".to_owned(),
        });
    }
    for (i, g) in file.gates.iter().enumerate() {
        g.check().map_err(|message| GateError::Invalid {
            path: source.to_owned(),
            index: i + 1,
            name: g.display_name(),
            message,
        })?;
    }
    Ok(file)
}

/// Reads and checks a gate file.
pub fn load_gates(path: &Path) -> Result<GateFile, GateError> {
    let source = path.display().to_string();
    let bytes = crate::io::read_regular_file(path).map_err(|err| GateError::Read {
        path: source.clone(),
        err,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| GateError::Parse {
        path: source.clone(),
        message: "it is not UTF-8 text; a gate file is TOML".to_owned(),
    })?;
    parse_gates(&text, &source)
}

/// The outcome of one gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

/// One gate evaluated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub name: String,
    pub metric: String,
    pub op: Option<String>,
    /// Statistic and phase, e.g. `median decode`; empty for boolean metrics.
    pub statistic: String,
    pub phase: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// The condition, e.g. `B <= A + 0`.
    pub rule: String,
    pub status: Status,
    /// Why it passed or failed, one sentence.
    pub message: String,
}

/// Every gate of a file evaluated against one diff.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    pub results: Vec<GateResult>,
}

impl GateReport {
    /// True when a gate with severity `fail` failed.
    pub fn failed(&self) -> bool {
        self.results.iter().any(|r| r.status == Status::Fail)
    }
    pub fn count(&self, status: Status) -> usize {
        self.results.iter().filter(|r| r.status == status).count()
    }
}

enum Value {
    Num(f64),
    Missing(String),
}

fn side_value(diff: &Diff, g: &Gate, b_side: bool) -> Value {
    let who = if b_side { "B" } else { "A" };
    let stat = g.statistic();
    if let Some(label) = &g.op {
        let found = diff
            .ops
            .iter()
            .chain(&diff.regions)
            .find(|o| &o.label == label);
        let row = found.and_then(|o| if b_side { o.b.as_ref() } else { o.a.as_ref() });
        let Some(row) = row else {
            return Value::Missing(format!("op `{label}` does not appear in {who}"));
        };
        return match g.metric.as_str() {
            "gpu_us" if stat == Statistic::Mean => Value::Num(row.gpu_us_mean),
            "gpu_us" => Value::Num(row.gpu_us_median),
            "dispatches_per_token" => Value::Num(row.dispatches_per_token),
            "gpu_share" => Value::Num(row.gpu_share),
            _ => match row.achieved_gbps {
                Some(v) => Value::Num(v),
                None => Value::Missing(format!("op `{label}` has no GB/s in {who}")),
            },
        };
    }
    let phase = g.phase();
    let Some(p) = diff.phase(phase) else {
        return Value::Missing(format!("no {phase:?} steps"));
    };
    let summary = if let Some(c) = p.counter(&g.metric) {
        c.b_or_a(b_side)
    } else if let Some(t) = p.timing(&g.metric) {
        if b_side { t.b } else { t.a }
    } else {
        return Value::Missing(format!(
            "`{}` was not recorded (timestamps `{}`)",
            g.metric,
            if b_side {
                &diff.b.timestamps
            } else {
                &diff.a.timestamps
            }
        ));
    };
    if summary.n == 0 {
        return Value::Missing(
            format!("{who} has no {phase:?} samples of `{}`", g.metric).to_lowercase(),
        );
    }
    Value::Num(summary.get(stat))
}

impl crate::diff::CounterDiff {
    fn b_or_a(&self, b_side: bool) -> crate::stats::Summary {
        if b_side { self.b } else { self.a }
    }
}

fn fmt(v: f64) -> String {
    crate::report::fmt_value(v)
}

/// Evaluates every gate of `file` against `diff`.
pub fn evaluate_gates(file: &GateFile, diff: &Diff) -> GateReport {
    GateReport {
        results: file.gates.iter().map(|g| evaluate(g, diff)).collect(),
    }
}

fn evaluate(g: &Gate, diff: &Diff) -> GateResult {
    let mut r = GateResult {
        name: g.display_name(),
        metric: g.metric.clone(),
        op: g.op.clone(),
        statistic: String::new(),
        phase: String::new(),
        a: None,
        b: None,
        rule: String::new(),
        status: Status::Pass,
        message: String::new(),
    };
    let verdict = |ok: bool| {
        if ok {
            Status::Pass
        } else if g.severity == Severity::Warn {
            Status::Warn
        } else {
            Status::Fail
        }
    };
    // Boolean metrics.
    match g.metric.as_str() {
        "tokens_identical" => {
            let t = &diff.tokens;
            r.rule = "generated token ids identical".to_owned();
            r.a = Some(t.a_count as f64);
            r.b = Some(t.b_count as f64);
            r.status = verdict(t.identical);
            r.message = match t.first_difference {
                None => format!("all {} token ids match", t.a_count),
                Some(i) => format!(
                    "token ids differ from index {i} (A has {}, B has {})",
                    t.a_count, t.b_count
                ),
            };
            return r;
        }
        "counters_identical" => {
            r.rule = "every counter identical on every token".to_owned();
            let ok = diff.counters_identical();
            r.status = verdict(ok);
            r.message = if ok {
                "every counter matches on every analysed token".to_owned()
            } else {
                let differing: Vec<String> = diff
                    .phases
                    .iter()
                    .flat_map(|p| {
                        p.counters
                            .iter()
                            .filter(|c| !matches!(c.per_token, PerToken::Identical))
                            .map(move |c| format!("{} ({})", c.name, phase_name(p.phase)))
                    })
                    .collect();
                format!("counters differ: {}", differing.join(", "))
            };
            return r;
        }
        "comparable" => {
            r.rule = "captures comparable".to_owned();
            let blocking: Vec<String> = diff
                .blocking_mismatches()
                .map(|m| format!("{}: {} vs {}", m.field, m.a, m.b))
                .collect();
            r.status = verdict(blocking.is_empty());
            r.message = if blocking.is_empty() {
                "identity fields match".to_owned()
            } else {
                format!("differ: {}", blocking.join("; "))
            };
            return r;
        }
        _ => {}
    }
    let stat = g.statistic();
    r.statistic = stat.name().to_owned();
    r.phase = if g.op.is_some() {
        "decode".to_owned()
    } else {
        phase_name(g.phase()).to_owned()
    };
    let Some(direction) = g.direction else {
        // `check` rejects this; keep evaluation total anyway.
        r.status = verdict(false);
        r.message = "no direction".to_owned();
        return r;
    };
    let a = side_value(diff, g, false);
    let b = side_value(diff, g, true);
    if let Value::Num(v) = a {
        r.a = Some(v);
    }
    if let Value::Num(v) = b {
        r.b = Some(v);
    }
    let what = format!("{} {}", r.statistic, g.metric);

    // Single-capture limits.
    if let Direction::Max | Direction::Min = direction {
        let limit = g.limit.unwrap_or(0.0);
        let cmp = if direction == Direction::Max {
            "<="
        } else {
            ">="
        };
        let capture = g.capture.unwrap_or_default();
        let sides: Vec<(&str, &Value)> = match capture {
            Capture::A => vec![("A", &a)],
            Capture::B => vec![("B", &b)],
            Capture::Both => vec![("A", &a), ("B", &b)],
        };
        r.rule = format!(
            "{} {cmp} {}",
            sides.iter().map(|s| s.0).collect::<Vec<_>>().join(", "),
            fmt(limit)
        );
        let mut problems = Vec::new();
        for (who, v) in sides {
            match v {
                Value::Missing(why) => problems.push(why.clone()),
                Value::Num(x) => {
                    let ok = if direction == Direction::Max {
                        *x <= limit
                    } else {
                        *x >= limit
                    };
                    if !ok {
                        problems.push(format!(
                            "{who} {what} is {} ({cmp} {} required)",
                            fmt(*x),
                            fmt(limit)
                        ));
                    }
                }
            }
        }
        r.status = verdict(problems.is_empty());
        r.message = if problems.is_empty() {
            format!("{what} within the limit")
        } else {
            problems.join("; ")
        };
        return r;
    }

    let (av, bv) = match (a, b) {
        (Value::Num(x), Value::Num(y)) => (x, y),
        (Value::Missing(why), _) | (_, Value::Missing(why)) => {
            r.rule = direction_name(direction).to_owned();
            r.status = verdict(false);
            r.message = format!("cannot evaluate: {why}");
            return r;
        }
    };
    let allowance = match (g.abs, g.rel) {
        (Some(x), _) => x,
        (_, Some(rel)) => rel * av.abs(),
        _ => 0.0,
    };
    let thr = match (g.abs, g.rel) {
        (Some(x), _) => fmt(x),
        (_, Some(rel)) => format!("{}% of A", fmt(rel * 100.0)),
        _ => "0".to_owned(),
    };
    // The change B - A that the gate judges: for timing medians the CI bound nearest zero.
    let timing = TIME_METRICS.contains(&g.metric.as_str()) && g.op.is_none();
    let ci = if timing && stat == Statistic::Median && g.use_ci.unwrap_or(true) {
        diff.phase(g.phase())
            .and_then(|p| p.timing(&g.metric))
            .and_then(|t| t.ci)
    } else if g.op.is_some()
        && g.metric == "gpu_us"
        && stat == Statistic::Median
        && g.use_ci.unwrap_or(true)
    {
        diff.ops
            .iter()
            .find(|o| Some(&o.label) == g.op.as_ref())
            .and_then(|o| o.ci)
    } else {
        None
    };
    let point = bv - av;
    let (ok, rule, detail) = match direction {
        Direction::NoIncrease => {
            let change = ci.map_or(point, |c| c.low);
            (
                change <= allowance,
                format!("B <= A + {thr}"),
                ci_note(ci, change, point),
            )
        }
        Direction::NoDecrease => {
            let change = ci.map_or(point, |c| c.high);
            (
                change >= -allowance,
                format!("B >= A - {thr}"),
                ci_note(ci, change, point),
            )
        }
        Direction::Equal => {
            if g.per_token == Some(true) {
                let per = diff
                    .phase(g.phase())
                    .and_then(|p| p.counter(&g.metric))
                    .map(|c| c.per_token.clone());
                let (ok, why) = match per {
                    Some(PerToken::Identical) => (true, "every token matches".to_owned()),
                    Some(PerToken::Differs { tokens, of, first }) => (
                        false,
                        format!(
                            "{tokens} of {of} tokens differ, the first at analysed token {first}"
                        ),
                    ),
                    Some(PerToken::Unpaired { a, b }) => (
                        false,
                        format!("A analyses {a} tokens and B {b}: tokens cannot be paired"),
                    ),
                    None => (false, "counter missing".to_owned()),
                };
                (ok, "B = A on every token".to_owned(), why)
            } else {
                let change = match ci {
                    Some(c) if c.significant() => {
                        if c.low > 0.0 {
                            c.low
                        } else {
                            c.high
                        }
                    }
                    Some(_) => 0.0,
                    None => point,
                };
                (
                    change.abs() <= allowance,
                    format!("|B - A| <= {thr}"),
                    ci_note(ci, change, point),
                )
            }
        }
        Direction::Decrease | Direction::Increase => {
            let dec = direction == Direction::Decrease;
            if let Some(ratio) = g.ratio_at_least {
                let (num, den) = if dec { (av, bv) } else { (bv, av) };
                let achieved = if den == 0.0 {
                    if num > 0.0 { f64::INFINITY } else { f64::NAN }
                } else {
                    num / den
                };
                let rule = if dec {
                    format!("A / B >= {}", fmt(ratio))
                } else {
                    format!("B / A >= {}", fmt(ratio))
                };
                (
                    achieved >= ratio,
                    rule,
                    if achieved.is_nan() {
                        "both values are 0: no ratio".to_owned()
                    } else {
                        format!("ratio {}", fmt(achieved))
                    },
                )
            } else if dec {
                (
                    point <= -allowance && point < 0.0,
                    format!("B <= A - {thr}"),
                    format!("change {}", signed(point)),
                )
            } else {
                (
                    point >= allowance && point > 0.0,
                    format!("B >= A + {thr}"),
                    format!("change {}", signed(point)),
                )
            }
        }
        Direction::Max | Direction::Min => (true, String::new(), String::new()),
    };
    r.rule = rule;
    r.status = verdict(ok);
    r.message = format!("{what}: A {} B {} ({detail})", fmt(av), fmt(bv));
    r
}

fn ci_note(ci: Option<crate::bootstrap::MedianDiffCi>, judged: f64, point: f64) -> String {
    match ci {
        Some(c) => format!(
            "change {}, {:.0}% CI [{}, {}], judged {}",
            signed(point),
            c.confidence * 100.0,
            signed(c.low),
            signed(c.high),
            signed(judged)
        ),
        None => format!("change {}", signed(point)),
    }
}

fn signed(v: f64) -> String {
    if v > 0.0 {
        format!("+{}", fmt(v))
    } else {
        fmt(v)
    }
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    }
}
