//! The analysis behind the Summary and Op breakdown panels: `profiler::compute_diff` of A and B,
//! or `profiler::compute_stats` of the one trace that is open. It runs on a worker thread (a
//! 10,000-token diff bootstraps for a second or two).

use std::time::{Duration, Instant};

use profiler::{DiffOptions, LabelOverlap, StatsOptions};

use crate::logic::load::LoadedTrace;
use crate::logic::ops::{
    OpPair, OpView, kind_pairs_of_diff, kind_pairs_of_stats, op_pairs_of_diff, op_pairs_of_stats,
};
use crate::logic::summary::{SummaryModel, summarize_diff, summarize_stats};

/// What the Summary and Op breakdown panels show.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub summary: SummaryModel,
    pub ops: Vec<OpPair>,
    /// The same dispatches by op kind.
    pub kinds: Vec<OpPair>,
    /// How far the labels of A and B line up (`None` with one trace or no dispatch spans).
    pub label_overlap: Option<LabelOverlap>,
    /// The Op breakdown's view until the user picks one: by kind for two traces whose labels
    /// do not line up.
    pub op_view: OpView,
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
    let (summary, ops, kinds, label_overlap, op_view, skip) = match (a, b) {
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
                kind_pairs_of_diff(&d),
                d.label_overlap.clone(),
                OpView::initial(true, d.labels_line_up()),
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
                kind_pairs_of_stats(&s, side_b),
                None,
                OpView::initial(false, true),
                skip,
            )
        }
        (None, None) => return None,
    };
    Some(Analysis {
        summary,
        ops,
        kinds,
        label_overlap,
        op_view,
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
        // Two decoder traces of one preset: the labels line up, the panel opens by label.
        assert_eq!(both.op_view, OpView::Label);
        assert!(both.label_overlap.as_ref().is_some_and(|o| o.lines_up()));
        assert!(!both.kinds.is_empty());
    }

    /// A llama.cpp-like capture (`meta.capture` present, every dispatch of kind `dispatch`
    /// with a ggml-vulkan pipeline name), as `profiler record` writes it before kinds existed.
    fn llama_like(decode_tokens: u32) -> profiler::Trace {
        let mut t = profiler::synthetic_trace(&profiler::SynthOptions {
            decode_tokens,
            layers: 2,
            ..profiler::SynthOptions::default()
        });
        t.meta.capture = Some(profiler::CaptureMeta::default());
        for op in &mut t.ops {
            let name = match op.kind.as_str() {
                "matvec" => "mul_mat_vec_q4_k_f32_f32",
                "norm" => "rms_norm_mul_f32",
                "rope" => "rope_neox_f32",
                "attention" => "flash_attn_f32_f16_D64",
                "kv" => "set_rows_f16_i64",
                "elementwise" => "add_f32_f32_f32_norepeat",
                "embed" => "get_rows_f16",
                "copy" => "cpy_f32_f16",
                _ => continue,
            };
            // One label per kind and layer, as ggml-vulkan's pipelines are shared by layers.
            op.label = name.to_owned();
            op.kind = "dispatch".to_owned();
        }
        t
    }

    #[test]
    fn a_foreign_capture_against_the_decoder_opens_by_kind_with_matvec_against_matvec() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("llama.json");
        profiler::write_trace(&path, &llama_like(8)).expect("write");
        // Loading gives the foreign dispatches their kinds.
        let a = crate::logic::load::load_trace(&path).expect("load");
        assert!(a.trace.ops.iter().all(|o| o.kind != "dispatch"));
        let b = LoadedTrace::new(
            PathBuf::from("fused.json"),
            profiler::synthetic_trace(&profiler::SynthOptions {
                decode_tokens: 8,
                layers: 2,
                kernels: profiler::SynthKernels::Fused,
                ..profiler::SynthOptions::default()
            }),
            Duration::ZERO,
        );
        let both = analyse(Some(&a), Some(&b)).expect("analysis");
        assert_eq!(both.op_view, OpView::Kind);
        assert!(both.label_overlap.as_ref().is_some_and(|o| !o.lines_up()));
        let matvec = both
            .kinds
            .iter()
            .find(|p| p.label == "matvec")
            .expect("a matvec row");
        assert!(matvec.a.is_some() && matvec.b.is_some());
        // The slowest kind comes first, as in the label view.
        assert_eq!(both.kinds[0].label, "matvec");
        // One trace alone opens by label.
        assert_eq!(analyse(Some(&a), None).expect("one").op_view, OpView::Label);
    }
}
