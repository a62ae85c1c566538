//! The one writer of every output: a regular file (or a missing one) replaced atomically, a
//! device or FIFO written in place and never replaced, the destination checked before any work
//! starts ([`check_output`]), and a directory written as a whole ([`StagedDir`]).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::file_type_name;

/// A user-named output that cannot be written, found before any work starts (see
/// [`check_output`]): names the flag, the path and what to do.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {flag} {}: {reason}", path.display())]
pub struct OutputError {
    /// The flag or argument that named the path (`--out`, `OUT`).
    pub flag: String,
    pub path: PathBuf,
    /// Why, and what to do.
    pub reason: String,
}

/// What [`write_output`] does with the path it is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTarget {
    /// Nothing is there, or a regular file is: a temporary file in `dest`'s directory is written
    /// and renamed over `dest`. A symbolic link to a regular file is followed: `dest` is the file
    /// it points to, which is replaced; the link itself is kept.
    Replace { dest: PathBuf },
    /// A character device (`/dev/null`, a terminal) or a FIFO: opened for writing and written in
    /// place, never replaced. A FIFO blocks until a reader opens it, as any writer's would.
    InPlace { what: &'static str },
}

/// Decides what [`write_output`] does with `path`, without writing anything: see
/// [`OutputTarget`]. Refused, with an error of kind `InvalidInput` whose message says what is
/// there and what to do: a directory, a block device (a disk is never overwritten by a report), a
/// socket, and a symbolic link whose target does not exist.
pub fn output_target(path: &Path) -> std::io::Result<OutputTarget> {
    let refuse = |reason: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, reason);
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        // Nothing there (or a file where a directory should be, which the directory check
        // reports): a new file.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(OutputTarget::Replace {
                dest: path.to_owned(),
            });
        }
        Err(e) => return Err(e),
    };
    let (meta, dest) = if meta.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(target) => (target, std::fs::canonicalize(path)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let to = std::fs::read_link(path)
                    .map_or_else(|_| "a missing path".to_owned(), |t| t.display().to_string());
                return Err(refuse(format!(
                    "it is a symbolic link to {to}, which does not exist; create the file it \
                     points to, remove the link, or give another path"
                )));
            }
            Err(e) => return Err(e),
        }
    } else {
        (meta, path.to_owned())
    };
    let t = meta.file_type();
    if t.is_file() {
        return Ok(OutputTarget::Replace { dest });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_char_device() || t.is_fifo() {
            return Ok(OutputTarget::InPlace {
                what: file_type_name(&t),
            });
        }
        if t.is_block_device() {
            return Err(refuse(
                "it is a block device, which is never overwritten with an output; give the path \
                 of a file"
                    .to_owned(),
            ));
        }
    }
    if t.is_dir() {
        return Err(refuse(
            "it is a directory; give the path of a file (inside it, or elsewhere)".to_owned(),
        ));
    }
    Err(refuse(format!(
        "it is {}, which cannot be written as a file; give the path of a file",
        file_type_name(&t)
    )))
}

/// Checks, before any work starts, that [`write_output`] can write `path` (named by `flag` on the
/// command line): what is at the path is acceptable ([`output_target`]), and for a file that is
/// replaced, its directory exists, is a directory and takes a new file (a probe file is created
/// and removed). A device or FIFO is not opened (a FIFO would block until a reader comes).
pub fn check_output(path: &Path, flag: &str) -> Result<OutputTarget, OutputError> {
    let error = |reason: String| OutputError {
        flag: flag.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let target = output_target(path).map_err(|e| error(e.to_string()))?;
    let OutputTarget::Replace { dest } = &target else {
        return Ok(target);
    };
    let dir = parent_dir(dest);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(error(format!(
                "{} is not a directory; give {flag} a path in an existing directory",
                dir.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(error(format!(
                "its directory {} does not exist; create it (mkdir -p {}) or give another {flag}",
                dir.display(),
                dir.display()
            )));
        }
        Err(e) => {
            return Err(error(format!(
                "cannot inspect its directory {}: {e}; give another {flag}",
                dir.display()
            )));
        }
    }
    match create_temp_beside(dest, "probe") {
        Ok((probe, file)) => {
            drop(file);
            let _ = std::fs::remove_file(probe);
            Ok(target)
        }
        Err(e) => Err(error(format!(
            "cannot create a file in {}: {e}; give {flag} a path in a writable directory",
            dir.display()
        ))),
    }
}

/// The one writer of every user-named output (traces, exports, reports, plots, GGUF files, logit
/// dumps): `fill` writes the contents, and what happens to `path` depends on what is there
/// ([`output_target`]).
///
/// - Nothing, or a regular file (also through symbolic links, which are followed and kept): the
///   contents go to a temporary file in the destination's directory, which is flushed, synced and
///   renamed over the destination; the directory is synced last so that the rename itself is
///   durable. The temporary file takes the replaced file's permissions (else the defaults under
///   the umask) and is removed if anything fails, leaving the destination as it was.
/// - A character device or a FIFO: written in place, never replaced.
/// - Anything else (a directory, a block device, a socket, a dangling link): refused with an error
///   of kind `InvalidInput` that says what is there.
pub fn write_output<T, E: From<std::io::Error>>(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&File>) -> Result<T, E>,
) -> Result<T, E> {
    let (value, staged) = stage_output(path, fill)?;
    staged.commit()?;
    Ok(value)
}

/// [`write_output`]'s first half, for outputs that must appear together (the generic/fused pair
/// of `decoder capture --mode both`): the contents are written and synced to a temporary file
/// beside the destination, which [`StagedOutput::commit`] renames into place; dropping it
/// uncommitted removes the temporary file and leaves the destination as it was. A character
/// device or a FIFO is written in place at once (there is nothing to rename).
pub fn stage_output<T, E: From<std::io::Error>>(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&File>) -> Result<T, E>,
) -> Result<(T, StagedOutput), E> {
    let (file, staged) = open_staged(path)?;
    let value = {
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        let value = fill(&mut w)?;
        w.flush()?;
        value
    };
    if staged.tmp.is_some() {
        file.sync_all()?;
    }
    Ok((value, staged))
}

