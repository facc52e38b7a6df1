use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Netns;

/// The reference Go plugins that side-by-side tests run beside ours: upstream's pinned
/// release, built from its module (see [`crate::peers::cni_plugins_dir`]).
pub fn reference_dir() -> PathBuf {
    crate::peers::cni_plugins_dir()
}

/// A binary of another workspace package (`cni-plugins` for multus's tests). `cargo test
/// --workspace` builds it beside the running test's `deps/` dir; a narrower `cargo test -p`
/// needs `cargo build -p <package>` first (cargo holds the build lock while tests run, so a
/// test cannot build it itself).
pub fn workspace_binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binaries live in <target>/<profile>/deps");
    let bin = profile_dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p {package}` or `cargo test --workspace`",
        bin.display()
    );
    bin
}

/// Runs `<bin> validate <plugin>` (the `cni-plugins` config check) with `config` on stdin:
/// its exit status, the CNI error object it printed, if any, and its warnings (stderr's lines).
pub fn validate_config(
    bin: &Path,
    plugin: &str,
    config: &str,
) -> (i32, Option<serde_json::Value>, Vec<String>) {
    let mut child = Command::new(bin)
        .args(["validate", plugin])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cni-plugins validate");
    // A type that is not built in is refused before stdin is read: the pipe may be closed.
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(config.as_bytes());
    if let Err(e) = written {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "write the config: {e}"
        );
    }
    let out = child
        .wait_with_output()
        .expect("wait for cni-plugins validate");
    let err = (!out.stdout.is_empty())
        .then(|| serde_json::from_slice(&out.stdout).expect("an error object on stdout"));
    let warnings = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect();
    (out.status.code().expect("an exit status"), err, warnings)
}

/// A directory that holds our multi-call binary under each plugin name, to use as `CNI_PATH`.
pub struct PluginDir {
    dir: tempfile::TempDir,
}

impl PluginDir {
    /// Links `names` to the multi-call binary `bin` in a fresh temporary directory.
    pub fn new(bin: &Path, names: &[&str]) -> PluginDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in names {
            std::os::unix::fs::symlink(bin, dir.path().join(name)).expect("symlink plugin");
        }
        PluginDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// One plugin invocation, built up like a runtime would.
#[derive(Clone, Debug)]
pub struct CniCall {
    pub command: String,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
    pub path: String,
    /// Extra or overriding environment; a value of `None` removes the variable.
    pub env: Vec<(String, Option<String>)>,
    pub stdin: String,
}

impl CniCall {
    pub fn new(command: &str, stdin: &str) -> CniCall {
        CniCall {
            command: command.into(),
            container_id: "c0ffee".into(),
            netns: String::new(),
            ifname: "eth0".into(),
            args: String::new(),
            path: String::new(),
            env: Vec::new(),
            stdin: stdin.into(),
        }
    }

    /// Runs the plugin binary `bin` (inside the `node` namespace when given).
    pub fn run(&self, bin: &Path, node: Option<&Netns>) -> CniOutput {
        self.run_while(self.command(bin, node), |_| {})
    }

    /// [`CniCall::run`] under strace, which SIGKILLs every process of the call (the plugin, and
    /// each plugin it runs) at its `n`th [`FILE_CHANGES`] syscall. Returns the output and
    /// whether a kill happened (`false`: no process made that many).
    pub fn run_killed_at(&self, bin: &Path, node: Option<&Netns>, n: usize) -> (CniOutput, bool) {
        let mut cmd = self.command(Path::new("strace"), node);
        cmd.args(["-f", "-qq", "-o", "/dev/null", "-e"])
            .arg(format!("trace={FILE_CHANGES}"))
            .arg("-e")
            .arg(format!("inject={FILE_CHANGES}:signal=KILL:when={n}"))
            .arg("--")
            .arg(bin);
        let out = self.run_while(cmd, |_| {});
        // strace ends as its first tracee did: by the signal (no exit code) when that one was
        // killed. A plugin it ran that was killed shows up as its caller's error instead.
        let killed = out.code == -1 || out.stdout.contains("signal: 9");
        (out, killed)
    }

    /// [`CniCall::run`], with the call and every process it starts SIGKILLed after `delay`.
    /// Returns the output and whether the kill came before the call ended.
    pub fn run_killed_after(
        &self,
        bin: &Path,
        node: Option<&Netns>,
        delay: std::time::Duration,
    ) -> (CniOutput, bool) {
        let mut cmd = self.command(bin, node);
        // Its own process group, so the kill reaches the plugins it runs too.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut killed = false;
        let out = self.run_while(cmd, |child| {
            std::thread::sleep(delay);
            if matches!(child.try_wait(), Ok(None)) {
                let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
                // SAFETY: kill(2) with a negative pid signals that process group; the group is
                // the child's own (process_group(0)), which has not been reaped yet.
                killed = unsafe { libc::kill(-pgid, libc::SIGKILL) } == 0;
            }
        });
        (out, killed)
    }

    /// Runs `cmd` with the call's stdin, `while_running` once it has its stdin, and collects
    /// what it printed.
    fn run_while(
        &self,
        mut cmd: Command,
        while_running: impl FnOnce(&mut std::process::Child),
    ) -> CniOutput {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn plugin");
        let mut stdin = child.stdin.take().expect("stdin");
        // A plugin may exit before reading stdin (bad env, or killed); ignore EPIPE.
        let _ = stdin.write_all(self.stdin.as_bytes());
        drop(stdin);
        while_running(&mut child);
        let out = child.wait_with_output().expect("wait plugin");
        CniOutput {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The command [`CniCall::run`] runs (`program` with the call's environment, in `node`),
    /// its stdin still to be given [`CniCall::stdin`].
    pub fn command(&self, program: &Path, node: Option<&Netns>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", &self.command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_ARGS", &self.args)
            .env("CNI_PATH", &self.path)
            // No system bus unless a test brings its own: a plugin under test never reaches
            // the machine's firewalld.
            .env("DBUS_SYSTEM_BUS_ADDRESS", NO_BUS)
            .env(cni::path_roots::ROOTS_FILE_ENV, test_path_roots());
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if let Some(ns) = node {
            ns.enter_on_exec(&mut cmd);
        }
        cmd
    }
}

/// The node's path roots of every call that does not set its own: upstream's places and the
/// temporary directory, where the tests keep their stores and sockets.
pub fn test_path_roots() -> PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let tmp = std::env::temp_dir();
        let file = tmp.join("multus-rs-test-path-roots.json");
        let mut roots: Vec<PathBuf> = cni::path_roots::DEFAULT_ROOTS
            .iter()
            .map(PathBuf::from)
            .collect();
        roots.push(tmp.clone());
        let text = serde_json::json!({ "roots": roots }).to_string();
        // Every test process writes the same text: each through a file of its own, renamed.
        let own = tmp.join(format!(".multus-rs-test-path-roots.{}", std::process::id()));
        std::fs::write(&own, text).expect("write the tests' path roots");
        std::fs::rename(&own, &file).expect("put the tests' path roots in place");
        file
    })
    .clone()
}

/// The `DBUS_SYSTEM_BUS_ADDRESS` of every call that does not set one: a socket that is not there.
pub const NO_BUS: &str = "unix:path=/nonexistent/multus-rs-tests/bus";

/// The syscalls that change files, where [`CniCall::run_killed_at`] kills.
pub const FILE_CHANGES: &str =
    "openat,write,rename,renameat,renameat2,unlink,unlinkat,fsync,fdatasync,ftruncate";

/// The most [`FILE_CHANGES`] syscalls any one process of `call` makes: strace counts them per
/// process, so these are the kill points of [`CniCall::run_killed_at`].
pub fn count_file_changes(call: &CniCall, bin: &Path, node: Option<&Netns>) -> usize {
    let log = tempfile::NamedTempFile::new().expect("strace log");
    let mut cmd = call.command(Path::new("strace"), node);
    cmd.args(["-f", "-qq", "-e"])
        .arg(format!("trace={FILE_CHANGES}"))
        .arg("-o")
        .arg(log.path())
        .arg("--")
        .arg(bin);
    call.run_while(cmd, |_| {});
    let mut per_process = std::collections::HashMap::<String, usize>::new();
    for line in std::fs::read_to_string(log.path())
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("resumed>"))
    {
        let pid = line.split_whitespace().next().unwrap_or_default();
        *per_process.entry(pid.to_owned()).or_default() += 1;
    }
    per_process.into_values().max().unwrap_or(0)
}

/// What a plugin printed and how it exited.
#[derive(Clone, Debug)]
pub struct CniOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CniOutput {
    /// stdout as JSON; panics with the whole output when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts success and returns the result JSON.
    pub fn ok(&self) -> serde_json::Value {
        assert_eq!(self.code, 0, "plugin failed: {self:?}");
        if self.stdout.trim().is_empty() {
            return serde_json::Value::Null;
        }
        self.json()
    }

    /// Asserts a CNI error (exit 1, error object on stdout) and returns its code.
    pub fn err_code(&self) -> u64 {
        assert_eq!(self.code, 1, "expected a CNI error: {self:?}");
        let v = self.json();
        v["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("error without code: {self:?}"))
    }
}

/// host-local reservation files (named by an IP address) anywhere under `dir`.
pub fn reservation_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(reservation_files(&p));
        } else if e
            .file_name()
            .to_string_lossy()
            .parse::<std::net::IpAddr>()
            .is_ok()
        {
            found.push(p.display().to_string());
        }
    }
    found
}
