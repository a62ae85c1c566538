//! The two trace slots (A, the baseline, and B) and their loading state, without threads or egui.
//!
//! The app starts a load with [`Session::begin_load`], reads the file on a worker thread, and
//! hands the result back with [`Session::finish_load`]. A slot whose file is malformed ends up
//! [`SlotState::Failed`] with the reader's message (which names the file); the other slot and the
//! app are unaffected. Results of superseded loads (the user opened another file meanwhile) are
//! dropped. Every change to the loaded set bumps [`Session::version`], so the app knows when to
//! recompute the analysis and the alignment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::logic::align::{Alignment, align};
use crate::logic::load::{LoadError, LoadedTrace};

/// Which slot: A (the baseline) or B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotId {
    A,
    B,
}

impl SlotId {
    pub const BOTH: [SlotId; 2] = [SlotId::A, SlotId::B];

    pub fn index(self) -> usize {
        match self {
            SlotId::A => 0,
            SlotId::B => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SlotId::A => "A",
            SlotId::B => "B",
        }
    }
}

/// What a slot holds.
#[derive(Clone, Debug, Default)]
pub enum SlotState {
    #[default]
    Empty,
    Loading {
        path: PathBuf,
    },
    Loaded(Arc<LoadedTrace>),
    Failed {
        path: PathBuf,
        error: String,
    },
}

/// A load in flight; give it back to [`Session::finish_load`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadTicket {
    pub slot: SlotId,
    pub generation: u64,
    pub path: PathBuf,
}

/// The slots, their load generations and the alignment of what is loaded.
#[derive(Debug, Default)]
pub struct Session {
    slots: [SlotState; 2],
    generations: [u64; 2],
    version: u64,
    alignment: Alignment,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Marks `slot` as loading `path`; earlier loads of the slot become stale.
    pub fn begin_load(&mut self, slot: SlotId, path: &Path) -> LoadTicket {
        let i = slot.index();
        self.generations[i] += 1;
        let was_loaded = matches!(self.slots[i], SlotState::Loaded(_));
        self.slots[i] = SlotState::Loading {
            path: path.to_path_buf(),
        };
        if was_loaded {
            self.changed();
        }
        LoadTicket {
            slot,
            generation: self.generations[i],
            path: path.to_path_buf(),
        }
    }

    /// Stores the result of a load; returns false (and changes nothing) for a stale ticket.
    pub fn finish_load(
        &mut self,
        ticket: &LoadTicket,
        result: Result<LoadedTrace, LoadError>,
    ) -> bool {
        let i = ticket.slot.index();
        if self.generations[i] != ticket.generation {
            return false;
        }
        self.slots[i] = match result {
            Ok(t) => SlotState::Loaded(Arc::new(t)),
            Err(e) => SlotState::Failed {
                path: ticket.path.clone(),
                error: e.to_string(),
            },
        };
        self.changed();
        true
    }

    /// Marks `slot` as failed with `error` without a load (the load could not even start).
    pub fn fail(&mut self, slot: SlotId, path: &Path, error: String) {
        let i = slot.index();
        self.generations[i] += 1;
        self.slots[i] = SlotState::Failed {
            path: path.to_path_buf(),
            error,
        };
        self.changed();
    }

    /// Empties `slot` (and cancels its load).
    pub fn close(&mut self, slot: SlotId) {
        let i = slot.index();
        self.generations[i] += 1;
        self.slots[i] = SlotState::Empty;
        self.changed();
    }

    /// Exchanges A and B (a load in flight keeps its slot's ticket valid only where it was).
    pub fn swap(&mut self) {
        self.slots.swap(0, 1);
        // Loads in flight would land in the wrong slot: cancel them.
        for i in 0..2 {
            if matches!(self.slots[i], SlotState::Loading { .. }) {
                self.slots[i] = SlotState::Empty;
            }
            self.generations[i] += 1;
        }
        self.changed();
    }

    fn changed(&mut self) {
        self.version += 1;
        let phases = |s: &SlotState| match s {
            SlotState::Loaded(t) => t.phases.clone(),
            _ => Vec::new(),
        };
        self.alignment = align(&phases(&self.slots[0]), &phases(&self.slots[1]));
    }

    pub fn slot(&self, slot: SlotId) -> &SlotState {
        &self.slots[slot.index()]
    }

    pub fn loaded(&self, slot: SlotId) -> Option<&Arc<LoadedTrace>> {
        match &self.slots[slot.index()] {
            SlotState::Loaded(t) => Some(t),
            _ => None,
        }
    }

