//! Op breakdown: GPU time per token per (folded) label or per op kind, A against B as paired
//! bars (in the unit that suits the slowest row), with how much faster B is, the achieved GB/s
//! and the share of the device bandwidth (or of the GPU time when the trace records no
//! bandwidth). The numbers are the profiler's per-op and per-kind tables over the analysed decode
//! tokens. Two traces whose labels do not line up (a foreign program against the decoder) open
//! by kind.

use eframe::egui::{self, RichText};
use egui_plot::{Bar, BarChart, Legend, Plot};

use crate::app::AnalysisState;
use crate::logic::format::{TimeUnit, fmt_bytes, fmt_pct, fmt_speedup, fmt_us, fmt_value};
use crate::logic::ops::{OpPair, OpSide, OpView, OpViewChoice};
use crate::logic::session::{Session, SlotId};
use crate::logic::summary::{SummaryRow, SummaryTable, Tone, tone_of};
use crate::panels::table;
use crate::theme;

pub fn ui(ui: &mut egui::Ui, session: &Session, state: &AnalysisState, choice: &mut OpViewChoice) {
    let Some((version, a)) = state.ready_with_version() else {
        ui.label("computing the per-op table…");
        return;
    };
    if a.ops.is_empty() {
        ui.weak(
            "No dispatch spans in the analysed decode tokens: capture with --timestamps dispatch \
             to see per-op times.",
        );
        return;
    }
    let names: Vec<String> = SlotId::BOTH
        .iter()
        .map(|s| {
            session.loaded(*s).map_or_else(
                || format!("{} (not open)", s.name()),
                |t| format!("{} {}", s.name(), t.mode()),
            )
        })
        .collect();
    let bandwidth_known = a.bandwidth_gbps.iter().any(Option::is_some);
    let mut view = choice.shown(version, a.op_view);
    ui.horizontal(|ui| {
        ui.label("Rows:");
        for v in OpView::ALL {
            let text = match v {
                OpView::Label => "by label",
                OpView::Kind => "by kind",
            };
            if ui.selectable_label(view == v, text).clicked() && view != v {
                view = v;
                choice.choose(version, v);
            }
        }
        if let Some(o) = a.label_overlap.as_ref().filter(|o| !o.lines_up()) {
            ui.weak(format!(
                "· the labels of A and B do not line up ({} of A's and {} of B's GPU time is in \
                 labels both have): compare them by kind",
                fmt_pct(o.a_shared),
                fmt_pct(o.b_shared)
            ));
        }
    });
    let rows = match view {
        OpView::Label => &a.ops,
        OpView::Kind => &a.kinds,
    };
    ui.horizontal(|ui| {
        ui.label(
            RichText::new(format!("■ {}", names[0]))
                .color(theme::A_COLOR)
                .strong(),
        );
        ui.label(
            RichText::new(format!("■ {}", names[1]))
                .color(theme::B_COLOR)
                .strong(),
        );
        ui.weak(format!(
            "· median GPU time per decode token (first {} / {} tokens skipped) · {}",
            a.skip[0],
            a.skip[1],
            match view {
                OpView::Label => "labels with layer numbers folded into *",
                OpView::Kind => "every dispatch of a kind summed",
            }
        ));
        if !bandwidth_known {
            ui.weak("· the traces record no device bandwidth: shares are of GPU time");
        }
    });
    let avail = ui.available_size();
    let chart_w = (avail.x * 0.38).max(300.0);
    ui.horizontal_top(|ui| {
        chart(ui, rows, &names, [chart_w, avail.y - 8.0]);
        ui.separator();
        egui::ScrollArea::both()
            .id_salt("ops_table")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                ui.vertical(|ui| {
                    table::show(
                        ui,
                        "ops_pairs",
                        &pairs_table(rows, view, bandwidth_known, a.bandwidth_gbps),
                    );
                });
            });
    });
}

