//! Reading and writing trace files.
//!
//! The on-disk form is the JSON serialization of [`Trace`] (`TRACE_FORMAT.md`). Every output of
//! decodescope (traces, exports, reports, plots, GGUF files) is written by [`write_output`]: over
//! a missing path or a regular file atomically (a temporary file in the destination's directory,
//! flushed to disk, then renamed over the final name, so an interrupted capture never leaves a
//! truncated trace behind); into a character device or a FIFO in place, never replacing it; and
//! [`check_output`] finds an output that cannot be written before any work starts. A directory
//! written as a whole (a checkpoint) goes through [`StagedDir`] the same way. Reading never
//! panics: every way a file can be wrong maps to one [`TraceError`] variant whose message names
//! the file and says what to do.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;

mod output;

pub use output::*;

use crate::trace::{
    Counters, FORMAT_NAME, FORMAT_VERSION, GpuSpan, Meta, OpInfo, Phase, TokenRecord, Trace,
};

/// Everything that can go wrong reading or writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {source_name}: {err}")]
    Read {
        source_name: String,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
    #[error(
        "cannot write trace {path}: {err} (check that the directory exists and is writable)",
        path = path.display()
    )]
    Write {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
    #[error("{source_name} is not a decodescope trace: {reason}")]
    WrongType { source_name: String, reason: String },
    #[error(
        "{source_name} is trace format version {found}, but this build of the profiler reads \
         versions up to {newest}; update decodescope to read it"
    )]
    NewerVersion {
        source_name: String,
        found: u32,
        newest: u32,
    },
    #[error(
        "{source_name} is truncated: the data ends at byte {offset} in the middle of the trace \
         (the capture was probably interrupted); capture it again"
    )]
    Truncated { source_name: String, offset: u64 },
    #[error(
        "{source_name} is not a valid trace at byte {offset} (line {line}, column {column}): {message}"
    )]
    Invalid {
        source_name: String,
        offset: u64,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{source_name} is an inconsistent trace: {message}")]
    Inconsistent {
        source_name: String,
        message: String,
    },
}

/// The name used for traces read from memory or a reader rather than a file.
const UNNAMED: &str = "<input>";

/// Reads the whole of the regular file at `path`, and no more than its size.
///
/// A FIFO, a character device (`/dev/zero`, a terminal) or a socket never ends (or, for a FIFO,
/// blocks on open until a writer comes), so reading one "to the end" hangs or fills memory:
/// anything that is not a regular file is refused, before it is opened, with an error of kind
/// `InvalidInput` that says what it is. The opened handle is checked again (a path swapped after
/// the first check is caught unless it became a FIFO), and the read is bounded by the size the
/// handle reports: a file that grows meanwhile is read as it was.
pub fn read_regular_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = open_regular_file(path)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens the regular file at `path` for reading; anything else (a FIFO, a device, a socket, a
/// directory) is refused before it is opened, with an error of kind `InvalidInput` that says what
/// it is, and the opened handle is checked again. The one way every input file of decodescope
/// is opened, so that no input hangs on a FIFO or reads a device without end.
pub fn open_regular_file(path: &Path) -> std::io::Result<File> {
    let not_regular = |t: &std::fs::FileType| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "it is {}, not a regular file; give the path of a file",
                file_type_name(t)
            ),
        )
    };
    let before = std::fs::metadata(path)?;
    if !before.is_file() {
        return Err(not_regular(&before.file_type()));
    }
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    Ok(file)
}

