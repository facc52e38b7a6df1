//! A plugin run as a runtime runs it: `CNI_*` variables, the config on stdin, the reply on
//! stdout; with a deadline, so a plugin that hangs cannot hang the doctor.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a plugin may take to answer VERSION or STATUS.
const DEADLINE: Duration = Duration::from_secs(10);
/// The most of a reply that is read.
const MAX_REPLY: u64 = 64 << 10;

/// What the plugin printed, and whether it exited 0.
pub struct Reply {
    pub ok: bool,
    pub stdout: String,
}

/// Runs `plugin` for `command` with `config` on stdin and `path` as `CNI_PATH`.
pub fn cni(plugin: &Path, command: &str, config: &[u8], path: &Path) -> Result<Reply, String> {
    let mut child = Command::new(plugin)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", plugin.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that exits without reading its config is its own answer.
        let _ = stdin.write_all(config);
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < DEADLINE => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not answer {command} within {} s",
                    plugin.display(),
                    DEADLINE.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for {}: {e}", plugin.display())),
        }
    };
    let mut stdout = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = out.take(MAX_REPLY).read_to_string(&mut stdout);
    }
    Ok(Reply {
        ok: status.success(),
        stdout,
    })
}
