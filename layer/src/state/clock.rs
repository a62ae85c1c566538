//! Shader clocks onto the timestamps' time line.
//!
//! At the dispatch level on a device with a shader device clock, each instrumented dispatch
//! writes the device clock when its first workgroup starts and its last one ends
//! ([`crate::spirv`]), and its command buffer is bracketed by two timestamps of the layer's
//! ([`Source::Bracket`](super::Source::Bracket)). Vulkan leaves the clock's unit and origin to
//! the implementation: NVIDIA's device clock is the timestamps' own nanosecond time line,
//! lavapipe's is 32 bits wide and runs unevenly between dispatches. [`ClockMap`] finds which.
//!
//! - **Same time line**: while every command buffer's clocks (64 bits wide) fall inside its
//!   bracket (within [`SLACK_NS`]), they are used as they are. Once [`CONFIRMATIONS`] brackets
//!   have shown it ([`ClockMap::established`]), the layer brackets only one recording in
//!   [`RECHECK`], and a command buffer without a bracket keeps its clocks as they are; a
//!   bracket that shows otherwise ends that (the dispatches recorded without a bracket since
//!   are then untimed, and counted).
//! - **Another clock**: from the first bracket that shows otherwise, ticks are scaled by the
//!   ratio of timestamp time to clock ticks between an anchor bracket and a later one (at least
//!   [`BASELINE_NS`] apart, the anchor moving on after [`REANCHOR_NS`]; by the bracket itself
//!   before that, and never by more than the bracket holds), and each command buffer's
//!   dispatches are centred in its bracket. Durations then carry the scale's error; positions
//!   within a bracket carry at most half of its launch and drain time.

/// How far outside its bracket a clock may fall and still be taken as the same time line.
pub const SLACK_NS: u64 = 2_000;
/// The shortest span between two brackets from which their ratio gives the clock's scale.
pub const BASELINE_NS: u64 = 1_000_000;
/// The longest: the anchor moves on after this, so that a clock only 32 bits wide cannot wrap
/// between the two (lavapipe's wraps every few seconds).
pub const REANCHOR_NS: u64 = 500_000_000;
/// Brackets that must show the clock on the timestamps' time line before recordings go
/// without one.
pub const CONFIRMATIONS: u32 = 64;
/// Once the time line is established, one recording in this many is still bracketed.
pub const RECHECK: u32 = 64;

/// The mapping of one device's shader clocks onto its timestamps (nanoseconds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClockMap {
    /// A bracket showed that the clock is not the timestamps' time line.
    other: bool,
    /// A clock above 32 bits was seen: the clock is 64 bits wide (until then it may wrap at 32).
    wide: bool,
    /// A bracket's first clock and start (once `other`), the baseline's start.
    anchor: Option<(u64, u64)>,
    /// Nanoseconds per tick, and the baseline it came from.
    scale: Option<(f64, u64)>,
    /// Brackets whose clocks fell inside them, on the same time line.
    confirmed: u32,
}

impl ClockMap {
    /// True while the clock is taken as the timestamps' own time line.
    pub fn same_time_line(&self) -> bool {
        !self.other
    }

    /// True once [`CONFIRMATIONS`] brackets showed the clock on the timestamps' time line
    /// (and none showed otherwise): a command buffer's clocks no longer need a bracket.
    pub fn established(&self) -> bool {
        !self.other && self.wide && self.confirmed >= CONFIRMATIONS
    }

