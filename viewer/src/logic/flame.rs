//! The host spans of the selected tokens as a puffin frame, for the `puffin_egui` flamegraph.
//!
//! A trace stores host spans flat, as `[name, start_ns, dur_ns, depth]` (the decoder recorded them
//! with puffin scopes). [`flatten_host_spans`] restores the nesting (pre-order, a child clamped
//! inside its parent); [`build_frame`] writes puffin's stream format and makes a
//! [`puffin::FrameData`] with one "thread" per capture, A above B. Times are relative to each
//! capture's first selected token, so A and B start together.
//!
//! puffin only hands out scope ids through its global profiler, so [`build_frame`] registers the
//! span names there as user scopes (`register_user_scopes`), reports the streams with
//! `report_user_scopes`, and takes the finished frame from a temporary frame sink. It flushes the
//! global profiler's pending frame first, so the viewer's own scopes never mix with trace data.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use profiler::HostSpan;
use puffin_egui::puffin::{
    FrameData, GlobalProfiler, ScopeDetails, ScopeId, Stream, StreamInfo, ThreadInfo,
};

/// One host span placed for puffin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatScope {
    pub name: String,
    /// Start and end, ns from the origin given to [`flatten_host_spans`].
    pub start_ns: i64,
    pub end_ns: i64,
    /// Nesting level (0 for top-level scopes); pre-order, so a scope's parent is the nearest
    /// earlier scope with a lower level.
    pub level: usize,
    /// puffin's per-scope data string (the token for top-level scopes, `#k` for the k-th submit).
    pub data: String,
}

/// Restores the nesting of one step's host spans, in pre-order. A span is a child of the
/// innermost open span that is still running and has a lower `depth`; a child's end is clamped
/// to its parent's. `token_label` becomes the data of top-level scopes.
pub fn flatten_host_spans(spans: &[HostSpan], origin_ns: u64, token_label: &str) -> Vec<FlatScope> {
    let mut order: Vec<&HostSpan> = spans.iter().collect();
    order.sort_by_key(|s| (s.start_ns(), s.depth(), std::cmp::Reverse(s.dur_ns())));
    let origin = origin_ns as i128;
    let rel = |ns: u64| (ns as i128 - origin).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    let mut out: Vec<FlatScope> = Vec::with_capacity(order.len());
    // Open scopes: (index in `out`, trace depth).
    let mut open: Vec<(usize, u32)> = Vec::new();
    let mut submits = 0usize;
    for s in order {
        let start_ns = rel(s.start_ns());
        let mut end_ns = rel(s.start_ns().saturating_add(s.dur_ns()));
        while let Some(&(top, depth)) = open.last() {
            if out[top].end_ns <= start_ns || depth >= s.depth() {
                open.pop();
            } else {
                break;
            }
        }
        if let Some(&(parent, _)) = open.last() {
            end_ns = end_ns.min(out[parent].end_ns);
        }
        let level = open.len();
        let data = if level == 0 {
            token_label.to_owned()
        } else if s.name() == "submit" {
            submits += 1;
            format!("#{}", submits - 1)
        } else {
            String::new()
        };
        open.push((out.len(), s.depth()));
        out.push(FlatScope {
            name: s.name().to_owned(),
            start_ns,
            end_ns,
            level,
            data,
        });
    }
    out
}

/// Why a flamegraph frame could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FlameError {
    #[error("the selected tokens have no host spans (the capture recorded none)")]
    Empty,
    #[error("could not build the flamegraph of the host spans: puffin rejected the stream ({0})")]
    Puffin(String),
}

/// Writes pre-ordered scopes as a puffin stream.
fn write_stream(scopes: &[FlatScope], ids: &BTreeMap<&str, ScopeId>) -> Stream {
    let mut stream = Stream::default();
    // Open scopes: (stream offset, end ns, level).
    let mut open: Vec<(usize, i64, usize)> = Vec::new();
    for s in scopes {
        while let Some(&(offset, end, level)) = open.last() {
            if level >= s.level {
                stream.end_scope(offset, end);
                open.pop();
            } else {
                break;
            }
        }
        let Some(&id) = ids.get(s.name.as_str()) else {
            continue;
        };
        let (offset, _) = stream.begin_scope(|| s.start_ns, id, &s.data);
        open.push((offset, s.end_ns.max(s.start_ns), s.level));
    }
    while let Some((offset, end, _)) = open.pop() {
        stream.end_scope(offset, end);
    }
    stream
}

