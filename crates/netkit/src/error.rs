//! One error type for the crate. Every failure that comes from the kernel keeps its errno so a
//! caller can branch on it (EEXIST, ENODEV, ...) and map it to a CNI code.

use std::io;

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel refused a netlink request. `msg` is the errno text plus the kernel's extended
    /// ack message when it sent one.
    #[error("{op}: {msg}")]
    Netlink { op: String, errno: i32, msg: String },
    /// A system call or file operation failed.
    #[error("{op}: {source}")]
    Io {
        op: String,
        #[source]
        source: io::Error,
    },
    /// Something looked up by name or index does not exist.
    #[error("{what} not found")]
    NotFound { what: String },
    /// The caller passed something unusable.
    #[error("{0}")]
    Invalid(String),
    /// A reply could not be decoded.
    #[error("{op}: cannot decode the kernel's reply: {msg}")]
    Decode { op: String, msg: String },
    /// An external command (nft, iptables) failed, or a service did not answer.
    #[error("{op}: {msg}")]
    Command { op: String, msg: String },
    /// A D-Bus service answered with an error: its name (`org.fedoraproject.FirewallD1.Exception`,
    /// say) and message.
    #[error("{op}: {name}: {msg}")]
    Dbus {
        op: String,
        name: String,
        msg: String,
    },
}

impl Error {
    /// The kernel's errno when the failure came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Netlink { errno, .. } => Some(*errno),
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// A netlink failure for `op` from a (positive) errno and an optional kernel message.
    pub(crate) fn netlink(op: String, errno: i32, ext_ack: Option<&str>) -> Error {
        let mut msg = io::Error::from_raw_os_error(errno).to_string();
        if let Some(text) = ext_ack.filter(|t| !t.is_empty()) {
            msg.push_str(": ");
            msg.push_str(text);
        }
        Error::Netlink { op, errno, msg }
    }

    pub(crate) fn io(op: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            op: op.into(),
            source,
        }
    }

    /// The last OS error, attributed to `op`.
    pub(crate) fn last_os(op: impl Into<String>) -> Error {
        Error::io(op, io::Error::last_os_error())
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlink_error_says_what_and_keeps_errno() {
        let e = Error::netlink(
            r#"creating link "veth1234" in netns /run/netns/x"#.into(),
            libc::EEXIST,
            None,
        );
        assert_eq!(e.errno(), Some(libc::EEXIST));
        assert_eq!(
            e.to_string(),
            r#"creating link "veth1234" in netns /run/netns/x: File exists (os error 17)"#
        );
        let e = Error::netlink(
            "creating link \"x\"".into(),
            95,
            Some("Unknown device type"),
        );
        assert!(
            e.to_string()
                .ends_with("(os error 95): Unknown device type"),
            "{e}"
        );
    }

    #[test]
    fn io_error_keeps_errno() {
        let e = Error::io("opening /x", io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert_eq!(Error::Invalid("bad".into()).errno(), None);
    }
}
