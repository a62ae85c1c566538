//! Lane layout of one step for the token timeline.
//!
//! Host spans get one lane per span name (`token`, `record`, `descriptors`, `submit`, `wait`,
//! `readback`, `sample`, then any other name); GPU spans get one lane per queue, with region and
//! token spans in a lane of their own beside the dispatch lane. Spans that overlap inside a lane
//! are stacked on extra rows (greedy interval partitioning), so no two spans of a row overlap and
//! every row is sorted by start: that is what hit testing relies on.
//!
//! Times are nanoseconds from the step's `start_ns`; the part of a span before it is cut off.

use profiler::stats::is_region_kind;
use profiler::{HOST_SPAN_NAMES, Trace};

/// Op kinds with a fixed colour, in palette order ([`kind_slot`]).
pub const OP_KINDS: [&str; 11] = [
    "matvec",
    "norm",
    "rope",
    "attention",
    "kv",
    "elementwise",
    "embed",
    "argmax",
    "copy",
    "region",
    "token",
];

/// Palette slot of an op kind: its index in [`OP_KINDS`], or `OP_KINDS.len()` for other kinds.
pub fn kind_slot(kind: &str) -> usize {
    OP_KINDS
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(OP_KINDS.len())
}

/// Palette slot of a host span name: its index in [`HOST_SPAN_NAMES`], or the list's length.
pub fn host_slot(name: &str) -> usize {
    HOST_SPAN_NAMES
        .iter()
        .position(|k| *k == name)
        .unwrap_or(HOST_SPAN_NAMES.len())
}

/// What a lane holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LaneKind {
    /// Host spans with this name.
    Host { name: String },
    /// GPU spans of a queue (0 compute, 1 transfer); `regions` for region and token spans.
    Gpu { queue: u8, regions: bool },
}

/// Where a span comes from: an index into the step's `host_spans` or `gpu_spans`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanSource {
    Host(usize),
    Gpu(usize),
}

/// One span placed on the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanBox {
    /// Start and end, ns from the step's start.
    pub start_ns: u64,
    pub end_ns: u64,
    pub source: SpanSource,
    /// Palette slot: [`host_slot`] of the name or [`kind_slot`] of the op kind.
    pub slot: usize,
}

/// A lane: a name and the rows it occupies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    pub name: String,
    pub kind: LaneKind,
    /// Indices into [`TokenLayout::rows`].
    pub rows: std::ops::Range<usize>,
}

/// One row of a lane: spans that do not overlap, sorted by start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneRow {
    pub lane: usize,
    pub spans: Vec<SpanBox>,
}

/// The lanes of one step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenLayout {
    /// The step (index into `Trace::tokens`).
    pub record: usize,
    pub lanes: Vec<Lane>,
    pub rows: Vec<LaneRow>,
    /// The step's wall time, or the end of its last span when later.
    pub duration_ns: u64,
}

fn queue_name(queue: u8) -> String {
    match queue {
        0 => "compute".to_owned(),
        1 => "transfer".to_owned(),
        q => format!("queue {q}"),
    }
}

/// Greedy interval partitioning of spans (sorted by start) into rows without overlap.
fn stack(mut spans: Vec<SpanBox>) -> Vec<Vec<SpanBox>> {
    spans.sort_by_key(|s| (s.start_ns, std::cmp::Reverse(s.end_ns)));
    let mut rows: Vec<Vec<SpanBox>> = Vec::new();
    for s in spans {
        match rows
            .iter_mut()
            .find(|r| r.last().is_none_or(|l| l.end_ns <= s.start_ns))
        {
            Some(r) => r.push(s),
            None => rows.push(vec![s]),
        }
    }
    rows
}

