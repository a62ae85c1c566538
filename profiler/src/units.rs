//! Durations in units people read.
//!
//! A trace stores times in ns and the statistics report them in µs; shown as raw numbers they run
//! to six digits (`512034.5`). [`TimeUnit`] picks ns, µs, ms or s from the size of the values:
//! one unit for a whole axis or ruler (chosen from its range), or one per value in a table
//! ([`fmt_us`], [`fmt_ns`]). The `profiler` tables, the viewer's tables, plots and ruler, and the
//! decoder's A/B table all write durations through this module.

use crate::report::fmt_value;

/// A unit of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimeUnit {
    Ns,
    Us,
    Ms,
    S,
}

impl TimeUnit {
    /// Every unit, smallest first.
    pub const ALL: [TimeUnit; 4] = [TimeUnit::Ns, TimeUnit::Us, TimeUnit::Ms, TimeUnit::S];

    /// Nanoseconds in one of this unit.
    pub fn ns(self) -> f64 {
        match self {
            TimeUnit::Ns => 1.0,
            TimeUnit::Us => 1e3,
            TimeUnit::Ms => 1e6,
            TimeUnit::S => 1e9,
        }
    }

    /// The unit's symbol: `ns`, `µs`, `ms`, `s`.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Us => "µs",
            TimeUnit::Ms => "ms",
            TimeUnit::S => "s",
        }
    }

    /// The unit for values whose largest magnitude is `max_ns`: the largest unit in which it is
    /// at least 1 (ns below 1 µs, and for 0 or a value that is not finite).
    pub fn for_ns(max_ns: f64) -> TimeUnit {
        let m = max_ns.abs();
        if !m.is_finite() {
            return TimeUnit::Ns;
        }
        TimeUnit::ALL
            .into_iter()
            .rev()
            .find(|u| m >= u.ns())
            .unwrap_or(TimeUnit::Ns)
    }

    /// [`TimeUnit::for_ns`] for a magnitude in µs.
    pub fn for_us(max_us: f64) -> TimeUnit {
        TimeUnit::for_ns(max_us * 1e3)
    }

    /// The unit for a set of values in µs (an axis, a series): chosen from their largest finite
    /// magnitude; µs when there is none (no values, or all 0).
    pub fn for_range_us(values: impl IntoIterator<Item = f64>) -> TimeUnit {
        let max = values
            .into_iter()
            .filter(|v| v.is_finite())
            .fold(0.0f64, |m, v| m.max(v.abs()));
        if max == 0.0 {
            TimeUnit::Us
        } else {
            TimeUnit::for_us(max)
        }
    }

    /// The unit for ruler ticks `step_ns` apart: the largest in which the step is at least 0.1,
    /// so that labels keep at most one decimal (`12.5 ms`, `250 µs`).
    pub fn for_step_ns(step_ns: f64) -> TimeUnit {
        TimeUnit::ALL
            .into_iter()
            .rev()
            .find(|u| step_ns >= 0.1 * u.ns())
            .unwrap_or(TimeUnit::Ns)
    }

    /// A value in µs expressed in this unit (a bare number, for an axis that names its unit).
    pub fn from_us(self, us: f64) -> f64 {
        us * 1e3 / self.ns()
    }

    /// A value in ns expressed in this unit.
    pub fn from_ns(self, ns: f64) -> f64 {
        ns / self.ns()
    }

    /// A value in µs written in this unit with its symbol: `12.50 ms`.
    pub fn fmt_us(self, us: f64) -> String {
        format!("{} {}", fmt_value(self.from_us(us)), self.name())
    }

    /// A value in ns written in this unit with its symbol.
    pub fn fmt_ns(self, ns: f64) -> String {
        format!("{} {}", fmt_value(self.from_ns(ns)), self.name())
    }
}

/// A duration given in µs, in the unit that suits it: `850.2 µs`, `1.23 ms`, `2.50 s`,
/// `420 ns`; `0 µs` for zero and `n/a` for a value that is not a number.
pub fn fmt_us(us: f64) -> String {
    if us == 0.0 {
        return TimeUnit::Us.fmt_us(0.0);
    }
    if !us.is_finite() {
        return fmt_value(us);
    }
    TimeUnit::for_us(us).fmt_us(us)
}

/// A duration given in ns, in the unit that suits it; `0 ns` for zero.
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return fmt_value(ns);
    }
    TimeUnit::for_ns(ns).fmt_ns(ns)
}

