//! The panels, one module each, each with a `fn ui(...)` that draws from the app's state.

pub mod flamegraph;
pub mod open_dialog;
pub mod ops;
pub mod plots;
pub mod summary;
pub mod table;
pub mod timeline;

use eframe::egui::{self, Color32, RichText, Sense, Vec2};

/// A coloured square and a name, for legends.
pub fn legend_chip(ui: &mut egui::Ui, color: Color32, name: impl Into<RichText>) {
    let (r, _) = ui.allocate_exact_size(Vec2::new(11.0, 11.0), Sense::hover());
    ui.painter().rect_filled(r, 2.0, color);
    ui.label(name.into());
}
