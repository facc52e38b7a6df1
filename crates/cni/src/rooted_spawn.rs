//! Starting a delegate chrooted to another root without fork(2).
//!
//! std's `Command` forks whenever the child must run code of ours before it execs, as a
//! chroot is. A fork copies the page tables of the whole process, and until the child execs,
//! every thread of a busy daemon takes a copy-on-write fault on each page it writes: a thick
//! daemon paid about half a millisecond of CPU per delegate. Here the child shares this
//! process's memory until it execs (clone(2) with `CLONE_VM | CLONE_VFORK`, as posix_spawn(3)
//! starts its children), and makes only system calls before execve(2).

use std::ffi::{CStr, CString, OsString};
use std::fs::File;
use std::io::{Error, ErrorKind, Read, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// The child's stack, in this process's memory, for the moment before it execs.
const STACK: usize = 64 << 10;

/// The highest signal number on Linux (`_NSIG - 1`).
const LAST_SIGNAL: libc::c_int = 64;

/// A delegate started, with the parent's ends of its standard pipes.
pub(crate) struct Spawned {
    pub pid: libc::pid_t,
    pub stdin: File,
    pub stdout: File,
    pub stderr: File,
}

/// What the child needs, all made before the clone: the child allocates nothing and takes no
/// lock.
struct ChildPlan {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    root: *const libc::c_char,
    new_group: bool,
    /// The descriptors that become its stdin, stdout and stderr.
    stdio: [RawFd; 3],
    /// Where it writes its errno when it cannot exec; closed by a successful exec.
    report: RawFd,
}

/// Runs `bin` chrooted to `root` (with `/` as its working directory), with exactly `vars` as
/// its environment, in a process group of its own when `new_group`. `bin` is looked up inside
/// the root. An exec that fails is this call's error, with its errno.
pub(crate) fn spawn(
    bin: &Path,
    vars: &[(OsString, OsString)],
    root: &CStr,
    new_group: bool,
) -> Result<Spawned> {
    let path = c_string(bin.as_os_str().as_bytes())?;
    let vars = vars
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c_string(&kv)
        })
        .collect::<Result<Vec<CString>>>()?;
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp: Vec<*const libc::c_char> = vars
        .iter()
        .map(|v| v.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    let (stdin_read, stdin_write) = pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let (report_read, report_write) = pipe()?;
    let plan = ChildPlan {
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        root: root.as_ptr(),
        new_group,
        stdio: [
            stdin_read.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        report: report_write.as_raw_fd(),
    };
    let mut stack = vec![0u8; STACK];
    // The stack grows down from its 16-byte aligned top, as x86_64 and aarch64 require.
    let top = (stack.as_mut_ptr() as usize + STACK) & !15;

    // Every signal is blocked around the clone, so that none can run one of this process's
    // handlers in the child before the child has set them back to their defaults.
    // SAFETY: sigset_t is a plain C bitmask, valid all-zero; sigfillset and pthread_sigmask
    // fill and swap this thread's mask through pointers to values we own.
    let old_mask = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    // SAFETY: the child runs `child` on `stack`, which outlives it here: with CLONE_VFORK this
    // thread is suspended until the child has exec'd or exited, and only then does clone
    // return. `plan` and everything it points to live until after that. Without CLONE_FILES
    // the child has its own descriptor table, so its dup2 and the exec's closing of
    // close-on-exec descriptors leave ours alone.
    let pid = unsafe {
        libc::clone(
            child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(&plan).cast_mut().cast(),
        )
    };
    let clone_error = Error::last_os_error();
    // SAFETY: restores this thread's mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
    drop((stdin_read, stdout_write, stderr_write, report_write));
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    // Empty once the child has exec'd (the exec closed its end); its errno otherwise. Where
    // clone(2) is emulated by a fork (qemu-user), this waits for the exec.
    let mut errno = [0u8; 4];
    let mut report = File::from(report_read);
    let mut got = 0;
    while got < errno.len() {
        match report.read(&mut errno[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if got == errno.len() {
        // The exec's error is the one to report; the child has exited with 127.
        let _ = reap(pid);
        return Err(Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(Spawned {
        pid,
        stdin: File::from(stdin_write),
        stdout: File::from(stdout_read),
        stderr: File::from(stderr_read),
    })
}

/// The child, between the clone and the exec: system calls only, on values the parent made.
extern "C" fn child(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `plan` is the ChildPlan the parent passed to clone, alive until we exec or exit.
    let plan = unsafe { &*plan.cast::<ChildPlan>() };
    // SAFETY: each call is a system call (through its libc wrapper) on descriptors, strings
    // and arrays the parent made and keeps alive; none allocates or locks. On failure the
    // errno goes to the parent through the report pipe and the child exits without running
    // anything of the parent's (_exit).
    unsafe {
        // This process's handlers are not to run in the child: each goes back to the default,
        // and so does SIGPIPE, which Rust's runtime ignores and a plugin expects to kill it.
        for signal in 1..=LAST_SIGNAL {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            let handled =
                current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            fail(plan.report);
        }
        for (target, fd) in (0..).zip(plan.stdio) {
            if libc::dup2(fd, target) < 0 {
                fail(plan.report);
            }
        }
        if plan.new_group && libc::setpgid(0, 0) != 0 {
            fail(plan.report);
        }
        if libc::chroot(plan.root) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
            fail(plan.report);
        }
        libc::execve(plan.path, plan.argv, plan.envp);
        fail(plan.report)
    }
}

/// Sends the child's errno to the parent and exits.
///
/// # Safety
/// Only in the child, between the clone and the exec.
unsafe fn fail(report: RawFd) -> ! {
    // SAFETY: errno is this thread's; write(2) of 4 bytes we own; _exit(2) ends the child
    // without running the parent's exit handlers.
    unsafe {
        let errno = (*libc::__errno_location()).to_ne_bytes();
        libc::write(report, errno.as_ptr().cast(), errno.len());
        libc::_exit(127)
    }
}

/// Waits for `pid`, our child, to exit, and reaps it.
pub(crate) fn reap(pid: libc::pid_t) -> Result<ExitStatus> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child, into a local.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(ExitStatus::from_raw(status));
        }
        let e = Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A close-on-exec pipe, both ends above the standard descriptors, so that the child's dup2
/// onto 0, 1 and 2 cannot overwrite one of the others.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills the two-element array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened for us and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn above_stdio(fd: OwnedFd) -> Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor we own to the lowest free one from 3.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: the duplicate was just made for us; the original closes when `fd` drops.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

fn c_string(bytes: &[u8]) -> Result<CString> {
    CString::new(bytes).map_err(|_| Error::new(ErrorKind::InvalidInput, "a NUL byte"))
}