/// Lays out step `record` of `trace`; `None` when there is no such step.
pub fn layout_token(trace: &Trace, record: usize) -> Option<TokenLayout> {
    let r = trace.tokens.get(record)?;
    let rel = |start: u64| start.saturating_sub(r.start_ns);
    let mut groups: Vec<(LaneKind, Vec<SpanBox>)> = Vec::new();
    let mut push = |kind: LaneKind, span: SpanBox| match groups.iter_mut().find(|g| g.0 == kind) {
        Some(g) => g.1.push(span),
        None => groups.push((kind, vec![span])),
    };
    let mut end_ns = r.wall_ns;
    for (i, s) in r.host_spans.iter().enumerate() {
        let span = SpanBox {
            start_ns: rel(s.start_ns()),
            end_ns: rel(s.start_ns().saturating_add(s.dur_ns())),
            source: SpanSource::Host(i),
            slot: host_slot(s.name()),
        };
        end_ns = end_ns.max(span.end_ns);
        push(
            LaneKind::Host {
                name: s.name().to_owned(),
            },
            span,
        );
    }
    for (i, s) in r.gpu_spans.iter().enumerate() {
        // The reader guarantees op indices are in range; skip defensively rather than panic.
        let Some(op) = trace.ops.get(s.op() as usize) else {
            continue;
        };
        let span = SpanBox {
            start_ns: rel(s.start_ns()),
            end_ns: rel(s.start_ns().saturating_add(s.dur_ns())),
            source: SpanSource::Gpu(i),
            slot: kind_slot(&op.kind),
        };
        end_ns = end_ns.max(span.end_ns);
        push(
            LaneKind::Gpu {
                queue: s.queue(),
                regions: is_region_kind(&op.kind),
            },
            span,
        );
    }
    // Host lanes in the order of HOST_SPAN_NAMES (unknown names after, by name), then GPU lanes by
    // queue, dispatches before regions.
    groups.sort_by(|(a, _), (b, _)| {
        let key = |k: &LaneKind| match k {
            LaneKind::Host { name } => (0u8, host_slot(name), name.clone(), 0u8, false),
            LaneKind::Gpu { queue, regions } => (1, 0, String::new(), *queue, *regions),
        };
        key(a).cmp(&key(b))
    });
    let mut lanes = Vec::with_capacity(groups.len());
    let mut rows = Vec::new();
    for (kind, spans) in groups {
        let lane = lanes.len();
        let first = rows.len();
        rows.extend(
            stack(spans)
                .into_iter()
                .map(|spans| LaneRow { lane, spans }),
        );
        let name = match &kind {
            LaneKind::Host { name } => name.clone(),
            LaneKind::Gpu { queue, regions } => format!(
                "GPU {}{}",
                queue_name(*queue),
                if *regions { " regions" } else { "" }
            ),
        };
        lanes.push(Lane {
            name,
            kind,
            rows: first..rows.len(),
        });
    }
    Some(TokenLayout {
        record,
        lanes,
        rows,
        duration_ns: end_ns,
    })
}

impl TokenLayout {
    /// The span at `row`, `index`, if any.
    pub fn span(&self, row: usize, index: usize) -> Option<&SpanBox> {
        self.rows.get(row)?.spans.get(index)
    }

