//! Calling another plugin (a delegate) by its type, the way a runtime would: found by name in
//! `CNI_PATH`, run with the `CNI_*` environment, config on stdin, result or error on stdout.

use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command as Process, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

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
        }
    }
}

/// Whether `bin` (symlinks followed) is the file this process runs: a multi-call binary
/// runs its own plugins in-process, and a meta-plugin refuses to delegate to itself.
pub fn is_this_executable(bin: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(bin), std::fs::metadata("/proc/self/exe")) {
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
    let mut process = Process::new(bin);
    process
        .env("CNI_COMMAND", command.as_str())
        .env("CNI_CONTAINERID", env.container_id)
        .env("CNI_NETNS", env.netns)
        .env("CNI_IFNAME", env.ifname)
        .env("CNI_ARGS", env.args)
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(root) = DELEGATE_ROOT.get() {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec the closure makes only chroot(2) and chdir(2) calls,
        // which are async-signal-safe, on a C string made before the fork; it allocates
        // nothing and touches no lock.
        unsafe {
            process.pre_exec(move || {
                if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let deadline = DELEGATE_DEADLINE.get().copied();
    if deadline.is_some() {
        use std::os::unix::process::CommandExt;
        process.process_group(0);
    }
    let (output, killed) = run(&mut process, stdin, deadline)
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

/// What a new pipe holds at the least: one page, even for a user past the kernel's pipe quota
/// (`pipe-user-pages-soft`).
const PIPE_ALWAYS_HOLDS: usize = 4096;

/// Runs the delegate to its end, or to `deadline`, when its process group is killed. Returns
/// its output, and whether it was killed.
fn run(
    process: &mut Process,
    stdin: &[u8],
    deadline: Option<Duration>,
) -> std::io::Result<(Output, bool)> {
    let mut attempt = 0;
    let child = loop {
        match process.spawn() {
            Err(e) if e.kind() == ErrorKind::ExecutableFileBusy && attempt < BUSY_RETRIES => {
                attempt += 1;
                std::thread::sleep(BUSY_WAIT);
            }
            other => break other?,
        }
    };
    match deadline {
        None => feed_and_wait(child, stdin).map(|out| (out, false)),
        Some(deadline) => feed_and_wait_until(child, stdin, deadline),
    }
}

/// A plugin may exit without reading its config (VERSION does).
fn write_config(pipe: &mut Option<ChildStdin>, stdin: &[u8]) -> std::io::Result<()> {
    match pipe.as_mut().map(|p| p.write_all(stdin)) {
        Some(Err(e)) if e.kind() != ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

fn feed_and_wait(mut child: Child, stdin: &[u8]) -> std::io::Result<Output> {
    let mut pipe = child.stdin.take();
    if stdin.len() <= PIPE_ALWAYS_HOLDS {
        // A fresh pipe takes this much without blocking, read or not.
        write_config(&mut pipe, stdin)?;
        drop(pipe);
        return child.wait_with_output();
    }
    // Written from a second thread so a plugin that prints before reading cannot deadlock us.
    std::thread::scope(|s| {
        let writer = s.spawn(move || write_config(&mut pipe, stdin));
        let output = child.wait_with_output()?;
        joined(writer).map(|()| output)
    })
}

/// [`feed_and_wait`] with a deadline, at which the delegate's process group is killed.
/// The child is reaped only after the deadline can no longer fire, so the group id signalled
/// is still the delegate's and never a stranger's that reused it.
fn feed_and_wait_until(
    mut child: Child,
    stdin: &[u8],
    deadline: Duration,
) -> std::io::Result<(Output, bool)> {
    let id = child.id();
    let pid = libc::pid_t::try_from(id).map_err(std::io::Error::other)?;
    let mut pipe = child.stdin.take();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    std::thread::scope(|s| {
        let writer = s.spawn(move || write_config(&mut pipe, stdin));
        let stdout = s.spawn(move || read_all(stdout));
        let stderr = s.spawn(move || read_all(stderr));
        let (exited, exit) = std::sync::mpsc::channel();
        s.spawn(move || exited.send(wait_for_exit(id)));
        let killed = match exit.recv_timeout(deadline) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // SAFETY: kill(2) with a negative pid signals a process group; the delegate
                // leads its own (made at spawn) and has not been reaped, so the id is its.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let _ = exit.recv();
                true
            }
            _ => false,
        };
        let output = Output {
            stdout: joined(stdout)?,
            stderr: joined(stderr)?,
            status: child.wait()?,
        };
        // Killed, it may have left its config unread: the broken pipe is no error.
        joined(writer)?;
        Ok((output, killed))
    })
}

/// Blocks until `pid` has exited, without reaping it.
fn wait_for_exit(pid: libc::id_t) -> std::io::Result<()> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) on our own child with WNOWAIT fills `info`, which we own, and
        // leaves the child to be reaped by `Child::wait`.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn read_all(pipe: Option<impl Read>) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

fn joined<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
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
