//! Number formatting: values, signs, percentages and bytes come from the profiler's report so the
//! viewer prints the numbers `profiler diff` prints; durations and axis ticks are the viewer's own.

pub use profiler::{fmt_bytes, fmt_pct, fmt_rel, fmt_signed, fmt_value};

/// A duration given in ns, in ns, us, ms or s with three significant digits or so.
pub fn fmt_ns(ns: f64) -> String {
    let a = ns.abs();
    if a >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A ruler tick at `ns` for ticks `step_ns` apart: in the unit of the step, with just the
/// decimals the step needs (`10 ms`, `12.5 ms`, `250 us`).
pub fn fmt_tick(ns: f64, step_ns: f64) -> String {
    // The largest unit in which the step is at least 0.1.
    let (unit, name) = if step_ns >= 1e8 {
        (1e9, "s")
    } else if step_ns >= 1e5 {
        (1e6, "ms")
    } else if step_ns >= 1e2 {
        (1e3, "us")
    } else {
        (1.0, "ns")
    };
    let step = step_ns / unit;
    let decimals = if step >= 1.0 || step <= 0.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{:.*} {name}", decimals, ns / unit)
}

/// GB/s of `bytes` moved in `dur_ns`; `None` without time or bytes.
pub fn gbps(bytes: u64, dur_ns: u64) -> Option<f64> {
    (dur_ns > 0 && bytes > 0).then(|| bytes as f64 / dur_ns as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_signed(2.5), "+2.50");
        assert_eq!(fmt_signed(-3.0), "-3");
        assert_eq!(fmt_rel(Some(0.1234)), "+12.3%");
        assert_eq!(fmt_rel(Some(-0.5)), "-50.0%");
        assert_eq!(fmt_rel(None), "-");
        assert_eq!(fmt_pct(0.256), "25.6%");
        assert_eq!(fmt_bytes(1_500_000.0), "1.50 MB");
        assert_eq!(fmt_bytes(12.0), "12 B");
        assert_eq!(fmt_ns(1_234.0), "1.23 us");
        assert_eq!(fmt_ns(2_500_000.0), "2.500 ms");
        assert_eq!(fmt_ns(12.0), "12 ns");
        assert_eq!(fmt_ns(3e9), "3.000 s");
        assert_eq!(fmt_tick(20_000_000.0, 10_000_000.0), "20 ms");
        assert_eq!(fmt_tick(12_500_000.0, 500_000.0), "12.5 ms");
        assert_eq!(fmt_tick(250_000.0, 50_000.0), "250 us");
        assert_eq!(fmt_tick(1_200.0, 200.0), "1.2 us");
        assert_eq!(fmt_tick(40.0, 20.0), "40 ns");
        assert_eq!(fmt_tick(2e9, 1e9), "2 s");
        assert_eq!(fmt_tick(0.0, 20_000.0), "0 us");
        assert_eq!(gbps(2_000, 1_000), Some(2.0));
        assert_eq!(gbps(0, 1_000), None);
        assert_eq!(gbps(5, 0), None);
    }
}
