//! The crate's error type and its mapping to CNI error codes.

use std::net::IpAddr;

use cni::{CniError, Code};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration or `CNI_ARGS` asks for something impossible (code 7).
    #[error("{0}")]
    Config(String),

    /// The configuration is not the JSON we expect (code 6); the error names the key.
    #[error("{0}")]
    Decode(#[from] cni::decode::DecodeError),

    /// A file or directory could not be read or written (code 5).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// Every address of a range set is reserved (code 11: a DEL elsewhere frees one).
    #[error("failed to allocate for range {index}: no IP addresses available in range set: {set}")]
    Exhausted { index: usize, set: String },

    /// A requested address is reserved by someone else (code 11).
    #[error(
        "failed to allocate for range {index}: requested IP address {ip} is not available \
         in range set {set}"
    )]
    Taken {
        index: usize,
        ip: IpAddr,
        set: String,
    },

    /// A second ADD for an attachment that already holds an address (code 4).
    #[error(
        "{ip} has been allocated to {container_id} (interface {ifname}), duplicate allocation \
         is not allowed; DEL the attachment first"
    )]
    Duplicate {
        ip: IpAddr,
        container_id: String,
        ifname: String,
    },

    /// CHECK found nothing for the attachment (code 3).
    #[error("host-local: no address is reserved for container {container_id} interface {ifname} in network {network}")]
    NoReservation {
        container_id: String,
        ifname: String,
        network: String,
    },

    /// STATUS: ADD cannot succeed now (code 50).
    #[error("{0}")]
    NotAvailable(String),

    /// CHECK found a configured address missing from, or different in, the previous result.
    #[error("{0}")]
    Mismatch(String),

    /// The dhcp daemon does not answer on its socket (code 11: the runtime retries, and STATUS
    /// reports the plugin unavailable).
    #[error(
        "cannot reach the dhcp daemon at {}: {source}. Start it with `dhcp daemon` (or enable \
         the cni-dhcp socket unit), or set ipam.daemonSocketPath to where it listens",
        socket.display()
    )]
    DaemonUnreachable {
        socket: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An error already in CNI form (from the `cni` crate).
    #[error(transparent)]
    Cni(#[from] CniError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn config(msg: impl Into<String>) -> Error {
        Error::Config(msg.into())
    }

    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<cni::path_roots::PathError> for Error {
    fn from(e: cni::path_roots::PathError) -> Error {
        use cni::path_roots::PathError;
        match e {
            PathError::Refused { .. } => Error::Config(e.to_string()),
            PathError::Io { path, source } => {
                Error::io(format!("cannot open {}", path.display()), source)
            }
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> CniError {
        let code = match &e {
            Error::Cni(inner) => return inner.clone(),
            Error::Config(_) => Code::InvalidConfig,
            Error::Decode(_) => Code::Decoding,
            Error::Io { .. } => Code::Io,
            Error::Exhausted { .. } | Error::Taken { .. } | Error::DaemonUnreachable { .. } => {
                Code::TryAgainLater
            }
            Error::Duplicate { .. } => Code::InvalidEnvironment,
            Error::NoReservation { .. } => Code::UnknownContainer,
            Error::NotAvailable(_) => Code::PluginNotAvailable,
            Error::Mismatch(_) => Code::Internal,
        };
        CniError::new(code, e.to_string())
    }
}
