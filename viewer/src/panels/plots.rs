//! Per-token plots: host enqueue, GPU and wall time, submits, barriers and descriptor writes per
//! token, A and B overlaid on the aligned token axis, the prefill shaded. A click selects the
//! token under the pointer in every panel; shift-click selects a range.

use eframe::egui::{self, Color32, RichText, Vec2};
use egui_plot::{Line, Plot, PlotPoints, Polygon, VLine};
use profiler::Phase;

use crate::logic::align::Alignment;
use crate::logic::decimate::decimate_min_max;
use crate::logic::load::LoadedTrace;
use crate::logic::selection::{Selection, row_at_x};
use crate::logic::series::Metric;
use crate::logic::session::{Session, SlotId};
use crate::logic::settings::Settings;
use crate::panels::legend_chip;
use crate::theme;

/// The prefill band's fill, and an opaque swatch of how it looks on the plot background.
const PREFILL_FILL: Color32 = Color32::from_rgba_premultiplied(36, 36, 36, 36);
const PREFILL_FILL_OPAQUE: Color32 = Color32::from_gray(62);

/// The values of `metric` on the aligned axis for one side (NaN where the side has no step).
fn aligned_values(al: &Alignment, t: &LoadedTrace, side: usize, metric: Metric) -> Vec<f64> {
    let v = t.series.get(metric);
    al.rows
        .iter()
        .map(|r| {
            let i = if side == 0 { r.a } else { r.b };
            i.and_then(|i| v.get(i).copied()).unwrap_or(f64::NAN)
        })
        .collect()
}

fn max_where(al: &Alignment, values: &[f64], decode_only: bool) -> f64 {
    values
        .iter()
        .zip(&al.rows)
        .filter(|(v, r)| !v.is_nan() && (!decode_only || r.phase == Phase::Decode))
        .map(|(v, _)| *v)
        .fold(0.0, f64::max)
}

