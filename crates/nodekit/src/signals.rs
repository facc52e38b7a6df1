//! SIGTERM and SIGINT, taken synchronously: they are blocked and collected with `sigtimedwait`,
//! so the watch loop's sleep doubles as the wait for a stop request and no handler runs in the
//! middle of a write.

use std::time::Duration;

pub struct Stop {
    set: libc::sigset_t,
}

impl Stop {
    /// Blocks SIGTERM and SIGINT for this thread and every thread it starts later.
    pub fn block() -> std::io::Result<Stop> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, exclusively borrowed sigset_t; the signal numbers are valid.
        let rc = unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(Stop { set })
    }

    /// Waits up to `timeout`; true when a stop signal arrived.
    pub fn wait(&self, timeout: Duration) -> bool {
        let ts = libc::timespec {
            // Beyond time_t's range is "forever" for a wait.
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
        };
        loop {
            // SAFETY: `self.set` was initialised in `block`; a null siginfo pointer is allowed.
            let rc = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
            if rc > 0 {
                return true;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }
}
