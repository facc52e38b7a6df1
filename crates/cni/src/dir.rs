//! A directory opened once, and the files in it opened, made, renamed and removed relative to
//! that open directory, never through a symlink at their name. Whoever can write in the
//! directory may plant a symlink where one of our files goes: it is refused, never followed,
//! and a directory swapped for another after it was opened is not the one written.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An open directory, with the path it was opened by (for messages).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The error of a call that found a symlink where it would have followed it.
#[derive(Debug)]
struct SymlinkRefused;

impl fmt::Display for SymlinkRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("it is a symbolic link, which is never followed here; remove it")
    }
}

impl std::error::Error for SymlinkRefused {}

fn symlink_refused() -> io::Error {
    io::Error::other(SymlinkRefused)
}

/// Whether `e` is the refusal of a symlink by a [`Dir`] call.
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<SymlinkRefused>())
}

impl Dir {
    /// Opens the directory at `path`. Symlinks on the way, the last one included, are
    /// followed: `path` is one configured by whoever runs us. Names in a directory that others
    /// may write are opened with [`Dir::open_dir`].
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = open_at(
            libc::AT_FDCWD,
            &cstring(path.as_os_str())?,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        Ok(Dir {
            fd,
            path: path.to_owned(),
        })
    }

    /// The path this directory was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages.
    pub fn join(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.path.join(name.as_ref())
    }

    /// Opens the directory `name` in this one; a symlink there is refused.
    pub fn open_dir(&self, name: impl AsRef<OsStr>) -> io::Result<Dir> {
        let name = name.as_ref();
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        match self.open_raw(name, flags, 0) {
            // With O_DIRECTORY, a symlink is "not a directory".
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) && self.is_symlink(name) => {
                Err(symlink_refused())
            }
            opened => opened.map(|fd| Dir {
                fd,
                path: self.join(name),
            }),
        }
    }

    /// [`Dir::open_dir`], making the directory first (with `mode`) when it is missing.
    pub fn open_or_create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<Dir> {
        let name = name.as_ref();
        match self.open_dir(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match self.create_dir(name, mode) {
                // Made meanwhile by another process.
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
                _ => self.open_dir(name),
            },
            opened => opened,
        }
    }

    /// Makes the directory `name` with permission bits `mode` (less the umask).
    pub fn create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<()> {
        let name = file_name(name.as_ref())?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call, and `self.fd` is an
        // open directory.
        let rc = unsafe { libc::mkdirat(self.fd.as_raw_fd(), name.as_ptr(), mode) };
        check(rc)
    }

    /// Opens `name` for reading; a symlink there is refused.
    pub fn open_read(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        self.open_file(name.as_ref(), libc::O_RDONLY, 0)
    }

    /// Reads the whole of `name` as [`crate::input::read_file`] does (a regular file, looked at
    /// before it is opened, capped); a symlink there is refused.
    pub fn read(&self, name: impl AsRef<OsStr>) -> io::Result<Vec<u8>> {
        crate::input::read_regular(self.open_path(name)?)
    }

    /// Opens `name` for writing, keeping its content, or creates it with permission bits
    /// `mode`; a symlink there is refused.
    pub fn open_write(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        self.open_file(name.as_ref(), libc::O_WRONLY | libc::O_CREAT, mode)
    }

    /// Opens `name` emptied for writing, or creates it with permission bits `mode`; a symlink
    /// there is refused.
    pub fn open_truncate(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
        self.open_file(name.as_ref(), flags, mode)
    }

    /// Creates `name`, which must not exist, with permission bits `mode`: a file there is
    /// `AlreadyExists`, a symlink is refused.
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let name = name.as_ref();
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        match self.open_file(name, flags, mode) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.is_symlink(name) => {
                Err(symlink_refused())
            }
            created => created,
        }
    }

    /// Makes `name` a symlink to `target`.
    pub fn symlink(&self, target: &Path, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = file_name(name.as_ref())?;
        let target = cstring(target.as_os_str())?;
        // SAFETY: both strings are NUL-terminated and outlive the call; `self.fd` is an open
        // directory.
        let rc = unsafe { libc::symlinkat(target.as_ptr(), self.fd.as_raw_fd(), name.as_ptr()) };
        check(rc)
    }

    /// Renames `from` to `to` in this directory; whatever was at `to` is replaced (a symlink
    /// itself, never its target).
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> io::Result<()> {
        let from = file_name(from.as_ref())?;
        let to = file_name(to.as_ref())?;
        let fd = self.fd.as_raw_fd();
        // SAFETY: both names are NUL-terminated strings that outlive the call; `fd` is an open
        // directory.
        let rc = unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) };
        check(rc)
    }

    /// Removes the file (or symlink) `name`.
    pub fn remove(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = file_name(name.as_ref())?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; `self.fd` is an open
        // directory.
        let rc = unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) };
        check(rc)
    }

    /// `name` itself, opened with `O_PATH` (found, not opened for reading or writing); a
    /// symlink there is refused.
    pub fn open_path(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        let found = self.open_file(name.as_ref(), libc::O_PATH, 0)?;
        // With O_PATH, O_NOFOLLOW opens a symlink itself rather than failing.
        if found.metadata()?.file_type().is_symlink() {
            return Err(symlink_refused());
        }
        Ok(found)
    }

    /// What is at `name` itself: a symlink is described, not followed.
    pub fn metadata(&self, name: impl AsRef<OsStr>) -> io::Result<Metadata> {
        let fd = self.open_raw(name.as_ref(), libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        File::from(fd).metadata()
    }

    fn is_symlink(&self, name: &OsStr) -> bool {
        self.metadata(name)
            .is_ok_and(|m| m.file_type().is_symlink())
    }

    /// The names in this directory, without `.` and `..`, in no particular order.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // A descriptor of its own: the stream takes it over and closes it.
        let fd = open_at(
            self.fd.as_raw_fd(),
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        let raw = fd.into_raw_fd();
        // SAFETY: `raw` is an open directory descriptor that nothing else owns; on success the
        // stream owns it.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours alone.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
            return Err(e);
        }
        let stream = Stream(stream);
        let mut names = Vec::new();
        loop {
            // SAFETY: errno is thread-local; clearing it tells readdir's end from its failure.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `stream.0` is an open directory stream used by this thread only.
            let entry = unsafe { libc::readdir(stream.0) };
            if entry.is_null() {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(0) => Ok(names),
                    _ => Err(e),
                };
            }
            // SAFETY: readdir returned an entry whose d_name is NUL-terminated and valid until
            // the next readdir on this stream; it is copied before that.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_owned());
            }
        }
    }

    /// Waits until the directory's entries (names made, renamed, removed) are on disk.
    pub fn sync(&self) -> io::Result<()> {
        // SAFETY: fsync on a descriptor this Dir owns.
        check(unsafe { libc::fsync(self.fd.as_raw_fd()) })
    }

    fn open_file(&self, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<File> {
        match self.open_raw(name, flags | libc::O_NOFOLLOW, mode) {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(symlink_refused()),
            opened => opened.map(File::from),
        }
    }

    /// openat on a single name, never a path.
    fn open_raw(&self, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
        open_at(self.fd.as_raw_fd(), &file_name(name)?, flags, mode)
    }
}

