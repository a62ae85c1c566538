//! The analysis behind the Summary and Op breakdown panels: `profiler::compute_diff` of A and B,
//! or `profiler::compute_stats` of the one trace that is open. It runs on a worker thread (a
//! 10,000-token diff bootstraps for a second or two).

use std::time::{Duration, Instant};

use profiler::{DiffOptions, StatsOptions};

use crate::logic::load::LoadedTrace;
use crate::logic::ops::{OpPair, op_pairs_of_diff, op_pairs_of_stats};
use crate::logic::summary::{SummaryModel, summarize_diff, summarize_stats};

/// What the Summary and Op breakdown panels show.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub summary: SummaryModel,
    pub ops: Vec<OpPair>,
    /// Warm-up decode tokens skipped in A and B (the profiler's clamped default).
    pub skip: [usize; 2],
    /// The device bandwidth each trace records, GB/s.
    pub bandwidth_gbps: [Option<f64>; 2],
    /// Time the profiler took.
    pub elapsed: Duration,
}

/// Analyses what is open: both traces as a diff (A is the baseline), or one alone. `None` when
/// neither is open.
pub fn analyse(a: Option<&LoadedTrace>, b: Option<&LoadedTrace>) -> Option<Analysis> {
    let started = Instant::now();
    let source = |t: &LoadedTrace| t.path.display().to_string();
    let bw = |t: Option<&LoadedTrace>| t.and_then(|t| t.trace.meta.device.memory_bandwidth_gbps);
    let bandwidth_gbps = [bw(a), bw(b)];
    let (summary, ops, skip) = match (a, b) {
        (Some(a), Some(b)) => {
            let d = profiler::compute_diff(
                &a.trace,
                &source(a),
                &b.trace,
                &source(b),
                &DiffOptions::default(),
            );
            (
                summarize_diff(&d),
                op_pairs_of_diff(&d),
                [d.skip_a, d.skip_b],
            )
        }
        (Some(t), None) | (None, Some(t)) => {
            let side_b = a.is_none();
            let s = profiler::compute_stats(&t.trace, &source(t), &StatsOptions::default());
            let skip = if side_b {
                [0, s.skip_applied]
            } else {
                [s.skip_applied, 0]
            };
            (
                summarize_stats(&s, if side_b { "B" } else { "A" }),
                op_pairs_of_stats(&s, side_b),
                skip,
            )
        }
        (None, None) => return None,
    };
    Some(Analysis {
        summary,
        ops,
        skip,
        bandwidth_gbps,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn loaded(decode_tokens: u32) -> LoadedTrace {
        let t = profiler::synthetic_trace(&profiler::SynthOptions {
            decode_tokens,
            layers: 1,
            ..profiler::SynthOptions::default()
        });
        LoadedTrace::new(PathBuf::from("x.json"), t, Duration::ZERO)
    }

    #[test]
    fn diff_for_two_stats_for_one() {
        let (a, b) = (loaded(8), loaded(8));
        let both = analyse(Some(&a), Some(&b)).expect("analysis");
        assert_eq!(both.summary.captures.len(), 2);
        assert_eq!(both.skip, [2, 2]);
        assert!(!both.ops.is_empty());
        assert!(both.ops.iter().all(|p| p.a.is_some() && p.b.is_some()));
        let only_b = analyse(None, Some(&b)).expect("analysis");
        assert_eq!(only_b.summary.captures[0].0, "B");
        assert_eq!(only_b.skip, [0, 2]);
        assert!(only_b.ops.iter().all(|p| p.a.is_none()));
        assert!(analyse(None, None).is_none());
    }
}
