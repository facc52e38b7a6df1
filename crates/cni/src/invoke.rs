//! Calling another plugin (a delegate) by its type, the way a runtime would: found by name in
//! `CNI_PATH`, run with the `CNI_*` environment, config on stdin, result or error on stdout.

use std::ffi::OsString;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::rooted_spawn::{reap, Spawned};
use crate::{CmdArgs, CniError, CniResult, Code, Command};

/// How much of a failing delegate's output goes into an error.
const EXCERPT_LEN: usize = 1024;

/// A binary being replaced in place cannot be executed (ETXTBSY); libcni retries the same way.
const BUSY_RETRIES: u32 = 5;
const BUSY_WAIT: Duration = Duration::from_secs(1);

/// The root every delegate of this process runs in, when set (see [`run_delegates_in`]).
static DELEGATE_ROOT: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();

/// From now on, every delegate this process runs is chrooted to `root`: a daemon in a pod
/// runs the node's plugins in the node's root, mounted at `root` (upstream's `chrootDir`).
/// Plugins are still found by path in this process's view, so the node's plugin directory
/// must be mounted at the same path. Set once; a second call is refused.
pub fn run_delegates_in(root: &Path) -> Result<(), CniError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(root.as_os_str().as_bytes())
        .map_err(|_| CniError::new(Code::InvalidConfig, "chrootDir: the path holds a NUL byte"))?;
    DELEGATE_ROOT
        .set(c)
        .map_err(|_| CniError::new(Code::Internal, "the delegates' root is set already"))
}

/// How long a delegate of this process may run, when set (see [`limit_delegates_to`]).
static DELEGATE_DEADLINE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// From now on, a delegate this process runs that has not finished within `deadline` is
/// killed, with every process it started (its own process group), and its call fails with
/// code 11 saying so. A process per call has the runtime's timeout over it; a daemon has not.
/// Set once; a second call is refused.
pub fn limit_delegates_to(deadline: Duration) -> Result<(), CniError> {
    DELEGATE_DEADLINE
        .set(deadline)
        .map_err(|_| CniError::new(Code::Internal, "the delegates' deadline is set already"))
}

/// The `CNI_*` environment a delegate runs with, apart from `CNI_COMMAND`.
#[derive(Clone, Copy, Debug)]
pub struct DelegateEnv<'a> {
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    /// Raw `CNI_ARGS`.
    pub args: &'a str,
    /// Directories searched for the delegate, and passed on as its `CNI_PATH`.
    pub path: &'a [PathBuf],
    /// [`crate::in_use`]'s value, for an IPAM plugin's DEL after a conflict probe; empty
    /// otherwise, and then the variable is not passed on.
    pub addresses_in_use: &'a str,
}

impl<'a> From<&'a CmdArgs> for DelegateEnv<'a> {
    /// The same attachment the calling plugin was asked about (bridge calling its IPAM).
    fn from(args: &'a CmdArgs) -> DelegateEnv<'a> {
        DelegateEnv {
            container_id: &args.container_id,
            netns: &args.netns,
            ifname: &args.ifname,
            args: &args.args,
            path: &args.path,
            addresses_in_use: "",
        }
    }
}

/// Whether `bin` (symlinks followed) is the file this process runs: a multi-call binary
/// runs its own plugins in-process, and a meta-plugin refuses to delegate to itself.
pub fn is_this_executable(bin: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // Opened first: a user-mode emulator (qemu-user, which runs the aarch64 build's tests)
    // answers an open of /proc/self/exe with the program it runs, a stat with itself. The stat
    // stays for a binary this process may run but not read.
    let this = std::fs::File::open("/proc/self/exe")
        .and_then(|f| f.metadata())
        .or_else(|_| std::fs::metadata("/proc/self/exe"));
    match (std::fs::metadata(bin), this) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Finds the executable for `plugin_type` in `path`, first match wins.
///
/// A type is a bare file name: anything that could point outside `CNI_PATH` is refused. Both
/// failures are code 7 (the type comes from the network config); libcni returns an untyped
/// error there, which plugins then report as 999.
pub fn find_in_path(plugin_type: &str, path: &[PathBuf]) -> Result<PathBuf, CniError> {
    if plugin_type.is_empty()
        || plugin_type == "."
        || plugin_type == ".."
        || plugin_type.contains(['/', '\0'])
    {
        return Err(CniError::invalid_config(format!(
            "invalid plugin type {}: a type is a binary's file name, looked up in CNI_PATH",
            crate::quote::quote(plugin_type)
        )));
    }
    path.iter()
        .map(|dir| dir.join(plugin_type))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| m.is_file()))
        .ok_or_else(|| {
            let dirs: Vec<String> = path.iter().map(|d| d.display().to_string()).collect();
            CniError::invalid_config(format!(
                "failed to find plugin {} in path [{}]",
                crate::quote::quote(plugin_type),
                dirs.join(" ")
            ))
        })
}

