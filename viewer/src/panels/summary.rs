//! Summary: the tables of `profiler diff` (or `profiler stats` for one trace) with the
//! comparability warnings on top and deltas coloured by direction and significance.

use eframe::egui::{self, Color32, RichText};

use crate::app::AnalysisState;
use crate::logic::summary::{SummaryModel, SummaryTable};
use crate::panels::table;
use crate::theme;

pub fn ui(ui: &mut egui::Ui, state: &AnalysisState) {
    match state {
        AnalysisState::None => {
            ui.weak("Nothing to summarize yet.");
        }
        AnalysisState::Running { .. } => {
            ui.label("computing the statistics (bootstrap intervals of every timing)…");
        }
        AnalysisState::Ready { analysis, .. } => {
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| show(ui, &analysis.summary, analysis.elapsed));
        }
    }
}

fn show(ui: &mut egui::Ui, m: &SummaryModel, elapsed: std::time::Duration) {
    ui.horizontal(|ui| {
        ui.heading(&m.title);
        ui.weak(format!("(profiler: {:.0} ms)", elapsed.as_secs_f64() * 1e3));
    });
    for w in &m.warnings {
        egui::Frame::new()
            .fill(theme::level_fill(w.level))
            .inner_margin(egui::Margin::symmetric(8, 4))
            .corner_radius(3.0)
            .show(ui, |ui| {
                ui.set_width(ui.available_width());
                let icon = match w.level {
                    crate::logic::summary::Level::Info => "ℹ",
                    crate::logic::summary::Level::Warning => "⚠",
                };
                ui.label(RichText::new(format!("{icon} {}", w.text)).color(Color32::WHITE));
            });
    }
    ui.add_space(4.0);
    // One column per capture, A on the left.
    ui.columns(m.captures.len().max(1), |cols| {
        for ((side, lines), ui) in m.captures.iter().zip(cols.iter_mut()) {
            let color = theme::side_color(usize::from(side == "B"));
            for (i, l) in lines.iter().enumerate() {
                if i == 0 {
                    ui.label(RichText::new(format!("{side}  {l}")).strong().color(color));
                } else {
                    ui.label(l);
                }
            }
        }
    });
    for n in &m.notes {
        ui.label(n);
    }
    ui.add_space(6.0);
    // Counters on the left, timings on the right; per-op tables below, full width.
    let (phase_tables, rest): (Vec<&SummaryTable>, Vec<&SummaryTable>) = m
        .tables
        .iter()
        .partition(|t| t.title.starts_with("decode") || t.title.starts_with("prefill"));
    let (counters, timings): (Vec<&SummaryTable>, Vec<&SummaryTable>) = phase_tables
        .into_iter()
        .partition(|t| t.title.contains("counters") || !t.title.contains("timings"));
    if timings.is_empty() {
        for (i, t) in counters.iter().enumerate() {
            table::show(ui, ("phase", i), t);
            ui.add_space(8.0);
        }
    } else {
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                for (i, t) in counters.iter().enumerate() {
                    table::show(ui, ("counters", i), t);
                    ui.add_space(8.0);
                }
            });
            ui.add_space(24.0);
            ui.vertical(|ui| {
                for (i, t) in timings.iter().enumerate() {
                    table::show(ui, ("timings", i), t);
                    ui.add_space(8.0);
                }
                ui.add_space(4.0);
                ui.weak("green: B lower than A (better) · red: B higher");
                ui.weak("bright and bold: significant (counters are exact; timings when the");
                ui.weak("95% interval of the median difference excludes zero)");
                ui.weak("muted: noise, or too few samples for an interval");
            });
        });
    }
    ui.add_space(8.0);
    for (i, t) in rest.iter().enumerate() {
        table::show(ui, ("ops", i), t);
        ui.add_space(8.0);
    }
}
