//! What the viewer remembers between runs (eframe storage): recent files, the open panel and the
//! plot options. Every field has a default (`#[serde(default)]`), so settings written by an older
//! or newer viewer still load.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The viewer's panels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Panel {
    #[default]
    Summary,
    Plots,
    Timeline,
    Ops,
    Flamegraph,
}

impl Panel {
    pub const ALL: [Panel; 5] = [
        Panel::Summary,
        Panel::Plots,
        Panel::Timeline,
        Panel::Ops,
        Panel::Flamegraph,
    ];

    /// The name used by `--panel`.
    pub fn name(self) -> &'static str {
        match self {
            Panel::Summary => "summary",
            Panel::Plots => "plots",
            Panel::Timeline => "timeline",
            Panel::Ops => "ops",
            Panel::Flamegraph => "flamegraph",
        }
    }

    /// The tab title.
    pub fn title(self) -> &'static str {
        match self {
            Panel::Summary => "Summary",
            Panel::Plots => "Per-token plots",
            Panel::Timeline => "Token timeline",
            Panel::Ops => "Op breakdown",
            Panel::Flamegraph => "Host flamegraph",
        }
    }

    /// Parses a `--panel` name.
    pub fn from_name(name: &str) -> Option<Panel> {
        Panel::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Most recently opened files, newest first, without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecentFiles {
    paths: Vec<PathBuf>,
}

impl RecentFiles {
    /// How many files are remembered.
    pub const MAX: usize = 12;

    /// Moves `path` to the front (adding it if new), keeping at most [`RecentFiles::MAX`].
    pub fn push(&mut self, path: &Path) {
        self.paths.retain(|p| p != path);
        self.paths.insert(0, path.to_path_buf());
        self.paths.truncate(Self::MAX);
    }

    pub fn remove(&mut self, path: &Path) {
        self.paths.retain(|p| p != path);
    }

    pub fn clear(&mut self) {
        self.paths.clear();
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

/// Persisted options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub recent: RecentFiles,
    pub panel: Panel,
    /// Per-token plots: fit the y axis to the decode tokens (the prefill step, many times longer,
    /// would flatten them).
    pub fit_decode: bool,
    /// The directory the Open dialog starts in.
    pub open_dir: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            recent: RecentFiles::default(),
            panel: Panel::Summary,
            fit_decode: true,
            open_dir: None,
        }
    }
}

impl Settings {
    /// The key under which eframe stores the settings.
    pub const KEY: &'static str = "decodescope-viewer-settings";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_files_move_to_front_and_are_capped() {
        let mut r = RecentFiles::default();
        for i in 0..20 {
            r.push(Path::new(&format!("t{i}.json")));
        }
        assert_eq!(r.paths().len(), RecentFiles::MAX);
        assert_eq!(r.paths()[0], Path::new("t19.json"));
        r.push(Path::new("t12.json"));
        assert_eq!(r.paths()[0], Path::new("t12.json"));
        assert_eq!(r.paths().len(), RecentFiles::MAX);
        assert_eq!(
            r.paths()
                .iter()
                .filter(|p| **p == Path::new("t12.json"))
                .count(),
            1
        );
        r.remove(Path::new("t12.json"));
        assert_eq!(r.paths()[0], Path::new("t19.json"));
        r.clear();
        assert!(r.is_empty());
    }

    #[test]
    fn settings_with_missing_or_unknown_fields_load() {
        // An older viewer wrote only the recent files; a newer one added a field.
        let old: Settings =
            serde_json::from_str(r#"{"recent": {"paths": ["a.json"]}, "future_option": 3}"#)
                .expect("older settings load");
        assert_eq!(old.recent.paths(), [PathBuf::from("a.json")]);
        assert_eq!(old.panel, Panel::Summary);
        assert!(old.fit_decode);
        let empty: Settings = serde_json::from_str("{}").expect("empty settings load");
        assert_eq!(empty, Settings::default());
    }

    #[test]
    fn panel_names_round_trip() {
        for p in Panel::ALL {
            assert_eq!(Panel::from_name(p.name()), Some(p));
        }
        assert_eq!(Panel::from_name("nope"), None);
    }
}
