//! Export to the Chrome Trace Event format (JSON), which Perfetto (ui.perfetto.dev) and
//! chrome://tracing open.
//!
//! Layout:
//! - process 1 is the host: thread 1 holds every host span as an `X` (complete) event, nested by
//!   time; the `token` span carries the step's index, phase, position, kv_len and token id.
//!   Counter tracks (`C` events, one per counter and per time, one sample per step at the step's
//!   start) belong to process 1.
//! - process 2 is the GPU: one thread per queue (thread 1 = queue 0, compute; thread 2 = queue 1,
//!   transfer; thread N + 1 = queue N), with GPU spans as `X` events named by their op label and
//!   categorized by op kind.
//! - a flow arrow (`s` on the host, `f` with `bp: "e"` on the GPU, shared `id`) links each `submit`
//!   host span to the first GPU span of the work it submitted. Both ends sit at the middle of their
//!   slice so that they bind to it unambiguously.
//! - `M` events name both processes and every thread; `ts` is microseconds (fractional) relative
//!   to the earliest time in the trace, so no `ts` is negative.
//!
//! Every string is escaped by serde_json; nothing is written by hand.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};

use crate::io::write_output;
use crate::trace::{Counters, Phase, Trace};

pub const HOST_PID: u32 = 1;
pub const GPU_PID: u32 = 2;
pub const HOST_TID: u32 = 1;

/// Arguments of an event (`args`).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Args {
    /// A counter sample.
    Count { value: u64 },
    /// A time sample, us.
    Micros { value: f64 },
    /// A process or thread name.
    Name { name: String },
    /// A process or thread sort order.
    Sort { sort_index: u32 },
    /// A GPU span shared by `shared` concurrent dispatches (the trace's `GpuSpan::shared`).
    Shared { shared: u32 },
    /// What a `token` host span stands for.
    Step {
        step: usize,
        phase: &'static str,
        position: u32,
        n_tokens: u32,
        kv_len: u32,
        token_id: Option<u32>,
    },
}

/// A Chrome trace event. Optional fields are left out when `None`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Event {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<String>,
    pub ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Args>,
}

/// The JSON object form of a Chrome trace.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChromeTrace {
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<Event>,
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    #[serde(rename = "otherData")]
    pub other_data: Value,
}

/// Export failures.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "cannot write the Chrome trace {path}: {err} (check that the directory exists and is writable)"
    )]
    Write {
        path: String,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
}

fn queue_name(queue: u8) -> String {
    match queue {
        0 => "queue 0 (compute)".to_owned(),
        1 => "queue 1 (transfer)".to_owned(),
        q => format!("queue {q}"),
    }
}

fn event(name: String, ph: &'static str, pid: u32, tid: Option<u32>) -> Event {
    Event {
        name,
        cat: None,
        ph,
        ts: None,
        dur: None,
        pid,
        tid,
        id: None,
        bp: None,
        args: None,
    }
}

/// What every step's events need: the time origin.
struct Layout {
    base_ns: u64,
}

impl Layout {
    fn of(trace: &Trace) -> Layout {
        // The earliest time anywhere becomes 0.
        let base_ns = trace
            .tokens
            .iter()
            .flat_map(|t| {
                std::iter::once(t.start_ns)
                    .chain(t.host_spans.iter().map(|s| s.start_ns()))
                    .chain(t.gpu_spans.iter().map(|s| s.start_ns()))
            })
            .min()
            .unwrap_or(0);
        Layout { base_ns }
    }