/// Runs the plugin binary `bin` for `command` with `stdin` as its config.
///
/// The rest of this process's environment is inherited, as libcni does. On success, ADD and
/// VERSION return the JSON the plugin printed; the other commands return `None` and their
/// stdout is ignored, as in libcni. A failing plugin's error object is returned as it is; a
/// failure without one becomes a code-999 error with the binary, exit status and stderr.
pub fn exec_plugin(
    bin: &Path,
    command: Command,
    env: &DelegateEnv,
    stdin: &[u8],
) -> Result<Option<Value>, CniError> {
    let stdout = exec_output(bin, command, env, stdin)?;
    if !matches!(command, Command::Add | Command::Version) {
        return Ok(None);
    }
    parse_printed(bin, command, &stdout).map(Some)
}

fn parse_printed(bin: &Path, command: Command, stdout: &[u8]) -> Result<Value, CniError> {
    serde_json::from_slice(stdout).map_err(|e| {
        CniError::decoding(format!(
            "plugin {} printed an invalid {} result: {e}",
            bin.display(),
            command.as_str()
        ))
        .with_details(excerpt(stdout))
    })
}

/// Runs the plugin as [`exec_plugin`] does; on success, what it printed, undecoded.
pub fn exec_output(
    bin: &Path,
    command: Command,
    env: &DelegateEnv,
    stdin: &[u8],
) -> Result<Vec<u8>, CniError> {
    let cni_path = std::env::join_paths(env.path).map_err(|e| {
        CniError::new(
            Code::InvalidEnvironment,
            format!("cannot pass CNI_PATH to {}: {e}", bin.display()),
        )
    })?;
    // The environment this process has, with the call's own variables over it.
    let ours = [
        ("CNI_COMMAND", command.as_str().into()),
        ("CNI_CONTAINERID", env.container_id.into()),
        ("CNI_NETNS", env.netns.into()),
        ("CNI_IFNAME", env.ifname.into()),
        ("CNI_ARGS", env.args.into()),
        ("CNI_PATH", cni_path),
        (crate::in_use::VAR, env.addresses_in_use.into()),
    ];
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !ours.iter().any(|(name, _)| k == name))
        .collect();
    // The addresses in use only when there are some.
    vars.extend(
        ours.into_iter()
            .filter(|(name, value)| *name != crate::in_use::VAR || !value.is_empty())
            .map(|(name, value)| (name.into(), value)),
    );
    let deadline = DELEGATE_DEADLINE.get().copied();
    // Under a deadline the delegate leads a process group of its own, killed as one.
    let new_group = deadline.is_some();
    let (output, killed) = run(bin, &vars, new_group, stdin, deadline)
        .map_err(|e| CniError::io(format!("cannot run plugin {}: {e}", bin.display())))?;
    if let (true, Some(deadline)) = (killed, deadline) {
        return Err(CniError::new(
            Code::TryAgainLater,
            format!(
                "plugin {} did not finish within {} s: it was killed",
                bin.display(),
                deadline.as_secs()
            ),
        ));
    }

    if !output.status.success() {
        return Err(plugin_failure(bin, &output));
    }
    forward_stderr(&output.stderr);
    Ok(output.stdout)
}

/// [`find_in_path`] then [`exec_plugin`].
pub fn delegate(
    plugin_type: &str,
    command: Command,
    env: &DelegateEnv,
    stdin: &[u8],
) -> Result<Option<Value>, CniError> {
    let bin = find_in_path(plugin_type, env.path)?;
    exec_plugin(&bin, command, env, stdin)
}

/// ADD through a delegate, its result decoded. A result without `cniVersion` is read as the
/// config's version, as libcni does.
pub fn delegate_add(
    plugin_type: &str,
    env: &DelegateEnv,
    stdin: &[u8],
) -> Result<CniResult, CniError> {
    exec_add(&find_in_path(plugin_type, env.path)?, env, stdin)
}

/// [`delegate_add`] for a binary already found.
pub fn exec_add(bin: &Path, env: &DelegateEnv, stdin: &[u8]) -> Result<CniResult, CniError> {
    let printed = exec_output(bin, Command::Add, env, stdin)?;
    add_result(bin, &printed, stdin)
}

