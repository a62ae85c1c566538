//! Per-token series of one trace: the six quantities the per-token plots show.

use profiler::{TimeUnit, TokenRecord, Trace};

/// A quantity plotted per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    HostEnqueueUs,
    GpuUs,
    WallUs,
    Submits,
    Barriers,
    DescriptorWrites,
}

impl Metric {
    pub const ALL: [Metric; 6] = [
        Metric::HostEnqueueUs,
        Metric::GpuUs,
        Metric::WallUs,
        Metric::Submits,
        Metric::Barriers,
        Metric::DescriptorWrites,
    ];

    /// The quantity's name, without a unit.
    pub fn name(self) -> &'static str {
        match self {
            Metric::HostEnqueueUs => "host enqueue",
            Metric::GpuUs => "GPU time",
            Metric::WallUs => "wall time",
            Metric::Submits => "submits",
            Metric::Barriers => "barrier calls",
            Metric::DescriptorWrites => "descriptor writes",
        }
    }

    /// Whether the values are times (in µs); the others are counts.
    pub fn is_time(self) -> bool {
        matches!(self, Metric::HostEnqueueUs | Metric::GpuUs | Metric::WallUs)
    }

    /// The unit of a plot's y axis whose top is `top_us`: for a time, the unit that suits that
    /// range (`µs` up to 1 ms, then `ms`, then `s`), as the timeline's ruler does; `None` for a
    /// count.
    pub fn axis_unit(self, top_us: f64) -> Option<TimeUnit> {
        self.is_time()
            .then(|| TimeUnit::for_range_us([top_us]).max(TimeUnit::Us))
    }

    /// The plot title: the name, and the axis unit of a time (`wall time (ms)`).
    pub fn title(self, unit: Option<TimeUnit>) -> String {
        match unit {
            Some(u) => format!("{} ({})", self.name(), u.name()),
            None => self.name().to_owned(),
        }
    }

    /// The metric's name in `profiler stats` / `diff` (a time or a counter name).
    pub fn profiler_name(self) -> &'static str {
        match self {
            Metric::HostEnqueueUs => "host_enqueue_us",
            Metric::GpuUs => "gpu_us",
            Metric::WallUs => "wall_us",
            Metric::Submits => "submits",
            Metric::Barriers => "barrier_calls",
            Metric::DescriptorWrites => "descriptor_writes",
        }
    }

    /// The value for one step; `None` when the trace has no such value (GPU time without
    /// timestamps).
    pub fn value(self, trace: &Trace, r: &TokenRecord) -> Option<f64> {
        let us = |ns: u64| ns as f64 / 1_000.0;
        match self {
            Metric::HostEnqueueUs => Some(us(r.host_enqueue_ns)),
            Metric::GpuUs => gpu_busy_ns(trace, r).map(us),
            Metric::WallUs => Some(us(r.wall_ns)),
            Metric::Submits => Some(r.counters.submits() as f64),
            Metric::Barriers => Some(r.counters.barrier_calls as f64),
            Metric::DescriptorWrites => Some(r.counters.descriptor_writes as f64),
        }
    }
}

/// GPU busy time of a step, by the rule of TRACE_FORMAT.md that `profiler stats` applies.
pub use profiler::stats::gpu_busy_ns;

/// Every [`Metric`] for every step of a trace, in trace order; NaN where a value is missing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceSeries {
    /// `values[m][i]`: metric `Metric::ALL[m]` of step `i`.
    values: Vec<Vec<f64>>,
}

impl TraceSeries {
    pub fn of(trace: &Trace) -> TraceSeries {
        let values = Metric::ALL
            .iter()
            .map(|m| {
                trace
                    .tokens
                    .iter()
                    .map(|r| m.value(trace, r).unwrap_or(f64::NAN))
                    .collect()
            })
            .collect();
        TraceSeries { values }
    }

    /// The values of `metric` by step index (NaN where missing).
    pub fn get(&self, metric: Metric) -> &[f64] {
        let i = Metric::ALL.iter().position(|m| *m == metric).unwrap_or(0);
        self.values.get(i).map_or(&[], Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.values.first().map_or(0, Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::GpuSpan;
    use profiler::{OpInfo, SynthOptions, synthetic_trace};

    #[test]
    fn gpu_busy_falls_back_to_the_union_of_dispatch_spans() {
        let mut t = synthetic_trace(&SynthOptions {
            decode_tokens: 2,
            layers: 1,
            ..SynthOptions::default()
        });
        t.ops = vec![
            OpInfo {
                label: "a".into(),
                kind: "matvec".into(),
                ..OpInfo::default()
            },
            OpInfo {
                label: "token".into(),
                kind: "token".into(),
                ..OpInfo::default()
            },
        ];
        let r = &mut t.tokens[1];
        r.gpu_busy_ns = None;
        // Two overlapping dispatches (union 15) inside a token span of 100 that must not count.
        r.gpu_spans = vec![
            GpuSpan(0, 10, 10, 0, 0, 1),
            GpuSpan(0, 15, 10, 0, 0, 1),
            GpuSpan(1, 0, 100, 0, 0, 1),
        ];
        let r = &t.tokens[1];
        assert_eq!(gpu_busy_ns(&t, r), Some(15));
        let mut only_token = r.clone();
        only_token.gpu_spans.truncate(0);
        assert_eq!(gpu_busy_ns(&t, &only_token), None);
        only_token.gpu_spans.push(GpuSpan(1, 0, 100, 0, 0, 1));
        assert_eq!(gpu_busy_ns(&t, &only_token), Some(100));
    }

    #[test]
    fn time_axes_take_the_unit_of_their_range() {
        // Half a second of wall time per step reads in ms, not as 500000.
        let unit = Metric::WallUs.axis_unit(500_000.0);
        assert_eq!(unit, Some(TimeUnit::Ms));
        assert_eq!(Metric::WallUs.title(unit), "wall time (ms)");
        assert_eq!(
            unit.map(|u| u.from_us(500_000.0)),
            Some(500.0),
            "values are plotted in the axis unit"
        );
        assert_eq!(Metric::GpuUs.axis_unit(850.0), Some(TimeUnit::Us));
        assert_eq!(Metric::HostEnqueueUs.axis_unit(2.5e6), Some(TimeUnit::S));
        // Sub-microsecond ranges and empty plots stay in µs.
        assert_eq!(Metric::GpuUs.axis_unit(0.3), Some(TimeUnit::Us));
        assert_eq!(Metric::GpuUs.axis_unit(0.0), Some(TimeUnit::Us));
        assert_eq!(Metric::GpuUs.title(Some(TimeUnit::Us)), "GPU time (µs)");
        // Counts have no unit.
        assert_eq!(Metric::Submits.axis_unit(500_000.0), None);
        assert_eq!(Metric::Submits.title(None), "submits");
    }

    #[test]
    fn series_follow_the_records() {
        let t = synthetic_trace(&SynthOptions {
            decode_tokens: 5,
            layers: 2,
            ..SynthOptions::default()
        });
        let s = TraceSeries::of(&t);
        assert_eq!(s.len(), t.tokens.len());
        for (i, r) in t.tokens.iter().enumerate() {
            assert_eq!(s.get(Metric::WallUs)[i], r.wall_ns as f64 / 1000.0);
            assert_eq!(s.get(Metric::Submits)[i], r.counters.submits() as f64);
            assert_eq!(
                s.get(Metric::DescriptorWrites)[i],
                r.counters.descriptor_writes as f64
            );
        }
    }
}
