//! Everything the viewer computes, as plain functions and data without egui.
//!
//! Numbers come from the profiler crate (`compute_diff`, `compute_stats`, `OpInfo::bytes_at`);
//! this module arranges them for the panels: per-token series, the A/B alignment of steps, the
//! selection, the timeline's lanes and hit testing, the summary and op tables, and the puffin
//! frame built from the host spans.

pub mod align;
pub mod analysis;
pub mod decimate;
pub mod files;
pub mod flame;
pub mod format;
pub mod hit;
pub mod lanes;
pub mod load;
pub mod ops;
pub mod selection;
pub mod series;
pub mod session;
pub mod settings;
pub mod summary;
pub mod view;

pub use align::{AlignedRow, Alignment, align};
pub use analysis::{Analysis, analyse};
pub use decimate::decimate_min_max;
pub use files::{DirEntryInfo, assign_dropped, list_dir};
pub use flame::{FlameError, FlatScope, build_frame, flatten_host_spans};
pub use hit::{Geometry, Hit, Placement, RowPlacement, hit_test, place_rows};
pub use lanes::{Lane, LaneKind, LaneRow, SpanBox, SpanSource, TokenLayout, layout_token};
pub use load::{LoadError, LoadedTrace, load_trace, load_trace_with_kinds};
pub use ops::{
    OpPair, OpSide, OpView, OpViewChoice, kind_pairs_of_diff, kind_pairs_of_stats,
    op_pairs_of_diff, op_pairs_of_stats,
};
pub use selection::{Selection, row_at_x};
pub use series::{Metric, TraceSeries, gpu_busy_ns};
pub use session::{LoadTicket, Session, SlotId, SlotState};
pub use settings::{Panel, RecentFiles, Settings};
pub use summary::{
    Level, SummaryModel, SummaryRow, SummaryTable, Tone, Warning, summarize_diff, summarize_stats,
};
pub use view::TimeView;