/// Decodes what plugin `bin` printed for a successful ADD of config `stdin`.
pub fn add_result(bin: &Path, printed: &[u8], stdin: &[u8]) -> Result<CniResult, CniError> {
    let mut value = parse_printed(bin, Command::Add, printed)?;
    let Value::Object(result) = &mut value else {
        return Err(CniError::decoding(format!(
            "plugin {} returned {} instead of a result object",
            bin.display(),
            crate::quote::quote_value(&value)
        )));
    };
    let has_version = result
        .get("cniVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if !has_version {
        let conf_version = serde_json::from_slice::<Value>(stdin)
            .ok()
            .and_then(|c| c.get("cniVersion")?.as_str().map(str::to_owned))
            .unwrap_or_default();
        result.insert("cniVersion".into(), conf_version.into());
    }
    CniResult::from_value(&value)
}

/// DEL through a delegate (CHECK, STATUS and GC go through [`delegate`] the same way).
pub fn delegate_del(plugin_type: &str, env: &DelegateEnv, stdin: &[u8]) -> Result<(), CniError> {
    delegate(plugin_type, Command::Del, env, stdin).map(drop)
}

/// Runs the delegate to its end, or to `deadline`, when its process group is killed. Returns
/// its output, and whether it was killed.
fn run(
    bin: &Path,
    vars: &[(OsString, OsString)],
    new_group: bool,
    stdin: &[u8],
    deadline: Option<Duration>,
) -> std::io::Result<(Output, bool)> {
    let mut attempt = 0;
    let child = loop {
        match spawn(bin, vars, new_group) {
            Err(e) if e.kind() == ErrorKind::ExecutableFileBusy && attempt < BUSY_RETRIES => {
                attempt += 1;
                std::thread::sleep(BUSY_WAIT);
            }
            other => break other?,
        }
    };
    feed_and_wait(child, stdin, deadline.map(|d| Instant::now() + d))
}

/// Starts `bin` with exactly `vars` as its environment and pipes on its standard streams: in
/// the delegates' root when one is set, otherwise by std (posix_spawn(3), which does not fork
/// this process either).
fn spawn(bin: &Path, vars: &[(OsString, OsString)], new_group: bool) -> std::io::Result<Spawned> {
    if let Some(root) = DELEGATE_ROOT.get() {
        return crate::rooted_spawn::spawn(bin, vars, root, new_group);
    }
    let mut process = Process::new(bin);
    process
        .env_clear()
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if new_group {
        use std::os::unix::process::CommandExt;
        process.process_group(0);
    }
    let mut child = process.spawn()?;
    let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
    let pipe = |fd: Option<OwnedFd>| fd.map(File::from).ok_or(ErrorKind::BrokenPipe);
    // The child is reaped by its pid (`reap`), not by the `Child`, which has nothing to drop.
    Ok(Spawned {
        pid,
        stdin: pipe(child.stdin.take().map(OwnedFd::from))?,
        stdout: pipe(child.stdout.take().map(OwnedFd::from))?,
        stderr: pipe(child.stderr.take().map(OwnedFd::from))?,
    })
}

