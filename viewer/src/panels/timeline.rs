//! Token timeline: the selected token of A above the same token of B on one time axis starting at
//! each token's start. Host lanes by span name, GPU lanes per queue with spans labelled by op,
//! colours by op kind; wheel zooms about the pointer, drag pans, double-click fits; hovering a
//! span shows its label, start, duration, and for dispatches the bytes they move and the GB/s.

use eframe::egui::{self, Align2, Color32, FontId, Pos2, Rect, RichText, Sense, Stroke, Vec2};

use crate::logic::format::{fmt_bytes, fmt_ns, fmt_tick, gbps};
use crate::logic::hit::{Geometry, Hit, Placement, hit_test, place_rows};
use crate::logic::lanes::{OP_KINDS, SpanSource, TokenLayout, layout_token};
use crate::logic::load::LoadedTrace;
use crate::logic::selection::Selection;
use crate::logic::session::{Session, SlotId};
use crate::logic::view::{TimeView, nice_step};
use crate::panels::legend_chip;
use crate::theme;

/// Layouts of the shown token, rebuilt when the token or the traces change.
struct Cache {
    version: u64,
    row: usize,
    /// `(side, trace, layout)` for each side that has the token.
    blocks: Vec<(usize, std::sync::Arc<LoadedTrace>, TokenLayout)>,
}

/// The timeline's own state.
#[derive(Default)]
pub struct TimelineState {
    pub view: TimeView,
    /// Fit the view to the token on the next frame.
    pub refit: bool,
    /// Keep the zoom when another token is selected.
    pub keep_zoom: bool,
    cache: Option<Cache>,
    nudge: f64,
}

impl TimelineState {
    /// Moves the view by a small step every call, back and forth (for `--bench-frames`).
    pub fn bench_nudge(&mut self) {
        self.nudge += 1.0;
        let w = self.view.width_ns();
        let dir = if (self.nudge as u64 / 50).is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        self.view.pan(dir * w * 0.002);
    }
}

const GUTTER_PX: f32 = 150.0;
const RULER_PX: f32 = 22.0;

fn span_label(t: &LoadedTrace, record: usize, source: SpanSource) -> &str {
    let r = &t.trace.tokens[record];
    match source {
        SpanSource::Host(i) => r.host_spans.get(i).map_or("", |s| s.name()),
        SpanSource::Gpu(i) => r
            .gpu_spans
            .get(i)
            .and_then(|s| t.trace.ops.get(s.op() as usize))
            .map_or("", |o| o.label.as_str()),
    }
}

fn rebuild(session: &Session, row: usize) -> Cache {
    let mut blocks = Vec::new();
    if let Some(r) = session.alignment().get(row) {
        for (side, slot) in SlotId::BOTH.iter().enumerate() {
            let idx = if side == 0 { r.a } else { r.b };
            if let (Some(idx), Some(t)) = (idx, session.loaded(*slot))
                && let Some(layout) = layout_token(&t.trace, idx)
            {
                blocks.push((side, std::sync::Arc::clone(t), layout));
            }
        }
    }
    Cache {
        version: session.version(),
        row,
        blocks,
    }
}

