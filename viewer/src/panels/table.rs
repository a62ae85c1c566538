//! Drawing a [`SummaryTable`]: a striped grid; numeric columns in a monospace font, right-aligned
//! by padding to the column's widest cell (so the layout is right from the first frame); toned
//! columns coloured by the row's direction and significance.

use eframe::egui::{self, Color32, RichText};

use crate::logic::summary::SummaryTable;
use crate::theme;

/// Draws `t` under its title; `id` must be unique in the panel.
pub fn show(ui: &mut egui::Ui, id: impl std::hash::Hash, t: &SummaryTable) {
    ui.label(RichText::new(&t.title).strong());
    let n = t.columns.len();
    let mut width = vec![0usize; n];
    for (i, c) in t.columns.iter().enumerate() {
        width[i] = c.chars().count();
    }
    for r in &t.rows {
        for (i, c) in r.cells.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let pad = |i: usize, s: &str| {
        if t.right.get(i).copied().unwrap_or(false) {
            format!("{s:>w$}", w = width[i])
        } else {
            s.to_owned()
        }
    };
    egui::Grid::new(id)
        .striped(true)
        .spacing([14.0, 3.0])
        .show(ui, |ui| {
            for (i, c) in t.columns.iter().enumerate() {
                let text = RichText::new(pad(i, c)).strong();
                ui.label(if t.right[i] { text.monospace() } else { text });
            }
            ui.end_row();
            for r in &t.rows {
                for (i, c) in r.cells.iter().enumerate().take(n) {
                    let mut text = RichText::new(pad(i, c));
                    if t.right[i] {
                        text = text.monospace();
                    }
                    if t.toned.contains(&i) {
                        text = text.color(theme::tone_color(r.tone, r.significant));
                        if r.significant {
                            text = text.strong();
                        }
                    } else if i == 0 {
                        text = text.color(Color32::from_gray(220));
                    }
                    ui.label(text);
                }
                ui.end_row();
            }
        });
}
