//! Replacing a file so that every reader sees the old content or the new, never a torn file:
//! a private temp file in the same directory, renamed over the old one. [`write`] also waits
//! until the file and the rename are on disk; [`place`] leaves that to the caller, so the wait
//! can overlap other work.
//!
//! Nothing is written through a symlink: the temp file is made new (`O_EXCL`, `O_NOFOLLOW`),
//! and the rename replaces a symlink at the name rather than writing where it points. Both
//! happen relative to the directory opened once. A writer killed between the two leaves its
//! temp file, named `.<name>.tmp-<pid>-<n>`; [`temp_target`] recognises one, and
//! [`remove_temp_files`] removes those of the files a caller owns.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dir::{self, Dir};

/// Temp names tried before giving up: one is taken only when a killed writer had this PID, or
/// someone planted a file there.
const TEMP_ATTEMPTS: usize = 16;

/// Writes `bytes` to `path` atomically, the new file having permission bits `mode`, and
/// returns once it survives a machine crash.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let (dir, name) = parent(path)?;
    write_in(&dir, name, bytes, mode)
}

/// [`write`] of the file `name` in the open directory `dir`.
pub fn write_in(dir: &Dir, name: &OsStr, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    put(dir, name, bytes, mode, true)?;
    dir.sync()
}

