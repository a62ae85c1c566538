//! The raw record stream and the live file.
//!
//! Records go to one file of JSON lines per process, `layer.PID.jsonl` in
//! `$DECODESCOPE_CAPTURE_DIR` (a folder `profiler record` made and owns). The program's threads
//! only hand records to a writer thread over a channel: serializing a wait group (hundreds of
//! spans for a runtime that records every token) happens there, off the program's critical
//! path. The writer writes each record as one line as soon as it arrives, so what a dead
//! program leaves behind is every record it had handed over by then.
//!
//! The live file `live.PID` (`profiler::capture::parse_live` documents its words) is a shared
//! mapping that the program's threads update with plain stores at every submit: when the
//! program is killed between two waits, it still says what was submitted after the last
//! record.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::time::Duration;

use profiler::capture::{
    LIVE_MAGIC, LIVE_SLOTS, LIVE_WORDS, RAW_VERSION, RawGroup, RawProcess, RawRecord,
};
use profiler::trace::{Counters, HostSpan};

use crate::state::{Closed, DeviceState};

enum Msg {
    Record(Box<RawRecord>),
    Group(Box<Closed>),
    Flush(SyncSender<()>),
}

/// A handle on the process's raw stream; cloning shares it. A disabled output (no capture
/// directory, or a file that could not be created) drops records.
#[derive(Clone, Debug)]
pub struct Output {
    tx: Option<Sender<Msg>>,
    live: Option<&'static [AtomicU64]>,
}

impl Output {
    pub fn disabled() -> Output {
        Output {
            tx: None,
            live: None,
        }
    }

    /// Opens `DIR/layer.PID.jsonl` and `DIR/live.PID`, starts the writer thread and writes the
    /// process record.
    pub fn open(dir: &str, timestamps: &str) -> Output {
        let pid = std::process::id();
        let path = PathBuf::from(dir).join(format!("layer.{pid}.jsonl"));
        let file = match File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "decodescope layer: cannot create {}: {e}; this process is not traced",
                    path.display()
                );
                return Output::disabled();
            }
        };
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("decodescope-writer".into())
            .spawn(move || writer(path, BufWriter::with_capacity(1 << 16, file), rx));
        if let Err(e) = spawned {
            eprintln!("decodescope layer: cannot start its writer thread: {e}; not traced");
            return Output::disabled();
        }
        let live = crate::ffi::map_live(&Path::new(dir).join(format!("live.{pid}")));
        let out = Output { tx: Some(tx), live };
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

    pub fn write(&self, rec: RawRecord) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Record(Box::new(rec)));
        }
    }

    pub fn group(&self, g: Closed) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Group(Box::new(g)));
        }
    }

    /// Waits (at most a few seconds) until the writer has written everything sent so far.
    pub fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (done, wait) = mpsc::sync_channel(1);
            if tx.send(Msg::Flush(done)).is_ok() {
                let _ = wait.recv_timeout(Duration::from_secs(5));
            }
        }
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

fn writer(path: PathBuf, mut file: BufWriter<File>, rx: Receiver<Msg>) {
    let mut ok = true;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Record(r) => ok = ok && line(&mut file, &r, &path),
                Msg::Group(g) => {
                    ok = ok && line(&mut file, &RawRecord::Group(raw_group(*g)), &path)
                }
                Msg::Flush(done) => {
                    ok = ok && flush(&mut file, &path);
                    let _ = done.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        // Nothing more queued: what was written reaches the file before the writer sleeps.
        ok = ok && flush(&mut file, &path);
    }
}

fn line(file: &mut BufWriter<File>, rec: &RawRecord, path: &Path) -> bool {
    let r = serde_json::to_writer(&mut *file, rec)
        .map_err(std::io::Error::other)
        .and_then(|()| file.write_all(b"\n"));
    report(r, path)
}

fn flush(file: &mut BufWriter<File>, path: &Path) -> bool {
    report(file.flush(), path)
}

fn report(r: std::io::Result<()>, path: &Path) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "decodescope layer: cannot write {}: {e}; tracing stops here",
                path.display()
            );
            false
        }
    }
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
