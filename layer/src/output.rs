//! The raw record stream and the live file.
//!
//! Records go to one file of JSON lines per process, `layer.PID.jsonl` in
//! `$DECODESCOPE_CAPTURE_DIR` (a folder `profiler record` made and owns), written through a
//! shared mapping of the file ([`MappedLog`]): every record is in the file as soon as it is
//! copied there, with no system call, so what a dead program leaves behind is every record it
//! had made by then, in order, followed by zero bytes up to the end of the mapped chunk (which
//! the reader skips; a clean exit cuts them off):
//!
//! - a small record (a wait group of at most [`INLINE_SPANS`] spans, an op, a queue) is written
//!   by the program's thread itself when nothing is queued for the writer thread: a microsecond
//!   or two of serializing and a copy, where waking another thread costs more (and on a busy
//!   machine takes a core from the program). A runtime that waits after every dispatch closes a
//!   small group per dispatch;
//! - a large wait group (hundreds of spans for a runtime that records a token at a time) goes
//!   over a channel to the writer thread, which serializes it off the program's critical path.
//!
//! The writer thread also maps the file's next chunk ahead and makes its pages present
//! ([`MappedLog::prepare_next`]), so the program's thread neither maps nor page-faults.
//!
//! The live file `live.PID` (`profiler::capture::parse_live` documents its words) is a shared
//! mapping that the program's threads update with plain stores at every submit: when the
//! program is killed between two waits, it still says what was submitted after the last
//! record.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use profiler::capture::{
    LIVE_MAGIC, LIVE_SLOTS, LIVE_WORDS, RAW_VERSION, RawGroup, RawProcess, RawRecord,
};
use profiler::trace::{Counters, HostSpan};

use crate::ffi::{MappedLog, Prefault};
use crate::state::{Closed, DeviceState};

/// A wait group with at most this many host and GPU spans is written by the thread that
/// closed it (when the writer thread has nothing queued).
pub const INLINE_SPANS: usize = 64;

enum Msg {
    Record(Box<RawRecord>),
    Group(Box<Closed>),
    Flush(SyncSender<()>),
    /// Map the file's next chunk ahead (not counted in `queued`: it writes no record).
    Prepare,
}

/// The file and what was queued for the writer thread and not yet written: a record is
/// written in place only when nothing is, so the file keeps the order records were made in.
#[derive(Debug)]
struct Stream {
    sink: Mutex<Sink>,
    queued: AtomicUsize,
    /// Someone holds the claim to prepare the file's next chunk ([`Stream::claim_prepare`]).
    preparing: AtomicBool,
}

#[derive(Debug)]
struct Sink {
    file: MappedLog,
    path: PathBuf,
    /// False once a write failed (tracing stops there; said once).
    ok: bool,
    /// A reused buffer for serializing a record before the file's lock is taken.
    line: Vec<u8>,
}

impl Stream {
    fn sink(&self) -> MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when the file wants its next chunk mapped and no one is preparing it yet: the
    /// caller is then the one to ([`prepare`]).
    fn claim_prepare(&self, sink: &Sink) -> bool {
        sink.ok && sink.file.wants_next() && !self.preparing.swap(true, Ordering::AcqRel)
    }
}

impl Sink {
    /// Writes one serialized line.
    fn write_line(&mut self, line: &[u8]) {
        if !self.ok {
            return;
        }
        let r = self.file.append(line);
        self.report(r);
    }

    /// Maps the file's next chunk when it wants one, returning its population to run without
    /// the lock.
    fn prepare(&mut self) -> Option<Prefault> {
        if !self.ok {
            return None;
        }
        match self.file.prepare_next() {
            Ok(p) => p,
            Err(e) => {
                self.report(Err(e));
                None
            }
        }
    }

    /// Cuts the file to what was written (the program is exiting or a device going away).
    fn settle(&mut self) {
        if self.ok {
            let r = self.file.settle();
            self.report(r);
        }
    }

    fn report(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            eprintln!(
                "decodescope layer: cannot write {}: {e}; tracing stops here",
                self.path.display()
            );
            self.ok = false;
        }
    }
}

/// `rec` as one JSON line into `buf` (cleared first).
fn serialize(rec: &RawRecord, buf: &mut Vec<u8>) {
    buf.clear();
    // Serializing these plain structs into memory cannot fail.
    let _ = serde_json::to_writer(&mut *buf, rec);
    buf.push(b'\n');
}

/// A handle on the process's raw stream; cloning shares it. A disabled output (no capture
/// directory, or a file that could not be created) drops records.
#[derive(Clone, Debug)]
pub struct Output {
    tx: Option<Sender<Msg>>,
    stream: Option<Arc<Stream>>,
    live: Option<&'static [AtomicU64]>,
}

impl Output {
    pub fn disabled() -> Output {
        Output {
            tx: None,
            stream: None,
            live: None,
        }
    }

