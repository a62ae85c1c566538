//! Reading a trace for the viewer: `profiler::read_trace` plus the per-token series the plots
//! draw, computed once. A foreign program's dispatches get their op kinds here, by the same
//! rules `profiler stats` and `diff` apply (`profiler::KindRules`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use profiler::{KindRules, Phase, Trace, TraceError};

use crate::logic::series::TraceSeries;

/// Why a trace could not be opened. The message names the file and says what to do (the
/// profiler's reader guarantees that for every way a file can be wrong).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// A trace read from disk, with what the panels need precomputed.
#[derive(Debug)]
pub struct LoadedTrace {
    pub path: PathBuf,
    pub trace: Trace,
    pub series: TraceSeries,
    /// The phase of every step, for [`crate::logic::align`].
    pub phases: Vec<Phase>,
    /// Time to read, parse and validate the file and compute the series.
    pub load_time: Duration,
}

impl LoadedTrace {
    /// Builds the view of an already parsed trace (`path` names it).
    pub fn new(path: PathBuf, trace: Trace, load_time: Duration) -> LoadedTrace {
        let series = TraceSeries::of(&trace);
        let phases = trace.tokens.iter().map(|t| t.phase).collect();
        LoadedTrace {
            path,
            trace,
            series,
            phases,
            load_time,
        }
    }

    /// The file name without its directory, for headers.
    pub fn file_name(&self) -> String {
        file_name(&self.path)
    }

    /// `generic`, `fused`, ... (the knobs' preset), for legends; a foreign program's capture
    /// (`profiler record`) is named by its program (`llama-server`) instead of `unknown`.
    pub fn mode(&self) -> &str {
        match &self.trace.meta.capture {
            Some(c) if !c.program.is_empty() => {
                c.program.rsplit('/').next().unwrap_or(c.program.as_str())
            }
            _ => &self.trace.meta.knobs.mode,
        }
    }

    /// For a foreign program's capture: a sentence on the dispatches it has no GPU span for
    /// (`meta.capture.untimed_dispatches`), `None` when every dispatch is timed.
    pub fn untimed(&self) -> Option<String> {
        let c = self.trace.meta.capture.as_ref()?;
        (c.untimed_dispatches > 0).then(|| {
            format!(
                "{} dispatch(es) without a GPU span: GPU time covers the rest",
                c.untimed_dispatches
            )
        })
    }
}

/// The file name of `path` without its directory (the whole path when it has no file name).
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// Reads, checks and prepares the trace at `path`, a foreign program's dispatches classified by
/// the built-in op-kind rules.
pub fn load_trace(path: &Path) -> Result<LoadedTrace, LoadError> {
    load_trace_with_kinds(path, &KindRules::builtin())
}

/// [`load_trace`] with the op-kind rules `kinds` (the viewer's `--op-kinds FILE`).
pub fn load_trace_with_kinds(path: &Path, kinds: &KindRules) -> Result<LoadedTrace, LoadError> {
    let started = Instant::now();
    let mut trace = profiler::read_trace(path)?;
    kinds.classify_foreign(&mut trace);
    let mut loaded = LoadedTrace::new(path.to_path_buf(), trace, Duration::ZERO);
    loaded.load_time = started.elapsed();
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_files_give_errors_that_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases: [(&str, &[u8], &str); 3] = [
            ("empty.json", b"", "not a decodescope trace"),
            (
                "cut.json",
                br#"{"format": "decodescope-trace", "version": 1, "meta": {"#,
                "truncated",
            ),
            (
                "chrome.json",
                br#"{"traceEvents": []}"#,
                "not a decodescope trace",
            ),
        ];
        for (name, bytes, expect) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            let err = load_trace(&path).expect_err("malformed").to_string();
            assert!(err.contains(name), "{err}");
            assert!(err.contains(expect), "{err}");
        }
        let missing = dir.path().join("missing.json");
        let err = load_trace(&missing).expect_err("missing").to_string();
        assert!(err.contains("missing.json"), "{err}");
    }

    #[test]
    fn a_synthetic_trace_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.json");
        let t = profiler::synthetic_trace(&profiler::SynthOptions {
            decode_tokens: 4,
            layers: 1,
            ..profiler::SynthOptions::default()
        });
        profiler::write_trace(&path, &t).expect("write");
        let l = load_trace(&path).expect("load");
        assert_eq!(l.phases.len(), t.tokens.len());
        assert_eq!(l.series.len(), t.tokens.len());
        assert_eq!(l.file_name(), "s.json");
        assert_eq!(l.mode(), t.meta.knobs.mode);
        assert_eq!(l.untimed(), None);

        // A foreign program's capture is named by its program and says what is untimed.
        let mut f = t.clone();
        f.meta.capture = Some(profiler::CaptureMeta {
            program: "/opt/llama/llama-server".into(),
            untimed_dispatches: 3,
            ..profiler::CaptureMeta::default()
        });
        let fp = dir.path().join("f.json");
        profiler::write_trace(&fp, &f).expect("write");
        let l = load_trace(&fp).expect("load");
        assert_eq!(l.mode(), "llama-server");
        assert!(l.untimed().is_some_and(|u| u.starts_with("3 dispatch")));
    }
}
