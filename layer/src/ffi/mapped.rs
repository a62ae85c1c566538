//! Files the layer writes through shared mappings: what it stores there is in the file the
//! moment the store is made, with no system call, and stays there when the program is killed.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
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

/// A shared read-write mapping of CHUNK bytes of the log's file from offset `start`, unmapped
/// when the last holder drops it (the log, or a [`Prefault`] still running on another thread).
#[derive(Debug)]
struct Chunk {
    base: NonNull<u8>,
    start: u64,
}

// SAFETY: the mapping is plain shared memory; the log writes it from one thread at a time (under
// its owner's lock), and a Prefault only asks the kernel to make its pages present.
unsafe impl Send for Chunk {}
// SAFETY: as above: `&Chunk` gives no access to the memory without the log.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// Allocates the file's blocks for CHUNK bytes from `start` (growing the file to their end)
    /// and maps them. The blocks are allocated first: a store into a page the file system cannot
    /// back (a full disk) would kill the program with SIGBUS, where a failed allocation only
    /// stops the tracing.
    fn map(file: &File, start: u64) -> io::Result<Arc<Chunk>> {
        // SAFETY: posix_fallocate on an open descriptor, with a non-negative range.
        let rc = unsafe {
            libc::posix_fallocate(file.as_raw_fd(), start as libc::off_t, CHUNK as libc::off_t)
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: a shared read-write mapping of CHUNK bytes of an open file, at an offset that
        // is a multiple of CHUNK (so of the page size), within the file's length and allocated
        // just above; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHUNK as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Arc::new(Chunk { base, start }))
    }

    /// Makes every page present and writable in one call: each page's first store would
    /// otherwise fault on its own (about 2 us a record on the CI machine, more than serializing
    /// it). A kernel without MADV_POPULATE_WRITE (before Linux 5.14) refuses it, and the pages
    /// fault one by one.
    fn populate(&self) {
        // SAFETY: advice on this CHUNK-byte mapping, which lives as long as `self`. Pages past
        // the file's end (the log was cut meanwhile) make the call fail, not fault.
        unsafe {
            libc::madvise(
                self.base.as_ptr().cast(),
                CHUNK as usize,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: the CHUNK-byte mapping this value made; no holder is left to use it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), CHUNK as usize) };
    }
}

/// The population of a log's next chunk, to run on a thread that is not writing the log
/// ([`MappedLog::prepare_next`]).
#[derive(Debug)]
pub struct Prefault(Arc<Chunk>);

impl Prefault {
    pub fn run(self) {
        self.0.populate();
    }
}

/// An append-only file written through a shared mapping of its last [`CHUNK`]. While it is
/// open the file is longer than what was appended: the rest reads as zero bytes, which is what a
/// killed program leaves after its last record. [`MappedLog::settle`] (and dropping it) cuts the
/// file to what was appended. The chunk after the current one can be mapped ahead and its pages
/// made present on another thread ([`MappedLog::prepare_next`]), so that the appending thread
/// neither maps nor faults.
#[derive(Debug)]
pub struct MappedLog {
    file: File,
    /// Bytes appended.
    len: u64,
    /// The chunk holding the next byte to append.
    chunk: Option<Arc<Chunk>>,
    /// The chunk after it, mapped ahead.
    next: Option<Arc<Chunk>>,
}

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
            next: None,
        })
    }

    /// Appends `bytes`: copied into the mapping, moving to the next chunk (mapped ahead, or
    /// mapped and populated here) where they reach the current one's end.
    pub fn append(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let (base, start) = match &self.chunk {
                Some(c) if self.len < c.start + CHUNK => (c.base, c.start),
                _ => self.advance()?,
            };
            let at = (self.len - start) as usize;
            let n = bytes.len().min(CHUNK as usize - at);
            // SAFETY: `base` maps CHUNK bytes of the file from `start` (the current chunk, which
            // `self.chunk` keeps mapped), and `start <= len < start + CHUNK`, so `at + n <= CHUNK`
            // bytes from it are mapped, writable and within the file's length; the source is a
            // separate slice of `n` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.as_ptr().add(at), n);
            }
            self.len += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Makes the chunk holding the next byte to append the current one (the chunk mapped ahead
    /// when it is that one, else a new mapping populated here); its address and offset.
    fn advance(&mut self) -> io::Result<(NonNull<u8>, u64)> {
        let start = self.len / CHUNK * CHUNK;
        self.chunk = None;
        let chunk = match self.next.take() {
            Some(c) if c.start == start => c,
            _ => {
                let c = Chunk::map(&self.file, start)?;
                c.populate();
                c
            }
        };
        let at = (chunk.base, chunk.start);
        self.chunk = Some(chunk);
        Ok(at)
    }

    /// True when the chunk after the current one is not mapped yet.
    pub fn wants_next(&self) -> bool {
        self.chunk.is_some() && self.next.is_none()
    }

    /// Maps the chunk after the current one (growing the file by it) and returns its
    /// population, to run without the log's lock; `None` when there is nothing to prepare.
    pub fn prepare_next(&mut self) -> io::Result<Option<Prefault>> {
        let Some(start) = self.chunk.as_ref().map(|c| c.start + CHUNK) else {
            return Ok(None);
        };
        if self.next.is_some() {
            return Ok(None);
        }
        let next = Chunk::map(&self.file, start)?;
        self.next = Some(next.clone());
        Ok(Some(Prefault(next)))
    }

    /// Cuts the file to the bytes appended (a later append grows it again).
    pub fn settle(&mut self) -> io::Result<()> {
        self.chunk = None;
        self.next = None;
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

    /// An empty log in a folder of its own (kept while the folder lives).
    fn new_log() -> (tempfile::TempDir, std::path::PathBuf, MappedLog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let log = MappedLog::create(&path).unwrap();
        (dir, path, log)
    }

    #[test]
    fn appends_across_chunks_and_settles_to_what_was_appended() {
        let (_dir, path, mut log) = new_log();
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
    fn the_next_chunk_prepared_on_another_thread_is_the_one_written() {
        let (_dir, path, mut log) = new_log();
        assert!(!log.wants_next(), "nothing mapped yet");
        assert!(log.prepare_next().unwrap().is_none());
        let line = [b'q'; 700];
        log.append(&line).unwrap();
        assert!(log.wants_next());
        let prefault = log.prepare_next().unwrap().expect("the second chunk");
        assert!(!log.wants_next());
        assert!(log.prepare_next().unwrap().is_none(), "prepared once");
        std::thread::spawn(move || prefault.run()).join().unwrap();
        let mut want = line.to_vec();
        while (want.len() as u64) < CHUNK + 5000 {
            log.append(&line).unwrap();
            want.extend_from_slice(&line);
        }
        // Writing moved into the prepared chunk, which wants a successor in turn.
        assert!(log.wants_next());
        log.settle().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    #[test]
    fn a_line_longer_than_a_chunk_is_written_whole() {
        let (_dir, path, mut log) = new_log();
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
