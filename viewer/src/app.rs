//! The eframe application: two trace slots loaded on worker threads, the analysis computed on a
//! worker thread, the selected tokens shared by every panel, persisted settings, and the drivers
//! of `--screenshot` and `--bench-frames`.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eframe::egui::{self, Color32, RichText};

use crate::logic::analysis::{Analysis, analyse};
use crate::logic::files::assign_dropped;
use crate::logic::load::{LoadError, LoadedTrace, file_name, load_trace_with_kinds};
use crate::logic::ops::{OpView, OpViewChoice};
use crate::logic::selection::Selection;
use crate::logic::session::{LoadTicket, Session, SlotId, SlotState};
use crate::logic::settings::{Panel, Settings};
use crate::panels;
use crate::theme;

/// What the app does on its own after opening (the command-line drivers).
#[derive(Clone, Debug, PartialEq)]
pub enum AutoRun {
    /// Render the window once everything is loaded, save a PNG, exit.
    Screenshot { out: PathBuf },
    /// Redraw the timeline `frames` times and report load and frame times, then exit.
    Bench { frames: usize },
}

/// How the app was started.
#[derive(Clone, Debug, Default)]
pub struct ViewerOptions {
    /// Traces to open: A, then B.
    pub paths: Vec<PathBuf>,
    /// The panel to show (else the remembered one).
    pub panel: Option<Panel>,
    /// Decode token to select (its 0-based ordinal), else the first analysed one.
    pub token: Option<usize>,
    /// The Op breakdown's view for every pair of traces (`--op-view`), else its own choice.
    pub op_view: Option<OpView>,
    /// Op-kind rules for a foreign program's dispatches (`--op-kinds FILE`, then the built-in
    /// rules).
    pub op_kinds: profiler::KindRules,
    pub auto: Option<AutoRun>,
    /// When the process started, for the load-time report.
    pub started: Option<Instant>,
}

/// The result of an [`AutoRun`], for `main` to report after the window closes.
pub type AutoOutcome = Arc<Mutex<Option<Result<String, String>>>>;

enum WorkerMsg {
    Loaded {
        ticket: LoadTicket,
        result: Box<Result<LoadedTrace, LoadError>>,
    },
    Analysed {
        version: u64,
        /// Boxed: the analysis is large beside a load message.
        analysis: Option<Box<Analysis>>,
    },
}

/// The analysis of the loaded traces.
#[derive(Default)]
pub enum AnalysisState {
    #[default]
    None,
    Running {
        version: u64,
    },
    Ready {
        version: u64,
        analysis: Arc<Analysis>,
    },
}

impl AnalysisState {
    pub fn ready(&self) -> Option<&Analysis> {
        self.ready_with_version().map(|(_, a)| a)
    }

    /// The analysis and the session version it was computed for.
    pub fn ready_with_version(&self) -> Option<(u64, &Analysis)> {
        match self {
            AnalysisState::Ready { version, analysis } => Some((*version, analysis)),
            _ => None,
        }
    }
}

/// State of a command-line driver.
struct AutoDriver {
    run: AutoRun,
    outcome: AutoOutcome,
    started: Instant,
    /// Frames drawn since everything was ready.
    settled_frames: usize,
    /// When the traces had loaded and when the analysis was ready.
    loaded_at: Option<Duration>,
    ready_at: Option<Duration>,
    screenshot_requested: bool,
    /// Bench: per-frame time spent building the UI (ms), and eframe's CPU time of the whole
    /// previous frame (update, tessellation, GL painting; ms).
    update_ms: Vec<f64>,
    cpu_ms: Vec<f64>,
    done: bool,
}

/// Frames to draw once everything is loaded before a screenshot, so that layouts settle (egui
/// sizes grids and plots from the previous frame).
const SETTLE_FRAMES: usize = 4;
/// A driver gives up after this long.
const AUTO_TIMEOUT: Duration = Duration::from_secs(180);

/// The viewer.
pub struct ViewerApp {
    session: Session,
    analysis: AnalysisState,
    selection: Selection,
    settings: Settings,
    timeline: panels::timeline::TimelineState,
    flame: panels::flamegraph::FlameState,
    op_view: OpViewChoice,
    /// Op-kind rules applied to every trace opened.
    op_kinds: Arc<profiler::KindRules>,
    open_dialog: panels::open_dialog::OpenDialog,
    /// The session version the selection was last reset for.
    selection_version: u64,
    requested_token: Option<usize>,
    tx: Sender<WorkerMsg>,
    rx: Receiver<WorkerMsg>,
    ctx: egui::Context,
    auto: Option<AutoDriver>,
    /// Settings are neither read nor written in screenshot and bench runs.
    persist: bool,
}