    fn ts(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.base_ns) as f64 / 1_000.0
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

/// The events of step `i`; flow ids continue from `flow_id`.
fn step_events(trace: &Trace, i: usize, layout: &Layout, flow_id: &mut u64) -> Vec<Event> {
    let t = &trace.tokens[i];
    let mut events = Vec::with_capacity(t.host_spans.len() + t.gpu_spans.len() + 32);
    let phase = match t.phase {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    };
    let mut submits = Vec::new();
    for h in &t.host_spans {
        let mut e = event(h.name().to_owned(), "X", HOST_PID, Some(HOST_TID));
        e.cat = Some("host".to_owned());
        e.ts = Some(layout.ts(h.start_ns()));
        e.dur = Some(us(h.dur_ns()));
        if h.name() == "token" {
            e.args = Some(Args::Step {
                step: i,
                phase,
                position: t.position,
                n_tokens: t.n_tokens,
                kv_len: t.kv_len,
                token_id: t.token_id,
            });
        }
        if h.name() == "submit" {
            submits.push(h);
        }
        events.push(e);
    }
    // First GPU span of every submit.
    let mut first: Vec<Option<usize>> = vec![None; submits.len()];
    for (j, g) in t.gpu_spans.iter().enumerate() {
        let Some(info) = trace.ops.get(g.op() as usize) else {
            continue;
        };
        let mut e = event(info.label.clone(), "X", GPU_PID, Some(g.queue() as u32 + 1));
        e.cat = Some(info.kind.clone());
        e.ts = Some(layout.ts(g.start_ns()));
        e.dur = Some(us(g.dur_ns()));
        if g.shared() > 1 {
            e.args = Some(Args::Shared { shared: g.shared() });
        }
        events.push(e);
        let k = g.submit() as usize;
        let region = crate::stats::is_region_kind(&info.kind);
        if let Some(slot) = first.get_mut(k)
            && !region
            && slot.is_none_or(|f| g.start_ns() < t.gpu_spans[f].start_ns())
        {
            *slot = Some(j);
        }
    }
    for (k, target) in first.iter().enumerate() {
        let Some(j) = *target else {
            continue;
        };
        let (h, g) = (submits[k], &t.gpu_spans[j]);
        *flow_id += 1;
        let mut s = event("submit".to_owned(), "s", HOST_PID, Some(HOST_TID));
        s.cat = Some("submit".to_owned());
        s.id = Some(*flow_id);
        s.ts = Some(layout.ts(h.start_ns().saturating_add(h.dur_ns() / 2)));
        let mut f = event(
            "submit".to_owned(),
            "f",
            GPU_PID,
            Some(g.queue() as u32 + 1),
        );
        f.cat = Some("submit".to_owned());
        f.id = Some(*flow_id);
        f.bp = Some("e");
        f.ts = Some(layout.ts(g.start_ns().saturating_add(g.dur_ns() / 2)));
        events.push(s);
        events.push(f);
    }
    // Counter tracks: one sample per step.
    let at = Some(layout.ts(t.start_ns));
    for (name, v) in Counters::NAMES.iter().zip(t.counters.values()) {
        let mut c = event((*name).to_owned(), "C", HOST_PID, Some(HOST_TID));
        c.ts = at;
        c.args = Some(Args::Count { value: v });
        events.push(c);
    }
    let mut times = vec![
        ("host_enqueue_us", us(t.host_enqueue_ns)),
        ("host_wait_us", us(t.host_wait_ns)),
        ("wall_us", us(t.wall_ns)),
    ];
    if let Some(g) = crate::stats::gpu_busy_ns(trace, t) {
        times.push(("gpu_us", us(g)));
    }
    for (name, v) in times {
        let mut c = event(name.to_owned(), "C", HOST_PID, Some(HOST_TID));
        c.ts = at;
        c.args = Some(Args::Micros { value: v });
        events.push(c);
    }
    events
}

/// `M` events naming both processes and every thread the trace uses.
fn metadata_events(trace: &Trace) -> Vec<Event> {
    let queues: BTreeSet<u8> = trace
        .tokens
        .iter()
        .flat_map(|t| t.gpu_spans.iter())
        .filter(|g| (g.op() as usize) < trace.ops.len())
        .map(|g| g.queue())
        .collect();
    let m = &trace.meta;
    let mut meta = Vec::new();
    let mut name_process = |pid: u32, name: String, sort: u32| {
        let mut e = event("process_name".to_owned(), "M", pid, None);
        e.args = Some(Args::Name { name });
        meta.push(e);
        let mut e = event("process_sort_index".to_owned(), "M", pid, None);
        e.args = Some(Args::Sort { sort_index: sort });
        meta.push(e);
    };
    name_process(
        HOST_PID,
        format!("host: {} ({} mode)", m.model.name, m.knobs.mode),
        0,
    );
    name_process(GPU_PID, format!("GPU: {}", m.device.name), 1);
    let mut name_thread = |pid: u32, tid: u32, name: String| {
        let mut e = event("thread_name".to_owned(), "M", pid, Some(tid));
        e.args = Some(Args::Name { name });
        meta.push(e);
        let mut e = event("thread_sort_index".to_owned(), "M", pid, Some(tid));
        e.args = Some(Args::Sort { sort_index: tid });
        meta.push(e);
    };
    name_thread(HOST_PID, HOST_TID, "host thread".to_owned());
    for q in &queues {
        name_thread(GPU_PID, *q as u32 + 1, queue_name(*q));
    }
    meta
}

fn other_data(trace: &Trace, layout: &Layout) -> Value {
    let m = &trace.meta;
    json!({
        "source_format": trace.format,
        "source_version": trace.version,
        "tool": format!("{} {}", m.tool.name, m.tool.version),
        "model": m.model.name,
        "device": m.device.name,
        "driver": m.device.driver,
        "mode": m.knobs.mode,
        "timestamps": m.run.timestamps,
        "gpu_clock": if m.clock.calibrated {
            format!("calibrated ({})", m.clock.method)
        } else {
            format!("uncalibrated ({})", m.clock.method)
        },
        "time_origin_host_ns": m.epoch_host_ns.saturating_add(layout.base_ns),
    })
}

/// Builds the Chrome trace of `trace` in memory (see [`export_chrome`] to write one).
pub fn chrome_trace(trace: &Trace) -> ChromeTrace {
    let layout = Layout::of(trace);
    let mut events = metadata_events(trace);
    let mut flow_id = 0;
    for i in 0..trace.tokens.len() {
        events.extend(step_events(trace, i, &layout, &mut flow_id));
    }
    ChromeTrace {
        trace_events: events,
        display_time_unit: "ns",
        other_data: other_data(trace, &layout),
    }
}

/// Serializes the same document as [`chrome_trace`], generating each step's events only when
/// they are written, so memory stays at one step's events however long the trace.
struct Streamed<'a> {
    trace: &'a Trace,
    layout: Layout,
}

struct EventStream<'a>(&'a Streamed<'a>);

impl Serialize for EventStream<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Streamed { trace, layout } = self.0;
        let mut flow_id = 0;
        let steps =
            (0..trace.tokens.len()).flat_map(move |i| step_events(trace, i, layout, &mut flow_id));
        serializer.collect_seq(metadata_events(trace).into_iter().chain(steps))
    }
}

impl Serialize for Streamed<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = serializer.serialize_struct("ChromeTrace", 3)?;
        st.serialize_field("traceEvents", &EventStream(self))?;
        st.serialize_field("displayTimeUnit", "ns")?;
        st.serialize_field("otherData", &other_data(self.trace, &self.layout))?;
        st.end()
    }
}

/// Writes the Chrome trace of `trace` to `out`, atomically, streaming the events.
pub fn export_chrome(trace: &Trace, out: &Path) -> Result<(), ExportError> {
    let doc = Streamed {
        trace,
        layout: Layout::of(trace),
    };
    write_output(out, |w| {
        serde_json::to_writer(&mut *w, &doc).map_err(std::io::Error::from)?;
        std::io::Write::write_all(w, b"\n")
    })
    .map_err(|err| ExportError::Write {
        path: out.display().to_string(),
        err,
    })
}
