//! The panels driven by synthetic input in a headless egui context (no window): a click in a
//! per-token plot selects the token under the pointer, shift-click extends the selection, and the
//! timeline pans on drag, zooms on the wheel about the pointer and fits on double-click.

use std::path::{Path, PathBuf};

use eframe::egui::{self, Event, Modifiers, PointerButton, Pos2, RawInput, Rect, vec2};
use viewer::logic::{Selection, Session, Settings, SlotId, load_trace};
use viewer::panels;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn session() -> Session {
    let mut s = Session::new();
    for (slot, name) in [(SlotId::A, "generic.json"), (SlotId::B, "fused.json")] {
        let t = s.begin_load(slot, &data(name));
        assert!(s.finish_load(&t, load_trace(&t.path)));
    }
    s
}

/// A headless egui context fed one frame at a time.
struct Harness {
    ctx: egui::Context,
    time: f64,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            ctx: egui::Context::default(),
            time: 0.0,
        }
    }

    fn frame(
        &mut self,
        events: Vec<Event>,
        modifiers: Modifiers,
        mut ui: impl FnMut(&mut egui::Ui),
    ) {
        self.time += 1.0 / 60.0;
        let input = RawInput {
            screen_rect: Some(Rect::from_min_size(Pos2::ZERO, vec2(1600.0, 1000.0))),
            time: Some(self.time),
            modifiers,
            events,
            ..Default::default()
        };
        let _ = self.ctx.run(input, |ctx| {
            egui::CentralPanel::default().show(ctx, |u| ui(u));
        });
    }

    /// Press and release the primary button at `pos` over two frames.
    fn click(&mut self, pos: Pos2, modifiers: Modifiers, mut ui: impl FnMut(&mut egui::Ui)) {
        let button = |pressed| Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers,
        };
        self.frame(
            vec![Event::PointerMoved(pos), button(true)],
            modifiers,
            &mut ui,
        );
        self.frame(vec![button(false)], modifiers, &mut ui);
        self.frame(Vec::new(), modifiers, &mut ui);
    }
}

#[test]
fn clicking_a_plot_selects_the_token_under_the_pointer() {
    let s = session();
    let mut sel = Selection::single(0);
    let mut settings = Settings::default();
    let mut h = Harness::new();
    // Let the plots fit their bounds.
    for _ in 0..3 {
        h.frame(Vec::new(), Modifiers::NONE, |ui| {
            panels::plots::ui(ui, &s, &mut sel, &mut settings)
        });
    }
    // The first plot spans the left half of the panel below the legend: click across it.
    let y = 150.0;
    let mut rows = Vec::new();
    for x in [150.0, 400.0, 650.0] {
        h.click(Pos2::new(x, y), Modifiers::NONE, |ui| {
            panels::plots::ui(ui, &s, &mut sel, &mut settings)
        });
        assert!(sel.is_single(), "a plain click selects one token");
        rows.push(sel.focus);
    }
    assert!(
        rows[0] < rows[1] && rows[1] < rows[2],
        "tokens further right are later: {rows:?}"
    );
    assert!(rows[2] < s.alignment().len());
    // Shift-click extends the selection from the last clicked token.
    h.click(Pos2::new(250.0, y), Modifiers::SHIFT, |ui| {
        panels::plots::ui(ui, &s, &mut sel, &mut settings)
    });
    assert!(!sel.is_single());
    assert_eq!(sel.anchor, rows[2]);
    assert!(
        sel.focus > rows[0] && sel.focus < rows[1],
        "{sel:?} {rows:?}"
    );
}

#[test]
fn the_timeline_pans_zooms_and_fits() {
    let s = session();
    let sel = Selection::single(s.alignment().decode_row(2).expect("decode 2"));
    let mut state = panels::timeline::TimelineState::default();
    let mut h = Harness::new();
    for _ in 0..2 {
        h.frame(Vec::new(), Modifiers::NONE, |ui| {
            panels::timeline::ui(ui, &s, &sel, &mut state)
        });
    }
    let fitted = state.view;
    assert_eq!(fitted.start_ns, 0.0);
    let wall_a = s.loaded(SlotId::A).expect("A").trace.tokens[3].wall_ns as f64;
    assert!(fitted.end_ns >= wall_a, "the fit shows the whole token");

    // Drag left by 200 points: later times come into view.
    let (from, to) = (Pos2::new(900.0, 300.0), Pos2::new(700.0, 300.0));
    let press = |pos, pressed| Event::PointerButton {
        pos,
        button: PointerButton::Primary,
        pressed,
        modifiers: Modifiers::NONE,
    };
    let steps = [
        vec![Event::PointerMoved(from), press(from, true)],
        vec![Event::PointerMoved(Pos2::new(800.0, 300.0))],
        vec![Event::PointerMoved(to)],
        vec![press(to, false)],
    ];
    for events in steps {
        h.frame(events, Modifiers::NONE, |ui| {
            panels::timeline::ui(ui, &s, &sel, &mut state)
        });
    }
    assert!(
        state.view.start_ns > 0.0,
        "dragging left pans to later times"
    );
    assert!((state.view.width_ns() - fitted.width_ns()).abs() < 1e-6 * fitted.width_ns());

    // The wheel zooms in about the pointer.
    let before = state.view;
    for _ in 0..3 {
        h.frame(
            vec![
                Event::PointerMoved(to),
                Event::MouseWheel {
                    unit: egui::MouseWheelUnit::Point,
                    delta: vec2(0.0, 120.0),
                    modifiers: Modifiers::NONE,
                },
            ],
            Modifiers::NONE,
            |ui| panels::timeline::ui(ui, &s, &sel, &mut state),
        );
    }
    for _ in 0..30 {
        // Smooth scrolling spreads the wheel over a few frames.
        h.frame(Vec::new(), Modifiers::NONE, |ui| {
            panels::timeline::ui(ui, &s, &sel, &mut state)
        });
    }
    assert!(state.view.width_ns() < before.width_ns() * 0.9, "zoomed in");

    // A double-click fits the token again.
    for _ in 0..2 {
        h.click(to, Modifiers::NONE, |ui| {
            panels::timeline::ui(ui, &s, &sel, &mut state)
        });
    }
    assert_eq!(state.view, fitted);
}
