//! Where rooms' counters live: memory the engine owns, a region the host hands in (an nginx
//! shared-memory zone), or a state file the engine maps. Shared storage finds each room by name
//! in the region's directory, so processes (and reloads) that list rooms in another order, or
//! fewer rooms, still share each room's counts.

use std::path::Path;
use std::sync::Arc;

use crate::config::{RoomConfig, Settings};
use crate::counters::directory::Directory;
use crate::counters::room_counters::RoomCounters;
use crate::counters::room_layout::RoomLayout;
use crate::counters::state_file::StateFile;
use crate::error::Result;

/// Where a running engine's counters live.
pub(crate) enum Storage {
    /// Memory the engine owns (one process).
    Owned,
    /// A region shared with other engines.
    Shared(Shared),
}

/// A shared region and its directory.
pub(crate) struct Shared {
    base: *mut u8,
    directory: Directory,
    /// The state file whose mapping this is (none: memory the host owns).
    _file: Option<StateFile>,
}

// SAFETY: the region is only accessed through atomics; its creator promised it outlives the
// engine (`Engine::new_shared`), or the engine owns its mapping (`_file`).
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Storage {
    /// A region of `len` bytes at `base`.
    ///
    /// # Safety
    /// As [`crate::Engine::new_shared`].
    pub(crate) unsafe fn region(base: *mut u8, len: usize) -> Result<Self> {
        // SAFETY: forwarded from this function's contract. Other processes may open the same
        // memory at the same time: a header being laid out is waited for.
        let directory = unsafe { Directory::open(base, len, false) }?;
        Ok(Storage::Shared(Shared {
            base,
            directory,
            _file: None,
        }))
    }

    /// The state file at `path`, created with `size` bytes if it does not exist.
    pub(crate) fn state_file(path: &Path, size: usize) -> Result<Self> {
        let (file, directory) = StateFile::open(path, size)?;
        Ok(Storage::Shared(Shared {
            base: file.region().0,
            directory,
            _file: Some(file),
        }))
    }

    /// The key shared by every engine over this storage, if it is shared.
    pub(crate) fn shared_key(&self) -> Result<Option<[u8; 32]>> {
        match self {
            Storage::Owned => Ok(None),
            Storage::Shared(s) => s.directory.shared_key().map(Some),
        }
    }

    /// Counters for room `cfg`, which the running engine does not have: fresh ones (owned), or
    /// the room's place in the shared region (found by name, or added after the others).
    pub(crate) fn counters(
        &self,
        cfg: &RoomConfig,
        settings: &Settings,
    ) -> Result<Arc<RoomCounters>> {
        let needed = RoomLayout::of(cfg, settings);
        match self {
            Storage::Owned => Ok(Arc::new(RoomCounters::new(needed))),
            Storage::Shared(s) => s
                .directory
                .attach_room(s.base, &cfg.name, needed, settings)
                .map(Arc::new),
        }
    }
}
