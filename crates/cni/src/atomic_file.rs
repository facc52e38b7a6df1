//! Replacing a file so that every reader sees the old content or the new, never a torn file:
//! a private temp file in the same directory, renamed over the old one. [`write`] also waits
//! until the file and the rename are on disk; [`place`] leaves that to the caller, so the wait
//! can overlap other work.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically, the new file having permission bits `mode`, and
/// returns once it survives a machine crash.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    put(path, bytes, mode, true)?;
    sync_dir(path)
}

/// Puts `bytes` at `path` atomically for every process at once, without waiting for the disk:
/// until [`Placed::sync`] returns, a machine crash may lose the file or leave it empty.
pub fn place(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<Placed> {
    let file = put(path, bytes, mode, false)?;
    Ok(Placed {
        file,
        path: path.to_owned(),
    })
}

/// The temp file, written (and synced first when `sync` is set), renamed to `path`.
fn put(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> std::io::Result<File> {
    let tmp = temp_path(path);
    let put = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            if sync {
                file.sync_all()?;
            }
            std::fs::rename(&tmp, path)?;
            Ok(file)
        });
    if put.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    put
}

/// A file [`place`]d but maybe not yet on disk.
#[derive(Debug)]
pub struct Placed {
    file: File,
    path: PathBuf,
}

impl Placed {
    /// Waits until the file's content and its name are on disk.
    pub fn sync(self) -> std::io::Result<()> {
        self.file.sync_all()?;
        sync_dir(&self.path)
    }
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir).and_then(|d| d.sync_all())
}

/// Points `path` at `target` with a symlink that replaces whatever was there in one rename.
pub fn symlink(target: &Path, path: &Path) -> std::io::Result<()> {
    let tmp = temp_path(path);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A temp name unique to this process and call, starting with a dot so that directory readers
/// that skip hidden files (the result cache's `list`, CNI config loading) never pick up one
/// left behind by a crash.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_content_with_the_given_mode_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.conf");
        std::fs::write(&path, b"a much longer old content").unwrap();
        write(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn place_replaces_content_at_once_and_sync_completes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        std::fs::write(&path, b"old").unwrap();
        let placed = place(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        placed.sync().unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn symlink_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bridge");
        std::fs::write(&path, b"old binary").unwrap();
        symlink(Path::new("cni-plugins"), &path).unwrap();
        assert_eq!(std::fs::read_link(&path).unwrap(), Path::new("cni-plugins"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("target");
        // A directory in the way makes the rename fail after the temp file was written.
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        assert!(write(&path, b"new", 0o600).is_err());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temp file left behind");
        assert!(path.join("inside").exists());
    }
}
