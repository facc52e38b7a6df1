//! host-local's configuration: decoding, the reference's merge rules, and validation.

use std::net::IpAddr;
use std::path::PathBuf;

use cni::args::CniArgs;
use cni::keys::Keys;
use cni::{GcAttachment, Route};
use ipnet::IpNet;
use serde::Deserialize;

use super::range::{Range, RangeSet};
use crate::common::{check_addresses_per_family, require_ipam};
use crate::error::{Error, Result};
use crate::json::{ip_list, null_default, opt_ip, opt_subnet, parse_ip_maybe_prefixed};

const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// A validated host-local configuration, for ADD and CHECK.
#[derive(Debug)]
pub struct Config {
    pub name: String,
    pub data_dir: PathBuf,
    /// Runtime `ipRanges` first, then the legacy top-level range, then `ranges`.
    pub range_sets: Vec<RangeSet>,
    /// Requested addresses without repeats, in the order CNI_ARGS, `args`, `runtimeConfig`.
    pub requested: Vec<IpAddr>,
    pub routes: Vec<Route>,
    pub resolv_conf: Option<PathBuf>,
}

/// What DEL and GC need: where the store is, and for GC what to keep. DEL must work even when
/// the rest of the config no longer validates, or the attachment could never be removed.
#[derive(Debug)]
pub struct StoreConfig {
    pub name: String,
    pub data_dir: PathBuf,
    pub valid_attachments: Option<Vec<GcAttachment>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNet {
    #[serde(default)]
    name: String,
    #[serde(default)]
    cni_version: String,
    /// Decoded twice: as [`RawIpam`], and as the legacy range written directly in it.
    #[serde(default)]
    ipam: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "null_default")]
    runtime_config: RawRuntime,
    #[serde(default, deserialize_with = "null_default")]
    args: RawArgs,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawIpam {
    #[serde(default, deserialize_with = "null_default")]
    ranges: Vec<Vec<RawRange>>,
    #[serde(default, deserialize_with = "null_default")]
    routes: Vec<Route>,
    #[serde(default, deserialize_with = "null_default")]
    data_dir: String,
    #[serde(default, deserialize_with = "null_default")]
    resolv_conf: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawRange {
    #[serde(default, deserialize_with = "opt_subnet")]
    subnet: Option<IpNet>,
    #[serde(default, deserialize_with = "opt_ip")]
    range_start: Option<IpAddr>,
    #[serde(default, deserialize_with = "opt_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "cni::decode::gateway")]
    gateway: Option<IpAddr>,
}

impl RawRange {
    /// `path` is where the range is written, for the error.
    fn validate(self, path: &str) -> Result<Range> {
        Range::new(self.subnet, self.range_start, self.range_end, self.gateway)
            .map_err(|e| Error::config(format!("{path}.{e}")))
    }
}

/// A range set as written, and where.
struct RawSet {
    path: String,
    ranges: Vec<RawRange>,
    /// The legacy range is the `ipam` object itself, not an item of a list.
    legacy: bool,
}

impl RawSet {
    fn list(prefix: &str, sets: Vec<Vec<RawRange>>) -> impl Iterator<Item = RawSet> + '_ {
        sets.into_iter().enumerate().map(move |(i, ranges)| RawSet {
            path: format!("{prefix}[{i}]"),
            ranges,
            legacy: false,
        })
    }

    fn validate(self) -> Result<RangeSet> {
        let ranges = self
            .ranges
            .into_iter()
            .enumerate()
            .map(|(j, r)| {
                let path = if self.legacy {
                    self.path.clone()
                } else {
                    format!("{}[{j}]", self.path)
                };
                r.validate(&path)
            })
            .collect::<Result<Vec<_>>>()?;
        RangeSet::new(ranges).map_err(|e| Error::config(format!("{}: {e}", self.path)))
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawRuntime {
    #[serde(default, deserialize_with = "null_default")]
    ip_ranges: Vec<Vec<RawRange>>,
    #[serde(default, deserialize_with = "ip_list")]
    ips: Vec<IpAddr>,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default, deserialize_with = "null_default")]
    cni: RawCniArgs,
}

#[derive(Deserialize, Default)]
struct RawCniArgs {
    #[serde(default, deserialize_with = "ip_list")]
    ips: Vec<IpAddr>,
}