/// Opens what [`stage_output`] writes into: the device or FIFO at `path` itself (nothing to
/// rename), or a new temporary file beside the destination (with the replaced file's
/// permissions), removed again when the returned [`StagedOutput`] is dropped uncommitted.
pub(super) fn open_staged(path: &Path) -> std::io::Result<(File, StagedOutput)> {
    let dest = match output_target(path)? {
        OutputTarget::InPlace { what } => {
            let file = OpenOptions::new().write(true).open(path)?;
            // Opened by name: a regular file put there meanwhile would be written over without
            // being truncated. Refuse it; the caller can try again.
            if file.metadata()?.is_file() {
                return Err(std::io::Error::other(format!(
                    "{} was {what} and became a regular file while it was opened; try again",
                    path.display()
                )));
            }
            let staged = StagedOutput {
                tmp: None,
                dest: path.to_owned(),
            };
            return Ok((file, staged));
        }
        OutputTarget::Replace { dest } => dest,
    };
    let (tmp_path, file) = create_temp_beside(&dest, "tmp")?;
    let staged = StagedOutput {
        tmp: Some(tmp_path),
        dest,
    };
    if let Ok(old) = std::fs::metadata(&staged.dest) {
        // Best effort: a file system without permissions still gets the contents.
        let _ = file.set_permissions(old.permissions());
    }
    Ok((file, staged))
}

/// An output written to a temporary file beside its destination and not yet renamed into place
/// ([`stage_output`]); removed when dropped uncommitted.
#[derive(Debug)]
pub struct StagedOutput {
    /// `None` once committed, or for an output written in place.
    pub(super) tmp: Option<PathBuf>,
    dest: PathBuf,
}

impl StagedOutput {
    /// Renames the temporary file over the destination and syncs the directory, so that the
    /// rename itself is durable (where a directory can be opened for syncing: not on Windows; the
    /// file itself is already on disk, so a failure there is not an error).
    pub fn commit(mut self) -> std::io::Result<()> {
        if let Some(tmp) = &self.tmp {
            std::fs::rename(tmp, &self.dest)?;
            self.tmp = None;
            if let Ok(d) = File::open(parent_dir(&self.dest)) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for StagedOutput {
    fn drop(&mut self) {
        if let Some(p) = self.tmp.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The directory a path's file lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Creates a new hidden file beside `path` (`.NAME.PID.N.SUFFIX`), never one that exists.
fn create_temp_beside(path: &Path, suffix: &str) -> std::io::Result<(PathBuf, File)> {
    create_beside(path, suffix, |p| {
        OpenOptions::new().write(true).create_new(true).open(p)
    })
}

/// Runs `create` on a new hidden name beside `path` (`.NAME.PID.N.SUFFIX`) until it does not
/// answer `AlreadyExists`: the name and what `create` made there.
fn create_beside<T>(
    path: &Path,
    suffix: &str,
    create: impl Fn(&Path) -> std::io::Result<T>,
) -> std::io::Result<(PathBuf, T)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = parent_dir(path);
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".to_owned());
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let candidate = dir.join(format!(".{file_name}.{}.{n}.{suffix}", std::process::id()));
        match create(&candidate) {
            Ok(made) => return Ok((candidate, made)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A directory written as a whole (a synthetic or imported checkpoint): its files go into a new
/// hidden directory beside the destination ([`StagedDir::path`]), which [`StagedDir::commit`]
/// renames into place once complete, so a reader never sees half a checkpoint. Dropped
/// uncommitted, the hidden directory is removed with everything in it.
#[derive(Debug)]
pub struct StagedDir {
    path: PathBuf,
    committed: bool,
}

impl StagedDir {
    /// Creates the hidden directory beside `dest` (`.NAME.PID.N.staging`), creating `dest`'s
    /// parent directories where they are missing.
    pub fn create(dest: &Path) -> std::io::Result<StagedDir> {
        std::fs::create_dir_all(parent_dir(dest))?;
        let (path, ()) = create_beside(dest, "staging", |p| std::fs::create_dir(p))?;
        Ok(StagedDir {
            path,
            committed: false,
        })
    }

    /// Where the contents go.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the directory to `dest` and syncs their parent, so the rename is durable. Where
    /// something is at `dest`: with `replace` it is moved aside first and removed once the new
    /// directory is in place (put back if that rename fails); without, the rename fails as the
    /// system decides (over a directory that holds anything, always). Callers check what is at
    /// `dest`, and say what to do about it, before they write.
    pub fn commit(mut self, dest: &Path, replace: bool) -> std::io::Result<()> {
        if replace && std::fs::symlink_metadata(dest).is_ok() {
            let mut aside = self.path.clone().into_os_string();
            aside.push(".replaced");
            let aside = PathBuf::from(aside);
            std::fs::rename(dest, &aside)?;
            if let Err(e) = std::fs::rename(&self.path, dest) {
                let _ = std::fs::rename(&aside, dest);
                return Err(e);
            }
            self.committed = true;
            std::fs::remove_dir_all(&aside).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot remove the replaced {}: {e}", aside.display()),
                )
            })?;
        } else {
            std::fs::rename(&self.path, dest)?;
            self.committed = true;
        }
        if let Ok(d) = File::open(parent_dir(dest)) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: the error that dropped it matters more than a leftover.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
