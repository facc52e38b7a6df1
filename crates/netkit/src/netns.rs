//! Network namespace handles.
//!
//! A thread is only ever moved into another namespace when this module created it for that
//! purpose ([`NetNs::run`]); the thread ends with the closure, so no thread is ever left in the
//! wrong namespace.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where named namespaces live, as with `ip netns`.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// statfs(2) magic of nsfs, where namespace handles live: `/proc/<pid>/ns/*` and their bind
/// mounts such as `/run/netns/*`.
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// Takes an exclusive flock on `file` (`what`, for the error), waiting at most `wait` for
/// `holder` to let it go; past that, `EAGAIN`: the caller may be retried.
pub(crate) fn lock_within(
    file: &File,
    wait: std::time::Duration,
    what: &str,
    holder: &str,
) -> Result<()> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::io(
                    format!(
                        "locking {what}: {holder} still holds it after {} s",
                        wait.as_secs()
                    ),
                    std::io::Error::from_raw_os_error(libc::EAGAIN),
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("locking {what}"), e))
            }
        }
    }
}

/// Whether an open nsfs file is a network namespace, by NS_GET_NSTYPE. Where that is not
/// implemented (kernels before 4.11, and user-mode emulators such as qemu-user, which run the
/// aarch64 build's tests) it is taken as one: every use of the handle, setns with
/// CLONE_NEWNET or a link moved by its fd, still refuses another kind of namespace.
fn is_net_namespace(file: &File) -> std::io::Result<bool> {
    // SAFETY: NS_GET_NSTYPE takes no argument and only inspects the fd, which is open.
    let kind = unsafe { libc::ioctl(file.as_raw_fd(), libc::NS_GET_NSTYPE) };
    if kind >= 0 {
        return Ok(kind == libc::CLONE_NEWNET);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::ENOTTY | libc::ENOSYS) => Ok(true),
        _ => Err(error),
    }
}

/// An open network namespace.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

impl NetNs {
    /// Takes an exclusive lock on the namespace (an flock on its file, which every opener of
    /// the namespace shares), waiting at most `wait`; it is held until this handle is dropped.
    /// Plugins hold it while they change the pod, so two calls on one pod never interleave.
    pub fn lock(&self, wait: std::time::Duration) -> Result<()> {
        lock_within(
            &self.file,
            wait,
            &format!("netns {}", self.path.display()),
            "another call on this pod",
        )
    }