pub fn ui(ui: &mut egui::Ui, session: &Session, selection: &Selection, state: &mut TimelineState) {
    let row = selection.focus;
    let stale = state
        .cache
        .as_ref()
        .is_none_or(|c| c.version != session.version() || c.row != row);
    if stale {
        state.cache = Some(rebuild(session, row));
        if !state.keep_zoom {
            state.refit = true;
        }
    }
    let Some(cache) = state.cache.as_ref() else {
        return;
    };
    let total_ns = cache
        .blocks
        .iter()
        .map(|b| b.2.duration_ns)
        .max()
        .unwrap_or(1_000) as f64;
    if state.refit {
        state.view = TimeView::fit(total_ns);
        state.refit = false;
    }

    // Toolbar and legend.
    ui.horizontal_wrapped(|ui| {
        if ui
            .button("Fit")
            .on_hover_text("or double-click the timeline")
            .clicked()
        {
            state.view = TimeView::fit(total_ns);
        }
        ui.checkbox(&mut state.keep_zoom, "keep zoom across tokens");
        ui.weak(format!(
            "showing {} … {}",
            fmt_ns(state.view.start_ns),
            fmt_ns(state.view.end_ns)
        ));
        ui.separator();
        for (slot, kind) in OP_KINDS.iter().enumerate() {
            legend_chip(ui, theme::kind_color(slot), RichText::new(*kind).small());
        }
        ui.separator();
        for (slot, name) in profiler::HOST_SPAN_NAMES.iter().enumerate() {
            legend_chip(ui, theme::host_color(slot), RichText::new(*name).small());
        }
    });
    if cache.blocks.is_empty() {
        ui.weak("The selected row has no step in either trace.");
        return;
    }

    let size = ui.available_size().max(Vec2::new(200.0, 120.0));
    let (response, painter) = ui.allocate_painter(size, Sense::click_and_drag());
    let rect = response.rect;
    let strip_left = rect.left() + GUTTER_PX;
    let strip_w = (rect.right() - 8.0 - strip_left).max(50.0);
    let layouts: Vec<&TokenLayout> = cache.blocks.iter().map(|b| &b.2).collect();
    // Rows as tall as the panel allows, within limits, so a few lanes fill it readably.
    let n_rows: usize = layouts.iter().map(|l| l.rows.len()).sum();
    let n_gaps: usize = layouts
        .iter()
        .map(|l| l.lanes.len().saturating_sub(1))
        .sum();
    let base = Geometry::default();
    let fixed = RULER_PX
        + 4.0
        + layouts.len() as f32 * base.header_px
        + layouts.len().saturating_sub(1) as f32 * base.block_gap_px
        + n_gaps as f32 * base.lane_gap_px;
    let geometry = Geometry {
        row_px: ((rect.height() - fixed - 8.0) / n_rows.max(1) as f32).clamp(16.0, 30.0),
        ..base
    };
    let placement = place_rows(&layouts, rect.top() + RULER_PX + 4.0, &geometry);

    // Input: drag pans, wheel / pinch zooms about the pointer, double-click fits.
    let ns_per_px = state.view.ns_per_px(strip_w);
    if response.dragged() {
        state
            .view
            .pan(-(response.drag_delta().x as f64) * ns_per_px);
    }
    if response.double_clicked() {
        state.view = TimeView::fit(total_ns);
    }
    if let Some(pos) = response.hover_pos() {
        let (scroll, zoom) = ui.input(|i| (i.smooth_scroll_delta, i.zoom_delta()));
        let factor = zoom as f64 * (scroll.y as f64 * 0.004).exp();
        if (factor - 1.0).abs() > 1e-6 {
            let anchor = state.view.ns_of(pos.x, strip_left, strip_w);
            state.view.zoom(factor, anchor, total_ns * 4.0);
        }
        if scroll.x.abs() > 0.0 {
            state.view.pan(-(scroll.x as f64) * ns_per_px);
        }
    }

    let view = state.view;
    painter.rect_filled(rect, 2.0, Color32::from_gray(22));
    ruler(&painter, rect, strip_left, strip_w, &view);
    let strip_clip = Rect::from_min_max(
        Pos2::new(strip_left, rect.top()),
        Pos2::new(strip_left + strip_w, rect.bottom()),
    );
    let span_painter = painter.with_clip_rect(strip_clip.intersect(painter.clip_rect()));

    // Block headers.
    for (b, top) in placement.headers.iter().enumerate() {
        let (side, t, layout) = &cache.blocks[b];
        let r = &t.trace.tokens[layout.record];
        let text = format!(
            "{} · {} · {} · {} (step {}, position {}, kv {}) · wall {} · host enqueue {}{}",
            if *side == 0 { "A" } else { "B" },
            t.file_name(),
            t.mode(),
            session.alignment().label(cache.row),
            layout.record,
            r.position,
            r.kv_len,
            fmt_ns(r.wall_ns as f64),
            fmt_ns(r.host_enqueue_ns as f64),
            crate::logic::series::gpu_busy_ns(&t.trace, r).map_or(String::new(), |g| format!(
                " · GPU busy {}",
                fmt_ns(g as f64)
            ))
        );
        painter.text(
            Pos2::new(rect.left() + 6.0, top + geometry.header_px * 0.5),
            Align2::LEFT_CENTER,
            text,
            FontId::proportional(14.0),
            theme::side_color(*side),
        );
    }

    // Lane labels and spans.
    let mut last_lane: Option<(usize, usize)> = None;
    for p in &placement.rows {
        if p.bottom < rect.top() || p.top > rect.bottom() {
            continue;
        }
        let (_, t, layout) = &cache.blocks[p.block];
        let lane_idx = layout.rows[p.row].lane;
        if last_lane != Some((p.block, lane_idx)) {
            last_lane = Some((p.block, lane_idx));
            let lane = &layout.lanes[lane_idx];
            painter.text(
                Pos2::new(strip_left - 8.0, (p.top + p.bottom) * 0.5),
                Align2::RIGHT_CENTER,
                &lane.name,
                FontId::proportional(12.5),
                Color32::from_gray(200),
            );
        }
        painter.rect_filled(
            Rect::from_min_max(
                Pos2::new(strip_left, p.top),
                Pos2::new(strip_left + strip_w, p.bottom),
            ),
            0.0,
            if p.row % 2 == 0 {
                Color32::from_gray(30)
            } else {
                Color32::from_gray(34)
            },
        );
        let visible = layout.visible(p.row, view.start_ns, view.end_ns);
        let spans = &layout.rows[p.row].spans[visible];
        let mut drawn_to = f32::NEG_INFINITY;
        for s in spans {
            let x0 = view.x_of(s.start_ns as f64, strip_left, strip_w);
            let x1 = view
                .x_of(s.end_ns as f64, strip_left, strip_w)
                .max(x0 + 1.0);
            // Spans narrower than a pixel that land on an already painted pixel add nothing.
            if x1 <= drawn_to + 0.5 && x1 - x0 <= 1.0 {
                continue;
            }
            drawn_to = x1;
            let fill = match s.source {
                SpanSource::Host(_) => theme::host_color(s.slot),
                SpanSource::Gpu(_) => theme::kind_color(s.slot),
            };
            let r = Rect::from_min_max(Pos2::new(x0, p.top + 1.0), Pos2::new(x1, p.bottom - 1.0));
            span_painter.rect_filled(r, 1.5, fill);
            if x1 - x0 > 34.0 {
                let label = span_label(t, layout.record, s.source);
                let visible_r = r.intersect(strip_clip);
                span_painter
                    .with_clip_rect(visible_r.shrink2(Vec2::new(2.0, 0.0)))
                    .text(
                        Pos2::new(visible_r.left() + 3.0, r.center().y),
                        Align2::LEFT_CENTER,
                        label,
                        FontId::proportional(11.5),
                        theme::text_on(fill),
                    );
            }
        }
    }

    // Hover.
    if let Some(pos) = response.hover_pos()
        && pos.x >= strip_left
        && !response.dragged()
    {
        let x_ns = view.ns_of(pos.x, strip_left, strip_w);
        let tol = 3.0 * ns_per_px;
        if let Some(hit) = hit_test(&placement, &layouts, pos.y, x_ns, tol) {
            highlight(
                &span_painter,
                &placement,
                &layouts,
                hit,
                &view,
                strip_left,
                strip_w,
            );
            let (side, t, layout) = &cache.blocks[hit.block];
            let span = layout.rows[hit.row].spans[hit.span];
            response.clone().on_hover_ui_at_pointer(|ui| {
                tooltip(ui, *side, t, layout.record, span.source);
            });
        }
    }
}

