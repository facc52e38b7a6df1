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

    /// The error cut to fit in [`MAX_ENCODED`] bytes of JSON, for the runtime's log, events and
    /// the kubelet's: every message ought to quote its input short already, and this holds for
    /// the ones that do not (a third-party delegate's).
    pub fn bounded(mut self) -> CniError {
        cut_encoded(&mut self.cni_version, 64);
        cut_encoded(&mut self.msg, 2560);
        cut_encoded(&mut self.details, 1024);
        self
    }
}

/// The most bytes a [`CniError::bounded`] error takes as pretty-printed JSON.
pub const MAX_ENCODED: usize = 4096;

/// Cuts `text` at a character so that its JSON encoding takes at most `budget` bytes, noting
/// how much was cut.
fn cut_encoded(text: &mut String, budget: usize) {
    let encoded = |c: char| match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    };
    if text.chars().map(encoded).sum::<usize>() <= budget {
        return;
    }
    // Room for the note.
    let keep = budget.saturating_sub(40);
    let mut used = 0;
    let end = text
        .char_indices()
        .find(|(_, c)| {
            used += encoded(*c);
            used > keep
        })
        .map_or(text.len(), |(i, _)| i);
    let note = format!("… ({} bytes cut)", text.len() - end);
    text.truncate(end);
    text.push_str(&note);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fits_in_the_limit() {
        for filler in ["x", "\u{1}", "\"", "é"] {
            let big = filler.repeat(1 << 20);
            let e = CniError::invalid_config(big.clone())
                .with_details(big.clone())
                .bounded();
            let mut e = e;
            e.cni_version = big;
            let json = serde_json::to_vec_pretty(&e.bounded()).unwrap();
            assert!(json.len() < MAX_ENCODED, "{filler:?}: {} bytes", json.len());
        }
        let small = CniError::invalid_config("mtu: -5 is not a whole number");
        assert_eq!(small.clone().bounded(), small);
    }
}
