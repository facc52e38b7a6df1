//! Running the firewall tools (nft, iptables and friends), and reading `nft -j` listings: the
//! one place that spawns them, feeds their stdin and turns a failure into an error carrying the
//! tool's own message.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::error::{Error, Result};

/// Where `execvp` looks when PATH is unset (glibc's default), so [`installed`] agrees with
/// what running the program would find.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Runs `program args`, with `stdin` as its input, and returns its stdout. `Ok(None)` when the
/// program is not installed; a failure exit is [`Error::Command`] with the tool's stderr.
pub(crate) fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<Option<String>> {
    let op = || format!("running {program} {}", args.join(" "));
    let mut child = match Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(op(), e)),
    };
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Dropping the pipe at the end of this block closes it, so the tool sees EOF.
        pipe.write_all(input.as_bytes())
            .map_err(|e| Error::io(op(), e))?;
    }
    let out = child.wait_with_output().map_err(|e| Error::io(op(), e))?;
    if !out.status.success() {
        return Err(Error::Command {
            op: op(),
            msg: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Like [`run`], but a program that is not installed is an error too.
pub(crate) fn run_installed(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    run(program, args, stdin)?
        .ok_or_else(|| not_installed(format!("running {program} {}", args.join(" ")), program))
}

/// The error for `op`, which needs `program`, when it is not installed.
pub(crate) fn not_installed(op: String, program: &str) -> Error {
    Error::Command {
        op,
        msg: format!("{program} is not installed"),
    }
}

/// Whether `program` is an executable file in one of PATH's directories.
pub(crate) fn installed(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The objects (`{"rule": ...}`, `{"chain": ...}`, ...) of `nft -j list <what>`. `Ok(None)`
/// when nft is not installed; an empty list when the listed table or chain does not exist.
pub(crate) fn nft_list(what: &[&str]) -> Result<Option<Vec<Value>>> {
    let args: Vec<&str> = ["-j", "list"].iter().chain(what).copied().collect();
    let listing = match run("nft", &args, None) {
        Ok(Some(listing)) => listing,
        Ok(None) => return Ok(None),
        // nft's text for ENOENT: the table or chain is not there.
        Err(Error::Command { msg, .. }) if msg.contains("No such file or directory") => {
            return Ok(Some(Vec::new()))
        }
        Err(e) => return Err(e),
    };
    let mut json: Value = serde_json::from_str(&listing).map_err(|e| Error::Command {
        op: format!("reading the output of nft {}", args.join(" ")),
        msg: e.to_string(),
    })?;
    Ok(Some(match json["nftables"].take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_not_installed_not_an_error() {
        let missing = "netkit-test-no-such-tool";
        assert!(matches!(run(missing, &["x"], None), Ok(None)));
        assert!(matches!(run(missing, &[], Some("input")), Ok(None)));
        let e = run_installed(missing, &["x"], None).expect_err("not installed");
        assert!(
            e.to_string()
                .contains("netkit-test-no-such-tool is not installed"),
            "{e}"
        );
        assert!(!installed(missing));
        assert!(installed("sh"));
    }

    #[test]
    fn stdin_goes_in_and_a_failure_carries_stderr() {
        let out = run("sh", &["-c", "cat"], Some("hello")).expect("sh runs");
        assert_eq!(out.as_deref(), Some("hello"));
        let e = run("sh", &["-c", "echo broken >&2; exit 3"], None).expect_err("exit 3");
        match e {
            Error::Command { op, msg } => {
                assert_eq!(op, "running sh -c echo broken >&2; exit 3");
                assert!(msg.ends_with(": broken"), "{msg}");
                assert!(msg.contains('3'), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
