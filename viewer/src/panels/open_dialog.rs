//! File > Open: a path field and a directory listing drawn by egui (no native dialog, so no GTK
//! or desktop portal is needed, and it works the same under Xvfb).

use std::path::{Path, PathBuf};

use eframe::egui::{self, RichText};

use crate::logic::files::{DirEntryInfo, list_dir};
use crate::logic::format::fmt_bytes;
use crate::logic::session::SlotId;

/// The Open window's state.
pub struct OpenDialog {
    pub open: bool,
    dir: PathBuf,
    path_text: String,
    all_files: bool,
    listing: Option<(PathBuf, bool, Result<Vec<DirEntryInfo>, String>)>,
    /// An error to show in the window (a thread that could not start, a bad path).
    pub error: Option<String>,
}

impl OpenDialog {
    /// Starts in `dir`, or the current directory.
    pub fn new(dir: Option<PathBuf>) -> OpenDialog {
        let dir = dir
            .filter(|d| d.is_dir())
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        OpenDialog {
            open: false,
            path_text: String::new(),
            dir,
            all_files: false,
            listing: None,
            error: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn go(&mut self, dir: PathBuf) {
        self.dir = dir;
        self.path_text.clear();
        self.listing = None;
    }

    /// Draws the window when open; pushes `(slot, path)` for every file the user opens.
    pub fn ui(&mut self, ctx: &egui::Context, opened: &mut Vec<(SlotId, PathBuf)>) {
        if !self.open {
            return;
        }
        let stale = self
            .listing
            .as_ref()
            .is_none_or(|(d, all, _)| *d != self.dir || *all != self.all_files);
        if stale {
            self.listing = Some((
                self.dir.clone(),
                self.all_files,
                list_dir(&self.dir, self.all_files).map_err(|e| e.to_string()),
            ));
        }
        let mut open = self.open;
        let mut go_to: Option<PathBuf> = None;
        let mut choose: Option<SlotId> = None;
        egui::Window::new("Open trace")
            .open(&mut open)
            .default_size([620.0, 480.0])
            .collapsible(false)
            .show(ctx, |ui| {
                ui.horizontal(|ui| {
                    if ui.button("⬆ Up").clicked()
                        && let Some(parent) = self.dir.parent()
                    {
                        go_to = Some(parent.to_path_buf());
                    }
                    ui.label(RichText::new(self.dir.display().to_string()).monospace());
                });
                ui.horizontal(|ui| {
                    ui.label("Path:");
                    let edit = ui.add(
                        egui::TextEdit::singleline(&mut self.path_text)
                            .desired_width(380.0)
                            .hint_text("a trace file or a directory"),
                    );
                    if edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
                        let p = PathBuf::from(self.path_text.trim());
                        let p = if p.is_relative() { self.dir.join(p) } else { p };
                        if p.is_dir() {
                            go_to = Some(p);
                        } else {
                            choose = Some(SlotId::A);
                        }
                    }
                    if ui.button("Open as A").clicked() {
                        choose = Some(SlotId::A);
                    }
                    if ui.button("Open as B").clicked() {
                        choose = Some(SlotId::B);
                    }
                });
                ui.checkbox(&mut self.all_files, "show every file (not only *.json)");
                if let Some(e) = &self.error {
                    ui.colored_label(egui::Color32::from_rgb(255, 120, 110), e);
                }
                ui.separator();
                egui::ScrollArea::vertical()
                    .auto_shrink([false, false])
                    .show(ui, |ui| match self.listing.as_ref().map(|l| &l.2) {
                        Some(Ok(entries)) if entries.is_empty() => {
                            ui.weak("no traces here");
                        }
                        Some(Ok(entries)) => {
                            for e in entries {
                                if e.is_dir {
                                    if ui
                                        .selectable_label(false, format!("📁 {}", e.name))
                                        .clicked()
                                    {
                                        go_to = Some(e.path.clone());
                                    }
                                } else {
                                    let selected = self.path_text == e.name;
                                    let r = ui.selectable_label(
                                        selected,
                                        format!("📄 {}   {}", e.name, fmt_bytes(e.bytes as f64)),
                                    );
                                    if r.clicked() {
                                        self.path_text = e.name.clone();
                                    }
                                    if r.double_clicked() {
                                        self.path_text = e.name.clone();
                                        choose = Some(SlotId::A);
                                    }
                                }
                            }
                        }
                        Some(Err(e)) => {
                            ui.colored_label(egui::Color32::from_rgb(255, 120, 110), e);
                        }
                        None => {}
                    });
            });
        if let Some(dir) = go_to {
            self.go(dir);
        }
        if let Some(slot) = choose {
            let text = self.path_text.trim();
            if text.is_empty() {
                self.error = Some("type or pick a trace file first".to_owned());
            } else {
                let p = PathBuf::from(text);
                let p = if p.is_relative() { self.dir.join(p) } else { p };
                opened.push((slot, p));
                self.error = None;
                open = false;
            }
        }
        self.open = open;
    }
}
