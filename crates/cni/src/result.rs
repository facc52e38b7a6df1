//! Results in every spec version, and the conversions between them.
//!
//! [`CniResult`] is the 1.x model. It reads any version's JSON and writes any version's JSON,
//! with the reference conversion rules: 0.3.x/0.4.0 add an IP `version`, and 0.1.0/0.2.0 keep
//! only the first IPv4 and the first IPv6 address.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{CniError, Dns, Version};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    /// The version the result was read in, or is meant for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Dns,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// 1.1.0 and later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// 1.1.0 and later.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
    /// 1.1.0 and later.
    #[serde(rename = "pciID", default, skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

/// An address on an interface: `address` keeps the host bits (10.1.0.5/16).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

/// A route, in results and in configs (`ipam.routes`): decode errors say what `dst` and `gw`
/// take.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    #[serde(deserialize_with = "crate::decode::destination")]
    pub dst: IpNet,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::decode::gateway"
    )]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// The 0.1.0/0.2.0 per-family block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LegacyIp {
    ip: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<Route>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct LegacyResult {
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(default)]
    ip4: Option<LegacyIp>,
    #[serde(default)]
    ip6: Option<LegacyIp>,
    #[serde(default)]
    dns: Dns,
}

impl CniResult {
    /// Reads a result of any version. The version comes from `cniVersion`; a result without
    /// one is read in the shape it has.
    pub fn from_value(value: &Value) -> Result<CniResult, CniError> {
        CniResult::from_value_at(value, None)
    }

    /// [`CniResult::from_value`] for a result inside a config, at `key` (`prevResult`), which
    /// errors name.
    pub fn from_value_at(value: &Value, key: Option<&str>) -> Result<CniResult, CniError> {
        let version = value
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let legacy = match version {
            "" => value.get("ip4").is_some() || value.get("ip6").is_some(),
            v => v.parse::<Version>()?.is_legacy_result(),
        };
        let decode_err = |e: crate::decode::DecodeError| {
            let e = match key {
                Some(key) => e.under_key(key),
                None => e,
            };
            CniError::decoding(format!(
                "cannot decode a {} result: {e}",
                crate::quote::quote(version)
            ))
        };
        if legacy {
            let old: LegacyResult = crate::decode::from_value(value).map_err(decode_err)?;
            return Ok(CniResult::from_legacy(old));
        }
        crate::decode::from_value(value).map_err(decode_err)
    }

    pub fn from_slice(bytes: &[u8]) -> Result<CniResult, CniError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| CniError::decoding(format!("cannot decode result: {e}")))?;
        CniResult::from_value(&value)
    }

    fn from_legacy(old: LegacyResult) -> CniResult {
        let mut result = CniResult {
            cni_version: old.cni_version,
            dns: old.dns,
            ..CniResult::default()
        };
        for ip in [old.ip4, old.ip6].into_iter().flatten() {
            result.ips.push(IpConfig {
                address: ip.ip,
                gateway: ip.gateway,
                interface: None,
            });
            result.routes.extend(ip.routes);
        }
        result
    }

    /// The result as JSON of `version`. Fails for 0.1.0/0.2.0 when there is no address.
    pub fn to_value(&self, version: Version) -> Result<Value, CniError> {
        if version.is_legacy_result() {
            return self.to_legacy(version);
        }
        let mut out = Map::new();
        out.insert("cniVersion".into(), version.as_str().into());
        if !self.interfaces.is_empty() {
            let interfaces = self
                .interfaces
                .iter()
                .map(|i| {
                    let mut i = i.clone();
                    if version < Version::V1_1_0 {
                        i.mtu = None;
                        i.socket_path.clear();
                        i.pci_id.clear();
                    }
                    i
                })
                .collect::<Vec<_>>();
            out.insert("interfaces".into(), to_json(&interfaces)?);
        }
        if !self.ips.is_empty() {
            let mut ips = Vec::with_capacity(self.ips.len());
            for ip in &self.ips {
                let mut v = to_json(ip)?;
                if version < Version::V1_0_0 {
                    if let Value::Object(m) = &mut v {
                        let family = if ip.address.addr().is_ipv4() {
                            "4"
                        } else {
                            "6"
                        };
                        // "version" goes first, like the reference prints it.
                        let mut with_version = Map::new();
                        with_version.insert("version".into(), family.into());
                        with_version.extend(std::mem::take(m));
                        *m = with_version;
                    }
                }
                ips.push(v);
            }
            out.insert("ips".into(), Value::Array(ips));
        }
        if !self.routes.is_empty() {
            out.insert("routes".into(), to_json(&self.routes)?);
        }
        // 1.x leaves out an empty `dns`; 0.3.x/0.4.0 always print it. Both as the reference.
        if version < Version::V1_0_0 || !self.dns.is_empty() {
            out.insert("dns".into(), to_json(&self.dns)?);
        }
        Ok(Value::Object(out))
    }

    fn to_legacy(&self, version: Version) -> Result<Value, CniError> {
        let first = |v4: bool| {
            self.ips
                .iter()
                .find(|ip| ip.address.addr().is_ipv4() == v4)
                .map(|ip| LegacyIp {
                    ip: ip.address,
                    gateway: ip.gateway,
                    routes: self
                        .routes
                        .iter()
                        .filter(|r| r.dst.addr().is_ipv4() == v4)
                        .map(|r| Route::new(r.dst, r.gw))
                        .collect(),
                })
        };
        let old = LegacyResult {
            cni_version: version.as_str().into(),
            ip4: first(true),
            ip6: first(false),
            dns: self.dns.clone(),
        };
        if old.ip4.is_none() && old.ip6.is_none() {
            return Err(CniError::new(
                crate::Code::IncompatibleVersion,
                format!("cannot convert the result to {version}: it has no IP address"),
            ));
        }
        let mut v = to_json(&old)?;
        if let Value::Object(m) = &mut v {
            m.retain(|_, v| !v.is_null());
        }
        Ok(v)
    }

    /// Converts between versions through JSON, as a round trip would.
    pub fn convert(&self, version: Version) -> Result<CniResult, CniError> {
        CniResult::from_value(&self.to_value(version)?)
    }
}

fn to_json<T: Serialize>(v: &T) -> Result<Value, CniError> {
    serde_json::to_value(v).map_err(|e| CniError::internal(format!("cannot encode result: {e}")))
}
