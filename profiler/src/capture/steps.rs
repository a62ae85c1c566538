//! Step segmentation: how wait groups become steps ([`StepRule`], [`segment`]; the module docs
//! of `capture` describe the rules).

use std::ops::Range;

use crate::trace::Phase;

/// Fewest repetitions of a period that [`StepRule::Auto`] accepts as a decode loop.
pub const MIN_REPEATS: usize = 3;

/// How wait groups become steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StepRule {
    /// One step per period of the repeating pattern of wait groups (see the module docs).
    #[default]
    Auto,
    /// Every wait group is its own step.
    Wait,
}

impl StepRule {
    pub fn name(self) -> &'static str {
        match self {
            StepRule::Auto => "auto",
            StepRule::Wait => "wait",
        }
    }
}

/// The decode loop that [`find_period`] found: `count` periods of `period` wait groups starting
/// at group `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    pub start: usize,
    pub period: usize,
    pub count: usize,
    /// Of the `count` periods, the leading ones added because their executed work matched.
    pub extended: usize,
}

impl Period {
    pub fn end(&self) -> usize {
        self.start + self.period * self.count
    }
}

/// Finds the last stretch of `signatures` that repeats with some period P at least
/// `min_repeats` times, every period holding GPU work (`has_work`), anchored at the stretch's
/// end. Among stretches ending last, the one covering most groups wins, then the smallest P.
pub fn find_period(signatures: &[u64], has_work: &[bool], min_repeats: usize) -> Option<Period> {
    let n = signatures.len();
    let min_repeats = min_repeats.max(2);
    // (end, covered, -period) is maximised.
    let mut best: Option<(usize, usize, Period)> = None;
    for p in 1..=n / min_repeats {
        let mut j = 0;
        while j + p < n {
            if signatures[j] != signatures[j + p] {
                j += 1;
                continue;
            }
            let a = j;
            while j + p < n && signatures[j] == signatures[j + p] {
                j += 1;
            }
            // signatures[a..j] equal signatures[a+p..j+p]: the stretch a..j+p has period p.
            let end = j + p;
            let count = (end - a) / p;
            if count < min_repeats {
                continue;
            }
            let start = end - count * p;
            if !has_work[start..start + p].iter().any(|&w| w) {
                continue;
            }
            let covered = count * p;
            let better = match &best {
                None => true,
                Some((e, c, bp)) => {
                    end > *e || (end == *e && (covered > *c || (covered == *c && p < bp.period)))
                }
            };
            if better {
                best = Some((
                    end,
                    covered,
                    Period {
                        start,
                        period: p,
                        count,
                        extended: 0,
                    },
                ));
            }
        }
    }
    best.map(|(_, _, p)| p)
}

/// Steps over wait groups: index ranges with their phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segmentation {
    pub steps: Vec<(Phase, Range<usize>)>,
    /// Groups summed into `meta.capture.epilogue` rather than a step.
    pub epilogue: Range<usize>,
    pub period: Option<Period>,
    /// One sentence on how the steps were made, for `meta.capture.step_rule_detail`.
    pub detail: String,
}

/// Extends `p` backwards by whole periods whose `work` signatures equal those of its first
/// period, position by position.
pub fn extend_by_work(mut p: Period, work: &[u64]) -> Period {
    if work.len() < p.end() {
        return p;
    }
    while p.start >= p.period
        && (0..p.period).all(|i| work[p.start - p.period + i] == work[p.start + i])
    {
        p.start -= p.period;
        p.count += 1;
        p.extended += 1;
    }
    p
}

/// Where the decode loop's periods start: at the end of the repeating stretch (a complete run,
/// whose last step ends where the teardown begins), or at its start (a run cut short, whose last
/// period may be partial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    End,
    Start,
}

/// Re-anchors `p` at the start of its repeating stretch: the earliest group from which the
/// signatures repeat with its period up to `p.end()`.
fn anchor_at_start(mut p: Period, signatures: &[u64]) -> Period {
    let end = p.end();
    let mut a = p.start;
    while a > 0 && a - 1 + p.period < end && signatures[a - 1] == signatures[a - 1 + p.period] {
        a -= 1;
    }
    p.count = (end - a) / p.period;
    p.start = a;
    p
}

/// Groups wait groups into steps by `rule` (see the module docs): `signatures` as submitted,
/// `work` regardless of submits (empty: no extension), `has_work` where a group submitted.
/// With [`Anchor::Start`] the periods start where the repetition starts and the groups after
/// the last whole period are left out of the steps (`epilogue`: for a run cut short, its tail).
pub fn segment(
    signatures: &[u64],
    work: &[u64],
    has_work: &[bool],
    rule: StepRule,
    anchor: Anchor,
) -> Segmentation {
    let n = signatures.len();
    let period = find_period(signatures, has_work, MIN_REPEATS)
        .map(|p| match anchor {
            Anchor::End => p,
            Anchor::Start => anchor_at_start(p, signatures),
        })
        .map(|p| extend_by_work(p, work));
    let extended = |p: &Period| match p.extended {
        0 => String::new(),
        k => format!(
            " (the first {k} of them submitted the same work in a different number of \
             submits or command buffers)"
        ),
    };
    let mut steps = Vec::new();
    match (rule, period) {
        (StepRule::Auto, Some(p)) => {
            if p.start > 0 {
                steps.push((Phase::Prefill, 0..p.start));
            }
            for k in 0..p.count {
                let a = p.start + k * p.period;
                steps.push((Phase::Decode, a..a + p.period));
            }
            Segmentation {
                steps,
                epilogue: p.end()..n,
                period,
                detail: format!(
                    "auto: the wait groups repeat with a period of {} wait group(s), {} times{}; \
                     one decode step per period{}, the {} wait group(s) before them one prefill \
                     step, the {} after them the {}",
                    p.period,
                    p.count,
                    extended(&p),
                    match anchor {
                        Anchor::End => "",
                        Anchor::Start => " counted from the first (the run was cut short)",
                    },
                    p.start,
                    n - p.end(),
                    match anchor {
                        Anchor::End => "epilogue",
                        Anchor::Start => "tail",
                    }
                ),
            }
        }
        (StepRule::Wait, Some(p)) => {
            for i in 0..p.end() {
                let phase = if i < p.start {
                    Phase::Prefill
                } else {
                    Phase::Decode
                };
                steps.push((phase, i..i + 1));
            }
            Segmentation {
                steps,
                epilogue: p.end()..n,
                period,
                detail: format!(
                    "wait: one step per wait group; the {} before the repeating pattern (period {} \
                     wait groups, {} times{}) are prefill, the {} after it the epilogue",
                    p.start,
                    p.period,
                    p.count,
                    extended(&p),
                    n - p.end()
                ),
            }
        }
        (rule, None) => {
            for i in 0..n {
                steps.push((Phase::Decode, i..i + 1));
            }
            let why = match rule {
                StepRule::Auto => {
                    "auto found no pattern of wait groups repeating at least 3 times, so "
                }
                StepRule::Wait => "",
            };
            Segmentation {
                steps,
                epilogue: n..n,
                period: None,
                detail: format!("wait: {why}every wait group is one decode step"),
            }
        }
    }
}