fn rect(x0: f64, x1: f64, y0: f64, y1: f64) -> PlotPoints<'static> {
    PlotPoints::new(vec![[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
}

pub fn ui(
    ui: &mut egui::Ui,
    session: &Session,
    selection: &mut Selection,
    settings: &mut Settings,
) {
    let al = session.alignment();
    let sides: Vec<(usize, &LoadedTrace)> = SlotId::BOTH
        .iter()
        .filter_map(|s| session.loaded(*s).map(|t| (s.index(), t.as_ref())))
        .collect();
    ui.horizontal(|ui| {
        for (side, t) in &sides {
            legend_chip(
                ui,
                theme::side_color(*side),
                RichText::new(format!(
                    "{} {} ({})",
                    if *side == 0 { "A" } else { "B" },
                    t.file_name(),
                    t.mode()
                ))
                .color(theme::side_color(*side))
                .strong(),
            );
        }
        legend_chip(ui, PREFILL_FILL_OPAQUE, "prefill");
        ui.separator();
        ui.checkbox(&mut settings.fit_decode, "fit y to decode tokens")
            .on_hover_text("The prefill step processes the whole prompt and can be many times longer than a decode token; fitting the y axis to decode tokens keeps them readable.");
        ui.weak("x: decode token (the prefill step left of 0) · drag to pan, ctrl+wheel to zoom, double-click to reset");
    });
    let spacing = 8.0;
    let w = ((ui.available_width() - spacing) / 2.0).max(100.0);
    let h = ((ui.available_height() - 2.0 * spacing) / 3.0).max(80.0);
    let mut clicked: Option<(f64, bool)> = None;
    let shift = ui.input(|i| i.modifiers.shift);
    ui.spacing_mut().item_spacing = Vec2::splat(spacing);
    for pair in Metric::ALL.chunks(2) {
        ui.horizontal(|ui| {
            for metric in pair {
                if let Some(x) = plot(ui, *metric, al, &sides, selection, settings, [w, h]) {
                    clicked = Some((x, shift));
                }
            }
        });
    }
    if let Some((x, extend)) = clicked
        && let Some(row) = row_at_x(x + al.prefill_len() as f64, al.len())
    {
        selection.click(row, extend);
    }
}

/// Draws one plot; returns the x of a click.
fn plot(
    ui: &mut egui::Ui,
    metric: Metric,
    al: &Alignment,
    sides: &[(usize, &LoadedTrace)],
    selection: &Selection,
    settings: &Settings,
    [w, h]: [f32; 2],
) -> Option<f64> {
    let values: Vec<(usize, String, Vec<f64>)> = sides
        .iter()
        .map(|(side, t)| {
            (
                *side,
                format!("{} {}", if *side == 0 { "A" } else { "B" }, t.mode()),
                aligned_values(al, t, *side, metric),
            )
        })
        .collect();
    let has_decode = al.rows.iter().any(|r| r.phase == Phase::Decode);
    let y_all = values
        .iter()
        .map(|(_, _, v)| max_where(al, v, false))
        .fold(0.0, f64::max);
    let y_decode = values
        .iter()
        .map(|(_, _, v)| max_where(al, v, true))
        .fold(0.0, f64::max);
    let y_fit = if settings.fit_decode && has_decode {
        y_decode
    } else {
        y_all
    };
    // Times are drawn in the unit that suits the plotted range (µs, ms or s), counts as they are.
    let unit = metric.axis_unit(y_fit);
    let scale = unit.map_or(1.0, |u| u.from_us(1.0));
    let values: Vec<(usize, String, Vec<f64>)> = values
        .into_iter()
        .map(|(side, name, v)| (side, name, v.into_iter().map(|x| x * scale).collect()))
        .collect();
    let (y_all, y_fit) = (y_all * scale, y_fit * scale);
    let y_top = if y_fit > 0.0 { y_fit * 1.08 } else { 1.0 };
    let fmt_y = move |y: f64| match unit {
        Some(u) => u.fmt_us(y / u.from_us(1.0)),
        None => profiler::fmt_value(y),
    };
    let n = al.len();
    // Decode token k at x = k; prefill rows at negative x.
    let off = al.prefill_len() as f64;
    let resp = Plot::new(("per_token", metric.profiler_name()))
        .width(w)
        .height(h)
        .link_axis("per_token_x", [true, false])
        .link_cursor("per_token_x", [true, false])
        .allow_scroll(false)
        .allow_zoom([true, false])
        .allow_drag([true, false])
        .y_axis_min_width(40.0)
        .x_axis_label(RichText::new(metric.title(unit)).strong())
        .x_axis_formatter(|mark, _range| {
            // Rows sit at integers: name them by phase (decode tokens by their ordinal).
            let v = mark.value.round();
            if (mark.value - v).abs() > 1e-6 || v < 0.0 {
                return String::new();
            }
            match al
                .get((v + off).max(0.0) as usize)
                .filter(|_| v + off >= 0.0)
            {
                Some(r) if r.phase == Phase::Prefill => "prefill".to_owned(),
                Some(r) => r.ordinal.to_string(),
                None => String::new(),
            }
        })
        .label_formatter(move |name, p| {
            let row = row_at_x(p.x + off, n).map_or("-".to_owned(), |r| al.label(r));
            if name.is_empty() {
                format!("{row}\n{}", fmt_y(p.y))
            } else {
                format!("{name}\n{row}: {}", fmt_y(p.y))
            }
        })
        .show(ui, |pui| {
            let b = pui.plot_bounds();
            // Up to four points per bucket: two buckets per point of width.
            let buckets = (w as usize / 2).max(16);
            if let Some((p0, p1)) = al.prefill_rows() {
                pui.polygon(
                    Polygon::new(
                        "prefill",
                        rect(
                            p0 as f64 - off - 0.5,
                            p1 as f64 - off + 0.5,
                            0.0,
                            y_all.max(y_top),
                        ),
                    )
                    .fill_color(PREFILL_FILL)
                    .stroke(egui::Stroke::NONE)
                    .allow_hover(false),
                );
            }
            if !selection.is_single() {
                let r = selection.range();
                pui.polygon(
                    Polygon::new(
                        "selection",
                        rect(
                            *r.start() as f64 - off - 0.5,
                            *r.end() as f64 - off + 0.5,
                            0.0,
                            y_all.max(y_top),
                        ),
                    )
                    .fill_color(Color32::from_rgba_unmultiplied(255, 255, 255, 14))
                    .stroke(egui::Stroke::new(1.0, Color32::from_gray(110)))
                    .allow_hover(false),
                );
            }
            // While x fits the data, the line must span every row (the bounds are computed from
            // it); once the user zooms or pans, only the visible rows are drawn.
            let (x0, x1) = if pui.auto_bounds().x {
                (0.0, n.saturating_sub(1) as f64)
            } else {
                (b.min()[0] + off, b.max()[0] + off)
            };
            for (side, name, v) in &values {
                let mut pts = decimate_min_max(v, x0, x1, buckets);
                for p in &mut pts {
                    p[0] -= off;
                }
                pui.line(
                    Line::new(name.clone(), PlotPoints::new(pts))
                        .color(theme::side_color(*side))
                        .width(1.5),
                );
            }
            pui.vline(
                VLine::new("selected", selection.focus as f64 - off)
                    .color(Color32::from_gray(230))
                    .width(1.0)
                    .allow_hover(false),
            );
            pui.set_plot_bounds_y(0.0..=y_top);
            pui.pointer_coordinate()
        });
    if resp.response.clicked() {
        resp.inner.map(|p| p.x)
    } else {
        None
    }
}
