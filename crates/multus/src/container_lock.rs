//! One multus command per container at a time. ADD, DEL, CHECK and GC of a container hold
//! `<cniDir>/locks/<containerID>` exclusively, so a second call (a runtime retrying, or a DEL
//! while the ADD still runs) waits for the first and then sees what it left: it never undoes
//! the other's work. The file holds the holder's PID, for the error of a call that waited too
//! long.
//!
//! GC also locks the directory `<cniDir>/locks` itself exclusively, and every ADD shared:
//! GC collects what no valid attachment holds, and an ADD under way (of a container GC does not
//! know yet, its allocations not yet in any cache) must not be collected halfway.

use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a call waits for the one before it: past an ADD's usual length, short of the
/// runtime's own timeout.
pub const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);
/// The directory of the lock files in cniDir.
pub const DIR: &str = "locks";

/// The held lock; released when dropped.
pub struct ContainerLock {
    file: File,
    path: PathBuf,
}

fn lock_error(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Cache {
        path: path.display().to_string(),
        msg: msg.to_string(),
    }
}

/// Takes the lock of `container_id`, waiting at most `wait`. Past that the error (code 11,
/// try again later) names the PID that holds it.
pub fn acquire(cni_dir: &Path, container_id: &str, wait: Duration) -> Result<ContainerLock> {
    let path = locks_dir(cni_dir)?.join(container_id);
    let deadline = Instant::now() + wait;
    loop {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| lock_error(&path, format!("cannot open: {e}")))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(Error::Busy(format!(
                    "container {container_id}: another multus call (pid {}) still holds {} after {} s; try again later",
                    holder.trim(),
                    path.display(),
                    wait.as_secs()
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(lock_error(&path, format!("cannot lock: {e}")))
            }
        }
        // A DEL that held it may have removed the file meanwhile: then this lock guards
        // nothing, and the file at the path is the one to lock.
        let same = std::fs::symlink_metadata(&path)
            .ok()
            .zip(file.metadata().ok())
            .is_some_and(|(at_path, held)| {
                at_path.dev() == held.dev() && at_path.ino() == held.ino()
            });
        if !same {
            continue;
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = write!(file, "{}", std::process::id());
        return Ok(ContainerLock { file, path });
    }
}

/// `<cniDir>/locks`, made when missing.
fn locks_dir(cni_dir: &Path) -> Result<PathBuf> {
    let dir = cni_dir.join(DIR);
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| lock_error(&dir, format!("cannot create: {e}")))?;
    Ok(dir)
}

/// The node's GC lock, held shared (ADD) or exclusively (GC); released when dropped.
pub struct GcLock {
    _held: File,
}

/// Takes the node's GC lock, waiting at most `wait` (then code 11).
pub fn gc_lock(cni_dir: &Path, exclusive: bool, wait: Duration) -> Result<GcLock> {
    // The lock is on the locks directory itself: nothing is left behind for it.
    let path = locks_dir(cni_dir)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| lock_error(&path, format!("cannot open: {e}")))?;
    let deadline = Instant::now() + wait;
    loop {
        let taken = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match taken {
            Ok(()) => return Ok(GcLock { _held: file }),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(POLL);
            }
            Err(TryLockError::WouldBlock) => {
                let what = if exclusive {
                    "GC waited for the ADDs under way"
                } else {
                    "ADD waited for a GC under way"
                };
                return Err(Error::Busy(format!(
                    "{what} for {} s ({}); try again later",
                    wait.as_secs(),
                    path.display()
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(lock_error(&path, format!("cannot lock: {e}")))
            }
        }
    }
}

impl ContainerLock {
    /// Removes the lock file (the container is gone), then releases the lock: a call waiting
    /// on the removed file sees that and takes a new one.
    pub fn remove(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != ErrorKind::NotFound {
                tracing::warn!("cannot remove {}: {e}", self.path.display());
            }
        }
        drop(self.file);
    }
}
