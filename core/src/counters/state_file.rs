//! A state file: a file mapped shared into every process that opens it, holding a region of
//! counters that outlives the processes (restarts, upgrades).
//!
//! The file is opened under an exclusive `flock`, so that processes starting together do not
//! race: the first one sizes a new (or empty) file and lays its header out; a header left
//! incomplete by a process that died doing so is laid out again. A file that exists is mapped
//! whole and attached: its rooms keep their counts.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use memmap2::MmapMut;

use crate::counters::directory::Directory;
use crate::error::{Error, Result};

/// A mapped state file.
pub(crate) struct StateFile {
    map: MmapMut,
    base: *mut u8,
}

// SAFETY: the mapping is only accessed through atomics (see `Region`); the pointer is the
// mapping's own and lives as long as it.
unsafe impl Send for StateFile {}
// SAFETY: as above.
unsafe impl Sync for StateFile {}

/// Holds an exclusive `flock` on a file until dropped.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn take(file: &'a File) -> std::io::Result<Self> {
        // SAFETY: `flock` on a descriptor this process owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self(file))
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `take`.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

impl StateFile {
    /// Opens (or creates, `size` bytes, mode 0600) the state file at `path`, maps it, and opens
    /// its header.
    pub(crate) fn open(path: &Path, size: usize) -> Result<(Self, Directory)> {
        let fail =
            |e: std::io::Error| Error::Region(format!("state file `{}`: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(fail)?;
        let _lock = FileLock::take(&file).map_err(fail)?;
        let len = file.metadata().map_err(fail)?.len();
        if len == 0 {
            file.set_len(size as u64).map_err(fail)?;
        }
        // SAFETY: the file is only ever accessed through this mapping's atomics (velvet-rope
        // engines, in any process); it is not truncated while mapped (only an empty file is
        // sized, above, under the lock).
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(fail)?;
        let base = map.as_mut_ptr();
        // SAFETY: the mapping is `map.len()` bytes, page-aligned, and lives as long as the
        // returned `StateFile`; the `flock` held here makes this the only opener meanwhile.
        let directory = unsafe { Directory::open(base, map.len(), true) }?;
        Ok((Self { map, base }, directory))
    }

    /// The mapping's base (page-aligned) and length.
    pub(crate) fn region(&self) -> (*mut u8, usize) {
        (self.base, self.map.len())
    }
}
