//! How much better B is than A, read the right way round.
//!
//! A plain ratio `A / B` reads backwards on half the rows of an A/B table: fewer submits give a
//! ratio above 1, more tokens per second one below 1, and `0.2x` on a throughput row reads as a
//! slowdown. [`Speedup`] orients the ratio by the metric's [`Better`] direction, so the factor is
//! always at least 1 and the word says which way it goes: `88.0x better`, `1.35x worse`, `same`.
//! `profiler diff`, the viewer's Summary and Op breakdown and the decoder's A/B table use it.

use std::fmt;

/// Which direction of a metric is an improvement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Better {
    /// A cost: submits, barriers, bytes copied, any time.
    Lower,
    /// A rate: tokens per second, GB/s.
    Higher,
}

impl Better {
    /// The direction of a metric by its name: rates (`*_per_s`, `*gbps`) are higher-is-better;
    /// every counter and time of a trace is a cost.
    pub fn of_metric(name: &str) -> Better {
        if name.ends_with("_per_s") || name.ends_with("gbps") {
            Better::Higher
        } else {
            Better::Lower
        }
    }
}

/// Which way B compares with A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Better,
    Worse,
    Same,
    /// A value is missing, negative or not a number.
    Unavailable,
}

/// B against A for one metric: the factor by which B is better or worse.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speedup {
    pub better: Better,
    /// The baseline's value.
    pub a: f64,
    /// The compared value.
    pub b: f64,
}

impl Speedup {
    pub fn new(a: f64, b: f64, better: Better) -> Speedup {
        Speedup { better, a, b }
    }

    /// [`Speedup::new`] when both values exist.
    pub fn of(a: Option<f64>, b: Option<f64>, better: Better) -> Option<Speedup> {
        Some(Speedup::new(a?, b?, better))
    }

    fn comparable(&self) -> bool {
        self.a.is_finite() && self.b.is_finite() && self.a >= 0.0 && self.b >= 0.0
    }

    /// How many times better B is than A: above 1 better, below 1 worse, 1 the same; infinite
    /// when B brings a cost to 0 (or a rate up from 0), 0 the other way round. `None` when a value
    /// is negative or not finite.
    pub fn factor(&self) -> Option<f64> {
        if !self.comparable() {
            return None;
        }
        let (good, bad) = match self.better {
            Better::Lower => (self.a, self.b),
            Better::Higher => (self.b, self.a),
        };
        Some(if good == bad {
            1.0
        } else if bad == 0.0 {
            f64::INFINITY
        } else {
            good / bad
        })
    }

    pub fn verdict(&self) -> Verdict {
        match self.factor() {
            None => Verdict::Unavailable,
            Some(f) if f > 1.0 => Verdict::Better,
            Some(f) if f < 1.0 => Verdict::Worse,
            Some(_) => Verdict::Same,
        }
    }
}

/// A factor of at least 1 with three significant digits: `2.53x`, `88.0x`, `607744x`.
fn fmt_factor(f: f64) -> String {
    if f >= 99.95 {
        format!("{f:.0}x")
    } else if f >= 9.995 {
        format!("{f:.1}x")
    } else {
        format!("{f:.2}x")
    }
}

/// `88.0x better`, `1.35x worse`, `same`; `eliminated` when B has none of a cost A had, `new`
/// when B has a cost A did not; `from 0` and `to 0` for a rate that starts or ends at 0; `-`
/// when the values cannot be compared.
impl fmt::Display for Speedup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(factor) = self.factor() else {
            return f.write_str("-");
        };
        let lower = self.better == Better::Lower;
        let text = if factor == 1.0 {
            "same".to_owned()
        } else if factor.is_infinite() {
            (if lower { "eliminated" } else { "from 0" }).to_owned()
        } else if factor == 0.0 {
            (if lower { "new" } else { "to 0" }).to_owned()
        } else if factor > 1.0 {
            format!("{} better", fmt_factor(factor))
        } else {
            format!("{} worse", fmt_factor(1.0 / factor))
        };
        f.pad(&text)
    }
}

/// The cell of an A/B table's "B vs A" column: the [`Speedup`] of `b` against `a`, `-` when a
/// side is missing.
pub fn fmt_speedup(a: Option<f64>, b: Option<f64>, better: Better) -> String {
    Speedup::of(a, b, better).map_or_else(|| "-".to_owned(), |s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(a: f64, b: f64, better: Better) -> String {
        Speedup::new(a, b, better).to_string()
    }

    #[test]
    fn fewer_and_faster_read_as_better() {
        // Costs: 88 submits down to 1, 552.8 µs of host time down to 13.61 µs.
        assert_eq!(text(88.0, 1.0, Better::Lower), "88.0x better");
        assert_eq!(text(552.8, 13.61, Better::Lower), "40.6x better");
        assert_eq!(text(100.0, 135.0, Better::Lower), "1.35x worse");
        // A rate: 180 tokens/s against 36 is five times better, not 0.2x.
        assert_eq!(text(36.0, 180.0, Better::Higher), "5.00x better");
        assert_eq!(text(180.0, 36.0, Better::Higher), "5.00x worse");
        assert_eq!(
            Speedup::new(36.0, 180.0, Better::Higher).verdict(),
            Verdict::Better
        );
        assert_eq!(
            Speedup::new(36.0, 180.0, Better::Lower).verdict(),
            Verdict::Worse
        );
        assert_eq!(text(607_744.0, 4.0, Better::Lower), "151936x better");
    }

    #[test]
    fn zeros_and_missing_values_have_words() {
        assert_eq!(text(79.0, 0.0, Better::Lower), "eliminated");
        assert_eq!(text(0.0, 8.0, Better::Lower), "new");
        assert_eq!(text(0.0, 0.0, Better::Lower), "same");
        assert_eq!(text(5.0, 5.0, Better::Higher), "same");
        assert_eq!(text(0.0, 3.0, Better::Higher), "from 0");
        assert_eq!(text(3.0, 0.0, Better::Higher), "to 0");
        assert_eq!(text(f64::NAN, 1.0, Better::Lower), "-");
        assert_eq!(text(-1.0, 1.0, Better::Lower), "-");
        assert_eq!(
            Speedup::new(79.0, 0.0, Better::Lower).verdict(),
            Verdict::Better
        );
        assert_eq!(
            Speedup::new(0.0, 8.0, Better::Lower).verdict(),
            Verdict::Worse
        );
        assert_eq!(
            Speedup::new(f64::NAN, 1.0, Better::Lower).verdict(),
            Verdict::Unavailable
        );
        assert_eq!(fmt_speedup(None, Some(1.0), Better::Lower), "-");
        assert_eq!(
            fmt_speedup(Some(2.0), Some(1.0), Better::Lower),
            "2.00x better"
        );
    }

    #[test]
    fn directions_by_name() {
        assert_eq!(Better::of_metric("submits"), Better::Lower);
        assert_eq!(Better::of_metric("wall_us"), Better::Lower);
        assert_eq!(Better::of_metric("tokens_per_s"), Better::Higher);
        assert_eq!(Better::of_metric("achieved_gbps"), Better::Higher);
    }

    #[test]
    fn the_factor_is_oriented() {
        assert_eq!(Speedup::new(10.0, 5.0, Better::Lower).factor(), Some(2.0));
        assert_eq!(Speedup::new(10.0, 5.0, Better::Higher).factor(), Some(0.5));
        assert_eq!(
            Speedup::new(10.0, 0.0, Better::Lower).factor(),
            Some(f64::INFINITY)
        );
        assert_eq!(
            Speedup::new(f64::INFINITY, 1.0, Better::Lower).factor(),
            None
        );
    }
}