fn ruler(painter: &egui::Painter, rect: Rect, left: f32, width: f32, view: &TimeView) {
    let step = nice_step(view.width_ns(), (width / 110.0).max(2.0) as usize);
    let first = (view.start_ns / step).ceil() * step;
    let mut t = first;
    let clip = painter.with_clip_rect(Rect::from_min_max(
        Pos2::new(left - 1.0, rect.top()),
        Pos2::new(left + width + 40.0, rect.bottom()),
    ));
    while t <= view.end_ns {
        let x = view.x_of(t, left, width);
        clip.line_segment(
            [
                Pos2::new(x, rect.top() + RULER_PX - 6.0),
                Pos2::new(x, rect.bottom()),
            ],
            Stroke::new(1.0, Color32::from_gray(48)),
        );
        // No label that the panel's edge would cut.
        if x > left + width - 60.0 {
            t += step;
            continue;
        }
        clip.text(
            Pos2::new(x + 3.0, rect.top() + 3.0),
            Align2::LEFT_TOP,
            fmt_tick(t, step),
            FontId::monospace(11.0),
            Color32::from_gray(170),
        );
        t += step;
    }
    painter.text(
        Pos2::new(rect.left() + 6.0, rect.top() + 3.0),
        Align2::LEFT_TOP,
        "from the token's start",
        FontId::proportional(11.0),
        Color32::from_gray(140),
    );
}

