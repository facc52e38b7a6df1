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

pub fn open(path: &Path) -> Result<Listener, String> {
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
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "another dhcp daemon is listening on {}; stop it first",
                    path.display()
                ));
            }
            // Left behind by a daemon that did not exit cleanly.
            std::fs::remove_file(path)
                .map_err(|e| format!("removing the stale socket {}: {e}", path.display()))?;
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a socket; remove it or choose another -socketpath",
                path.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("looking at {}: {e}", path.display())),
    }
    // The mask makes the socket 0600 as it is bound: a chmod after the bind would follow a
    // symlink put in its place meanwhile.
    // SAFETY: umask only swaps the process's file mode mask; the daemon is still starting, on
    // one thread, and makes no other file meanwhile.
    let mask = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above; the earlier mask is restored.
    unsafe { libc::umask(mask) };
    let listener = bound.map_err(|e| format!("listening on {}: {e}", path.display()))?;
    Ok(Listener {
        listener,
        made: Some(path.to_path_buf()),
    })
}

/// The socket systemd passed when `LISTEN_PID` is this process and `LISTEN_FDS` is 1.
fn from_systemd() -> Result<Option<UnixListener>, String> {
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
            listener
                .local_addr()
                .map_err(|e| format!("the socket systemd passed is not a unix socket: {e}"))?;
            Ok(Some(listener))
        }
        n => Err(format!(
            "systemd passed {n} sockets (LISTEN_FDS); the dhcp daemon takes exactly one"
        )),
    }
}
