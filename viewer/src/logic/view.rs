//! The visible time range of the token timeline: zoom about a point, pan, fit.

/// Narrowest visible range, ns.
pub const MIN_WIDTH_NS: f64 = 100.0;

/// The visible range `[start_ns, end_ns]`, ns from the step's start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeView {
    pub start_ns: f64,
    pub end_ns: f64,
}

impl Default for TimeView {
    fn default() -> Self {
        TimeView::fit(1_000.0)
    }
}

impl TimeView {
    /// The whole of `[0, total_ns]` with a 2 % margin on the right.
    pub fn fit(total_ns: f64) -> TimeView {
        let total = if total_ns.is_finite() {
            total_ns.max(MIN_WIDTH_NS)
        } else {
            MIN_WIDTH_NS
        };
        TimeView {
            start_ns: 0.0,
            end_ns: total * 1.02,
        }
    }

    pub fn width_ns(&self) -> f64 {
        self.end_ns - self.start_ns
    }

    /// Zooms by `factor` (> 1 zooms in) keeping `anchor_ns` where it is on screen. The width stays
    /// between [`MIN_WIDTH_NS`] and `max_width_ns`.
    pub fn zoom(&mut self, factor: f64, anchor_ns: f64, max_width_ns: f64) {
        if !(factor.is_finite() && factor > 0.0 && anchor_ns.is_finite()) {
            return;
        }
        let old = self.width_ns();
        let width = (old / factor).clamp(MIN_WIDTH_NS, max_width_ns.max(MIN_WIDTH_NS));
        let t = if old > 0.0 {
            (anchor_ns - self.start_ns) / old
        } else {
            0.5
        };
        self.start_ns = anchor_ns - t * width;
        self.end_ns = self.start_ns + width;
    }

    /// Moves the view by `delta_ns` (positive shows later times).
    pub fn pan(&mut self, delta_ns: f64) {
        if delta_ns.is_finite() {
            self.start_ns += delta_ns;
            self.end_ns += delta_ns;
        }
    }

    /// Screen x of time `ns` in a strip `[left, left + width]`.
    pub fn x_of(&self, ns: f64, left: f32, width: f32) -> f32 {
        left + ((ns - self.start_ns) / self.width_ns() * width as f64) as f32
    }

    /// Time at screen x in a strip `[left, left + width]`.
    pub fn ns_of(&self, x: f32, left: f32, width: f32) -> f64 {
        self.start_ns + (x - left) as f64 / width.max(1.0) as f64 * self.width_ns()
    }

    /// Nanoseconds per point for a strip `width` points wide.
    pub fn ns_per_px(&self, width: f32) -> f64 {
        self.width_ns() / width.max(1.0) as f64
    }
}

/// A round tick spacing (1, 2 or 5 times a power of ten, ns) giving at most `max_ticks` ticks
/// over `width_ns`.
pub fn nice_step(width_ns: f64, max_ticks: usize) -> f64 {
    if !(width_ns.is_finite() && width_ns > 0.0) {
        return 1.0;
    }
    let raw = width_ns / max_ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
        .max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_steps_are_round() {
        assert_eq!(nice_step(1_000.0, 10), 100.0);
        assert_eq!(nice_step(1_000.0, 4), 500.0);
        assert_eq!(nice_step(12_345_678.0, 8), 2_000_000.0);
        assert_eq!(nice_step(3.0, 10), 1.0);
        assert_eq!(nice_step(0.0, 10), 1.0);
        assert_eq!(nice_step(f64::NAN, 10), 1.0);
        for w in [77.0, 1e3, 4.2e6, 9.9e8] {
            let s = nice_step(w, 8);
            assert!(w / s <= 8.0 + 1e-9, "{w} {s}");
        }
    }

    #[test]
    fn zoom_keeps_the_anchor_in_place() {
        let mut v = TimeView {
            start_ns: 0.0,
            end_ns: 1_000.0,
        };
        let x_before = v.x_of(250.0, 0.0, 500.0);
        v.zoom(2.0, 250.0, 1e9);
        assert!((v.width_ns() - 500.0).abs() < 1e-9);
        assert!((v.x_of(250.0, 0.0, 500.0) - x_before).abs() < 1e-3);
        // Clamped at both ends.
        v.zoom(1e9, 250.0, 1e9);
        assert_eq!(v.width_ns(), MIN_WIDTH_NS);
        v.zoom(1e-9, 250.0, 4_000.0);
        assert!((v.width_ns() - 4_000.0).abs() < 1e-6);
        let before = v;
        v.zoom(f64::NAN, 0.0, 1e9);
        v.zoom(0.0, 0.0, 1e9);
        assert_eq!(v, before);
    }

    #[test]
    fn pan_fit_and_conversions() {
        let mut v = TimeView::fit(1_000.0);
        assert_eq!(v.start_ns, 0.0);
        assert!((v.end_ns - 1_020.0).abs() < 1e-9);
        v.pan(100.0);
        assert!((v.start_ns - 100.0).abs() < 1e-9);
        let ns = v.ns_of(60.0, 10.0, 100.0);
        assert!((v.x_of(ns, 10.0, 100.0) - 60.0).abs() < 1e-3);
        assert!((v.ns_per_px(100.0) - 10.2).abs() < 1e-9);
        assert_eq!(TimeView::fit(0.0).width_ns(), MIN_WIDTH_NS * 1.02);
        assert_eq!(TimeView::fit(f64::INFINITY).width_ns(), MIN_WIDTH_NS * 1.02);
    }
}