fn highlight(
    painter: &egui::Painter,
    placement: &Placement,
    layouts: &[&TokenLayout],
    hit: Hit,
    view: &TimeView,
    left: f32,
    width: f32,
) {
    let Some(p) = placement
        .rows
        .iter()
        .find(|p| p.block == hit.block && p.row == hit.row)
    else {
        return;
    };
    let Some(s) = layouts[hit.block].span(hit.row, hit.span) else {
        return;
    };
    let x0 = view.x_of(s.start_ns as f64, left, width);
    let x1 = view.x_of(s.end_ns as f64, left, width).max(x0 + 1.0);
    painter.rect_stroke(
        Rect::from_min_max(Pos2::new(x0 - 1.0, p.top), Pos2::new(x1 + 1.0, p.bottom)),
        1.5,
        Stroke::new(1.5, Color32::WHITE),
        egui::StrokeKind::Outside,
    );
}

fn tooltip(ui: &mut egui::Ui, side: usize, t: &LoadedTrace, record: usize, source: SpanSource) {
    let r = &t.trace.tokens[record];
    let side_name = if side == 0 { "A" } else { "B" };
    match source {
        SpanSource::Host(i) => {
            let Some(s) = r.host_spans.get(i) else {
                return;
            };
            ui.label(RichText::new(format!("{side_name} host: {}", s.name())).strong());
            egui::Grid::new("tip").show(ui, |ui| {
                row(
                    ui,
                    "start",
                    fmt_ns(s.start_ns().saturating_sub(r.start_ns) as f64),
                );
                row(ui, "duration", fmt_ns(s.dur_ns() as f64));
                row(ui, "depth", s.depth().to_string());
            });
        }
        SpanSource::Gpu(i) => {
            let Some(s) = r.gpu_spans.get(i) else {
                return;
            };
            let Some(op) = t.trace.ops.get(s.op() as usize) else {
                return;
            };
            let bytes = op.bytes_at(r.kv_len as u64);
            ui.label(RichText::new(format!("{side_name} GPU: {}", op.label)).strong());
            egui::Grid::new("tip").show(ui, |ui| {
                row(ui, "kind", op.kind.clone());
                row(
                    ui,
                    "start",
                    fmt_ns(s.start_ns().saturating_sub(r.start_ns) as f64),
                );
                row(ui, "duration", fmt_ns(s.dur_ns() as f64));
                if s.shared() > 1 {
                    row(
                        ui,
                        "shared",
                        format!(
                            "with {} concurrent dispatches (no barrier between them); \
                             the op table counts {}",
                            s.shared() - 1,
                            fmt_ns(s.share_ns() as f64)
                        ),
                    );
                }
                row(
                    ui,
                    "queue / submit",
                    format!(
                        "{} / #{}",
                        if s.queue() == 0 {
                            "compute"
                        } else {
                            "transfer"
                        },
                        s.submit()
                    ),
                );
                row(
                    ui,
                    "bytes",
                    if bytes > 0 {
                        format!("{} (at kv {})", fmt_bytes(bytes as f64), r.kv_len)
                    } else {
                        "-".to_owned()
                    },
                );
                let rate = gbps(bytes, s.dur_ns());
                row(
                    ui,
                    "GB/s",
                    rate.map_or("-".to_owned(), |g| format!("{g:.2}")),
                );
                if let (Some(g), Some(bw)) = (rate, t.trace.meta.device.memory_bandwidth_gbps)
                    && bw > 0.0
                {
                    row(ui, "of bandwidth", format!("{:.1}%", g / bw * 100.0));
                }
                let flops = op.flops_at(r.kv_len as u64);
                if flops > 0 && s.dur_ns() > 0 {
                    row(
                        ui,
                        "GFLOP/s",
                        format!("{:.2}", flops as f64 / s.dur_ns() as f64),
                    );
                }
            });
        }
    }
}

fn row(ui: &mut egui::Ui, k: &str, v: String) {
    ui.weak(k);
    ui.label(v);
    ui.end_row();
}