impl ViewerApp {
    /// Creates the app and starts loading `options.paths`; `outcome` receives the result of an
    /// [`AutoRun`].
    pub fn new(
        cc: &eframe::CreationContext<'_>,
        options: ViewerOptions,
        outcome: AutoOutcome,
    ) -> Self {
        let persist = options.auto.is_none();
        let mut settings: Settings = if persist {
            cc.storage
                .and_then(|s| eframe::get_value(s, Settings::KEY))
                .unwrap_or_default()
        } else {
            Settings::default()
        };
        if let Some(p) = options.panel {
            settings.panel = p;
        }
        // The puffin_egui flamegraph warns while puffin's scopes are off; its own scopes then go
        // to the global profiler, whose frames `update` flushes every frame.
        puffin_egui::puffin::set_scopes_on(true);
        let (tx, rx) = channel();
        let mut app = ViewerApp {
            session: Session::new(),
            analysis: AnalysisState::None,
            selection: Selection::default(),
            timeline: Default::default(),
            flame: Default::default(),
            op_view: OpViewChoice {
                forced: options.op_view,
                chosen: None,
            },
            op_kinds: Arc::new(options.op_kinds),
            open_dialog: panels::open_dialog::OpenDialog::new(settings.open_dir.clone()),
            settings,
            selection_version: 0,
            requested_token: options.token,
            tx,
            rx,
            ctx: cc.egui_ctx.clone(),
            auto: options.auto.map(|run| AutoDriver {
                run,
                outcome,
                started: options.started.unwrap_or_else(Instant::now),
                settled_frames: 0,
                loaded_at: None,
                ready_at: None,
                screenshot_requested: false,
                update_ms: Vec::new(),
                cpu_ms: Vec::new(),
                done: false,
            }),
            persist,
        };
        for (slot, path) in SlotId::BOTH.iter().zip(options.paths.iter()) {
            app.open(*slot, path);
        }
        app
    }

    /// Starts loading `path` into `slot` on a worker thread.
    pub fn open(&mut self, slot: SlotId, path: &Path) {
        let ticket = self.session.begin_load(slot, path);
        let tx = self.tx.clone();
        let ctx = self.ctx.clone();
        let kinds = Arc::clone(&self.op_kinds);
        let spawned = std::thread::Builder::new()
            .name(format!("load {}", slot.name()))
            .spawn(move || {
                let result = Box::new(load_trace_with_kinds(&ticket.path, &kinds));
                // The receiver is gone only when the app is closing.
                let _ = tx.send(WorkerMsg::Loaded { ticket, result });
                ctx.request_repaint();
            });
        if let Err(e) = spawned {
            self.session.fail(
                slot,
                path,
                format!(
                    "cannot start a thread to load {}: {e} (close other programs and try again)",
                    path.display()
                ),
            );
        }
    }

    fn start_analysis(&mut self) {
        let version = self.session.version();
        let a = self.session.loaded(SlotId::A).cloned();
        let b = self.session.loaded(SlotId::B).cloned();
        if a.is_none() && b.is_none() {
            self.analysis = AnalysisState::None;
            return;
        }
        self.analysis = AnalysisState::Running { version };
        let tx = self.tx.clone();
        let ctx = self.ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("analysis".into())
            .spawn(move || {
                let analysis = analyse(a.as_deref(), b.as_deref());
                let analysis = analysis.map(Box::new);
                let _ = tx.send(WorkerMsg::Analysed { version, analysis });
                ctx.request_repaint();
            });
        if spawned.is_err() {
            self.analysis = AnalysisState::None;
        }
    }