/// A `DIR*` stream, closed when dropped.
struct Stream(*mut libc::DIR);

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: the stream is open and closed only here, once.
        unsafe { libc::closedir(self.0) };
    }
}

fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is an open directory
        // or AT_FDCWD.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
        if fd >= 0 {
            // SAFETY: openat returned a new descriptor that nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `name` as one name in a directory: not empty, `.` or `..`, and without a `/`, so a call
/// relative to the directory never reaches outside it.
fn file_name(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} is not a file name", name.to_string_lossy()),
        ));
    }
    cstring(name)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn setup() -> (tempfile::TempDir, Dir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        let dir = Dir::open(&tmp.path().join("d")).unwrap();
        (tmp, dir, victim)
    }

    #[test]
    fn a_symlink_is_refused_by_every_open_and_never_followed() {
        let (tmp, dir, victim) = setup();
        std::os::unix::fs::symlink(&victim, dir.join("link")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), dir.join("dirlink")).unwrap();
        let refused = |r: io::Result<File>| {
            let e = r.unwrap_err();
            assert!(is_symlink_refusal(&e), "{e}");
            assert!(e.to_string().contains("symbolic link"), "{e}");
        };
        refused(dir.open_read("link"));
        let e = dir.read("link").unwrap_err();
        assert!(is_symlink_refusal(&e), "{e}");
        refused(dir.open_write("link", 0o600));
        refused(dir.open_truncate("link", 0o600));
        refused(dir.create_new("link", 0o600));
        for e in [
            dir.open_dir("dirlink").unwrap_err(),
            dir.open_or_create_dir("dirlink", 0o700).unwrap_err(),
        ] {
            assert!(is_symlink_refusal(&e), "{e}");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Removing and describing a symlink touch the link itself.
        assert!(dir.metadata("link").unwrap().file_type().is_symlink());
        dir.remove("link").unwrap();
        assert!(victim.exists());
    }

    #[test]
    fn files_are_made_listed_renamed_and_removed_inside_the_directory() {
        let (_tmp, dir, _) = setup();
        dir.create_new("a", 0o600)
            .unwrap()
            .write_all(b"one")
            .unwrap();
        let e = dir.create_new("a", 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(!is_symlink_refusal(&e));
        dir.open_truncate("a", 0o600)
            .unwrap()
            .write_all(b"two")
            .unwrap();
        assert_eq!(dir.read("a").unwrap(), b"two");
        let mode = std::fs::metadata(dir.join("a"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        dir.rename("a", "b").unwrap();
        dir.create_dir("sub", 0o700).unwrap();
        dir.open_dir("sub").unwrap().open_write("x", 0o600).unwrap();
        dir.open_or_create_dir("sub", 0o700).unwrap();
        dir.open_or_create_dir("new", 0o700).unwrap();
        dir.symlink(Path::new("b"), "l").unwrap();
        let mut names = dir.names().unwrap();
        names.sort();
        assert_eq!(names, ["b", "l", "new", "sub"]);
        dir.remove("b").unwrap();
        dir.sync().unwrap();
        assert_eq!(dir.names().unwrap().len(), 3);
    }

    #[test]
    fn names_that_are_paths_are_refused() {
        let (_tmp, dir, _) = setup();
        for bad in ["", ".", "..", "../victim", "a/b", "/etc/passwd"] {
            let e = dir.open_write(bad, 0o600).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
            assert!(dir.remove(bad).is_err(), "{bad:?}");
        }
    }
}
