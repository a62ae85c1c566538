//! Colours: A and B, tones of deltas, op kinds and host span names.

use eframe::egui::Color32;

use crate::logic::lanes::OP_KINDS;
use crate::logic::summary::{Level, Tone};

/// Trace A (the baseline) and trace B, everywhere.
pub const A_COLOR: Color32 = Color32::from_rgb(86, 156, 255);
pub const B_COLOR: Color32 = Color32::from_rgb(255, 146, 56);

/// The colour of side 0 (A) or 1 (B).
pub fn side_color(side: usize) -> Color32 {
    if side == 0 { A_COLOR } else { B_COLOR }
}

/// Fill of the error banner (a malformed trace). The screenshot test looks for this exact colour.
pub const ERROR_FILL: Color32 = Color32::from_rgb(122, 26, 30);
pub const WARNING_FILL: Color32 = Color32::from_rgb(92, 72, 18);
pub const INFO_FILL: Color32 = Color32::from_rgb(28, 48, 74);

/// Banner fill for a summary warning level.
pub fn level_fill(level: Level) -> Color32 {
    match level {
        Level::Info => INFO_FILL,
        Level::Warning => WARNING_FILL,
    }
}

/// Text colour of a delta: green when B is lower (better), red when higher, grey when the same.
/// A change that is not significant is drawn in a muted version of its colour.
pub fn tone_color(tone: Tone, significant: bool) -> Color32 {
    let strong = match tone {
        Tone::Better => Color32::from_rgb(92, 214, 120),
        Tone::Worse => Color32::from_rgb(255, 104, 96),
        Tone::Neutral => Color32::from_gray(170),
        Tone::Unavailable => Color32::from_gray(120),
    };
    if significant || matches!(tone, Tone::Neutral | Tone::Unavailable) {
        strong
    } else {
        mix(strong, Color32::from_gray(150), 0.6)
    }
}

fn mix(a: Color32, b: Color32, t: f32) -> Color32 {
    let m = |x: u8, y: u8| (x as f32 * (1.0 - t) + y as f32 * t).round() as u8;
    Color32::from_rgb(m(a.r(), b.r()), m(a.g(), b.g()), m(a.b(), b.b()))
}

/// Op kind colours in the order of [`OP_KINDS`], then one for unknown kinds.
const KIND_COLORS: [Color32; OP_KINDS.len() + 1] = [
    Color32::from_rgb(66, 133, 244),  // matvec
    Color32::from_rgb(171, 71, 188),  // norm
    Color32::from_rgb(0, 172, 193),   // rope
    Color32::from_rgb(239, 108, 0),   // attention
    Color32::from_rgb(124, 179, 66),  // kv
    Color32::from_rgb(253, 216, 53),  // elementwise
    Color32::from_rgb(161, 136, 127), // embed
    Color32::from_rgb(236, 64, 122),  // argmax
    Color32::from_rgb(120, 144, 156), // copy
    Color32::from_rgb(92, 107, 192),  // region
    Color32::from_rgb(117, 117, 117), // token
    Color32::from_rgb(200, 200, 200), // other
];

/// Host span name colours in the order of `profiler::HOST_SPAN_NAMES`, then one for other names.
const HOST_COLORS: [Color32; 8] = [
    Color32::from_rgb(97, 97, 97),    // token
    Color32::from_rgb(92, 107, 192),  // record
    Color32::from_rgb(171, 71, 188),  // descriptors
    Color32::from_rgb(239, 108, 0),   // submit
    Color32::from_rgb(84, 110, 122),  // wait
    Color32::from_rgb(0, 172, 193),   // readback
    Color32::from_rgb(124, 179, 66),  // sample
    Color32::from_rgb(200, 200, 200), // other
];

/// Colour of an op kind's palette slot (`logic::lanes::kind_slot`).
pub fn kind_color(slot: usize) -> Color32 {
    KIND_COLORS[slot.min(KIND_COLORS.len() - 1)]
}

/// Colour of a host span name's palette slot (`logic::lanes::host_slot`).
pub fn host_color(slot: usize) -> Color32 {
    HOST_COLORS[slot.min(HOST_COLORS.len() - 1)]
}

/// Black or white, whichever reads better on `fill`.
pub fn text_on(fill: Color32) -> Color32 {
    let l = 0.299 * fill.r() as f32 + 0.587 * fill.g() as f32 + 0.114 * fill.b() as f32;
    if l > 150.0 {
        Color32::BLACK
    } else {
        Color32::WHITE
    }
}
