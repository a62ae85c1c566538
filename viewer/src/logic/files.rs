//! Choosing files: the directory listing of the File > Open dialog and where dropped files go.
//!
//! The dialog is drawn by egui itself (a path field and a listing) rather than a native dialog,
//! so the viewer needs no GTK or portal service and works the same under Xvfb.

use std::path::{Path, PathBuf};

use crate::logic::session::SlotId;

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryInfo {
    pub name: String,
    pub path: PathBuf,
    pub is_dir: bool,
    pub bytes: u64,
}

/// Why a directory could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("cannot list {}: {err} (type another directory in the path field)", dir.display())]
pub struct ListError {
    pub dir: PathBuf,
    #[source]
    pub err: std::io::Error,
}

/// Whether a file name looks like a trace (`*.json`, any case).
pub fn is_trace_name(name: &str) -> bool {
    Path::new(name)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// The sub-directories and `*.json` files of `dir` (every file when `all_files`), directories
/// first, each group sorted by name; hidden entries (`.name`) are left out.
pub fn list_dir(dir: &Path, all_files: bool) -> Result<Vec<DirEntryInfo>, ListError> {
    let err = |err| ListError {
        dir: dir.to_path_buf(),
        err,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follows symlinks, so a link to a directory lists as a directory.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let is_dir = meta.is_dir();
        if !is_dir && !all_files && !is_trace_name(&name) {
            continue;
        }
        out.push(DirEntryInfo {
            name,
            path,
            is_dir,
            bytes: if is_dir { 0 } else { meta.len() },
        });
    }
    out.sort_by(|a, b| b.is_dir.cmp(&a.is_dir).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

/// Where dropped files go: two or more files open as A and B (the first two); one file fills the
/// A when A is empty, else B (replacing what B holds: A stays the baseline).
pub fn assign_dropped(paths: &[PathBuf], a_empty: bool) -> Vec<(SlotId, PathBuf)> {
    match paths {
        [] => Vec::new(),
        [one] => {
            // B when it is empty, and also when both are taken: A stays the baseline.
            let slot = if a_empty { SlotId::A } else { SlotId::B };
            vec![(slot, one.clone())]
        }
        [a, b, ..] => vec![(SlotId::A, a.clone()), (SlotId::B, b.clone())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_keeps_dirs_and_traces_sorted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        std::fs::create_dir(p.join("zeta")).expect("mkdir");
        std::fs::create_dir(p.join("alpha")).expect("mkdir");
        std::fs::create_dir(p.join(".hidden")).expect("mkdir");
        std::fs::write(p.join("b.json"), b"{}").expect("write");
        std::fs::write(p.join("A.JSON"), b"{}").expect("write");
        std::fs::write(p.join("notes.txt"), b"x").expect("write");
        let names = |v: Vec<DirEntryInfo>| v.into_iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(
            names(list_dir(p, false).expect("list")),
            ["alpha", "zeta", "A.JSON", "b.json"]
        );
        assert_eq!(
            names(list_dir(p, true).expect("list")),
            ["alpha", "zeta", "A.JSON", "b.json", "notes.txt"]
        );
        let listed = list_dir(p, false).expect("list");
        assert_eq!(listed[3].bytes, 2);
        assert!(listed[0].is_dir);
        let err = list_dir(&p.join("missing"), false)
            .expect_err("missing dir")
            .to_string();
        assert!(err.contains("missing"), "{err}");
    }

    #[test]
    fn dropped_files_fill_slots() {
        let (x, y, z) = (PathBuf::from("x"), PathBuf::from("y"), PathBuf::from("z"));
        assert!(assign_dropped(&[], true).is_empty());
        assert_eq!(
            assign_dropped(std::slice::from_ref(&x), true),
            [(SlotId::A, x.clone())]
        );
        assert_eq!(
            assign_dropped(std::slice::from_ref(&x), false),
            [(SlotId::B, x.clone())]
        );
        assert_eq!(
            assign_dropped(&[x.clone(), y.clone(), z], false),
            [(SlotId::A, x), (SlotId::B, y)]
        );
    }
}
