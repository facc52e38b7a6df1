//! CNI specification versions.

use std::fmt;
use std::str::FromStr;

use crate::{CniError, Code};

/// A CNI spec version this implementation speaks, in release order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl Version {
    pub const ALL: [Version; 7] = [
        Version::V0_1_0,
        Version::V0_2_0,
        Version::V0_3_0,
        Version::V0_3_1,
        Version::V0_4_0,
        Version::V1_0_0,
        Version::V1_1_0,
    ];
    pub const LATEST: Version = Version::V1_1_0;

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_1_0 => "0.1.0",
            Version::V0_2_0 => "0.2.0",
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn has_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// STATUS and GC exist from 1.1.0 on.
    pub fn has_status_and_gc(self) -> bool {
        self >= Version::V1_1_0
    }

    /// Results before 0.3.0 use the `ip4`/`ip6` shape.
    pub fn is_legacy_result(self) -> bool {
        self < Version::V0_3_0
    }

    /// Parses a config's `cniVersion`; an empty one means 0.1.0, as in libcni.
    pub fn from_config(s: &str) -> Result<Version, CniError> {
        if s.is_empty() {
            return Ok(Version::V0_1_0);
        }
        s.parse()
    }

    /// The `VERSION` command's answer.
    pub fn plugin_info() -> serde_json::Value {
        serde_json::json!({
            "cniVersion": Version::LATEST.as_str(),
            "supportedVersions": Version::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
        })
    }
}

impl FromStr for Version {
    type Err = CniError;

    fn from_str(s: &str) -> Result<Version, CniError> {
        Version::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                CniError::new(Code::IncompatibleVersion, "incompatible CNI versions").with_details(
                    format!(
                        "config is {}, plugin supports [{}]",
                        crate::quote::quote(s),
                        Version::ALL.map(|v| v.as_str()).join(" ")
                    ),
                )
            })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
