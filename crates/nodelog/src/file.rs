//! The log file, shared with the other processes that write it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The log file as this process opened it.
pub(crate) struct LogFile {
    path: PathBuf,
    file: File,
}

impl LogFile {
    /// Opens `path` for appending, creating its directory (0755) first if it is missing, as
    /// multus upstream does.
    pub(crate) fn open(path: &Path) -> std::io::Result<LogFile> {
        let file = match open_append(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(dir)?;
                }
                open_append(path)?
            }
            other => other?,
        };
        Ok(LogFile {
            path: path.to_owned(),
            file,
        })
    }

    /// Appends a line under a shared lock: another process compressing the file this one
    /// opened (rotated meanwhile) holds it exclusively, and once the file is no longer the
    /// one at the path (renamed or removed by a rotation), the line goes to the new log
    /// instead.
    pub(crate) fn append(&mut self, buf: &[u8]) {
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        let moved = || {
            self.file.metadata().ok().map(id) != std::fs::symlink_metadata(&self.path).ok().map(id)
        };
        if self.file.lock_shared().is_ok() && moved() {
            if let Ok(file) = open_append(&self.path) {
                let _ = self.file.unlock();
                self.file = file;
                let _ = self.file.lock_shared();
            }
        }
        let _ = self.file.write_all(buf);
        let _ = self.file.unlock();
    }
}

/// The log may sit in a directory others can write (`/tmp`): a symlink planted at its name is
/// never followed.
fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}
