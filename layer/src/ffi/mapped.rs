//! Files the layer writes through shared mappings: what it stores there is in the file the
//! moment the store is made, with no system call, and stays there when the program is killed.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// Maps the live file at `path` (created at its full size) as shared memory for the rest of the
/// process; `None` (and a message) when it cannot be.
pub fn map_live(path: &Path) -> Option<&'static [AtomicU64]> {
    let len = profiler::capture::LIVE_BYTES;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .and_then(|f| f.set_len(len as u64).map(|()| f));
    let f = match f {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "decodescope layer: cannot create {}: {e}; a killed program's last work is lost",
                path.display()
            );
            return None;
        }
    };
    // SAFETY: a fresh shared read-write mapping of a file of `len` bytes that this process
    // opened; the kernel picks the address. The descriptor may be closed after mmap.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        eprintln!(
            "decodescope layer: cannot map {}; a killed program's last work is lost",
            path.display()
        );
        return None;
    }
    // SAFETY: the mapping is page-aligned, `len` bytes long (a multiple of 8), zero-filled by
    // the kernel, never unmapped, and only ever accessed through these atomics (AtomicU64 has
    // u64's size and, here, its alignment).
    Some(unsafe {
        std::slice::from_raw_parts(p as *const AtomicU64, len / std::mem::size_of::<u64>())
    })
}

/// The file grows (and is mapped) this many bytes at a time: a multiple of any page size.
const CHUNK: u64 = 1 << 20;

/// An append-only file written through a shared mapping of its last [`CHUNK`]. While it is
/// open the file is longer than what was appended: the rest reads as zero bytes, which is what a
/// killed program leaves after its last record. [`MappedLog::settle`] (and dropping it) cuts the
/// file to what was appended.
#[derive(Debug)]
pub struct MappedLog {
    file: File,
    /// Bytes appended.
    len: u64,
    /// The mapped chunk: its address and its offset in the file.
    chunk: Option<(NonNull<u8>, u64)>,
}

// SAFETY: the mapping belongs to this value alone (nothing else holds its address), so moving
// the value to another thread moves the only access to it.
unsafe impl Send for MappedLog {}

impl MappedLog {
    /// Creates (or empties) the file at `path`.
    pub fn create(path: &Path) -> io::Result<MappedLog> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(MappedLog {
            file,
            len: 0,
            chunk: None,
        })
    }

    /// Appends `bytes`: copied into the mapping, growing the file by a chunk where they reach
    /// its end.
    pub fn append(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let (base, start) = match self.chunk {
                Some((base, start)) if self.len < start + CHUNK => (base, start),
                _ => self.map_next()?,
            };
            let at = (self.len - start) as usize;
            let n = bytes.len().min(CHUNK as usize - at);
            // SAFETY: `base` maps CHUNK bytes of the file from `start`, and `start <= len <
            // start + CHUNK`, so `at + n <= CHUNK` bytes from `base` are mapped, writable and
            // within the file's length; the source is a separate slice of `n` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.as_ptr().add(at), n);
            }
            self.len += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Unmaps the chunk and maps the one holding the next byte to append, growing the file to
    /// its end. The chunk's blocks are allocated first: a store into a page the file system
    /// cannot back (a full disk) would kill the program with SIGBUS, where a failed allocation
    /// only stops the tracing.
    fn map_next(&mut self) -> io::Result<(NonNull<u8>, u64)> {
        self.unmap();
        let start = self.len / CHUNK * CHUNK;
        // SAFETY: posix_fallocate on a descriptor this value owns, with a non-negative range.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                start as libc::off_t,
                CHUNK as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: a shared read-write mapping of CHUNK bytes of a file this value opened, at an
        // offset that is a multiple of CHUNK (so of the page size), within the file's length
        // and allocated just above; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHUNK as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        self.chunk = Some((base, start));
        Ok((base, start))
    }

    fn unmap(&mut self) {
        if let Some((base, _)) = self.chunk.take() {
            // SAFETY: `base` is the address of a CHUNK-byte mapping this value made and still
            // holds; nothing else refers to it.
            unsafe { libc::munmap(base.as_ptr().cast(), CHUNK as usize) };
        }
    }

    /// Cuts the file to the bytes appended (a later append grows it again).
    pub fn settle(&mut self) -> io::Result<()> {
        self.unmap();
        self.file.set_len(self.len)
    }
}

impl Drop for MappedLog {
    fn drop(&mut self) {
        let _ = self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_across_chunks_and_settles_to_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut log = MappedLog::create(&path).unwrap();
        let line: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut want = Vec::new();
        // 3.1 chunks, with lines across each boundary.
        for _ in 0..(CHUNK as usize * 31 / 10 / line.len()) {
            log.append(&line).unwrap();
            want.extend_from_slice(&line);
        }
        // While open the file runs to the end of its last chunk, zero-filled past the data.
        let open = std::fs::read(&path).unwrap();
        assert_eq!(open.len() as u64 % CHUNK, 0);
        assert_eq!(&open[..want.len()], &want[..]);
        assert!(open[want.len()..].iter().all(|&b| b == 0));
        log.settle().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
        // Appending after settling continues where it stopped.
        log.append(b"tail").unwrap();
        want.extend_from_slice(b"tail");
        drop(log);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    #[test]
    fn a_line_longer_than_a_chunk_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut log = MappedLog::create(&path).unwrap();
        log.append(b"x").unwrap();
        let big: Vec<u8> = (0..CHUNK as usize * 2 + 7)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        log.append(&big).unwrap();
        drop(log);
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), big.len() + 1);
        assert_eq!(&got[1..], &big[..]);
    }
}