/// A signed duration in µs (a difference): `+1.20 ms`, `-850.2 µs`, `0 µs`.
pub fn fmt_signed_us(us: f64) -> String {
    if us > 0.0 {
        format!("+{}", fmt_us(us))
    } else {
        fmt_us(us)
    }
}

/// A ruler tick at `ns` for ticks `step_ns` apart, in the unit of the step with just the
/// decimals the step needs: `10 ms`, `12.5 ms`, `250 µs`.
pub fn fmt_tick_ns(ns: f64, step_ns: f64) -> String {
    let unit = TimeUnit::for_step_ns(step_ns);
    let step = unit.from_ns(step_ns);
    let decimals = if step >= 1.0 || step <= 0.0 || !step.is_finite() {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{:.*} {}", decimals, unit.from_ns(ns), unit.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_the_largest_in_which_the_value_is_at_least_one() {
        assert_eq!(TimeUnit::for_us(0.5), TimeUnit::Ns);
        assert_eq!(TimeUnit::for_us(1.0), TimeUnit::Us);
        assert_eq!(TimeUnit::for_us(999.9), TimeUnit::Us);
        assert_eq!(TimeUnit::for_us(1_000.0), TimeUnit::Ms);
        assert_eq!(TimeUnit::for_us(500_000.0), TimeUnit::Ms);
        assert_eq!(TimeUnit::for_us(2.5e6), TimeUnit::S);
        assert_eq!(TimeUnit::for_us(-2_000.0), TimeUnit::Ms);
        assert_eq!(TimeUnit::for_us(f64::NAN), TimeUnit::Ns);
        assert_eq!(TimeUnit::for_ns(0.0), TimeUnit::Ns);
    }

    #[test]
    fn a_range_takes_its_largest_finite_value() {
        assert_eq!(
            TimeUnit::for_range_us([12.0, f64::NAN, 480_000.0, 3.0]),
            TimeUnit::Ms
        );
        assert_eq!(TimeUnit::for_range_us([12.0, 800.0]), TimeUnit::Us);
        assert_eq!(TimeUnit::for_range_us([]), TimeUnit::Us);
        assert_eq!(TimeUnit::for_range_us([0.0, f64::NAN]), TimeUnit::Us);
        assert_eq!(TimeUnit::for_range_us([1.5e6]), TimeUnit::S);
    }

    #[test]
    fn values_are_written_with_their_unit() {
        assert_eq!(fmt_us(552.8), "552.8 µs");
        assert_eq!(fmt_us(13.61), "13.61 µs");
        assert_eq!(fmt_us(1_234.0), "1.23 ms");
        assert_eq!(fmt_us(512_034.5), "512.0 ms");
        assert_eq!(fmt_us(2_000.0), "2 ms");
        assert_eq!(fmt_us(3.5e6), "3.50 s");
        assert_eq!(fmt_us(0.25), "250 ns");
        assert_eq!(fmt_us(0.0), "0 µs");
        assert_eq!(fmt_us(-1_500.0), "-1.50 ms");
        assert_eq!(fmt_us(f64::NAN), "n/a");
        assert_eq!(fmt_signed_us(1_200.0), "+1.20 ms");
        assert_eq!(fmt_signed_us(-850.3), "-850.3 µs");
        assert_eq!(fmt_ns(1_234.0), "1.23 µs");
        assert_eq!(fmt_ns(12.0), "12 ns");
        assert_eq!(fmt_ns(3e9), "3 s");
        assert_eq!(TimeUnit::Ms.fmt_us(250.0), "0.2500 ms");
        assert_eq!(TimeUnit::Ms.from_us(500_000.0), 500.0);
    }

    #[test]
    fn ticks_use_the_unit_of_their_step() {
        assert_eq!(fmt_tick_ns(20_000_000.0, 10_000_000.0), "20 ms");
        assert_eq!(fmt_tick_ns(12_500_000.0, 500_000.0), "12.5 ms");
        assert_eq!(fmt_tick_ns(250_000.0, 50_000.0), "250 µs");
        assert_eq!(fmt_tick_ns(1_200.0, 200.0), "1.2 µs");
        assert_eq!(fmt_tick_ns(40.0, 20.0), "40 ns");
        assert_eq!(fmt_tick_ns(2e9, 1e9), "2 s");
        assert_eq!(fmt_tick_ns(0.0, 20_000.0), "0 µs");
    }
}
