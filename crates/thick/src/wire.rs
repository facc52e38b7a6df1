//! The wire between `multus-shim` and `multus-daemon`, as upstream's: HTTP/1.1 over the unix
//! socket `<daemonSocketDir>/multus.sock`, one request per connection (every reply says
//! `Connection: close`). This module owns the format: the `POST /cni` body and the replies; the
//! HTTP framing both ends use is `nodekit::http1`'s.
//!
//! - Request body: `{"env": {"CNI_COMMAND": ..., ...}, "config": "<stdin, base64>",
//!   "interfaceAttributes": {...}}` (the last only on `/delegate`, hot-plug's endpoint, whose
//!   config is the one network to add to or remove from a running sandbox).
//! - ADD's reply: 200 `{"Result": <the CNI result, cniVersion 1.1.0>}`; other commands: 200 with
//!   an empty body.
//! - A failure: 400 with a CNI error object `{"code", "msg", "details"}`; upstream's daemon may
//!   also answer plain text.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const SOCKET_NAME: &str = "multus.sock";
/// `daemonSocketDir` (the shim) and `socketDir` (the daemon) when not set.
pub const DEFAULT_SOCKET_DIR: &str = "/run/multus/";

pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET_NAME)
}

/// The body of `POST /cni`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CniRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The runtime's stdin to the shim: the network config.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "to_base64",
        deserialize_with = "from_base64"
    )]
    pub config: Vec<u8>,
    /// Hot-plug's requested IPs, MAC and CNI args (`/delegate` only).
    #[serde(
        default,
        rename = "interfaceAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub interface_attributes: Option<InterfaceAttributes>,
}

/// What a hot-plug caller asks of the interface, as a network selection element would: upstream's
/// `DelegateInterfaceAttributes` (its client always sends `cni-args`, `null` when unset).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceAttributes {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, rename = "cni-args")]
    pub cni_args: Option<serde_json::Map<String, Value>>,
}

fn to_base64<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn from_base64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = Option::<String>::deserialize(d)?.unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|e| serde::de::Error::custom(format!("config is not base64: {e}")))
}

/// ADD's reply: upstream's `Response` has no JSON tag, so the key is `Result`.
#[derive(Serialize)]
pub struct AddReply<'a> {
    #[serde(rename = "Result")]
    pub result: &'a Value,
}

/// The result in ADD's reply; Go decodes keys regardless of case, so `result` is taken too.
pub fn result_of(reply: &Value) -> Option<&Value> {
    reply
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("result"))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_body_in_upstreams_shape() {
        let mut req = CniRequest::default();
        req.env.insert("CNI_COMMAND".into(), "ADD".into());
        req.config = br#"{"cniVersion":"1.0.0"}"#.to_vec();
        let text = serde_json::to_value(&req).unwrap();
        assert_eq!(
            text,
            serde_json::json!({"env": {"CNI_COMMAND": "ADD"},
                               "config": "eyJjbmlWZXJzaW9uIjoiMS4wLjAifQ=="})
        );
        let back: CniRequest = serde_json::from_value(text).unwrap();
        assert_eq!(back, req);
        let bad = serde_json::from_str::<CniRequest>(r#"{"config": "***"}"#).unwrap_err();
        assert!(bad.to_string().contains("config is not base64"), "{bad}");
        let reply = serde_json::json!({"Result": {"cniVersion": "1.1.0"}});
        assert_eq!(
            result_of(&reply),
            Some(&serde_json::json!({"cniVersion": "1.1.0"}))
        );
        assert_eq!(result_of(&serde_json::json!({"result": null})), None);
    }
}