/// Builds one puffin frame with a thread per `(name, scopes)` entry, in the given order.
pub fn build_frame(threads: &[(String, Vec<FlatScope>)]) -> Result<Arc<FrameData>, FlameError> {
    if threads.iter().all(|(_, s)| s.is_empty()) {
        return Err(FlameError::Empty);
    }
    let names: Vec<&str> = {
        let mut n: Vec<&str> = threads
            .iter()
            .flat_map(|(_, s)| s.iter().map(|s| s.name.as_str()))
            .collect();
        n.sort_unstable();
        n.dedup();
        n
    };
    let details: Vec<ScopeDetails> = names
        .iter()
        .map(|n| ScopeDetails::from_scope_name(n.to_string()))
        .collect();

    let slot: Arc<Mutex<Option<Arc<FrameData>>>> = Arc::new(Mutex::new(None));
    let mut gp = GlobalProfiler::lock();
    // Flush whatever the viewer's own puffin scopes left pending, without a sink to see it.
    gp.new_frame();
    let ids: BTreeMap<&str, ScopeId> = names
        .iter()
        .copied()
        .zip(gp.register_user_scopes(&details))
        .collect();
    let sink_slot = Arc::clone(&slot);
    let sink = gp.add_sink(Box::new(move |frame| {
        if let Ok(mut s) = sink_slot.lock() {
            *s = Some(frame);
        }
    }));
    let mut result = Ok(());
    for (i, (name, scopes)) in threads.iter().enumerate() {
        if scopes.is_empty() {
            continue;
        }
        match StreamInfo::parse(write_stream(scopes, &ids)) {
            Ok(info) => gp.report_user_scopes(
                ThreadInfo {
                    start_time_ns: Some(i as i64),
                    name: name.clone(),
                },
                &info.as_stream_into_ref(),
            ),
            Err(e) => result = Err(FlameError::Puffin(format!("{e:?}"))),
        }
    }
    // Every scope's details travel with the frame, so a fresh FrameView can name them.
    gp.emit_scope_snapshot();
    gp.new_frame();
    gp.remove_sink(sink);
    drop(gp);
    result?;
    let frame = slot.lock().ok().and_then(|mut s| s.take());
    frame.ok_or_else(|| FlameError::Puffin("no frame came out of the global profiler".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffin_egui::puffin::{FrameView, Reader};

    fn h(name: &str, start: u64, dur: u64, depth: u32) -> HostSpan {
        HostSpan(name.into(), start, dur, depth)
    }

    #[test]
    fn nesting_is_restored_from_depth_and_time() {
        let spans = [
            h("record", 110, 20, 1),
            h("token", 100, 100, 0),
            h("submit", 140, 5, 1),
            h("wait", 150, 80, 1), // runs past the token's end: clamped to 200
            h("inner", 141, 2, 2),
            h("submit", 160, 5, 1),
            h("token", 300, 50, 0),
            h("record", 310, 5, 1),
        ];
        let flat = flatten_host_spans(&spans, 100, "decode 0");
        let view: Vec<(&str, i64, i64, usize, &str)> = flat
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.start_ns,
                    s.end_ns,
                    s.level,
                    s.data.as_str(),
                )
            })
            .collect();
        assert_eq!(
            view,
            [
                ("token", 0, 100, 0, "decode 0"),
                ("record", 10, 30, 1, ""),
                ("submit", 40, 45, 1, "#0"),
                ("inner", 41, 43, 2, ""),
                ("wait", 50, 100, 1, ""),
                ("submit", 60, 65, 1, "#1"),
                ("token", 200, 250, 0, "decode 0"),
                ("record", 210, 215, 1, ""),
            ]
        );
    }

    #[test]
    fn a_frame_with_two_threads_reads_back() {
        let a = flatten_host_spans(
            &[
                h("token", 1_000, 500, 0),
                h("record", 1_010, 100, 1),
                h("submit", 1_120, 10, 1),
                h("wait", 1_140, 300, 1),
            ],
            1_000,
            "decode 3",
        );
        let b = flatten_host_spans(
            &[h("token", 9_000, 200, 0), h("submit", 9_010, 5, 1)],
            9_000,
            "decode 3",
        );
        let frame = build_frame(&[("A generic".into(), a), ("B fused".into(), b)]).expect("frame");
        assert_eq!(frame.meta().num_scopes, 6);
        let unpacked = frame.unpacked().expect("unpacked");
        let threads: Vec<&str> = unpacked
            .thread_streams
            .keys()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(threads, ["A generic", "B fused"]);
        let mut view = FrameView::default();
        view.add_frame(Arc::clone(&frame));
        for (info, stream) in &unpacked.thread_streams {
            let tops = Reader::from_start(&stream.stream)
                .read_top_scopes()
                .expect("valid stream");
            assert_eq!(tops.len(), 1, "{}", info.name);
            let top = tops[0];
            assert_eq!(top.record.start_ns, 0);
            assert_eq!(top.record.data, "decode 3");
            let name = view
                .scope_collection()
                .fetch_by_id(&top.id)
                .map(|d| d.name().to_string());
            assert_eq!(name.as_deref(), Some("token"));
            let children = Reader::with_offset(&stream.stream, top.child_begin_position)
                .expect("offset")
                .read_top_scopes()
                .expect("children");
            let expect = if info.name.starts_with('A') { 3 } else { 1 };
            assert_eq!(children.len(), expect);
        }
        assert!(matches!(
            build_frame(&[("A".into(), Vec::new())]),
            Err(FlameError::Empty)
        ));
    }
}
