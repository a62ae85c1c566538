//! The raw record stream: one file of JSON lines per process in `$DECODESCOPE_CAPTURE_DIR`,
//! flushed after every record so that a program that dies leaves every finished record behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use profiler::capture::{RAW_VERSION, RawProcess, RawRecord};

/// A shared handle on the process's raw file; cloning shares it. A disabled output (no capture
/// directory, or a write that failed) drops records.
#[derive(Clone, Debug)]
pub struct Output {
    inner: Option<Arc<Mutex<Writer>>>,
}

#[derive(Debug)]
struct Writer {
    path: PathBuf,
    file: Option<BufWriter<File>>,
}

impl Output {
    pub fn disabled() -> Output {
        Output { inner: None }
    }

    /// Opens `DIR/layer.PID.jsonl` and writes the process record.
    pub fn open(dir: &str, timestamps: &str) -> Output {
        let pid = std::process::id();
        let path = PathBuf::from(dir).join(format!("layer.{pid}.jsonl"));
        let file = match File::create(&path) {
            Ok(f) => Some(BufWriter::new(f)),
            Err(e) => {
                eprintln!(
                    "decodescope layer: cannot create {}: {e}; this process is not traced",
                    path.display()
                );
                None
            }
        };
        let out = Output {
            inner: Some(Arc::new(Mutex::new(Writer { path, file }))),
        };
        out.write(&RawRecord::Process(RawProcess {
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
        self.inner.is_some()
    }

    /// Appends one record as a line and flushes it.
    pub fn write(&self, rec: &RawRecord) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Ok(mut w) = inner.lock() else {
            return;
        };
        let Some(file) = w.file.as_mut() else {
            return;
        };
        let r = serde_json::to_writer(&mut *file, rec)
            .map_err(std::io::Error::other)
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.flush());
        if let Err(e) = r {
            eprintln!(
                "decodescope layer: cannot write {}: {e}; tracing stops here",
                w.path.display()
            );
            w.file = None;
        }
    }
}