    /// Opens a namespace file such as `/run/netns/x` or `/proc/<pid>/ns/net`. Anything that is
    /// not a network namespace (a plain file, the file left after an unmount, another kind of
    /// namespace) is [`Error::Invalid`].
    pub fn open(path: impl AsRef<Path>) -> Result<NetNs> {
        let path = path.as_ref().to_path_buf();
        let op = || format!("opening netns {}", path.display());
        let file = File::open(&path).map_err(|e| Error::io(op(), e))?;
        // SAFETY: statfs is plain old data, so all-zero is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open for the duration of the call and `st` is a valid out pointer.
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::last_os(op()));
        }
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between libc targets.
        let fs_type = st.f_type as i64;
        let not_netns = |why: &str| {
            Error::Invalid(format!(
                "{} is not a network namespace ({why})",
                path.display()
            ))
        };
        if fs_type != NSFS_MAGIC {
            return Err(not_netns("not a namespace file"));
        }
        if !is_net_namespace(&file).map_err(|e| Error::io(op(), e))? {
            return Err(not_netns("another kind of namespace"));
        }
        Ok(NetNs { file, path })
    }

    /// The namespace of the calling thread.
    pub fn current() -> Result<NetNs> {
        NetNs::open("/proc/thread-self/ns/net")
    }

    /// The path this handle was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on a new short-lived thread that has joined this namespace, and returns its
    /// value. A panic in `f` is propagated to the caller.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|scope| {
            let handle = std::thread::Builder::new()
                .name("netns".into())
                .spawn_scoped(scope, || {
                    self.enter_this_thread()?;
                    Ok(f())
                })
                .map_err(|e| Error::io("spawning a thread to enter a netns", e))?;
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Makes `cmd`'s process join this namespace between fork and exec.
    pub fn enter_on_exec(&self, cmd: &mut std::process::Command) -> Result<()> {
        use std::os::unix::process::CommandExt;
        let file = self
            .file
            .try_clone()
            .map_err(|e| Error::io(format!("duplicating {}", self.path.display()), e))?;
        // SAFETY: the closure only calls setns(2), which is async-signal-safe; `file` is moved
        // into it and stays open until exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Whether both handles refer to the same namespace.
    pub fn is_same(&self, other: &NetNs) -> bool {
        match (fstat(&self.file), fstat(&other.file)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// Creates `/run/netns/<name>` holding a fresh namespace, like `ip netns add`. Loopback is
    /// left down, as `ip netns add` leaves it.
    pub fn create_named(name: &str) -> Result<NetNs> {
        let path = named_path(name)?;
        let run_dir = Path::new(NETNS_RUN_DIR);
        std::fs::create_dir_all(run_dir)
            .map_err(|e| Error::io(format!("creating {NETNS_RUN_DIR}"), e))?;
        make_shared_mount(run_dir)?;
        // The mount point; create_new fails with EEXIST when the name is taken.
        std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let bound = std::thread::scope(|scope| {
            // The thread that unshares ends right after the bind mount: it is never reused.
            std::thread::Builder::new()
                .name("netns-create".into())
                .spawn_scoped(scope, || {
                    // SAFETY: unshare only affects the calling thread, which we own and which
                    // ends right after.
                    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                        return Err(Error::last_os("unshare(CLONE_NEWNET)"));
                    }
                    mount(
                        Some(Path::new("/proc/thread-self/ns/net")),
                        &path,
                        libc::MS_BIND,
                    )
                })
                .map_err(|e| Error::io("spawning a thread to create a netns", e))?
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        if let Err(e) = bound {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        NetNs::open(&path)
    }

    /// Deletes `/run/netns/<name>` like `ip netns del`; succeeds when it does not exist.
    pub fn delete_named(name: &str) -> Result<()> {
        let path = named_path(name)?;
        let c = cstring(&path)?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            let e = std::io::Error::last_os_error();
            // EINVAL: not a mount point (a half-made entry); ENOENT: already gone.
            if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
                return Err(Error::io(format!("unmounting {}", path.display()), e));
            }
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing {}", path.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// Moves the calling thread into this namespace. Callers own the thread and end it after.
    fn enter_this_thread(&self) -> Result<()> {
        // SAFETY: setns on a valid fd only changes the calling thread's namespace; `run` owns
        // this thread and lets it end when the closure returns.
        if unsafe { libc::setns(self.file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(Error::last_os(format!(
                "entering netns {}",
                self.path.display()
            )));
        }
        Ok(())
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for NetNs {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

fn named_path(name: &str) -> Result<PathBuf> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::Invalid(format!("invalid netns name {name:?}")));
    }
    Ok(Path::new(NETNS_RUN_DIR).join(name))
}

fn fstat(file: &File) -> Option<(u64, u64)> {
    // SAFETY: stat is plain old data, so all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the duration of the call and `st` is a valid out pointer.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // st_dev/st_ino widths differ between libc targets.
    Some((st.st_dev as u64, st.st_ino as u64))
}

fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("path {} contains NUL", path.display())))
}

fn mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> Result<()> {
    let op = || match source {
        Some(s) => format!("mounting {} on {}", s.display(), target.display()),
        None => format!("changing mount propagation of {}", target.display()),
    };
    let src = source.map(cstring).transpose()?;
    let tgt = cstring(target)?;
    let none = c"none";
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call; bind mounts
    // and propagation changes ignore the filesystem type and take no data.
    let rc = unsafe {
        libc::mount(
            src.as_deref().unwrap_or(none).as_ptr(),
            tgt.as_ptr(),
            none.as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Error::last_os(op()));
    }
    Ok(())
}

/// Makes `dir` a shared mount so namespace mounts under it propagate to other mount namespaces
/// (what iproute2 does): bind it onto itself first when it is not a mount point yet.
fn make_shared_mount(dir: &Path) -> Result<()> {
    let shared = || mount(None, dir, libc::MS_SHARED | libc::MS_REC);
    match shared() {
        Err(e) if e.errno() == Some(libc::EINVAL) => {
            mount(Some(dir), dir, libc::MS_BIND | libc::MS_REC)?;
            shared()
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where NS_GET_NSTYPE is missing, `open` takes any namespace file as a network one. A
    /// handle on another kind is still refused where it is used: entering it (on a thread or
    /// between fork and exec) fails, and the caller stays in its own namespace.
    #[test]
    fn a_handle_on_another_kind_of_namespace_is_refused_where_it_is_used() {
        let path = PathBuf::from("/proc/self/ns/uts");
        assert!(
            matches!(NetNs::open(&path), Err(Error::Invalid(_))),
            "this kernel has NS_GET_NSTYPE: open refuses a UTS namespace"
        );
        // As the fallback would have opened it.
        let uts = NetNs {
            file: File::open(&path).expect("opening /proc/self/ns/uts"),
            path,
        };
        let before = NetNs::current().expect("this thread's netns");
        let entered = uts.run(|| NetNs::current().map(|ns| ns.is_same(&before)));
        let err = entered.expect_err("a UTS namespace entered as a network one");
        assert_eq!(err.errno(), Some(libc::EINVAL), "{err}");
        let mut cmd = std::process::Command::new("true");
        uts.enter_on_exec(&mut cmd)
            .expect("setting the pre-exec step");
        let spawned = cmd
            .status()
            .expect_err("a child entering a UTS namespace as a network one");
        assert_eq!(spawned.raw_os_error(), Some(libc::EINVAL), "{spawned}");
        let after = NetNs::current().expect("this thread's netns");
        assert!(
            after.is_same(&before),
            "the test's thread changed namespace"
        );
    }
}
