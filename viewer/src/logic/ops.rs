//! The Op breakdown panel's rows: per (folded) label or per op kind, A against B, from the
//! profiler's per-op and per-kind tables (`OpRow`: median GPU us per token, achieved GB/s, share
//! of the device bandwidth).

use profiler::{Change, Diff, OpDiff, OpRow, TraceStats};

/// What the rows of the Op breakdown stand for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OpView {
    /// One row per (folded) label.
    #[default]
    Label,
    /// One row per op kind (`matvec`, `norm`, ...), every dispatch of the kind summed.
    Kind,
}

impl OpView {
    pub const ALL: [OpView; 2] = [OpView::Label, OpView::Kind];

    /// The name used by `--op-view`.
    pub fn name(self) -> &'static str {
        match self {
            OpView::Label => "label",
            OpView::Kind => "kind",
        }
    }

    /// Parses an `--op-view` name.
    pub fn from_name(name: &str) -> Option<OpView> {
        OpView::ALL.into_iter().find(|v| v.name() == name)
    }

    /// The view the panel opens on: by kind when two traces are open and their labels do not
    /// line up (`profiler::Diff::labels_line_up`, the criterion of `profiler diff`), by label
    /// otherwise.
    pub fn initial(two_open: bool, labels_line_up: bool) -> OpView {
        if two_open && !labels_line_up {
            OpView::Kind
        } else {
            OpView::Label
        }
    }
}

/// The Op breakdown's view as the user left it: `forced` from the command line (`--op-view`)
/// for any traces, `chosen` by a click for the traces open at the time (the session version).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpViewChoice {
    pub forced: Option<OpView>,
    pub chosen: Option<(u64, OpView)>,
}

impl OpViewChoice {
    /// The view to show for the analysis of session `version`, whose own choice is `initial`
    /// ([`OpView::initial`]).
    pub fn shown(&self, version: u64, initial: OpView) -> OpView {
        match self.chosen {
            Some((v, view)) if v == version => view,
            _ => self.forced.unwrap_or(initial),
        }
    }

    /// The user picked `view` while session `version` was shown.
    pub fn choose(&mut self, version: u64, view: OpView) {
        self.chosen = Some((version, view));
    }
}

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

fn pairs_of_diff(rows: &[OpDiff]) -> Vec<OpPair> {
    sorted(
        rows.iter()
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

/// Dispatch labels of a diff, A against B.
pub fn op_pairs_of_diff(d: &Diff) -> Vec<OpPair> {
    pairs_of_diff(&d.ops)
}

/// Op kinds of a diff, A against B (`label` and `kind` are the kind).
pub fn kind_pairs_of_diff(d: &Diff) -> Vec<OpPair> {
    pairs_of_diff(&d.kinds)
}

/// Dispatch labels of one trace; `side_b` puts them on B's side (when only B is open).
pub fn op_pairs_of_stats(s: &TraceStats, side_b: bool) -> Vec<OpPair> {
    pairs_of_stats(&s.ops, side_b)
}

/// Op kinds of one trace; `side_b` puts them on B's side.
pub fn kind_pairs_of_stats(s: &TraceStats, side_b: bool) -> Vec<OpPair> {
    pairs_of_stats(&s.kinds, side_b)
}

fn pairs_of_stats(rows: &[OpRow], side_b: bool) -> Vec<OpPair> {
    sorted(
        rows.iter()
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
        let kinds_b = kind_pairs_of_stats(&st, true);
        assert_eq!(kinds_b.len(), st.kinds.len());
        assert!(kinds_b.iter().all(|p| p.label == p.kind && p.a.is_none()));
    }

    #[test]
    fn the_view_opens_by_kind_only_for_two_traces_whose_labels_differ() {
        assert_eq!(OpView::initial(true, false), OpView::Kind);
        assert_eq!(OpView::initial(true, true), OpView::Label);
        assert_eq!(OpView::initial(false, false), OpView::Label);
        for v in OpView::ALL {
            assert_eq!(OpView::from_name(v.name()), Some(v));
        }
        assert_eq!(OpView::from_name("labels"), None);
    }

    #[test]
    fn a_choice_holds_for_its_traces_and_the_command_line_for_all() {
        let mut c = OpViewChoice::default();
        assert_eq!(c.shown(1, OpView::Kind), OpView::Kind);
        c.choose(1, OpView::Label);
        assert_eq!(c.shown(1, OpView::Kind), OpView::Label);
        // Other traces open on their own initial view again.
        assert_eq!(c.shown(2, OpView::Kind), OpView::Kind);
        let forced = OpViewChoice {
            forced: Some(OpView::Kind),
            chosen: None,
        };
        assert_eq!(forced.shown(5, OpView::Label), OpView::Kind);
    }
}