/// Puts `bytes` at `path` atomically for every process at once, without waiting for the disk:
/// until [`Placed::sync`] returns, a machine crash may lose the file or leave it empty.
pub fn place(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<Placed> {
    let (dir, name) = parent(path)?;
    let file = put(&dir, name, bytes, mode, false)?;
    Ok(Placed { file, dir })
}

/// [`place`] of the file `name` in the open directory `dir`, for a file nobody waits to see on
/// disk.
pub fn place_in(dir: &Dir, name: &OsStr, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    put(dir, name, bytes, mode, false).map(drop)
}

/// [`write_in`] of what `src` reads to its end, streamed: a binary is never held in memory.
pub fn copy_in(dir: &Dir, name: &OsStr, src: &mut File, mode: u32) -> std::io::Result<()> {
    fill(dir, name, mode, true, |file| {
        std::io::copy(src, file).map(drop)
    })?;
    dir.sync()
}

/// The temp file, written (and synced first when `sync` is set), renamed to `name`.
fn put(dir: &Dir, name: &OsStr, bytes: &[u8], mode: u32, sync: bool) -> std::io::Result<File> {
    fill(dir, name, mode, sync, |file| file.write_all(bytes))
}

/// The temp file, filled by `write` (and synced first when `sync` is set), renamed to `name`.
fn fill(
    dir: &Dir,
    name: &OsStr,
    mode: u32,
    sync: bool,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<File> {
    let (tmp, mut file) = new_temp(name, |tmp| dir.create_new(tmp, mode))?;
    let put = write(&mut file)
        .and_then(|()| if sync { file.sync_all() } else { Ok(()) })
        .and_then(|()| dir.rename(&tmp, name));
    if let Err(e) = put {
        let _ = dir.remove(&tmp);
        return Err(e);
    }
    Ok(file)
}

/// A file [`place`]d but maybe not yet on disk.
#[derive(Debug)]
pub struct Placed {
    file: File,
    dir: Dir,
}

impl Placed {
    /// Waits until the file's content and its name are on disk.
    pub fn sync(self) -> std::io::Result<()> {
        self.file.sync_all()?;
        self.dir.sync()
    }
}

/// Points `path` at `target` with a symlink that replaces whatever was there in one rename.
pub fn symlink(target: &Path, path: &Path) -> std::io::Result<()> {
    let (dir, name) = parent(path)?;
    let (tmp, ()) = new_temp(name, |tmp| dir.symlink(target, tmp))?;
    dir.rename(&tmp, name).inspect_err(|_| {
        let _ = dir.remove(&tmp);
    })
}

/// The directory of `path`, opened, and the file's name in it.
fn parent(path: &Path) -> std::io::Result<(Dir, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("{} does not name a file", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((Dir::open(dir)?, name))
}

/// Makes a temp file for `name` with `make`, trying the next name while one is taken.
fn new_temp<T>(
    name: &OsStr,
    mut make: impl FnMut(&OsStr) -> std::io::Result<T>,
) -> std::io::Result<(OsString, T)> {
    let mut attempts = 0;
    loop {
        let tmp = temp_name(name);
        match make(&tmp) {
            Ok(made) => return Ok((tmp, made)),
            Err(e) if attempts + 1 < TEMP_ATTEMPTS && is_taken(&e) => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

fn is_taken(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::AlreadyExists || dir::is_symlink_refusal(e)
}

/// A temp name unique to this process and call, starting with a dot so that directory readers
/// that skip hidden files (the result cache's `list`, CNI config loading) never pick up one
/// left behind by a crash.
fn temp_name(name: &OsStr) -> OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}-{n}", std::process::id()));
    tmp
}

/// The name of the file whose temp file `file_name` is (`.<name>.tmp-<pid>-<n>`), or `None`
/// when it is not one.
pub fn temp_target(file_name: &OsStr) -> Option<&OsStr> {
    let rest = file_name.as_bytes().strip_prefix(b".")?;
    let at = rest.windows(5).rposition(|w| w == b".tmp-")?;
    let (target, suffix) = (&rest[..at], &rest[at + 5..]);
    let (pid, n) = std::str::from_utf8(suffix).ok()?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (!target.is_empty() && digits(pid) && digits(n)).then(|| OsStr::from_bytes(target))
}

/// Removes the temp files in `dir` of the files `owned` names (by their name), as writers
/// killed mid-write left them; a missing `dir` has none. Returns the paths removed. The
/// caller makes sure no writer of those files is still at work.
pub fn remove_temp_files(
    dir: &Path,
    owned: impl Fn(&OsStr) -> bool,
) -> std::io::Result<Vec<PathBuf>> {
    let dir = match Dir::open(dir) {
        Ok(dir) => dir,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for name in dir.names()? {
        if !temp_target(&name).is_some_and(&owned) {
            continue;
        }
        match dir.remove(&name) {
            Ok(()) => removed.push(dir.join(&name)),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
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
    fn a_taken_temp_name_is_skipped_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let d = Dir::open(dir.path()).unwrap();
        let tried = std::cell::RefCell::new(Vec::new());
        // The first two names are taken: a leftover file, then a planted symlink.
        let (tmp, _file) = new_temp(OsStr::new("f"), |tmp| {
            let mut tried = tried.borrow_mut();
            tried.push(tmp.to_owned());
            match tried.len() {
                1 => std::fs::write(d.join(tmp), b"left over").unwrap(),
                2 => std::os::unix::fs::symlink(&victim, d.join(tmp)).unwrap(),
                _ => {}
            }
            d.create_new(tmp, 0o600)
        })
        .unwrap();
        let tried = tried.into_inner();
        assert_eq!(tried.len(), 3);
        assert_eq!(tmp, tried[2]);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Never more than TEMP_ATTEMPTS names.
        let mut count = 0;
        let e = new_temp(OsStr::new("f"), |_| -> std::io::Result<()> {
            count += 1;
            Err(ErrorKind::AlreadyExists.into())
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        assert_eq!(count, TEMP_ATTEMPTS);
    }

    #[test]
    fn a_symlink_at_the_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("f");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn temp_files_are_recognised_and_removed_for_their_owner() {
        let t = |s: &str| temp_target(OsStr::new(s)).map(|t| t.to_string_lossy().into_owned());
        assert_eq!(t(".c1.tmp-12-0").as_deref(), Some("c1"));
        assert_eq!(t(".a.tmp-1-2.tmp-3-4").as_deref(), Some("a.tmp-1-2"));
        assert_eq!(t(".net-c1-eth0.tmp-999-17").as_deref(), Some("net-c1-eth0"));
        for not in [
            "c1",
            ".c1",
            ".c1.tmp-",
            ".c1.tmp-1",
            ".c1.tmp-1-",
            ".c1.tmp-x-1",
            "..tmp-1-2",
        ] {
            assert_eq!(t(not), None, "{not}");
        }
        let dir = tempfile::tempdir().unwrap();
        for name in [".c1.tmp-1-0", ".c1.tmp-2-5", ".c2.tmp-1-1", "c1", ".c1"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let mut removed = remove_temp_files(dir.path(), |t| t == "c1").unwrap();
        removed.sort();
        assert_eq!(
            removed,
            [
                dir.path().join(".c1.tmp-1-0"),
                dir.path().join(".c1.tmp-2-5")
            ]
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
        assert!(remove_temp_files(&dir.path().join("absent"), |_| true)
            .unwrap()
            .is_empty());
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
