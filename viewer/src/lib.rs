//! decodescope's desktop viewer: two captures side by side.
//!
//! The viewer reads traces and computes every number through the `profiler` crate (it never
//! depends on the decoder). It is split the way STYLE.md pattern 12 asks:
//!
//! - [`logic`]: plain functions and data without egui (loading, per-token series, A/B alignment,
//!   selection, timeline lane layout, hit testing, the summary and op tables, the puffin frames of
//!   the host spans, recent files). Everything here is tested without a window.
//! - [`panels`]: one module per panel, each with a `fn ui(...)`.
//! - [`app`]: the eframe application state: two trace slots, background loading, the selected
//!   token, persisted settings, and the screenshot and benchmark drivers.
//!
//! ```text
//! viewer [A] [B]                                   open one or two traces
//! viewer --screenshot OUT.png [--panel NAME] A [B] render the window, save a PNG, exit
//!        [--op-view label|kind] [--op-kinds FILE]  the Op breakdown's rows; op-kind rules
//! viewer --bench-frames N A [B]                    report load time and timeline frame times
//! ```

pub mod app;
pub mod logic;
pub mod panels;
pub mod theme;

pub use app::{AutoRun, ViewerApp, ViewerOptions};
pub use logic::Panel;