/// What a file that is not a regular file is, as a phrase: `a directory`, `a FIFO`.
pub(crate) fn file_type_name(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// Reads and checks the trace at `path`.
pub fn read_trace(path: &Path) -> Result<Trace, TraceError> {
    let source_name = path.display().to_string();
    let bytes = read_regular_file(path).map_err(|err| TraceError::Read {
        source_name: source_name.clone(),
        err,
    })?;
    parse(&bytes, &source_name)
}

/// Reads and checks the trace at `path` without its host spans (every `host_spans` is left empty).
///
/// Statistics, diffs and gates never look at host spans, and in a capture that submits after every
/// dispatch they are most of the file: skipping them while parsing (no allocation per span) makes
/// a 10,000-token generic-preset trace several times cheaper to analyse. Use [`read_trace`] for
/// anything that shows host spans (the Chrome export, the viewer).
pub fn read_trace_for_analysis(path: &Path) -> Result<Trace, TraceError> {
    let source_name = path.display().to_string();
    let bytes = read_regular_file(path).map_err(|err| TraceError::Read {
        source_name: source_name.clone(),
        err,
    })?;
    parse_with(&bytes, &source_name, Spans::SkipHost)
}

/// Reads and checks a trace from any reader (the whole input is read first).
pub fn from_reader<R: Read>(mut reader: R) -> Result<Trace, TraceError> {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|err| TraceError::Read {
            source_name: UNNAMED.to_owned(),
            err,
        })?;
    parse(&bytes, UNNAMED)
}

/// Reads and checks a trace held in memory.
pub fn from_slice(bytes: &[u8]) -> Result<Trace, TraceError> {
    parse(bytes, UNNAMED)
}

/// Like [`from_slice`], naming the input `source_name` in errors.
pub fn from_slice_named(bytes: &[u8], source_name: &str) -> Result<Trace, TraceError> {
    parse(bytes, source_name)
}

/// Serializes `trace` as compact JSON into `writer`.
pub fn to_writer<W: Write>(writer: W, trace: &Trace) -> Result<(), serde_json::Error> {
    serde_json::to_writer(writer, trace)
}

/// Serializes `trace` as compact JSON.
pub fn to_vec(trace: &Trace) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(trace)
}

/// Writes `trace` to `path` with [`write_output`]: atomically over a missing path or a regular
/// file, in place into a character device or a FIFO. On any error the temporary file is removed
/// and `path` is left as it was.
pub fn write_trace(path: &Path, trace: &Trace) -> Result<(), TraceError> {
    stage_trace(path, trace)?
        .commit()
        .map_err(|err| TraceError::Write {
            path: path.to_owned(),
            err,
        })
}

/// Writes `trace` beside `path` with [`stage_output`], for [`StagedOutput::commit`] to put in
/// place together with other outputs.
pub fn stage_trace(path: &Path, trace: &Trace) -> Result<StagedOutput, TraceError> {
    let ((), staged) = stage_output(path, |w| {
        serde_json::to_writer(&mut *w, trace).map_err(std::io::Error::from)?;
        w.write_all(b"\n")
    })
    .map_err(|err| TraceError::Write {
        path: path.to_owned(),
        err,
    })?;
    Ok(staged)
}

/// A trace written while it is produced, through [`stage_output`]'s rules (a temporary file
/// beside the destination, renamed into place by [`StagedOutput::commit`]; a device or FIFO
/// written in place): the header and each step's record go out as they come, so a long capture
/// holds one record at a time, not the whole trace. The ops and the metadata, known only at the
/// end, follow the tokens array (`TRACE_FORMAT.md`, "Encoding"); dropping the writer unfinished
/// removes the temporary file and leaves the destination as it was.
#[derive(Debug)]
pub struct TraceWriter {
    w: BufWriter<File>,
    staged: StagedOutput,
    path: PathBuf,
    tokens: u64,
}

impl TraceWriter {
    /// Starts the trace for `path`: `{"format":..,"version":..,"tokens":[`.
    pub fn create(path: &Path) -> Result<Self, TraceError> {
        let (file, staged) = open_staged(path).map_err(|err| TraceError::Write {
            path: path.to_owned(),
            err,
        })?;
        let mut out = TraceWriter {
            w: BufWriter::with_capacity(1 << 20, file),
            staged,
            path: path.to_owned(),
            tokens: 0,
        };
        out.io(|w| {
            w.write_all(b"{\"format\":")?;
            serde_json::to_writer(&mut *w, FORMAT_NAME)?;
            write!(w, ",\"version\":{FORMAT_VERSION},\"tokens\":[")
        })?;
        Ok(out)
    }

