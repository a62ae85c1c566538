//! The Op breakdown panel's rows: per (folded) label, A against B, from the profiler's per-op
//! table (`OpRow`: median GPU us per token, achieved GB/s, share of the device bandwidth).

use profiler::{Change, Diff, OpRow, TraceStats};

/// One side of an op row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpSide {
    pub dispatches_per_token: f64,
    /// Median GPU us per token.
    pub gpu_us: f64,
    /// Share of the tokens' GPU busy time.
    pub gpu_share: f64,
    pub bytes_per_token: f64,
    pub achieved_gbps: Option<f64>,
    /// `achieved_gbps` over the device's measured bandwidth, when the trace records it.
    pub bandwidth_share: Option<f64>,
}

impl From<&OpRow> for OpSide {
    fn from(r: &OpRow) -> OpSide {
        OpSide {
            dispatches_per_token: r.dispatches_per_token,
            gpu_us: r.gpu_us_median,
            gpu_share: r.gpu_share,
            bytes_per_token: r.bytes_per_token,
            achieved_gbps: r.achieved_gbps,
            bandwidth_share: r.bandwidth_share,
        }
    }
}

/// One label, A against B.
#[derive(Clone, Debug, PartialEq)]
pub struct OpPair {
    pub label: String,
    pub kind: String,
    pub a: Option<OpSide>,
    pub b: Option<OpSide>,
    /// The diff's verdict on the GPU us difference (`Unavailable` without both sides).
    pub change: Change,
}

impl OpPair {
    /// The larger GPU us per token of the two sides (for sorting and scaling bars).
    pub fn max_gpu_us(&self) -> f64 {
        let v = |s: &Option<OpSide>| s.map_or(0.0, |s| s.gpu_us);
        v(&self.a).max(v(&self.b))
    }
}

/// Sorts by the larger GPU time, largest first, then by label (stable for equal times).
fn sorted(mut v: Vec<OpPair>) -> Vec<OpPair> {
    v.sort_by(|x, y| {
        y.max_gpu_us()
            .total_cmp(&x.max_gpu_us())
            .then_with(|| x.label.cmp(&y.label))
    });
    v
}

/// Dispatch labels of a diff, A against B.
pub fn op_pairs_of_diff(d: &Diff) -> Vec<OpPair> {
    sorted(
        d.ops
            .iter()
            .map(|o| OpPair {
                label: o.label.clone(),
                kind: o.kind.clone(),
                a: o.a.as_ref().map(OpSide::from),
                b: o.b.as_ref().map(OpSide::from),
                change: o.change,
            })
            .collect(),
    )
}

/// Dispatch labels of one trace; `side_b` puts them on B's side (when only B is open).
pub fn op_pairs_of_stats(s: &TraceStats, side_b: bool) -> Vec<OpPair> {
    sorted(
        s.ops
            .iter()
            .map(|r| {
                let side = Some(OpSide::from(r));
                OpPair {
                    label: r.label.clone(),
                    kind: r.kind.clone(),
                    a: if side_b { None } else { side },
                    b: if side_b { side } else { None },
                    change: Change::Unavailable,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::{SynthKernels, SynthOptions, SynthSubmit, synthetic_trace};

    #[test]
    fn pairs_match_labels_and_sort_by_time() {
        let a = synthetic_trace(&SynthOptions {
            layers: 2,
            decode_tokens: 12,
            ..SynthOptions::default()
        });
        let b = synthetic_trace(&SynthOptions {
            layers: 2,
            decode_tokens: 12,
            kernels: SynthKernels::Fused,
            submit: SynthSubmit::PerToken,
            ..SynthOptions::default()
        });
        let d = profiler::compute_diff(&a, "a", &b, "b", &Default::default());
        let pairs = op_pairs_of_diff(&d);
        assert_eq!(pairs.len(), d.ops.len());
        assert!(
            pairs
                .windows(2)
                .all(|w| w[0].max_gpu_us() >= w[1].max_gpu_us())
        );
        // Every pair carries exactly the profiler's medians.
        for p in &pairs {
            let o = d.ops.iter().find(|o| o.label == p.label).expect("label");
            assert_eq!(p.a.map(|s| s.gpu_us), o.a.as_ref().map(|r| r.gpu_us_median));
            assert_eq!(p.b.map(|s| s.gpu_us), o.b.as_ref().map(|r| r.gpu_us_median));
        }
        // Primitive-only and fused-only labels have one side.
        assert!(pairs.iter().any(|p| p.a.is_some() && p.b.is_none()));
        assert!(pairs.iter().any(|p| p.a.is_none() && p.b.is_some()));

        let st = profiler::compute_stats(&b, "b", &Default::default());
        let only_b = op_pairs_of_stats(&st, true);
        assert_eq!(only_b.len(), st.ops.len());
        assert!(only_b.iter().all(|p| p.a.is_none() && p.b.is_some()));
    }
}