    /// Indices of the spans of `row` that intersect `[from_ns, to_ns]` (binary search; rows are
    /// sorted by start and by end).
    pub fn visible(&self, row: usize, from_ns: f64, to_ns: f64) -> std::ops::Range<usize> {
        let Some(r) = self.rows.get(row) else {
            return 0..0;
        };
        let lo = r.spans.partition_point(|s| (s.end_ns as f64) < from_ns);
        let hi = r.spans.partition_point(|s| (s.start_ns as f64) <= to_ns);
        lo..hi.max(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::{GpuSpan, HostSpan, OpInfo, TokenRecord};

    fn op(label: &str, kind: &str) -> OpInfo {
        OpInfo {
            label: label.into(),
            kind: kind.into(),
            ..OpInfo::default()
        }
    }

    fn trace() -> Trace {
        let mut t = profiler::synthetic_trace(&profiler::SynthOptions {
            decode_tokens: 1,
            layers: 1,
            ..profiler::SynthOptions::default()
        });
        t.ops = vec![
            op("L0.q_proj", "matvec"),
            op("L0.attn", "region"),
            op("copy_in", "copy"),
        ];
        let h = |n: &str, s, d, depth| HostSpan(n.into(), s, d, depth);
        t.tokens = vec![TokenRecord {
            start_ns: 1_000,
            wall_ns: 500,
            host_spans: vec![
                h("token", 1_000, 500, 0),
                h("record", 1_010, 40, 1),
                h("submit", 1_060, 10, 1),
                h("wait", 1_080, 300, 1),
                h("submit", 1_390, 10, 1),
                h("custom", 1_400, 5, 1),
            ],
            gpu_spans: vec![
                GpuSpan(0, 1_100, 50, 0, 0, 1),
                // Overlaps the first dispatch: goes to a second row.
                GpuSpan(0, 1_120, 50, 0, 0, 1),
                GpuSpan(0, 1_200, 50, 0, 0, 1),
                GpuSpan(1, 1_100, 150, 0, 0, 1),
                GpuSpan(2, 1_050, 20, 1, 0, 1),
                // Starts before the step: clamped to 0.
                GpuSpan(0, 900, 150, 0, 0, 1),
            ],
            ..TokenRecord::default()
        }];
        t
    }

    #[test]
    fn lanes_by_name_and_queue_in_a_fixed_order() {
        let t = trace();
        let l = layout_token(&t, 0).expect("step 0 exists");
        let names: Vec<&str> = l.lanes.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "token",
                "record",
                "submit",
                "wait",
                "custom",
                "GPU compute",
                "GPU compute regions",
                "GPU transfer"
            ]
        );
        let submit = &l.lanes[2];
        assert_eq!(submit.rows.len(), 1);
        assert_eq!(l.rows[submit.rows.start].spans.len(), 2);
        assert_eq!(l.duration_ns, 500);
        assert!(layout_token(&t, 1).is_none());
    }

    #[test]
    fn overlapping_spans_stack_and_rows_never_overlap() {
        let t = trace();
        let l = layout_token(&t, 0).expect("step 0 exists");
        let gpu = &l.lanes[5];
        assert_eq!(
            gpu.rows.len(),
            2,
            "two overlapping dispatches need two rows"
        );
        let first = &l.rows[gpu.rows.start];
        // The clamped span (0..50) first, then 100..150 and 200..250; 120..170 goes below.
        let starts: Vec<u64> = first.spans.iter().map(|s| s.start_ns).collect();
        assert_eq!(starts, [0, 100, 200]);
        assert_eq!(first.spans[0].end_ns, 50);
        assert_eq!(l.rows[gpu.rows.start + 1].spans[0].start_ns, 120);
        for row in &l.rows {
            for w in row.spans.windows(2) {
                assert!(w[0].end_ns <= w[1].start_ns, "{row:?}");
            }
            assert!(row.spans.iter().all(|s| s.slot <= OP_KINDS.len()));
        }
        // Every span of the step is placed exactly once.
        let placed: usize = l.rows.iter().map(|r| r.spans.len()).sum();
        assert_eq!(placed, 12);
    }

    #[test]
    fn colours_by_kind_and_name() {
        assert_eq!(kind_slot("matvec"), 0);
        assert_eq!(kind_slot("token"), 10);
        assert_eq!(kind_slot("mystery"), OP_KINDS.len());
        assert_eq!(host_slot("token"), 0);
        assert_eq!(host_slot("wait"), 4);
        assert_eq!(host_slot("other"), HOST_SPAN_NAMES.len());
        let t = trace();
        let l = layout_token(&t, 0).expect("step 0 exists");
        let transfer = &l.rows[l.lanes[7].rows.start].spans[0];
        assert_eq!(transfer.slot, kind_slot("copy"));
        assert_eq!(transfer.source, SpanSource::Gpu(4));
    }

    #[test]
    fn visible_range_by_binary_search() {
        let t = trace();
        let l = layout_token(&t, 0).expect("step 0 exists");
        let row = l.lanes[5].rows.start; // spans at 0..50, 100..150, 200..250
        assert_eq!(l.visible(row, 0.0, 1000.0), 0..3);
        assert_eq!(l.visible(row, 60.0, 90.0), 1..1);
        assert_eq!(l.visible(row, 140.0, 210.0), 1..3);
        assert_eq!(l.visible(row, 251.0, 300.0), 3..3);
        assert_eq!(l.visible(99, 0.0, 1.0), 0..0);
    }
}