    /// Whether a slot is empty (to decide where a dropped file goes).
    pub fn is_empty(&self, slot: SlotId) -> bool {
        matches!(self.slots[slot.index()], SlotState::Empty)
    }

    /// Every failed slot with its message, A first.
    pub fn errors(&self) -> Vec<(SlotId, &str)> {
        SlotId::BOTH
            .iter()
            .filter_map(|&s| match &self.slots[s.index()] {
                SlotState::Failed { error, .. } => Some((s, error.as_str())),
                _ => None,
            })
            .collect()
    }

    pub fn is_loading(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, SlotState::Loading { .. }))
    }

    /// Whether any slot holds a loaded trace.
    pub fn any_loaded(&self) -> bool {
        self.slots.iter().any(|s| matches!(s, SlotState::Loaded(_)))
    }

    /// Bumped on every change of the loaded set.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The alignment of the loaded traces' steps.
    pub fn alignment(&self) -> &Alignment {
        &self.alignment
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::load::load_trace;

    fn write(dir: &Path, name: &str, decode_tokens: u32) -> PathBuf {
        let path = dir.join(name);
        let t = profiler::synthetic_trace(&profiler::SynthOptions {
            decode_tokens,
            layers: 1,
            ..profiler::SynthOptions::default()
        });
        profiler::write_trace(&path, &t).expect("write");
        path
    }

    #[test]
    fn a_malformed_trace_fails_its_slot_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = write(dir.path(), "good.json", 3);
        let bad = dir.path().join("bad.json");
        std::fs::write(
            &bad,
            b"{\"format\": \"decodescope-trace\", \"version\": 1, \"me",
        )
        .expect("write");

        let mut s = Session::new();
        let ta = s.begin_load(SlotId::A, &bad);
        let tb = s.begin_load(SlotId::B, &good);
        assert!(s.is_loading());
        assert!(s.finish_load(&ta, load_trace(&ta.path)));
        assert!(s.finish_load(&tb, load_trace(&tb.path)));
        assert!(!s.is_loading());
        let errors = s.errors();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, SlotId::A);
        assert!(errors[0].1.contains("bad.json"), "{}", errors[0].1);
        assert!(errors[0].1.contains("truncated"), "{}", errors[0].1);
        // B still works: its steps are aligned alone.
        assert!(s.loaded(SlotId::B).is_some());
        assert_eq!(s.alignment().len(), 4);
        assert!(s.alignment().rows.iter().all(|r| r.a.is_none()));
        // Opening a good file in A clears the error.
        let ta = s.begin_load(SlotId::A, &good);
        assert!(s.finish_load(&ta, load_trace(&ta.path)));
        assert!(s.errors().is_empty());
        assert!(
            s.alignment()
                .rows
                .iter()
                .all(|r| r.a.is_some() && r.b.is_some())
        );
    }

    #[test]
    fn stale_loads_are_dropped_and_versions_bump() {
        let dir = tempfile::tempdir().expect("tempdir");
        let short = write(dir.path(), "short.json", 2);
        let long = write(dir.path(), "long.json", 5);
        let mut s = Session::new();
        let v0 = s.version();
        let first = s.begin_load(SlotId::A, &short);
        let second = s.begin_load(SlotId::A, &long);
        assert!(!s.finish_load(&first, load_trace(&first.path)));
        assert_eq!(s.version(), v0, "a stale result changes nothing");
        assert!(s.finish_load(&second, load_trace(&second.path)));
        assert!(s.version() > v0);
        assert_eq!(s.alignment().len(), 6);

        let tb = s.begin_load(SlotId::B, &short);
        assert!(s.finish_load(&tb, load_trace(&tb.path)));
        assert_eq!(s.alignment().len(), 6);
        s.swap();
        assert_eq!(
            s.loaded(SlotId::A).map(|t| t.file_name()).as_deref(),
            Some("short.json")
        );
        s.close(SlotId::B);
        assert!(s.is_empty(SlotId::B));
        assert_eq!(s.alignment().len(), 3);
        // A slot that could not start loading fails with the given message.
        s.fail(SlotId::A, &long, "no thread".to_owned());
        assert_eq!(s.errors(), [(SlotId::A, "no thread")]);
        assert!(s.loaded(SlotId::A).is_none());
        // A load started before a close is stale afterwards.
        let t = s.begin_load(SlotId::B, &long);
        s.close(SlotId::B);
        assert!(!s.finish_load(&t, load_trace(&t.path)));
        assert!(s.is_empty(SlotId::B));
    }
}
