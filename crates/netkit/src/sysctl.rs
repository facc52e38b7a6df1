//! Reading and writing `/proc/sys`.
//!
//! Network sysctls belong to the network namespace of the thread that opens the file, so
//! [`write_in`] and [`read_in`] do their work on a thread inside the target namespace.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::netns::NetNs;

/// The file behind a key: either the slash form (`net/ipv6/conf/eth0.100/accept_dad`, which
/// allows dots in interface names) or the dotted form (`net.ipv4.ip_forward`).
fn path_of(key: &str) -> Result<PathBuf> {
    let rel = if key.contains('/') {
        key.trim_start_matches('/').to_string()
    } else {
        key.replace('.', "/")
    };
    if rel.is_empty() || rel.split('/').any(|c| c.is_empty() || c == "..") {
        return Err(Error::Invalid(format!("invalid sysctl key {key:?}")));
    }
    Ok(PathBuf::from("/proc/sys").join(rel))
}

/// The current value, without the trailing newline.
pub fn read(key: &str) -> Result<String> {
    let path = path_of(key)?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("reading sysctl {}", path.display()), e))?;
    Ok(text.trim_end_matches('\n').to_string())
}

/// Sets a value; the file is only written when the value differs, so an unchanged setting
/// costs no write (and works where /proc/sys is read-only).
pub fn write(key: &str, value: &str) -> Result<()> {
    if read(key)?.trim() == value.trim() {
        return Ok(());
    }
    let path = path_of(key)?;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut file| file.write_all(value.as_bytes()))
        .map_err(|e| Error::io(format!("writing {value:?} to sysctl {}", path.display()), e))
}

/// [`read`] inside `ns`.
pub fn read_in(ns: &NetNs, key: &str) -> Result<String> {
    ns.run(|| read(key))?.map_err(|e| in_ns(e, ns))
}

/// [`write`] inside `ns`.
pub fn write_in(ns: &NetNs, key: &str, value: &str) -> Result<()> {
    ns.run(|| write(key, value))?.map_err(|e| in_ns(e, ns))
}

fn in_ns(e: Error, ns: &NetNs) -> Error {
    match e {
        Error::Io { op, source } => Error::Io {
            op: format!("{op} in netns {}", ns.path().display()),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_paths() {
        assert_eq!(
            path_of("net.ipv4.ip_forward").expect("valid key"),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            path_of("net/ipv6/conf/eth0.100/accept_dad").expect("valid key"),
            PathBuf::from("/proc/sys/net/ipv6/conf/eth0.100/accept_dad")
        );
        assert!(path_of("net/../../etc/passwd").is_err());
        assert!(path_of("").is_err());
    }
}