    /// The spans (nanoseconds) of one command buffer's clocked dispatches, `clocks` being their
    /// (start, end) in ticks in the order recorded (`None`: not written) and `bracket` the
    /// command buffer's start and end timestamps in nanoseconds (`None`: not read). Clocks are
    /// taken relative to the first dispatch's start, modulo the clock's width, so a clock that
    /// wraps inside a command buffer still gives right spans. A dispatch without both clocks,
    /// or whose clocks cannot be placed, gets `None` (untimed, counted).
    pub fn map(
        &mut self,
        bracket: Option<(u64, u64)>,
        clocks: &[Option<(u64, u64)>],
    ) -> Vec<Option<(u64, u64)>> {
        let none = || vec![None; clocks.len()];
        if clocks
            .iter()
            .flatten()
            .any(|&(s, e)| s.max(e) > u32::MAX as u64)
        {
            self.wide = true;
        }
        let mask = if self.wide { u64::MAX } else { u32::MAX as u64 };
        let Some(&(first, _)) = clocks.iter().flatten().next() else {
            return none();
        };
        // Dispatches the program lets overlap may start before the first one recorded: the
        // origin sits a quarter of the clock's range before it.
        let origin = first.wrapping_sub(mask / 4 + 1) & mask;
        let rel = |c: u64| c.wrapping_sub(origin) & mask;
        let rels: Vec<Option<(u64, u64)>> = clocks
            .iter()
            .map(|c| c.map(|(s, e)| (rel(s), rel(e))).filter(|(s, e)| e >= s))
            .collect();
        let Some(c0) = rels.iter().flatten().map(|&(s, _)| s).min() else {
            return none();
        };
        let c1 = rels.iter().flatten().map(|&(_, e)| e).max().unwrap_or(c0);
        let absolute = |c: u64| origin.wrapping_add(c) & mask;
        let bracket = bracket.filter(|(t0, t1)| t1 >= t0);
        if !self.other {
            // Without a bracket a wide clock is still taken as the time line it has been.
            let inside = bracket.is_none_or(|(t0, t1)| {
                absolute(c0).saturating_add(SLACK_NS) >= t0
                    && absolute(c1) <= t1.saturating_add(SLACK_NS)
            });
            if self.wide && inside {
                if bracket.is_some() {
                    self.confirmed = self.confirmed.saturating_add(1);
                }
                return rels
                    .iter()
                    .map(|r| r.map(|(s, e)| (absolute(s), absolute(e))))
                    .collect();
            }
            if bracket.is_some() {
                self.other = true;
            }
        }
        let Some((t0, t1)) = bracket else {
            return none();
        };
        let here = absolute(c0);
        match self.anchor {
            Some((ac, at)) if t0 > at => {
                let (dt, dc) = (t0 - at, here.wrapping_sub(ac) & mask);
                let longer = self.scale.is_none_or(|(_, b)| dt >= b);
                if dt >= BASELINE_NS && dc > 0 && longer {
                    self.scale = Some((dt as f64 / dc as f64, dt));
                }
                if dt > REANCHOR_NS {
                    self.anchor = Some((here, t0));
                }
            }
            Some(_) => {}
            None => self.anchor = Some((here, t0)),
        }
        // The bracket's own ratio bounds the scale: a clock that does not advance evenly
        // (lavapipe's, between dispatches) never spills its spans past their bracket.
        let fits = (c1 > c0).then(|| (t1 - t0) as f64 / (c1 - c0) as f64);
        let scale = match (self.scale, fits) {
            (Some((s, _)), Some(f)) => s.min(f),
            (Some((s, _)), None) => s,
            (None, Some(f)) => f,
            (None, None) => 1.0,
        };
        let span = (c1 - c0) as f64 * scale;
        let slack = ((t1 - t0) as f64 - span).max(0.0);
        let base = t0 as f64 + slack / 2.0;
        let at = |c: u64| ((base + (c - c0) as f64 * scale).round() as u64).clamp(t0, t1);
        rels.iter()
            .map(|r| r.map(|(s, e)| (at(s), at(e))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nanoseconds on a 64-bit time line far from zero (as NVIDIA's).
    const T: u64 = 1_700_000_000_000_000_000;

    #[test]
    fn clocks_inside_their_bracket_are_taken_as_they_are() {
        let mut m = ClockMap::default();
        let spans = m.map(
            Some((T + 1_000_000, T + 1_100_000)),
            &[
                Some((T + 1_010_000, T + 1_020_000)),
                None,
                Some((T + 1_030_000, T + 1_099_000)),
            ],
        );
        assert_eq!(
            spans,
            vec![
                Some((T + 1_010_000, T + 1_020_000)),
                None,
                Some((T + 1_030_000, T + 1_099_000))
            ]
        );
        assert!(m.same_time_line());
    }

    #[test]
    fn a_clock_32_bits_wide_that_wraps_inside_a_command_buffer_keeps_its_spans() {
        let mut m = ClockMap::default();
        let w = |c: u64| c & u32::MAX as u64;
        let base = u32::MAX as u64 - 30_000;
        // Two dispatches of 40 us, the second across the wrap, in a 100 us bracket.
        let spans = m.map(
            Some((5_000_000, 5_100_000)),
            &[
                Some((w(base), w(base + 40_000))),
                Some((w(base + 40_000), w(base + 80_000))),
            ],
        );
        assert!(!m.same_time_line());
        let lens: Vec<u64> = spans.iter().map(|s| s.map_or(0, |(a, b)| b - a)).collect();
        assert_eq!(
            lens,
            vec![50_000, 50_000],
            "stretched over the bracket, none lost"
        );
    }

    #[test]
    fn another_clock_is_scaled_by_the_baseline_and_centred_in_its_bracket() {
        let mut m = ClockMap::default();
        // A clock at 3 ticks a nanosecond from an unrelated origin.
        let tick = |ns: u64| 9_000_000_000 + 3 * ns;
        // The first bracket: 100 us, with 80 us of dispatches; before a baseline exists the
        // bracket's own ratio stretches them over it.
        let first = m.map(
            Some((1_000_000, 1_100_000)),
            &[
                Some((tick(0), tick(40_000))),
                Some((tick(40_000), tick(80_000))),
            ],
        );
        assert!(!m.same_time_line());
        assert_eq!(first[0], Some((1_000_000, 1_050_000)));
        assert_eq!(first[1], Some((1_050_000, 1_100_000)));
        // Two milliseconds later the clock has advanced 2 ms (in ticks): the scale is known, and
        // 60 us of dispatches sit in the middle of a 100 us bracket. (The clock is 64 bits wide.)
        let later = m.map(
            Some((3_000_000, 3_100_000)),
            &[Some((tick(2_000_000), tick(2_060_000)))],
        );
        assert_eq!(later[0], Some((3_020_000, 3_080_000)));
    }

    #[test]
    fn the_time_line_is_established_by_brackets_and_undone_by_one() {
        let mut m = ClockMap::default();
        let inside = |m: &mut ClockMap, k: u64| {
            let t = T + k * 1_000_000;
            m.map(Some((t, t + 100_000)), &[Some((t + 10_000, t + 90_000))])
        };
        for k in 0..CONFIRMATIONS as u64 {
            assert!(!m.established(), "after {k} brackets");
            inside(&mut m, k);
        }
        assert!(m.established());
        let t = T + 500_000_000;
        assert_eq!(
            m.map(None, &[Some((t, t + 5_000))]),
            vec![Some((t, t + 5_000))],
            "without a bracket the clocks are taken as they are"
        );
        assert!(
            m.established(),
            "a recording without a bracket confirms nothing"
        );
        m.map(Some((t, t + 100_000)), &[Some((t + 300_000, t + 400_000))]);
        assert!(!m.established(), "a bracket the clocks fall outside");
        assert_eq!(m.map(None, &[Some((t, t + 5_000))]), vec![None]);
    }

    #[test]
    fn missing_or_backward_clocks_are_untimed() {
        let mut m = ClockMap::default();
        let spans = m.map(Some((T + 10, T + 20)), &[None, Some((T + 15, T + 12))]);
        assert_eq!(spans, vec![None, None]);
        assert!(m.same_time_line(), "nothing to judge the clock by");
    }

    #[test]
    fn another_clock_without_a_bracket_cannot_be_placed() {
        let mut m = ClockMap::default();
        m.map(Some((T, T + 1_000)), &[Some((T + 50_000, T + 60_000))]);
        assert!(!m.same_time_line());
        assert_eq!(m.map(None, &[Some((T + 70_000, T + 80_000))]), vec![None]);
    }
}
