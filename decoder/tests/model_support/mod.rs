//! Helpers shared by the model tests.
#![allow(clippy::unwrap_used, dead_code)] // Tests unwrap; not every test file uses every helper.

use std::path::{Path, PathBuf};

use decoder::model::synth::{SynthOptions, write_preset};
use decoder::model::{Model, Preset, Weights};

/// Writes `preset` with `opts` into a fresh temporary directory; returns (guard, checkpoint dir).
pub fn synth(preset: Preset, opts: &SynthOptions) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(preset.name());
    write_preset(preset, &dir, opts).unwrap();
    (tmp, dir)
}

/// Runs `tokens` through the cached reference one position at a time; returns every
/// position's logits.
pub fn cached_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut reference = model.reference(tokens.len()).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| reference.forward(t, pos).unwrap().to_vec())
        .collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Copies every file of `from` into a new directory `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Loads the weights of a checkpoint directory.
pub fn load_weights(dir: &Path) -> Weights {
    Model::load(dir).unwrap().weights
}

/// Edits `dir/config.json` as JSON.
pub fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}
