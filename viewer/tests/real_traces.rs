//! The viewer's logic on real captures of `tiny` (generic against fused), without a window:
//! loading, A/B alignment, selection, the timeline's lanes and hit testing, the flamegraph frame,
//! and the summary carrying `profiler diff`'s numbers.

use std::path::{Path, PathBuf};

use profiler::Phase;
use viewer::logic::{
    self, Geometry, SpanSource, analyse, flatten_host_spans, hit_test, layout_token, load_trace,
    place_rows,
};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn generic_and_fused_align_token_by_token() {
    let a = load_trace(&data("generic.json")).expect("generic");
    let b = load_trace(&data("fused.json")).expect("fused");
    let al = logic::align(&a.phases, &b.phases);
    assert_eq!(al.len(), a.trace.tokens.len());
    assert_eq!(al.rows[0].phase, Phase::Prefill);
    for (i, r) in al.rows.iter().enumerate() {
        assert_eq!((r.a, r.b), (Some(i), Some(i)));
        // Paired steps are at the same position of the same generation.
        let (ta, tb) = (&a.trace.tokens[i], &b.trace.tokens[i]);
        assert_eq!((ta.position, ta.kv_len), (tb.position, tb.kv_len));
    }
    let mut sel = logic::Selection::single(al.decode_row(2).expect("decode 2"));
    assert_eq!(al.label(sel.focus), "decode 2");
    sel.click(al.len() - 1, true);
    assert_eq!(sel.count(), al.len() - 3);
}

#[test]
fn timeline_lanes_and_hit_testing_on_a_decode_token() {
    let a = load_trace(&data("generic.json")).expect("generic");
    let b = load_trace(&data("fused.json")).expect("fused");
    let la = layout_token(&a.trace, 3).expect("step 3");
    let lb = layout_token(&b.trace, 3).expect("step 3");
    for (t, l) in [(&a, &la), (&b, &lb)] {
        let r = &t.trace.tokens[3];
        let placed: usize = l.rows.iter().map(|r| r.spans.len()).sum();
        assert_eq!(placed, r.host_spans.len() + r.gpu_spans.len());
        assert_eq!(l.lanes[0].name, "token");
        assert!(l.lanes.iter().any(|l| l.name == "GPU compute"));
        assert!(l.duration_ns >= r.wall_ns);
    }
    // The generic preset submits and waits after every dispatch: 88 submit spans in one lane.
    let submit = la
        .lanes
        .iter()
        .find(|l| l.name == "submit")
        .expect("submit lane");
    let n: usize = la.rows[submit.rows.clone()]
        .iter()
        .map(|r| r.spans.len())
        .sum();
    assert_eq!(n as u64, a.trace.tokens[3].counters.submits());

    // Hit testing finds the GPU span under a point in its middle, in either block.
    let g = Geometry::default();
    let blocks = [&la, &lb];
    let placement = place_rows(&blocks, 0.0, &g);
    for (b, layout) in blocks.iter().enumerate() {
        let lane = layout
            .lanes
            .iter()
            .find(|l| l.name == "GPU compute")
            .expect("gpu lane");
        let row = lane.rows.start;
        let p = placement
            .rows
            .iter()
            .find(|p| p.block == b && p.row == row)
            .expect("placed");
        for (k, s) in layout.rows[row].spans.iter().enumerate() {
            let mid = (s.start_ns + s.end_ns) as f64 / 2.0;
            let hit = hit_test(&placement, &blocks, (p.top + p.bottom) / 2.0, mid, 0.0)
                .expect("a span under its middle");
            assert_eq!((hit.block, hit.row, hit.span), (b, row, k));
            assert!(matches!(s.source, SpanSource::Gpu(_)));
        }
    }
}

#[test]
fn flamegraph_frame_holds_every_host_span_of_the_selection() {
    let a = load_trace(&data("generic.json")).expect("generic");
    let b = load_trace(&data("fused.json")).expect("fused");
    let mut expected = 0;
    let mut threads = Vec::new();
    for t in [&a, &b] {
        let origin = t.trace.tokens[3].start_ns;
        let mut scopes = Vec::new();
        for i in 3..6 {
            let spans = &t.trace.tokens[i].host_spans;
            expected += spans.len();
            scopes.extend(flatten_host_spans(
                spans,
                origin,
                &format!("decode {}", i - 1),
            ));
        }
        // Pre-order: every scope's level is at most one more than the previous scope's.
        assert!(scopes.windows(2).all(|w| w[1].level <= w[0].level + 1));
        assert_eq!(scopes.iter().filter(|s| s.level == 0).count(), 3);
        threads.push((t.mode().to_owned(), scopes));
    }
    let frame = logic::build_frame(&threads).expect("frame");
    assert_eq!(frame.meta().num_scopes, expected);
}

#[test]
fn summary_and_ops_carry_the_profiler_diff() {
    let a = load_trace(&data("generic.json")).expect("generic");
    let b = load_trace(&data("fused.json")).expect("fused");
    let analysis = analyse(Some(&a), Some(&b)).expect("analysis");
    let d = profiler::compute_diff(
        &a.trace,
        &a.path.display().to_string(),
        &b.trace,
        &b.path.display().to_string(),
        &Default::default(),
    );
    let text = profiler::render_diff(&d, None, profiler::Format::Human);
    // Every number of every counter and timing row is in the profiler's report.
    for t in &analysis.summary.tables {
        if t.title.starts_with("ops") || t.title.starts_with("regions") {
            continue;
        }
        for r in &t.rows {
            for cell in &r.cells[1..5] {
                assert!(
                    text.contains(cell.as_str()),
                    "{cell} of {:?} not in\n{text}",
                    r.cells
                );
            }
        }
    }
    // Identical generations; only knobs differ, so nothing is a warning.
    assert!(
        analysis
            .summary
            .warnings
            .iter()
            .all(|w| w.level == logic::Level::Info)
    );
    assert_eq!(analysis.ops.len(), d.ops.len());
    let lm_head = analysis
        .ops
        .iter()
        .find(|p| p.label == "lm_head")
        .expect("lm_head in both");
    assert!(lm_head.a.is_some() && lm_head.b.is_some());
}
