//! Number formatting, all from the profiler so the viewer prints the numbers `profiler diff`
//! prints: values, signs, percentages and bytes; durations in the unit that suits them
//! (`profiler::fmt_us`, `fmt_ns`, the ruler's `fmt_tick_ns` and the axes' [`TimeUnit`]); the
//! "B vs A" speed-up cells.

pub use profiler::{
    TimeUnit, fmt_bytes, fmt_ci_us, fmt_metric, fmt_ns, fmt_pct, fmt_rel, fmt_signed,
    fmt_signed_us, fmt_speedup, fmt_tick_ns as fmt_tick, fmt_us, fmt_value, median_speedup,
    op_speedup, unit_cell,
};

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
        assert_eq!(fmt_ns(1_234.0), "1.23 µs");
        assert_eq!(fmt_ns(2_500_000.0), "2.50 ms");
        assert_eq!(fmt_ns(12.0), "12 ns");
        assert_eq!(fmt_ns(3e9), "3 s");
        assert_eq!(fmt_us(512_034.5), "512.0 ms");
        assert_eq!(fmt_tick(20_000_000.0, 10_000_000.0), "20 ms");
        assert_eq!(fmt_tick(12_500_000.0, 500_000.0), "12.5 ms");
        assert_eq!(fmt_tick(250_000.0, 50_000.0), "250 µs");
        assert_eq!(fmt_tick(1_200.0, 200.0), "1.2 µs");
        assert_eq!(fmt_tick(40.0, 20.0), "40 ns");
        assert_eq!(fmt_tick(2e9, 1e9), "2 s");
        assert_eq!(fmt_tick(0.0, 20_000.0), "0 µs");
        assert_eq!(gbps(2_000, 1_000), Some(2.0));
        assert_eq!(gbps(0, 1_000), None);
        assert_eq!(gbps(5, 0), None);
    }
}