/// How often a delegate's exit is looked for once its pipes are closed, where the kernel has
/// no pidfd to wake us.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// Feeds the delegate its config and collects what it prints, on this thread: one poll(2)
/// over its pipes, so a plugin that prints before it reads cannot deadlock us, and no thread
/// is started per call. At `deadline` its process group is killed. The child is reaped only
/// after that can no longer happen, so the group signalled is never a stranger's that reused
/// the id.
fn feed_and_wait(
    child: Spawned,
    stdin: &[u8],
    deadline: Option<Instant>,
) -> std::io::Result<(Output, bool)> {
    let pid = child.pid;
    let mut input = Some(child.stdin);
    let mut stdout = Some(child.stdout);
    let mut stderr = Some(child.stderr);
    for fd in [raw(&input), raw(&stdout), raw(&stderr)]
        .into_iter()
        .flatten()
    {
        nonblocking(fd)?;
    }
    // Under a deadline the delegate's exit is awaited within the poll: a pidfd turns readable
    // when it exits. Without one, the end is awaited by `reap`.
    let mut exit_fd = deadline.and_then(|_| pidfd(pid));
    let mut exited = deadline.is_none();
    let mut written = 0;
    let mut output = Output {
        status: std::process::ExitStatus::default(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    if stdin.is_empty() {
        input = None;
    }
    let killed = loop {
        if stdout.is_none() && stderr.is_none() {
            if !exited && has_exited(pid)? {
                exited = true;
            }
            if exited {
                break false;
            }
        }
        let wait = match deadline {
            None => -1,
            Some(at) => {
                let Some(left) = at.checked_duration_since(Instant::now()) else {
                    // SAFETY: kill(2) with a negative pid signals a process group; the
                    // delegate leads its own (made at spawn) and has not been reaped, so the
                    // id is its.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                    break true;
                };
                let left = if stdout.is_none() && stderr.is_none() && exit_fd.is_none() {
                    left.min(EXIT_POLL)
                } else {
                    left
                };
                i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX)
            }
        };
        let mut fds = Vec::with_capacity(4);
        let mut watch = |fd: Option<i32>, events: i16| {
            if let Some(fd) = fd {
                fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        };
        watch(raw(&input), libc::POLLOUT);
        watch(raw(&stdout), libc::POLLIN);
        watch(raw(&stderr), libc::POLLIN);
        watch(exit_fd.as_ref().map(AsRawFd::as_raw_fd), libc::POLLIN);
        // SAFETY: poll(2) on descriptors this function owns, through a slice it owns whose
        // length is passed with it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let ready =
            |fd: Option<i32>| fd.is_some_and(|fd| fds.iter().any(|p| p.fd == fd && p.revents != 0));
        if ready(raw(&input)) {
            if let Some(pipe) = input.as_mut() {
                match pipe.write(&stdin[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    // A plugin may exit without reading its config (VERSION does).
                    Err(e) if e.kind() == ErrorKind::BrokenPipe => written = stdin.len(),
                    Err(e) => return Err(e),
                }
            }
            if written == stdin.len() {
                input = None;
            }
        }
        if ready(raw(&stdout)) && drain(&mut stdout, &mut output.stdout)? {
            stdout = None;
        }
        if ready(raw(&stderr)) && drain(&mut stderr, &mut output.stderr)? {
            stderr = None;
        }
        if ready(exit_fd.as_ref().map(AsRawFd::as_raw_fd)) {
            exit_fd = None;
            exited = true;
        }
    };
    // Killed, what its pipes still hold is not waited for: a process that left its group may
    // keep them open.
    output.status = reap(pid)?;
    Ok((output, killed))
}

fn raw(pipe: &Option<impl AsRawFd>) -> Option<i32> {
    pipe.as_ref().map(AsRawFd::as_raw_fd)
}

fn nonblocking(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl(2) reading and setting the status flags of a descriptor we own.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Reads what the pipe holds now into `into`; true at its end.
fn drain(pipe: &mut Option<impl Read>, into: &mut Vec<u8>) -> std::io::Result<bool> {
    let Some(pipe) = pipe.as_mut() else {
        return Ok(true);
    };
    let mut buf = [0u8; 16 << 10];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A descriptor that turns readable when `pid` exits (Linux 5.3 on); `None` where the kernel
/// has none.
fn pidfd(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the descriptor was just opened for us and is owned by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `pid`, our child, has exited, without reaping it.
fn has_exited(pid: libc::pid_t) -> std::io::Result<bool> {
    let pid = libc::id_t::try_from(pid).map_err(std::io::Error::other)?;
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) on our own child with WNOWAIT fills `info`, which we own, and
        // leaves the child to be reaped by `reap`.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r == 0 {
            // SAFETY: waitid filled `info`; si_pid is 0 when no child had changed state.
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn plugin_failure(bin: &Path, output: &Output) -> CniError {
    if let Ok(e) = serde_json::from_slice::<CniError>(&output.stdout) {
        forward_stderr(&output.stderr);
        // A delegate's error goes on into our own error, events and logs.
        return e.bounded();
    }
    let mut details = Vec::new();
    if !output.stdout.is_empty() {
        details.push(format!("stdout: {}", excerpt(&output.stdout)));
    }
    if !output.stderr.is_empty() {
        details.push(format!("stderr: {}", tail(&output.stderr)));
    }
    CniError::internal(format!(
        "plugin {} failed ({}) without printing a CNI error object",
        bin.display(),
        output.status
    ))
    .with_details(details.join("; "))
}

/// A delegate's diagnostics go where ours go, as libcni passes them on.
fn forward_stderr(stderr: &[u8]) {
    if !stderr.is_empty() {
        let _ = std::io::stderr().write_all(stderr);
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(EXCERPT_LEN)]);
    text.trim().to_owned()
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(EXCERPT_LEN)..]);
    text.trim().to_owned()
}
