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
        Err(err) => {
            return Err(ImportError::Write {
                path: target.to_path_buf(),
                err,
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

/// The output directory staged by [`profiler::io::StagedDir`]: written under a hidden name beside
/// the target and renamed to it once complete; removed on drop unless committed.
pub(super) struct Staging(profiler::io::StagedDir);

impl Staging {
    pub(super) fn create(target: &Path) -> Result<Self, ImportError> {
        profiler::io::StagedDir::create(target)
            .map(Staging)
            .map_err(|err| ImportError::Write {
                path: target.to_path_buf(),
                err,
            })
    }

    /// Where the files go.
    pub(super) fn path(&self) -> &Path {
        self.0.path()
    }

    /// Renames the staging directory to `target`, replacing an existing directory there only
    /// when `overwrite` is set.
    pub(super) fn commit(self, target: &Path, overwrite: bool) -> Result<(), ImportError> {
        // Again: the target may have changed during the import.
        check_out_dir(target, overwrite)?;
        self.0
            .commit(target, overwrite)
            .map_err(|err| ImportError::Write {
                path: target.to_path_buf(),
                err,
            })
    }
}
