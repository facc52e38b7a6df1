//! The daemon's unix socket: handed over by systemd (socket activation), or made here with mode
//! 0600 after removing one a crashed daemon left behind.

use std::os::fd::FromRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The first descriptor systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: i32 = 3;

pub struct Listener {
    pub listener: UnixListener,
    /// The socket file this daemon made, removed again on exit; none with systemd.
    pub made: Option<PathBuf>,
}

/// Why the socket could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another dhcp daemon is listening on {}; stop it first", .0.display())]
    InUse(PathBuf),
    #[error("{} exists and is not a socket; remove it or choose another -socketpath", .0.display())]
    NotASocket(PathBuf),
    #[error("the socket systemd passed is not a unix socket: {0}")]
    NotUnix(#[source] std::io::Error),
    #[error("systemd passed {0} sockets (LISTEN_FDS); the dhcp daemon takes exactly one")]
    Sockets(i32),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SocketError {
    let path = path.to_owned();
    move |source| SocketError::Io { what, path, source }
}

pub fn open(path: &Path) -> Result<Listener, SocketError> {
    if let Some(listener) = from_systemd()? {
        return Ok(Listener {
            listener,
            made: None,
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("creating", dir))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse(path.to_owned()));
            }
            // Left behind by a daemon that did not exit cleanly.
            std::fs::remove_file(path).map_err(io("removing the stale socket", path))?;
        }
        Ok(_) => return Err(SocketError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("looking at", path)(e)),
    }
    // The mask makes the socket 0600 as it is bound: a chmod after the bind would follow a
    // symlink put in its place meanwhile.
    // SAFETY: umask only swaps the process's file mode mask; the daemon is still starting, on
    // one thread, and makes no other file meanwhile.
    let mask = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above; the earlier mask is restored.
    unsafe { libc::umask(mask) };
    let listener = bound.map_err(io("listening on", path))?;
    Ok(Listener {
        listener,
        made: Some(path.to_path_buf()),
    })
}

/// The socket systemd passed when `LISTEN_PID` is this process and `LISTEN_FDS` is 1.
fn from_systemd() -> Result<Option<UnixListener>, SocketError> {
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    if !for_us {
        return Ok(None);
    }
    let count: i32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match count {
        0 => Ok(None),
        1 => {
            // SAFETY: by the socket activation protocol, descriptor 3 is a listening socket
            // systemd handed to this process, and nothing else in it has taken ownership.
            let listener = unsafe { UnixListener::from_raw_fd(LISTEN_FDS_START) };
            // SAFETY: fcntl on a descriptor we own; FD_CLOEXEC keeps it out of child processes.
            unsafe { libc::fcntl(LISTEN_FDS_START, libc::F_SETFD, libc::FD_CLOEXEC) };
            listener.local_addr().map_err(SocketError::NotUnix)?;
            Ok(Some(listener))
        }
        n => Err(SocketError::Sockets(n)),
    }
}
