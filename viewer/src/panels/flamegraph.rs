//! Host flamegraph: the `puffin_egui` flamegraph and table of the host spans of the selected
//! tokens, A and B as two threads of one puffin frame.

use eframe::egui::{self, RichText};
use puffin_egui::puffin::FrameView;
use puffin_egui::{MaybeMutRef, ProfilerUi};

use crate::logic::flame::{FlatScope, build_frame, flatten_host_spans};
use crate::logic::selection::Selection;
use crate::logic::session::{Session, SlotId};

/// At most this many tokens go into one flamegraph frame.
pub const MAX_TOKENS: usize = 1_000;

/// The flamegraph's frame, rebuilt when the selection or the traces change.
#[derive(Default)]
pub struct FlameState {
    key: Option<(u64, usize, usize)>,
    view: FrameView,
    profiler_ui: ProfilerUi,
    error: Option<String>,
    tokens: usize,
    truncated: bool,
}

fn rebuild(session: &Session, selection: &Selection, state: &mut FlameState) {
    let al = session.alignment();
    let range = selection.range();
    let rows: Vec<usize> = range.take(MAX_TOKENS).collect();
    state.truncated = selection.count() > MAX_TOKENS;
    state.tokens = rows.len();
    let mut threads: Vec<(String, Vec<FlatScope>)> = Vec::new();
    for (side, slot) in SlotId::BOTH.iter().enumerate() {
        let Some(t) = session.loaded(*slot) else {
            continue;
        };
        let records: Vec<(usize, usize)> = rows
            .iter()
            .filter_map(|&row| {
                let r = al.get(row)?;
                Some((row, if side == 0 { r.a } else { r.b }?))
            })
            .collect();
        let Some(origin) = records.first().map(|&(_, i)| t.trace.tokens[i].start_ns) else {
            continue;
        };
        let mut scopes = Vec::new();
        for (row, i) in records {
            scopes.extend(flatten_host_spans(
                &t.trace.tokens[i].host_spans,
                origin,
                &al.label(row),
            ));
        }
        threads.push((
            format!("{} {} ({})", slot.name(), t.mode(), t.file_name()),
            scopes,
        ));
    }
    state.view = FrameView::default();
    // A paused profiler UI would keep showing the frame it paused on, and the flamegraph keeps
    // its zoom while the number of frames stays the same: fit the new frame.
    state.profiler_ui.reset();
    state.profiler_ui.flamegraph_options.canvas_width_ns = 0.0;
    state.profiler_ui.flamegraph_options.sideways_pan_in_points = 0.0;
    state.error = None;
    match build_frame(&threads) {
        Ok(frame) => state.view.add_frame(frame),
        Err(e) => state.error = Some(e.to_string()),
    }
}

pub fn ui(ui: &mut egui::Ui, session: &Session, selection: &Selection, state: &mut FlameState) {
    let range = selection.range();
    let key = (session.version(), *range.start(), *range.end());
    if state.key != Some(key) {
        rebuild(session, selection, state);
        state.key = Some(key);
    }
    ui.horizontal(|ui| {
        ui.label(
            RichText::new(format!(
                "Host spans of {} selected token{}",
                state.tokens,
                if state.tokens == 1 { "" } else { "s" }
            ))
            .strong(),
        );
        ui.weak(
            "· one puffin thread per capture, A above B, times from each capture's first \
             selected token · shift-click in the plots to select a range · Table view sums the \
             spans",
        );
        if state.truncated {
            ui.weak(format!("· only the first {MAX_TOKENS} tokens"));
        }
    });
    if let Some(e) = &state.error {
        ui.colored_label(egui::Color32::from_rgb(255, 120, 110), e);
        return;
    }
    state
        .profiler_ui
        .ui(ui, &mut MaybeMutRef::MutRef(&mut state.view));
}