    fn drain_workers(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                WorkerMsg::Loaded { ticket, result } => {
                    let ok = result.is_ok();
                    if self.session.finish_load(&ticket, *result) && ok {
                        self.settings.recent.push(&ticket.path);
                    }
                }
                WorkerMsg::Analysed { version, analysis } => {
                    if version == self.session.version() {
                        self.analysis = match analysis {
                            Some(a) => AnalysisState::Ready {
                                version,
                                analysis: Arc::from(a),
                            },
                            None => AnalysisState::None,
                        };
                    }
                }
            }
        }
        let version = self.session.version();
        let current = match &self.analysis {
            AnalysisState::None => None,
            AnalysisState::Running { version } | AnalysisState::Ready { version, .. } => {
                Some(*version)
            }
        };
        if !self.session.is_loading() && current != Some(version) {
            if self.session.any_loaded() {
                self.start_analysis();
            } else {
                self.analysis = AnalysisState::None;
            }
        }
        if self.selection_version != version && !self.session.is_loading() {
            self.selection_version = version;
            self.reset_selection();
        }
    }

    /// Selects the requested decode token, or the first one the statistics analyse.
    fn reset_selection(&mut self) {
        let al = self.session.alignment();
        let decode_steps = al
            .rows
            .iter()
            .filter(|r| r.phase == profiler::Phase::Decode)
            .count();
        let ordinal = self.requested_token.unwrap_or_else(|| {
            profiler::stats::effective_skip(profiler::DEFAULT_SKIP, decode_steps)
        });
        self.selection = Selection::single(al.decode_row(ordinal).unwrap_or(0));
        self.timeline.refit = true;
    }

    fn handle_dropped_files(&mut self, ctx: &egui::Context) {
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .filter_map(|f| f.path.clone())
                .collect()
        });
        for (slot, path) in assign_dropped(&dropped, self.session.is_empty(SlotId::A)) {
            self.open(slot, &path);
        }
    }

    fn handle_keys(&mut self, ctx: &egui::Context) {
        if ctx.wants_keyboard_input() {
            return;
        }
        let n = self.session.alignment().len();
        let (left, right, shift) = ctx.input(|i| {
            (
                i.key_pressed(egui::Key::ArrowLeft),
                i.key_pressed(egui::Key::ArrowRight),
                i.modifiers.shift,
            )
        });
        if left {
            self.selection.step(-1, n, shift);
        }
        if right {
            self.selection.step(1, n, shift);
        }
        if ctx.input(|i| i.modifiers.command && i.key_pressed(egui::Key::O)) {
            self.open_dialog.open = true;
        }
    }

    fn menu_bar(&mut self, ui: &mut egui::Ui) {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.button("Open…").clicked() {
                    self.open_dialog.open = true;
                    ui.close();
                }
                ui.menu_button("Open recent", |ui| {
                    if self.settings.recent.is_empty() {
                        ui.label("(none yet)");
                    }
                    let mut chosen = None;
                    for p in self.settings.recent.paths() {
                        ui.horizontal(|ui| {
                            ui.label(p.display().to_string());
                            if ui.button("as A").clicked() {
                                chosen = Some((SlotId::A, p.clone()));
                            }
                            if ui.button("as B").clicked() {
                                chosen = Some((SlotId::B, p.clone()));
                            }
                        });
                    }
                    if let Some((slot, p)) = chosen {
                        self.open(slot, &p);
                        ui.close();
                    }
                    if !self.settings.recent.is_empty() && ui.button("Clear list").clicked() {
                        self.settings.recent.clear();
                    }
                });
                ui.separator();
                if ui.button("Swap A and B").clicked() {
                    self.session.swap();
                    ui.close();
                }
                for slot in SlotId::BOTH {
                    if ui.button(format!("Close {}", slot.name())).clicked() {
                        self.session.close(slot);
                        ui.close();
                    }
                }
                ui.separator();
                if ui.button("Quit").clicked() {
                    ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
                }
            });
            ui.separator();
            for p in Panel::ALL {
                ui.selectable_value(&mut self.settings.panel, p, p.title());
            }
        });
    }

    fn slot_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            for slot in SlotId::BOTH {
                let color = theme::side_color(slot.index());
                ui.label(
                    RichText::new(format!("{} ", slot.name()))
                        .strong()
                        .color(color),
                );
                match self.session.slot(slot) {
                    SlotState::Empty => {
                        ui.weak("(empty: File > Open, or drop a trace)");
                    }
                    SlotState::Loading { path } => {
                        // No spinner: its animation repaints every frame, and on a software
                        // renderer that takes the CPU the loading thread needs.
                        ui.label(format!("loading {}…", file_name(path)));
                    }
                    SlotState::Loaded(t) => {
                        let m = &t.trace.meta;
                        ui.label(RichText::new(t.file_name()).strong())
                            .on_hover_text(t.path.display().to_string());
                        ui.weak(format!(
                            "{} · {} · {} · {} steps",
                            t.mode(),
                            m.model.name,
                            m.device.name,
                            t.trace.tokens.len()
                        ));
                        if let Some(u) = t.untimed() {
                            ui.colored_label(Color32::from_rgb(255, 190, 90), u);
                        }
                    }
                    SlotState::Failed { path, .. } => {
                        ui.colored_label(
                            Color32::from_rgb(255, 120, 110),
                            format!("{}: failed to open", file_name(path)),
                        );
                    }
                }
                ui.add_space(24.0);
            }
            if matches!(self.analysis, AnalysisState::Running { .. }) {
                ui.weak("computing statistics…");
            }
        });
    }

    fn error_banners(&mut self, ui: &mut egui::Ui) {
        let errors: Vec<(SlotId, String)> = self
            .session
            .errors()
            .into_iter()
            .map(|(s, e)| (s, e.to_owned()))
            .collect();
        for (slot, error) in errors {
            egui::Frame::new()
                .fill(theme::ERROR_FILL)
                .inner_margin(8.0)
                .corner_radius(4.0)
                .show(ui, |ui| {
                    ui.set_width(ui.available_width());
                    ui.horizontal(|ui| {
                        ui.label(
                            RichText::new(format!("Could not open trace {}:", slot.name()))
                                .strong()
                                .color(Color32::WHITE),
                        );
                        if ui.button("Dismiss").clicked() {
                            self.session.close(slot);
                        }
                    });
                    ui.label(RichText::new(error).color(Color32::WHITE));
                });
        }
    }

    fn selection_bar(&mut self, ui: &mut egui::Ui) {
        let al = self.session.alignment();
        if al.is_empty() {
            return;
        }
        let n = al.len();
        let label = al.label(self.selection.focus);
        let row = al.get(self.selection.focus).copied();
        let mut step = 0isize;
        ui.horizontal(|ui| {
            ui.label("Selected token:");
            if ui
                .small_button("◀")
                .on_hover_text("previous token (left arrow key)")
                .clicked()
            {
                step = -1;
            }
            ui.label(RichText::new(&label).strong());
            if ui
                .small_button("▶")
                .on_hover_text("next token (right arrow key)")
                .clicked()
            {
                step = 1;
            }
            if let Some(r) = row {
                let side = |s: Option<usize>| s.map_or("-".to_owned(), |i| format!("step {i}"));
                ui.weak(format!("A {} · B {}", side(r.a), side(r.b)));
            }
            if !self.selection.is_single() {
                let range = self.selection.range();
                ui.weak(format!(
                    "· {} tokens selected ({} … {})",
                    self.selection.count(),
                    al.label(*range.start()),
                    al.label(*range.end())
                ));
            }
            ui.weak("· click a plot to select, shift-click for a range");
        });
        if step != 0 {
            self.selection.step(step, n, false);
        }
    }

    fn empty_state(&mut self, ui: &mut egui::Ui) {
        ui.vertical_centered(|ui| {
            ui.add_space(60.0);
            ui.heading("decodescope viewer");
            ui.label("Open a trace with File > Open, drop one or two trace files here, or run");
            ui.code("viewer A.json B.json");
            ui.add_space(16.0);
            if !self.settings.recent.is_empty() {
                ui.label(RichText::new("Recent files").strong());
                let mut chosen = None;
                for p in self.settings.recent.paths() {
                    if ui.link(p.display().to_string()).clicked() {
                        chosen = Some(p.clone());
                    }
                }
                if let Some(p) = chosen {
                    let slot = if self.session.is_empty(SlotId::A) {
                        SlotId::A
                    } else {
                        SlotId::B
                    };
                    self.open(slot, &p);
                }
            }
        });
    }

    fn drop_preview(&self, ctx: &egui::Context) {
        let hovering = ctx.input(|i| i.raw.hovered_files.len());
        if hovering == 0 {
            return;
        }
        let text = if hovering >= 2 {
            "Drop to open the first two files as A and B".to_owned()
        } else if self.session.is_empty(SlotId::A) {
            "Drop to open as A".to_owned()
        } else {
            "Drop to open as B".to_owned()
        };
        let painter = ctx.layer_painter(egui::LayerId::new(
            egui::Order::Foreground,
            egui::Id::new("drop_preview"),
        ));
        let rect = ctx.content_rect();
        painter.rect_filled(rect, 0.0, Color32::from_black_alpha(180));
        painter.text(
            rect.center(),
            egui::Align2::CENTER_CENTER,
            text,
            egui::FontId::proportional(28.0),
            Color32::WHITE,
        );
    }

    /// Whether everything the current panel shows is ready (for the drivers).
    fn everything_ready(&self) -> bool {
        if self.session.is_loading() {
            return false;
        }
        let analysed = match &self.analysis {
            AnalysisState::Ready { version, .. } => *version == self.session.version(),
            AnalysisState::None => !self.session.any_loaded(),
            AnalysisState::Running { .. } => false,
        };
        analysed && self.selection_version == self.session.version()
    }

    /// Runs the command-line driver after the frame's UI is built.
    fn drive(&mut self, ctx: &egui::Context, frame: &eframe::Frame, update_ms: f64) {
        let ready = self.everything_ready();
        let Some(d) = self.auto.as_mut() else {
            return;
        };
        if d.done {
            return;
        }
        if ready {
            ctx.request_repaint();
        } else {
            // The workers repaint when they finish; until then, look in now and then without
            // rendering continuously (which would slow the loading on a software renderer).
            ctx.request_repaint_after(Duration::from_millis(100));
        }
        let elapsed = d.started.elapsed();
        if d.loaded_at.is_none() && !self.session.is_loading() {
            d.loaded_at = Some(elapsed);
        }
        if d.ready_at.is_none() && ready {
            d.ready_at = Some(elapsed);
        }
        if elapsed > AUTO_TIMEOUT {
            finish(
                ctx,
                d,
                Err(format!(
                    "gave up after {} s waiting for the traces to load and be analysed",
                    AUTO_TIMEOUT.as_secs()
                )),
            );
            return;
        }
        if !ready {
            return;
        }
        d.settled_frames += 1;
        match d.run.clone() {
            AutoRun::Screenshot { out } => {
                let shot = ctx.input(|i| {
                    i.events.iter().find_map(|e| match e {
                        egui::Event::Screenshot { image, .. } => Some(Arc::clone(image)),
                        _ => None,
                    })
                });
                if let Some(image) = shot {
                    let result = save_png(&image, &out);
                    finish(ctx, d, result);
                } else if d.settled_frames >= SETTLE_FRAMES && !d.screenshot_requested {
                    d.screenshot_requested = true;
                    ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(
                        egui::UserData::default(),
                    ));
                }
            }
            AutoRun::Bench { frames } => {
                if d.settled_frames <= SETTLE_FRAMES {
                    return;
                }
                d.update_ms.push(update_ms);
                if let Some(cpu) = frame.info().cpu_usage
                    && d.update_ms.len() > 1
                {
                    d.cpu_ms.push(cpu as f64 * 1e3);
                }
                if d.update_ms.len() >= frames.max(1) {
                    let report = bench_report(d, &self.session);
                    finish(ctx, d, Ok(report));
                }
            }
        }
    }
}