#[derive(Deserialize)]
struct RawStoreNet {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ipam: Option<RawStoreIpam>,
    #[serde(rename = "cni.dev/valid-attachments", default)]
    valid_attachments: Option<Vec<GcAttachment>>,
    /// The key's name in the 1.1.0 spec text; libcni sends both.
    #[serde(rename = "cni.dev/attachments", default)]
    attachments: Option<Vec<GcAttachment>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawStoreIpam {
    #[serde(default, deserialize_with = "null_default")]
    data_dir: String,
}

/// The keys host-local reads in `ipam`: `ranges`, `routes`, and a range written in `ipam`
/// itself (the legacy form).
pub fn keys() -> Keys {
    Keys::of::<RawIpam>()
        .and::<RawRange>()
        .with("ranges", Keys::of::<RawRange>())
        .with("routes", Keys::of::<Route>())
}

fn data_dir(raw: String) -> PathBuf {
    if raw.is_empty() {
        PathBuf::from(DEFAULT_DATA_DIR)
    } else {
        PathBuf::from(raw)
    }
}

impl Config {
    /// Decodes and validates the network config (`stdin`) with the raw `CNI_ARGS`.
    pub fn load(stdin: &[u8], cni_args: &str) -> Result<Config> {
        let net: RawNet = cni::decode::from_slice(stdin)?;
        let ipam_value = require_ipam(net.ipam)?;
        let within_ipam = |e: cni::decode::DecodeError| Error::Decode(e.under_key("ipam"));
        let ipam: RawIpam = cni::decode::from_value(&ipam_value).map_err(within_ipam)?;
        let legacy: RawRange = cni::decode::from_value(&ipam_value).map_err(within_ipam)?;

        let mut requested = Vec::new();
        let args = CniArgs::parse(cni_args)?;
        args.check_known(&["IP"])?;
        if let Some(ip) = args.get("IP").filter(|v| !v.is_empty()) {
            requested.push(parse_ip_maybe_prefixed(ip).map_err(|want| {
                Error::config(format!(
                    "CNI_ARGS IP: {} is not {want}",
                    cni::quote::quote(ip)
                ))
            })?);
        }
        for ip in net.args.cni.ips.into_iter().chain(net.runtime_config.ips) {
            if !requested.contains(&ip) {
                requested.push(ip);
            }
        }

        let legacy = legacy.subnet.is_some().then(|| RawSet {
            path: "ipam".to_owned(),
            ranges: vec![legacy],
            legacy: true,
        });
        let raw_sets: Vec<RawSet> =
            RawSet::list("runtimeConfig.ipRanges", net.runtime_config.ip_ranges)
                .chain(legacy)
                .chain(RawSet::list("ipam.ranges", ipam.ranges))
                .collect();
        if raw_sets.is_empty() {
            return Err(Error::config(
                "ipam.ranges: no IP ranges specified: give ranges, or a subnet",
            ));
        }
        let mut range_sets: Vec<(String, RangeSet)> = Vec::with_capacity(raw_sets.len());
        for raw in raw_sets {
            let path = raw.path.clone();
            let set = raw.validate()?;
            if let Some((other, _)) = range_sets.iter().find(|(_, s)| s.overlaps(&set)) {
                return Err(Error::config(format!("{path}: overlaps {other}")));
            }
            range_sets.push((path, set));
        }
        let range_sets: Vec<RangeSet> = range_sets.into_iter().map(|(_, s)| s).collect();

        // ADD takes one address from each range set.
        check_addresses_per_family(&net.cni_version, range_sets.iter().map(RangeSet::is_v4))?;

        Ok(Config {
            name: net.name,
            data_dir: data_dir(ipam.data_dir),
            range_sets,
            requested,
            routes: ipam.routes,
            resolv_conf: (!ipam.resolv_conf.is_empty()).then(|| ipam.resolv_conf.into()),
        })
    }
}

impl StoreConfig {
    pub fn load(stdin: &[u8]) -> Result<StoreConfig> {
        let net: RawStoreNet = cni::decode::from_slice(stdin)?;
        let ipam = require_ipam(net.ipam)?;
        Ok(StoreConfig {
            name: net.name,
            data_dir: data_dir(ipam.data_dir),
            valid_attachments: net.valid_attachments.or(net.attachments),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(json: &str) -> Result<Config> {
        Config::load(json.as_bytes(), "")
    }

    fn err(json: &str, args: &str) -> String {
        Config::load(json.as_bytes(), args).unwrap_err().to_string()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const BASIC: &str = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local",
        "ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"fd00::/64"}]],
        "routes":[{"dst":"0.0.0.0/0"}],"resolvConf":"/etc/resolv.conf"}}"#;

    #[test]
    fn basic() {
        let c = load(BASIC).unwrap();
        assert_eq!(c.name, "n");
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/cni/networks"));
        assert_eq!(c.range_sets.len(), 2);
        assert!(c.range_sets[0].is_v4());
        assert!(!c.range_sets[1].is_v4());
        assert_eq!(c.routes.len(), 1);
        assert_eq!(c.resolv_conf, Some(PathBuf::from("/etc/resolv.conf")));
        assert!(c.requested.is_empty());
    }

    #[test]
    fn order_runtime_legacy_ranges() {
        let c = load(
            r#"{"cniVersion":"1.0.0","name":"n",
            "runtimeConfig":{"ipRanges":[[{"subnet":"10.3.0.0/16"}]]},
            "ipam":{"subnet":"10.2.0.0/16","ranges":[[{"subnet":"10.1.0.0/16"}]]}}"#,
        )
        .unwrap();
        let subnets: Vec<String> = c
            .range_sets
            .iter()
            .map(|s| s.ranges()[0].subnet.to_string())
            .collect();
        assert_eq!(subnets, ["10.3.0.0/16", "10.2.0.0/16", "10.1.0.0/16"]);
    }

    #[test]
    fn legacy_needs_subnet() {
        let e = err(
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"rangeStart":"10.1.2.5"}}"#,
            "",
        );
        assert_eq!(
            e,
            "ipam.ranges: no IP ranges specified: give ranges, or a subnet"
        );
    }