    /// Appends one step's record.
    pub fn push(&mut self, token: &TokenRecord) -> Result<(), TraceError> {
        let first = self.tokens == 0;
        self.io(|w| {
            if !first {
                w.write_all(b",")?;
            }
            serde_json::to_writer(&mut *w, token)?;
            Ok(())
        })?;
        self.tokens += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Closes the tokens array, writes `meta` and `ops`, flushes and syncs the file, and returns
    /// it staged for [`StagedOutput::commit`].
    pub fn finish(mut self, meta: &Meta, ops: &[OpInfo]) -> Result<StagedOutput, TraceError> {
        self.io(|w| {
            w.write_all(b"],\"meta\":")?;
            serde_json::to_writer(&mut *w, meta)?;
            w.write_all(b",\"ops\":")?;
            serde_json::to_writer(&mut *w, ops)?;
            w.write_all(b"}\n")?;
            w.flush()
        })?;
        if self.staged.tmp.is_some() {
            let path = self.path.clone();
            self.w
                .get_ref()
                .sync_all()
                .map_err(|err| TraceError::Write { path, err })?;
        }
        Ok(self.staged)
    }

    fn io(
        &mut self,
        f: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<(), TraceError> {
        f(&mut self.w).map_err(|err| TraceError::Write {
            path: self.path.clone(),
            err,
        })
    }
}

/// Only the identifying fields, to explain why a full parse failed.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    format: Option<IgnoredAnyOrString>,
    #[serde(default)]
    version: Option<IgnoredAnyOrU32>,
    #[serde(default, rename = "traceEvents")]
    trace_events: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IgnoredAnyOrString {
    Str(String),
    Other(IgnoredAny),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IgnoredAnyOrU32 {
    Num(u32),
    Other(IgnoredAny),
}

/// [`Trace`] as parsed for analysis: host spans are skipped without allocating.
#[derive(Deserialize)]
struct LeanTrace {
    format: String,
    version: u32,
    meta: Meta,
    ops: Vec<OpInfo>,
    tokens: Vec<LeanToken>,
}

/// [`TokenRecord`] without host spans; the serde attributes must match trace.rs (a test compares
/// both readers on every fixture).
#[derive(Deserialize)]
struct LeanToken {
    index: u32,
    phase: Phase,
    position: u32,
    n_tokens: u32,
    kv_len: u32,
    #[serde(default)]
    token_id: Option<u32>,
    start_ns: u64,
    wall_ns: u64,
    host_enqueue_ns: u64,
    #[serde(default)]
    host_wait_ns: u64,
    #[serde(default)]
    gpu_busy_ns: Option<u64>,
    counters: Counters,
    #[serde(default)]
    #[allow(dead_code)]
    host_spans: IgnoredAny,
    #[serde(default)]
    gpu_spans: Vec<GpuSpan>,
    #[serde(default)]
    gpu_untimed: u64,
}

impl From<LeanTrace> for Trace {
    fn from(t: LeanTrace) -> Trace {
        Trace {
            format: t.format,
            version: t.version,
            meta: t.meta,
            ops: t.ops,
            tokens: t
                .tokens
                .into_iter()
                .map(|r| TokenRecord {
                    index: r.index,
                    phase: r.phase,
                    position: r.position,
                    n_tokens: r.n_tokens,
                    kv_len: r.kv_len,
                    token_id: r.token_id,
                    start_ns: r.start_ns,
                    wall_ns: r.wall_ns,
                    host_enqueue_ns: r.host_enqueue_ns,
                    host_wait_ns: r.host_wait_ns,
                    gpu_busy_ns: r.gpu_busy_ns,
                    counters: r.counters,
                    host_spans: Vec::new(),
                    gpu_spans: r.gpu_spans,
                    gpu_untimed: r.gpu_untimed,
                })
                .collect(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Spans {
    All,
    SkipHost,
}

fn parse(bytes: &[u8], source_name: &str) -> Result<Trace, TraceError> {
    parse_with(bytes, source_name, Spans::All)
}

fn parse_with(bytes: &[u8], source_name: &str, spans: Spans) -> Result<Trace, TraceError> {
    let wrong_type = |reason: String| TraceError::WrongType {
        source_name: source_name.to_owned(),
        reason,
    };
    let first = bytes.iter().position(|b| !b.is_ascii_whitespace());
    match first.map(|i| bytes[i]) {
        None => return Err(wrong_type("the file is empty".to_owned())),
        Some(b'{') => {}
        Some(_) => {
            let what = if bytes.starts_with(b"\x7fELF") {
                "it is an executable"
            } else if bytes.starts_with(&[0x1f, 0x8b]) {
                "it is gzip-compressed (decompress it first)"
            } else if std::str::from_utf8(&bytes[..bytes.len().min(64)]).is_err() {
                "it is binary data, not JSON"
            } else {
                "it does not start with a JSON object `{`"
            };
            return Err(wrong_type(format!(
                "{what}; a trace is a JSON object with \"format\": \"{FORMAT_NAME}\""
            )));
        }
    }

    let parsed = match spans {
        Spans::All => serde_json::from_slice::<Trace>(bytes),
        Spans::SkipHost => serde_json::from_slice::<LeanTrace>(bytes).map(Trace::from),
    };
    match parsed {
        Ok(trace) => {
            check_identity(Some(&trace.format), Some(trace.version), false, source_name)?;
            validate(&trace).map_err(|message| TraceError::Inconsistent {
                source_name: source_name.to_owned(),
                message,
            })?;
            Ok(trace)
        }
        Err(err) => {
            if err.is_eof() {
                return Err(TraceError::Truncated {
                    source_name: source_name.to_owned(),
                    offset: bytes.len() as u64,
                });
            }
            // Explain the failure by the file's identity first: another tool's JSON or a newer
            // version fails in ways whose serde message would only confuse.
            if let Ok(header) = serde_json::from_slice::<Header>(bytes) {
                let format = match &header.format {
                    Some(IgnoredAnyOrString::Str(s)) => Some(s.as_str()),
                    _ => None,
                };
                let version = match header.version {
                    Some(IgnoredAnyOrU32::Num(v)) => Some(v),
                    _ => None,
                };
                check_identity(format, version, header.trace_events.is_some(), source_name)?;
            }
            let offset = byte_offset(bytes, err.line(), err.column());
            let message = if err.is_syntax() {
                format!("not valid JSON: {}", strip_position(&err))
            } else {
                strip_position(&err)
            };
            Err(TraceError::Invalid {
                source_name: source_name.to_owned(),
                offset,
                line: err.line(),
                column: err.column(),
                message,
            })
        }
    }
}

fn check_identity(
    format: Option<&str>,
    version: Option<u32>,
    chrome_events: bool,
    source_name: &str,
) -> Result<(), TraceError> {
    let wrong_type = |reason: String| TraceError::WrongType {
        source_name: source_name.to_owned(),
        reason,
    };
    match format {
        Some(FORMAT_NAME) => {}
        Some(other) => {
            return Err(wrong_type(format!(
                "its \"format\" is \"{other}\", expected \"{FORMAT_NAME}\""
            )));
        }
        None if chrome_events => {
            return Err(wrong_type(
                "it is a Chrome trace-event file (perhaps a `profiler export` output); pass the \
                 decodescope trace it was exported from"
                    .to_owned(),
            ));
        }
        None => {
            return Err(wrong_type(format!(
                "it is JSON without \"format\": \"{FORMAT_NAME}\""
            )));
        }
    }
    if let Some(found) = version
        && found > FORMAT_VERSION
    {
        return Err(TraceError::NewerVersion {
            source_name: source_name.to_owned(),
            found,
            newest: FORMAT_VERSION,
        });
    }
    Ok(())
}

/// Checks the references inside a trace that analysis relies on: every GPU span names an op, and
/// no counter sum overflows.
pub fn validate(trace: &Trace) -> Result<(), String> {
    if trace.version == 0 {
        return Err("format version 0 does not exist; the first version is 1".to_owned());
    }
    let n_ops = trace.ops.len();
    for (i, token) in trace.tokens.iter().enumerate() {
        // `Counters::submits` adds both queues; a sum past u64 is corruption, not a count.
        let c = &token.counters;
        if c.submits_compute.checked_add(c.submits_transfer).is_none() {
            return Err(format!(
                "step {i}: submits_compute + submits_transfer exceeds 2^64"
            ));
        }
        if let Some((j, span)) = token
            .gpu_spans
            .iter()
            .enumerate()
            .find(|(_, s)| s.op() as usize >= n_ops)
        {
            return Err(format!(
                "step {i}, GPU span {j} names op {} but the trace lists only {n_ops} ops",
                span.op()
            ));
        }
    }
    Ok(())
}

/// serde_json reports line and column (1-based, column counted in bytes); turn them into a byte
/// offset from the start of the input.
fn byte_offset(bytes: &[u8], line: usize, column: usize) -> u64 {
    if line == 0 {
        return 0;
    }
    let mut line_start = 0usize;
    let mut current = 1usize;
    if line > 1 {
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' {
                current += 1;
                if current == line {
                    line_start = i + 1;
                    break;
                }
            }
        }
    }
    (line_start + column.saturating_sub(1)).min(bytes.len()) as u64
}

/// serde_json appends " at line L column C" to its messages; the error reports the position itself.
fn strip_position(err: &serde_json::Error) -> String {
    let s = err.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_count_bytes_from_the_start() {
        let text = b"{\n  \"a\": 1,\n  x\n}";
        let err = match serde_json::from_slice::<serde_json::Value>(text) {
            Err(e) => e,
            Ok(v) => panic!("parsed {v}"),
        };
        let offset = byte_offset(text, err.line(), err.column()) as usize;
        assert_eq!(text[offset], b'x');
    }

    #[test]
    fn a_staged_directory_appears_whole_replaces_only_when_asked_and_leaves_nothing() {
        let root = tempfile::tempdir().expect("temp dir");
        let dest = root.path().join("nested").join("ckpt");
        let write = |dest: &Path, text: &str| {
            let staged = StagedDir::create(dest).expect("create");
            std::fs::write(staged.path().join("config.json"), text).expect("write");
            staged
        };
        let first = write(&dest, "1");
        assert!(!dest.exists(), "visible before the commit");
        first.commit(&dest, false).expect("commit");
        assert_eq!(
            std::fs::read_to_string(dest.join("config.json")).ok(),
            Some("1".into())
        );
        // Over a directory with contents: refused without `replace`, replaced with it.
        assert!(write(&dest, "2").commit(&dest, false).is_err());
        write(&dest, "3").commit(&dest, true).expect("replace");
        assert_eq!(
            std::fs::read_to_string(dest.join("config.json")).ok(),
            Some("3".into())
        );
        // Dropped uncommitted: removed; nothing hidden is left beside the destination.
        drop(write(&dest, "4"));
        let names: Vec<_> = std::fs::read_dir(dest.parent().expect("parent"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["ckpt"]);
    }

    #[test]
    fn a_streamed_trace_reads_back_as_the_whole_one() {
        let trace = crate::synth::synthetic_trace(&crate::synth::SynthOptions {
            decode_tokens: 5,
            ..Default::default()
        });
        let dir = std::env::temp_dir().join(format!("decodescope-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("streamed.json");
        let mut w = TraceWriter::create(&path).expect("create");
        for t in &trace.tokens {
            w.push(t).expect("push");
        }
        assert_eq!(w.tokens(), trace.tokens.len() as u64);
        let staged = w.finish(&trace.meta, &trace.ops).expect("finish");
        // Nothing under the final name until the commit.
        assert!(!path.exists());
        staged.commit().expect("commit");
        // The same as the trace written whole (both read back: f64s round-trip through text).
        let whole = dir.join("whole.json");
        write_trace(&whole, &trace).expect("write");
        assert_eq!(
            read_trace(&path).expect("read"),
            read_trace(&whole).expect("read")
        );
        std::fs::remove_file(&whole).expect("remove");
        // An unfinished writer leaves nothing behind.
        let other = dir.join("dropped.json");
        let mut w = TraceWriter::create(&other).expect("create");
        w.push(&trace.tokens[0]).expect("push");
        drop(w);
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