fn finish(ctx: &egui::Context, d: &mut AutoDriver, result: Result<String, String>) {
    d.done = true;
    if let Ok(mut o) = d.outcome.lock() {
        *o = Some(result);
    }
    ctx.send_viewport_cmd(egui::ViewportCommand::Close);
}

fn save_png(image: &egui::ColorImage, out: &Path) -> Result<String, String> {
    let [w, h] = image.size;
    let mut rgba = Vec::with_capacity(w * h * 4);
    for p in &image.pixels {
        rgba.extend_from_slice(&p.to_array());
    }
    let buf = image::RgbaImage::from_raw(w as u32, h as u32, rgba)
        .ok_or_else(|| format!("the screenshot of {w}x{h} pixels came back with a wrong size"))?;
    buf.save_with_format(out, image::ImageFormat::Png)
        .map_err(|e| {
            format!(
                "cannot write the screenshot {}: {e} (check that the directory exists and is \
                 writable)",
                out.display()
            )
        })?;
    Ok(format!("wrote {} ({w}x{h})", out.display()))
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let p95 = s[((s.len() - 1) as f64 * 0.95).round() as usize];
    (mean, p95, s[s.len() - 1])
}

fn bench_report(d: &AutoDriver, session: &Session) -> String {
    let mut out = String::new();
    for slot in SlotId::BOTH {
        if let Some(t) = session.loaded(slot) {
            let spans: usize = t
                .trace
                .tokens
                .iter()
                .map(|r| r.gpu_spans.len() + r.host_spans.len())
                .sum();
            out.push_str(&format!(
                "{}: {} ({} steps, {spans} spans): read + parse + series {:.2} s\n",
                slot.name(),
                t.path.display(),
                t.trace.tokens.len(),
                t.load_time.as_secs_f64()
            ));
        }
    }
    let secs =
        |x: Option<Duration>| x.map_or("-".to_owned(), |x| format!("{:.2} s", x.as_secs_f64()));
    out.push_str(&format!(
        "open: traces shown {} after start, statistics ready {} after start\n",
        secs(d.loaded_at),
        secs(d.ready_at)
    ));
    let over = |v: &[f64]| v.iter().filter(|&&x| x > 16.0).count();
    let (m, p95, max) = stats(&d.update_ms);
    out.push_str(&format!(
        "timeline frames: {}; UI build (viewer code + egui layout): mean {m:.2} ms, p95 {p95:.2} \
         ms, max {max:.2} ms, {} over 16 ms\n",
        d.update_ms.len(),
        over(&d.update_ms)
    ));
    let (m, p95, max) = stats(&d.cpu_ms);
    out.push_str(&format!(
        "timeline frames: whole frame CPU (UI + tessellation + GL paint, from eframe): mean \
         {m:.2} ms, p95 {p95:.2} ms, max {max:.2} ms, {} of {} over 16 ms\n",
        over(&d.cpu_ms),
        d.cpu_ms.len()
    ));
    out
}