/// Horizontal paired bars, the slowest label on top.
fn chart(ui: &mut egui::Ui, ops: &[OpPair], names: &[String], [w, h]: [f32; 2]) {
    let n = ops.len();
    let unit = TimeUnit::for_range_us(ops.iter().map(OpPair::max_gpu_us)).max(TimeUnit::Us);
    let scale = unit.from_us(1.0);
    // Label i sits at y = n - 1 - i so the first (slowest) is on top.
    let y_of = |i: usize| (n - 1 - i) as f64;
    let bars = |side: usize| -> Vec<Bar> {
        ops.iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let s = if side == 0 { p.a } else { p.b }?;
                let offset = if side == 0 { 0.2 } else { -0.2 };
                let color = theme::side_color(side);
                Some(
                    Bar::new(y_of(i) + offset, s.gpu_us * scale)
                        .width(0.38)
                        .fill(color)
                        .stroke(egui::Stroke::new(1.0, color))
                        .name(format!("{}\n{} / token", p.label, fmt_us(s.gpu_us))),
                )
            })
            .collect()
    };
    let labels: Vec<String> = ops.iter().map(|p| p.label.clone()).collect();
    Plot::new("op_bars")
        .width(w)
        .height(h.max(200.0))
        .legend(Legend::default())
        .allow_scroll(false)
        .allow_drag([true, false])
        .allow_zoom([true, false])
        .y_axis_min_width(150.0)
        .x_axis_label(format!(
            "GPU time per decode token (median, {})",
            unit.name()
        ))
        .y_grid_spacer(move |_input| {
            (0..n)
                .map(|i| egui_plot::GridMark {
                    value: i as f64,
                    step_size: 1.0,
                })
                .collect()
        })
        .y_axis_formatter(move |mark, _range| {
            let v = mark.value.round();
            if (mark.value - v).abs() > 1e-6 || v < 0.0 || v as usize >= n {
                return String::new();
            }
            labels.get(n - 1 - v as usize).cloned().unwrap_or_default()
        })
        .show(ui, |pui| {
            pui.bar_chart(
                BarChart::new(names[0].clone(), bars(0))
                    .horizontal()
                    .color(theme::A_COLOR),
            );
            pui.bar_chart(
                BarChart::new(names[1].clone(), bars(1))
                    .horizontal()
                    .color(theme::B_COLOR),
            );
        });
}

fn share(s: &OpSide, bandwidth_known: bool) -> String {
    if bandwidth_known {
        s.bandwidth_share.map_or("-".to_owned(), fmt_pct)
    } else {
        fmt_pct(s.gpu_share)
    }
}