    #[test]
    fn requested_sources_in_order_without_repeats() {
        let c = Config::load(
            br#"{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.1.2.0/24"},
            "args":{"cni":{"ips":["10.1.2.9/24","10.1.2.7"]}},
            "runtimeConfig":{"ips":["10.1.2.8","10.1.2.7"]}}"#,
            "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.2.9",
        )
        .unwrap();
        assert_eq!(
            c.requested,
            [ip("10.1.2.9"), ip("10.1.2.7"), ip("10.1.2.8")]
        );
    }

    #[test]
    fn cni_args_errors() {
        let j = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.1.2.0/24"}}"#;
        assert_eq!(
            err(j, "IP=10.1.2.300"),
            r#"CNI_ARGS IP: "10.1.2.300" is not an IP address"#
        );
        assert!(err(j, "IP=10.1.2.3,10.1.2.4").contains("is not an IP address"));
        assert!(err(j, "FOO=bar").contains("unknown args"));
        assert!(err(j, "IP").contains("invalid pair"));
        assert!(Config::load(j.as_bytes(), "IP=")
            .unwrap()
            .requested
            .is_empty());
    }

    #[test]
    fn validation_errors() {
        let cases = [
            (
                r#"{"name":"n"}"#,
                "ipam: required, but missing (IPAM config missing 'ipam' key)",
            ),
            (
                r#"{"name":"n","ipam":{}}"#,
                "ipam.ranges: no IP ranges specified",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[]]}}"#,
                "ipam.ranges[0]: empty range set",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/31"}]]}}"#,
                "ipam.ranges[0][0].subnet: 10.1.2.0/31 is too small to allocate from: use a \
                 prefix length of at most /30",
            ),
            (
                r#"{"name":"n","ipam":{"subnet":"10.1.2.1/24"}}"#,
                "ipam.subnet: 10.1.2.1/24 has host bits set: for a prefix length of 24 the \
                 network address is 10.1.2.0",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24"},{"subnet":"fd00::/64"}]]}}"#,
                "ipam.ranges[0]: mixed address families",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24"},{"subnet":"10.1.2.0/25"}]]}}"#,
                "ipam.ranges[0]: ranges 10.1.2.1-10.1.2.254 and 10.1.2.1-10.1.2.126 overlap",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.0.0/16"}],[{"subnet":"10.1.2.0/24"}]]}}"#,
                "ipam.ranges[1]: overlaps ipam.ranges[0]",
            ),
            (
                r#"{"name":"n","runtimeConfig":{"ipRanges":[[{"subnet":"10.1.0.0/16"}]]},"ipam":{"subnet":"10.1.2.0/24"}}"#,
                "ipam: overlaps runtimeConfig.ipRanges[0]",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24","rangeStart":"10.1.3.1"}]]}}"#,
                "ipam.ranges[0][0].rangeStart: 10.1.3.1 is not in the subnet 10.1.2.0/24",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24"},{"subnet":"10.1.3.0/24","rangeEnd":"10.1.4.1"}]]}}"#,
                "ipam.ranges[0][1].rangeEnd: 10.1.4.1 is not in the subnet 10.1.3.0/24",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"rangeStart":"10.1.3.1"}]]}}"#,
                "ipam.ranges[0][0].subnet: required, but missing",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24","gateway":"fd00::1"}]]}}"#,
                "ipam.ranges[0][0].gateway: fd00::1 and 10.1.2.0/24 are of different address families",
            ),
            (
                r#"{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.3.0/24"}]]}}"#,
                "CNI version 0.2.0 does not support more than 1 address per family",
            ),
        ];
        for (json, want) in cases {
            let e = Config::load(json.as_bytes(), "").unwrap_err();
            let code = cni::CniError::from(Config::load(json.as_bytes(), "").unwrap_err()).code;
            let e = e.to_string();
            assert!(e.starts_with(want), "{json}\n got {e}\nwant {want}");
            assert_eq!(code, 7, "{json}");
        }
    }

    #[test]
    fn decode_errors_are_code_6_and_name_the_key() {
        for (json, want) in [
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"bogus"}]]}}"#,
                r#"ipam.ranges[0][0].subnet: "bogus" is not a CIDR like 10.1.2.0/24"#,
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.3.0/24","gateway":"x"}]]}}"#,
                r#"ipam.ranges[1][0].gateway: "x" is not an IP address"#,
            ),
            (
                r#"{"name":"n","ipam":{"subnet":"10.1.2.0"}}"#,
                r#"ipam.subnet: "10.1.2.0" is not a CIDR like 10.1.2.0/24 (a subnet needs a prefix length)"#,
            ),
            (
                r#"{"name":"n","ipam":{"subnet":"10.1.2.0/24","gateway":"10.1.2.1/24"}}"#,
                r#"ipam.gateway: "10.1.2.1/24" is not an IP address (a gateway takes no prefix length)"#,
            ),
            (
                r#"{"name":"n","ipam":{"subnet":"10.42.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.42.0.100/24"}]}}"#,
                r#"ipam.routes[0].gw: "10.42.0.100/24" is not an IP address (a gateway takes no prefix length)"#,
            ),
            (
                r#"{"name":"n","ipam":{"ranges":"x"}}"#,
                r#"ipam.ranges: "x" is not a list"#,
            ),
            (
                r#"{"name":"n","ipam":{"subnet":"10.1.2.0/24"},"runtimeConfig":{"ips":["10.1.2.3","nope"]}}"#,
                r#"runtimeConfig.ips[1]: "nope" is not an IP address"#,
            ),
            (r#"{"name":"n","ipam":7}"#, "ipam: 7 is not an object"),
        ] {
            let e = Config::load(json.as_bytes(), "").unwrap_err();
            assert_eq!(e.to_string(), want, "{json}");
            assert_eq!(cni::CniError::from(e).code, 6, "{json}");
        }
    }

    #[test]
    fn nulls_are_unset() {
        let c = load(
            r#"{"name":"n","runtimeConfig":null,"args":null,"ipam":{"subnet":"10.1.2.0/24",
            "gateway":"","ranges":null,"routes":null,"dataDir":null}}"#,
        )
        .unwrap();
        assert_eq!(c.range_sets.len(), 1);
        assert_eq!(c.range_sets[0].ranges()[0].gateway, ip("10.1.2.1"));
    }

    #[test]
    fn store_config_is_lenient() {
        let s = StoreConfig::load(
            br#"{"name":"n","ipam":{"dataDir":"/d","ranges":[[{"subnet":"10.1.2.1/31"}]]},
            "cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(s.data_dir, PathBuf::from("/d"));
        assert_eq!(s.valid_attachments.unwrap().len(), 1);
        assert!(StoreConfig::load(br#"{"name":"n"}"#).is_err());
    }
}