    /// Opens `DIR/layer.PID.jsonl` and `DIR/live.PID`, starts the writer thread and writes the
    /// process record.
    pub fn open(dir: &str, timestamps: &str) -> Output {
        let pid = std::process::id();
        let path = PathBuf::from(dir).join(format!("layer.{pid}.jsonl"));
        let file = match MappedLog::create(&path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "decodescope layer: cannot create {}: {e}; this process is not traced",
                    path.display()
                );
                return Output::disabled();
            }
        };
        let stream = Arc::new(Stream {
            sink: Mutex::new(Sink {
                file,
                path,
                ok: true,
                line: Vec::new(),
            }),
            queued: AtomicUsize::new(0),
            preparing: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let theirs = stream.clone();
        let spawned = std::thread::Builder::new()
            .name("decodescope-writer".into())
            .spawn(move || writer(&theirs, rx));
        if let Err(e) = spawned {
            eprintln!("decodescope layer: cannot start its writer thread: {e}; not traced");
            return Output::disabled();
        }
        let live = crate::ffi::map_live(&Path::new(dir).join(format!("live.{pid}")));
        let out = Output {
            tx: Some(tx),
            stream: Some(stream),
            live,
        };
        out.write(RawRecord::Process(RawProcess {
            raw_version: RAW_VERSION,
            pid,
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            timestamps: timestamps.to_owned(),
            layer_version: env!("CARGO_PKG_VERSION").to_owned(),
        }));
        out
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Writes `rec` in place when nothing is queued for the writer thread; gives it back
    /// otherwise.
    fn inline(&self, rec: RawRecord) -> Option<RawRecord> {
        let Some(stream) = &self.stream else {
            return None;
        };
        if stream.queued.load(Ordering::Acquire) != 0 {
            return Some(rec);
        }
        let mut sink = stream.sink();
        // Checked again under the file's lock: the writer thread counts a message done only
        // once it is in the file's buffer, and only under this lock.
        if stream.queued.load(Ordering::Acquire) != 0 {
            return Some(rec);
        }
        let mut line = std::mem::take(&mut sink.line);
        serialize(&rec, &mut line);
        sink.write_line(&line);
        sink.line = line;
        let claimed = stream.claim_prepare(&sink);
        drop(sink);
        // Without a writer thread to take it, the claim stays: the file's chunks are then
        // mapped where the program's thread reaches them.
        if claimed && let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Prepare);
        }
        None
    }

    fn send(&self, msg: Msg) {
        if let (Some(tx), Some(stream)) = (&self.tx, &self.stream) {
            stream.queued.fetch_add(1, Ordering::AcqRel);
            if tx.send(msg).is_err() {
                stream.queued.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    pub fn write(&self, rec: RawRecord) {
        if let Some(rec) = self.inline(rec) {
            self.send(Msg::Record(Box::new(rec)));
        }
    }

    pub fn group(&self, g: Closed) {
        if self.stream.is_none() {
            return;
        }
        if g.host.len() + g.gpu.len() <= INLINE_SPANS {
            if let Some(RawRecord::Group(r)) = self.inline(RawRecord::Group(raw_group(g))) {
                self.send(Msg::Record(Box::new(RawRecord::Group(r))));
            }
        } else {
            self.send(Msg::Group(Box::new(g)));
        }
    }

    /// Waits (at most a few seconds) until everything made so far is written, and cuts the
    /// file to it.
    pub fn flush(&self) {
        let Some(stream) = &self.stream else { return };
        if stream.queued.load(Ordering::Acquire) == 0 {
            stream.sink().settle();
            return;
        }
        let (done, wait) = mpsc::sync_channel(1);
        self.send(Msg::Flush(done));
        let _ = wait.recv_timeout(Duration::from_secs(5));
    }

    /// Copies what `state` counted so far into the device's slot of the live file.
    pub fn live(&self, state: &DeviceState, last_submit_ns: u64) {
        let Some(words) = self.live else { return };
        let slot = state.index as usize;
        if slot >= LIVE_SLOTS {
            return;
        }
        let w = &words[slot * LIVE_WORDS..(slot + 1) * LIVE_WORDS];
        let fields = state.total.to_fields();
        w[1].store(state.index as u64, Ordering::Relaxed);
        w[2].store(state.groups_closed(), Ordering::Relaxed);
        w[3].store(state.open_group_start_ns(), Ordering::Relaxed);
        w[4].store(last_submit_ns, Ordering::Relaxed);
        for (i, v) in fields.iter().enumerate().take(Counters::FIELDS) {
            w[5 + i].store(*v, Ordering::Relaxed);
        }
        w[0].store(LIVE_MAGIC, Ordering::Release);
    }
}

fn writer(stream: &Stream, rx: Receiver<Msg>) {
    let mut line = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            next = rx.try_recv().ok();
            let flushed = match msg {
                Msg::Record(r) => {
                    serialize(&r, &mut line);
                    None
                }
                Msg::Group(g) => {
                    serialize(&RawRecord::Group(raw_group(*g)), &mut line);
                    None
                }
                Msg::Flush(done) => {
                    line.clear();
                    Some(done)
                }
                Msg::Prepare => {
                    prepare(stream);
                    continue;
                }
            };
            let mut sink = stream.sink();
            sink.write_line(&line);
            if let Some(done) = flushed {
                sink.settle();
                let _ = done.send(());
            }
            let claimed = stream.claim_prepare(&sink);
            drop(sink);
            stream.queued.fetch_sub(1, Ordering::AcqRel);
            if claimed {
                prepare(stream);
            }
        }
    }
}

/// Maps the file's next chunk (under the file's lock) and makes its pages present (without
/// it), for the claim of [`Stream::claim_prepare`], which it releases.
fn prepare(stream: &Stream) {
    let prefault = stream.sink().prepare();
    if let Some(p) = prefault {
        p.run();
    }
    stream.preparing.store(false, Ordering::Release);
}

fn raw_group(g: Closed) -> RawGroup {
    RawGroup {
        device: g.device,
        index: g.index,
        wait: g.wait.to_owned(),
        start_ns: g.start_ns,
        end_ns: g.end_ns,
        signature: g.signature,
        work_signature: g.work_signature,
        counters: g.counters,
        host_spans: g
            .host
            .into_iter()
            .map(|(name, start, dur, depth)| HostSpan(name.name().to_owned(), start, dur, depth))
            .collect(),
        gpu_spans: g.gpu,
        dropped_timestamps: g.dropped,
        untimed: g.untimed,
        queues: g.queues,
    }
}