impl eframe::App for ViewerApp {
    fn update(&mut self, ctx: &egui::Context, frame: &mut eframe::Frame) {
        let t0 = Instant::now();
        puffin_egui::puffin::GlobalProfiler::lock().new_frame();
        self.drain_workers();
        self.handle_dropped_files(ctx);
        self.handle_keys(ctx);
        if let Some(d) = &self.auto
            && matches!(d.run, AutoRun::Bench { .. })
            && self.everything_ready()
        {
            self.settings.panel = Panel::Timeline;
            // Move the view a little every frame, as a pan would.
            self.timeline.bench_nudge();
        }

        egui::TopBottomPanel::top("menu").show(ctx, |ui| self.menu_bar(ui));
        egui::TopBottomPanel::top("slots").show(ctx, |ui| {
            self.slot_bar(ui);
            self.error_banners(ui);
            self.selection_bar(ui);
        });
        egui::CentralPanel::default().show(ctx, |ui| {
            if !self.session.any_loaded() {
                if !self.session.is_loading() {
                    self.empty_state(ui);
                }
                return;
            }
            self.selection.clamp(self.session.alignment().len());
            match self.settings.panel {
                Panel::Summary => panels::summary::ui(ui, &self.analysis),
                Panel::Plots => {
                    panels::plots::ui(ui, &self.session, &mut self.selection, &mut self.settings)
                }
                Panel::Timeline => {
                    panels::timeline::ui(ui, &self.session, &self.selection, &mut self.timeline)
                }
                Panel::Ops => panels::ops::ui(ui, &self.session, &self.analysis, &mut self.op_view),
                Panel::Flamegraph => {
                    panels::flamegraph::ui(ui, &self.session, &self.selection, &mut self.flame)
                }
            }
        });
        let mut opened = Vec::new();
        self.open_dialog.ui(ctx, &mut opened);
        for (slot, path) in opened {
            self.open(slot, &path);
        }
        self.settings.open_dir = Some(self.open_dialog.dir().to_path_buf());
        self.drop_preview(ctx);
        let update_ms = t0.elapsed().as_secs_f64() * 1e3;
        self.drive(ctx, frame, update_ms);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        if self.persist {
            eframe::set_value(storage, Settings::KEY, &self.settings);
        }
    }

    fn persist_egui_memory(&self) -> bool {
        self.persist
    }

    /// Screenshot and bench runs ignore the pointer: under Xvfb it rests in the middle of the
    /// screen, and hover effects would make the images depend on where it happens to be.
    fn raw_input_hook(&mut self, _ctx: &egui::Context, raw_input: &mut egui::RawInput) {
        if self.auto.is_some() {
            raw_input.events.retain(|e| {
                !matches!(
                    e,
                    egui::Event::PointerMoved(_)
                        | egui::Event::MouseMoved(_)
                        | egui::Event::PointerButton { .. }
                        | egui::Event::MouseWheel { .. }
                        | egui::Event::Zoom(_)
                        | egui::Event::Touch { .. }
                )
            });
        }
    }
}
