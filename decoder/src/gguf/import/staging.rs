//! The output directory: checked before the import, written through a hidden staging directory
//! that is renamed to it only when complete.

use super::*;

/// Checks what is at the output path: nothing, or (with `overwrite`) a directory, which is
/// replaced. Anything else (a regular file, a symbolic link, a device) is refused, `--force` or
/// not: a directory never takes the place of a file.
pub(super) fn check_out_dir(target: &Path, overwrite: bool) -> Result<(), ImportError> {
    let meta = match fs::symlink_metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ImportError::Write {
                path: target.to_path_buf(),
                source,
            });
        }
    };
    let t = meta.file_type();
    if t.is_dir() {
        return if overwrite {
            Ok(())
        } else {
            Err(ImportError::OutputExists {
                path: target.to_path_buf(),
            })
        };
    }
    let what = if t.is_file() {
        "a regular file"
    } else if t.is_symlink() {
        "a symbolic link (give the directory itself)"
    } else {
        "a special file (a device, FIFO or socket)"
    };
    Err(ImportError::OutputNotDirectory {
        path: target.to_path_buf(),
        what: what.into(),
    })
}

/// A hidden directory beside the target that is removed on drop unless committed.
pub(super) struct Staging {
    pub(super) path: PathBuf,
    pub(super) committed: bool,
}

impl Staging {
    pub(super) fn create(target: &Path) -> Result<Self, ImportError> {
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "checkpoint".into());
        let path = parent.join(format!(".{name}.importing-{}", std::process::id()));
        let write_err = |source| ImportError::Write {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&parent).map_err(|source| ImportError::Write {
            path: parent.clone(),
            source,
        })?;
        if path.exists() {
            fs::remove_dir_all(&path).map_err(write_err)?;
        }
        fs::create_dir(&path).map_err(write_err)?;
        Ok(Staging {
            path,
            committed: false,
        })
    }

    /// Renames the staging directory to `target`, replacing an existing `target` only when
    /// `overwrite` is set.
    pub(super) fn commit(mut self, target: &Path, overwrite: bool) -> Result<(), ImportError> {
        let write_err = |source| ImportError::Write {
            path: target.to_path_buf(),
            source,
        };
        // Again: the target may have changed during the import.
        check_out_dir(target, overwrite)?;
        if fs::symlink_metadata(target).is_ok() {
            let mut old = self.path.clone().into_os_string();
            old.push(".replaced");
            let old = PathBuf::from(old);
            fs::rename(target, &old).map_err(write_err)?;
            fs::rename(&self.path, target).map_err(write_err)?;
            self.committed = true;
            fs::remove_dir_all(&old).map_err(|source| ImportError::Write { path: old, source })?;
        } else {
            fs::rename(&self.path, target).map_err(write_err)?;
            self.committed = true;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: the staging directory is hidden and named by process id, and a later
            // import into the same target removes it.
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}
