//! Vertical placement of the timeline's rows and hit testing of spans under the pointer.
//!
//! The timeline stacks blocks (A's step above B's step); each block has a header line, then its
//! lanes' rows, with a small gap between lanes. [`place_rows`] computes those positions in
//! points; [`hit_test`] finds the span under a pointer given as a y position and a time.

use crate::logic::lanes::TokenLayout;

/// Sizes of the timeline's parts, in points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Geometry {
    pub header_px: f32,
    pub row_px: f32,
    pub lane_gap_px: f32,
    pub block_gap_px: f32,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry {
            header_px: 22.0,
            row_px: 18.0,
            lane_gap_px: 3.0,
            block_gap_px: 14.0,
        }
    }
}

/// Where one row of one block sits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowPlacement {
    /// Index into the `blocks` given to [`place_rows`].
    pub block: usize,
    /// Row index within that block's layout.
    pub row: usize,
    pub top: f32,
    pub bottom: f32,
}

/// Positions of every header and row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    /// Top of each block's header line, in block order.
    pub headers: Vec<f32>,
    /// Every row, top to bottom.
    pub rows: Vec<RowPlacement>,
    /// Bottom of the last block.
    pub bottom: f32,
}

/// Stacks `blocks` from `top` down.
pub fn place_rows(blocks: &[&TokenLayout], top: f32, g: &Geometry) -> Placement {
    let mut y = top;
    let mut out = Placement::default();
    for (b, layout) in blocks.iter().enumerate() {
        if b > 0 {
            y += g.block_gap_px;
        }
        out.headers.push(y);
        y += g.header_px;
        for (l, lane) in layout.lanes.iter().enumerate() {
            if l > 0 {
                y += g.lane_gap_px;
            }
            for row in lane.rows.clone() {
                out.rows.push(RowPlacement {
                    block: b,
                    row,
                    top: y,
                    bottom: y + g.row_px,
                });
                y += g.row_px;
            }
        }
    }
    out.bottom = y;
    out
}

/// A span under the pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub block: usize,
    pub row: usize,
    /// Index into the row's spans.
    pub span: usize,
}

/// The span at height `y` and time `x_ns` (ns from the step's start). A span containing `x_ns`
/// wins; otherwise the nearest span within `tolerance_ns` (so that spans narrower than a pixel
/// can be hovered). `None` between rows, in gaps and headers, or when nothing is near.
pub fn hit_test(
    placement: &Placement,
    blocks: &[&TokenLayout],
    y: f32,
    x_ns: f64,
    tolerance_ns: f64,
) -> Option<Hit> {
    let i = placement.rows.partition_point(|r| r.bottom <= y);
    let p = placement.rows.get(i).filter(|r| r.top <= y)?;
    let layout = blocks.get(p.block)?;
    let spans = &layout.rows.get(p.row)?.spans;
    let tol = tolerance_ns.max(0.0);
    let range = layout.visible(p.row, x_ns - tol, x_ns + tol);
    let distance = |k: usize| {
        let s = &spans[k];
        let (a, b) = (s.start_ns as f64, s.end_ns as f64);
        if x_ns < a {
            a - x_ns
        } else if x_ns > b {
            x_ns - b
        } else {
            0.0
        }
    };
    range
        .min_by(|&a, &b| distance(a).total_cmp(&distance(b)))
        .filter(|&k| distance(k) <= tol)
        .map(|span| Hit {
            block: p.block,
            row: p.row,
            span,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::lanes::{Lane, LaneKind, LaneRow, SpanBox, SpanSource};

    fn span(start_ns: u64, end_ns: u64, i: usize) -> SpanBox {
        SpanBox {
            start_ns,
            end_ns,
            source: SpanSource::Gpu(i),
            slot: 0,
        }
    }

    /// Two lanes: lane 0 with one row, lane 1 with two rows.
    fn layout() -> TokenLayout {
        TokenLayout {
            record: 0,
            lanes: vec![
                Lane {
                    name: "token".into(),
                    kind: LaneKind::Host {
                        name: "token".into(),
                    },
                    rows: 0..1,
                },
                Lane {
                    name: "GPU compute".into(),
                    kind: LaneKind::Gpu {
                        queue: 0,
                        regions: false,
                    },
                    rows: 1..3,
                },
            ],
            rows: vec![
                LaneRow {
                    lane: 0,
                    spans: vec![span(0, 1000, 0)],
                },
                LaneRow {
                    lane: 1,
                    spans: vec![span(100, 200, 1), span(300, 301, 2), span(600, 900, 3)],
                },
                LaneRow {
                    lane: 1,
                    spans: vec![span(150, 250, 4)],
                },
            ],
            duration_ns: 1000,
        }
    }

    const G: Geometry = Geometry {
        header_px: 20.0,
        row_px: 10.0,
        lane_gap_px: 2.0,
        block_gap_px: 8.0,
    };

    #[test]
    fn rows_stack_with_headers_and_gaps() {
        let l = layout();
        let p = place_rows(&[&l, &l], 100.0, &G);
        assert_eq!(p.headers, [100.0, 100.0 + 20.0 + 10.0 + 2.0 + 20.0 + 8.0]);
        assert_eq!(p.rows.len(), 6);
        assert_eq!((p.rows[0].top, p.rows[0].bottom), (120.0, 130.0));
        assert_eq!((p.rows[1].top, p.rows[2].top), (132.0, 142.0));
        assert_eq!((p.rows[3].block, p.rows[3].row), (1, 0));
        assert_eq!(p.rows[3].top, p.headers[1] + 20.0);
        assert_eq!(p.bottom, p.rows[5].bottom);
        assert_eq!(place_rows(&[], 5.0, &G).bottom, 5.0);
    }

    #[test]
    fn hit_inside_near_and_nowhere() {
        let l = layout();
        let blocks = [&l, &l];
        let p = place_rows(&blocks, 0.0, &G);
        // Row 1 of block 0 spans y 32..42.
        let hit = |y, x, tol| hit_test(&p, &blocks, y, x, tol);
        assert_eq!(
            hit(35.0, 150.0, 0.0),
            Some(Hit {
                block: 0,
                row: 1,
                span: 0
            })
        );
        // The 1-ns span at 300 is found from 3 ns away with a 5 ns tolerance, not with 2.
        assert_eq!(hit(35.0, 304.0, 5.0).map(|h| h.span), Some(1));
        assert_eq!(hit(35.0, 304.0, 2.0), None);
        // Between two spans the nearer wins.
        assert_eq!(hit(35.0, 560.0, 100.0).map(|h| h.span), Some(2));
        assert_eq!(hit(35.0, 320.0, 100.0).map(|h| h.span), Some(1));
        // The second row of the GPU lane.
        assert_eq!(hit(45.0, 240.0, 0.0).map(|h| (h.row, h.span)), Some((2, 0)));
        // Header, lane gap, below everything.
        assert_eq!(hit(10.0, 150.0, 0.0), None);
        assert_eq!(hit(31.0, 150.0, 0.0), None);
        assert_eq!(hit(p.bottom + 1.0, 150.0, 0.0), None);
        // Block B's first row.
        let y_b = p.rows[3].top + 1.0;
        assert_eq!(
            hit(y_b, 999.0, 0.0),
            Some(Hit {
                block: 1,
                row: 0,
                span: 0
            })
        );
        assert_eq!(hit(y_b, 1001.0, 0.0), None);
    }
}
