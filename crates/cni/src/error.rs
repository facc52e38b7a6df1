//! The CNI error object and its well-known codes.

use serde::{Deserialize, Serialize};

/// Well-known CNI error codes (SPEC.md "Error"). Codes 100 and up belong to plugins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    IncompatibleVersion = 1,
    UnsupportedField = 2,
    UnknownContainer = 3,
    InvalidEnvironment = 4,
    Io = 5,
    Decoding = 6,
    InvalidConfig = 7,
    InvalidNetns = 8,
    TryAgainLater = 11,
    PluginNotAvailable = 50,
    LimitedConnectivity = 51,
    Internal = 999,
}

/// A CNI error: what a plugin prints on stdout, with exit status 1, when a command fails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{msg}{}", if details.is_empty() { String::new() } else { format!("; {details}") })]
pub struct CniError {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: Code, msg: impl Into<String>) -> CniError {
        CniError {
            cni_version: String::new(),
            code: code as u32,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> CniError {
        self.details = details.into();
        self
    }

    pub fn is(&self, code: Code) -> bool {
        self.code == code as u32
    }

    pub fn invalid_config(msg: impl Into<String>) -> CniError {
        CniError::new(Code::InvalidConfig, msg)
    }

    pub fn decoding(msg: impl Into<String>) -> CniError {
        CniError::new(Code::Decoding, msg)
    }

    pub fn io(msg: impl Into<String>) -> CniError {
        CniError::new(Code::Io, msg)
    }

    pub fn internal(msg: impl Into<String>) -> CniError {
        CniError::new(Code::Internal, msg)
    }
}