fn pairs_table(
    ops: &[OpPair],
    view: OpView,
    bandwidth_known: bool,
    bw: [Option<f64>; 2],
) -> SummaryTable {
    let share_name = if bandwidth_known {
        "of bandwidth"
    } else {
        "of GPU time"
    };
    // A kind row's label is its kind: one column says it.
    let by_kind = view == OpView::Kind;
    let mut cols: Vec<(String, bool)> = vec![("label".into(), false), ("kind".into(), false)];
    if by_kind {
        cols.remove(0);
    }
    cols.extend([
        ("A time".into(), true),
        ("B time".into(), true),
        ("B vs A".into(), true),
        ("A GB/s".into(), true),
        ("B GB/s".into(), true),
        (format!("A {share_name}"), true),
        (format!("B {share_name}"), true),
        ("A bytes".into(), true),
        ("B bytes".into(), true),
    ]);
    let opt =
        |s: Option<OpSide>, f: &dyn Fn(&OpSide) -> String| s.as_ref().map_or("-".to_owned(), f);
    // A foreign program's capture knows no bytes.
    let bytes = |s: &OpSide| {
        if s.bytes_per_token > 0.0 {
            fmt_bytes(s.bytes_per_token)
        } else {
            "-".to_owned()
        }
    };
    let rows = ops
        .iter()
        .map(|p| {
            let speedup = fmt_speedup(
                p.a.map(|s| s.gpu_us),
                p.b.map(|s| s.gpu_us),
                profiler::Better::Lower,
            );
            let mut cells = vec![p.label.clone(), p.kind.clone()];
            if by_kind {
                cells.remove(0);
            }
            cells.extend([
                opt(p.a, &|s| fmt_us(s.gpu_us)),
                opt(p.b, &|s| fmt_us(s.gpu_us)),
                speedup,
                opt(p.a, &|s| s.achieved_gbps.map_or("-".into(), fmt_value)),
                opt(p.b, &|s| s.achieved_gbps.map_or("-".into(), fmt_value)),
                opt(p.a, &|s| share(s, bandwidth_known)),
                opt(p.b, &|s| share(s, bandwidth_known)),
                opt(p.a, &bytes),
                opt(p.b, &bytes),
            ]);
            SummaryRow {
                cells,
                tone: if p.a.is_some() && p.b.is_some() {
                    tone_of(p.change)
                } else {
                    Tone::Neutral
                },
                significant: matches!(
                    p.change,
                    profiler::Change::Increase | profiler::Change::Decrease
                ),
            }
        })
        .collect();
    let bw_text = |b: Option<f64>| b.map_or("not recorded".to_owned(), |g| format!("{g:.0} GB/s"));
    SummaryTable {
        title: format!(
            "per {}, decode tokens (device bandwidth: A {}, B {})",
            view.name(),
            bw_text(bw[0]),
            bw_text(bw[1])
        ),
        columns: cols.iter().map(|c| c.0.clone()).collect(),
        right: cols.iter().map(|c| c.1).collect(),
        // The "B vs A" column.
        toned: vec![if by_kind { 3 } else { 4 }],
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(gpu_us: f64) -> OpSide {
        OpSide {
            dispatches_per_token: 1.0,
            gpu_us,
            gpu_share: 0.5,
            bytes_per_token: 1e6,
            achieved_gbps: Some(100.0),
            bandwidth_share: None,
        }
    }

    #[test]
    fn the_table_says_how_much_faster_b_is_in_readable_units() {
        let ops = vec![
            OpPair {
                label: "lm_head".into(),
                kind: "matvec".into(),
                a: Some(side(1_500.0)),
                b: Some(side(500.0)),
                change: profiler::Change::Decrease,
            },
            OpPair {
                label: "L*.q_proj".into(),
                kind: "matvec".into(),
                a: Some(side(8.0)),
                b: None,
                change: profiler::Change::Unavailable,
            },
        ];
        let t = pairs_table(&ops, OpView::Label, false, [None, None]);
        assert_eq!(t.columns[2..5], ["A time", "B time", "B vs A"]);
        assert_eq!(t.rows[0].cells[2..5], ["1.50 ms", "500 µs", "3.00x better"]);
        assert_eq!(t.rows[0].tone, Tone::Better);
        assert_eq!(t.rows[1].cells[2..5], ["8 µs", "-", "-"]);
        assert_eq!(t.toned, [4]);
    }

    #[test]
    fn the_kind_table_has_one_name_column() {
        let ops = vec![OpPair {
            label: "matvec".into(),
            kind: "matvec".into(),
            a: Some(side(2_000.0)),
            b: Some(side(1_000.0)),
            change: profiler::Change::Decrease,
        }];
        let t = pairs_table(&ops, OpView::Kind, false, [None, None]);
        assert_eq!(t.columns[..4], ["kind", "A time", "B time", "B vs A"]);
        assert_eq!(
            t.rows[0].cells[..4],
            ["matvec", "2 ms", "1 ms", "2.00x better"]
        );
        assert_eq!(t.toned, [3]);
        assert!(t.title.starts_with("per kind"));
        assert_eq!(t.columns.len(), t.rows[0].cells.len());
    }
}
