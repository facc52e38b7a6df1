use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Netns;

/// Where Debian's reference Go plugins live (package containernetworking-plugins).
pub fn reference_dir() -> PathBuf {
    PathBuf::from("/usr/lib/cni")
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
/// its exit status, and the CNI error object it printed, if any.
pub fn validate_config(bin: &Path, plugin: &str, config: &str) -> (i32, Option<serde_json::Value>) {
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
    (out.status.code().expect("an exit status"), err)
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
        let mut cmd = self.command(bin, node);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn plugin");
        let mut stdin = child.stdin.take().expect("stdin");
        // A plugin may exit before reading stdin (bad env); ignore EPIPE.
        let _ = stdin.write_all(self.stdin.as_bytes());
        drop(stdin);
        let out = child.wait_with_output().expect("wait plugin");
        CniOutput {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The command [`CniCall::run`] runs, its stdin still to be given [`CniCall::stdin`]: for a
    /// test that needs the process itself (to kill it mid-call, say).
    pub fn command(&self, bin: &Path, node: Option<&Netns>) -> Command {
        let mut cmd = Command::new(bin);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", &self.command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_ARGS", &self.args)
            .env("CNI_PATH", &self.path);
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
