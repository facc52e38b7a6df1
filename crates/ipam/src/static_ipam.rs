//! static: the addresses, routes and DNS settings written in the config, or given by the
//! runtime, handed back as the result. Nothing is stored.

use std::net::IpAddr;

use cni::args::CniArgs;
use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, Dns, IpConfig, Plugin, Route};
use ipnet::IpNet;
use serde::Deserialize;

use crate::common::{
    check_addresses_per_family, check_gateway_family, cni_args_ips, parse_address, require_ipam,
    RawAddress,
};
use crate::error::{Error, Result};

use crate::json::null_default;

/// The static IPAM plugin.
pub struct StaticIpam;

impl Plugin for StaticIpam {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        cni::args::CniArgs::parse(&args.args)?.refuse_ipam_claim("static")?;
        let conf = Config::load(&args.stdin, &args.args)?;
        Ok(CniResult {
            ips: conf.addresses,
            routes: conf.routes,
            dns: conf.dns,
            ..CniResult::default()
        })
    }

    /// Nothing was allocated, so there is nothing to release.
    fn del(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        Config::load(config, "")?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNet {
    #[serde(default)]
    cni_version: String,
    #[serde(default)]
    ipam: Option<RawIpam>,
    #[serde(default, deserialize_with = "null_default")]
    runtime_config: RawIps,
    #[serde(default, deserialize_with = "null_default")]
    args: RawArgs,
    #[serde(default)]
    prev_result: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawIpam {
    #[serde(default, deserialize_with = "null_default")]
    routes: Vec<Route>,
    #[serde(default, deserialize_with = "null_default")]
    addresses: Vec<RawAddress>,
    #[serde(default, deserialize_with = "null_default")]
    dns: Dns,
}

/// The keys static reads in `ipam`.
pub fn keys() -> Keys {
    Keys::of::<RawIpam>()
        .with("addresses", Keys::of::<RawAddress>())
        .with("routes", Keys::of::<Route>())
        .with("dns", Keys::of::<Dns>())
}

/// `runtimeConfig` and `args.cni` both carry `ips`: CIDR strings.
#[derive(Deserialize, Default)]
struct RawIps {
    #[serde(default, deserialize_with = "null_default")]
    ips: Vec<String>,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default, deserialize_with = "null_default")]
    cni: RawIps,
}

struct Config {
    addresses: Vec<IpConfig>,
    routes: Vec<Route>,
    dns: Dns,
    prev_result: Option<serde_json::Value>,
}

fn address(net: IpNet, gateway: Option<IpAddr>) -> IpConfig {
    IpConfig {
        address: net,
        gateway,
        interface: None,
    }
}

/// `ips` from `args.cni` or `runtimeConfig` (`key`), which replace every other address.
fn parse_ips(key: &str, ips: &[String]) -> Result<Vec<IpConfig>> {
    ips.iter()
        .enumerate()
        .map(|(i, s)| parse_address(&format!("{key}[{i}]"), s).map(|n| address(n, None)))
        .collect()
}

impl Config {
    /// The reference's precedence: the config's `addresses` plus CNI_ARGS `IP` (with `GATEWAY`
    /// applied to those), all replaced by `args.cni.ips` if given, all replaced by
    /// `runtimeConfig.ips` if given (the runtime passes that only with the `ips` capability).
    fn load(stdin: &[u8], cni_args: &str) -> Result<Config> {
        let net: RawNet = cni::decode::from_slice(stdin)?;
        let ipam = require_ipam(net.ipam)?;
        let mut configured = ipam.addresses;
        let mut extra = cni_args_addresses(cni_args)?;
        for (key, replacement) in [
            ("args.cni.ips", &net.args.cni.ips),
            ("runtimeConfig.ips", &net.runtime_config.ips),
        ] {
            if !replacement.is_empty() {
                configured.clear();
                extra = parse_ips(key, replacement)?;
            }
        }
        let mut addresses = configured
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                let key = format!("ipam.addresses[{i}]");
                let net = parse_address(&format!("{key}.address"), &a.address)?;
                if let Some(gw) = a.gateway {
                    check_gateway_family(gw, &net)
                        .map_err(|e| Error::config(format!("{key}.gateway: {e}")))?;
                }
                Ok(address(net, a.gateway))
            })
            .collect::<Result<Vec<_>>>()?;
        addresses.extend(extra);

        check_addresses_per_family(
            &net.cni_version,
            addresses.iter().map(|a| a.address.addr().is_ipv4()),
        )?;
        Ok(Config {
            addresses,
            routes: ipam.routes,
            dns: ipam.dns,
            prev_result: net.prev_result,
        })
    }
}

/// CNI_ARGS `IP` and `GATEWAY`: comma lists. A gateway goes to each of these addresses whose
/// subnet contains it (not to the config's addresses, as in the reference).
fn cni_args_addresses(raw: &str) -> Result<Vec<IpConfig>> {
    let args = CniArgs::parse(raw)?;
    args.check_known(&["IP", "GATEWAY"])?;
    let (ips, gateways) = cni_args_ips(&args)?;
    let mut out: Vec<IpConfig> = ips.into_iter().map(|n| address(n, None)).collect();
    for gw in gateways {
        for a in out.iter_mut().filter(|a| a.address.contains(&gw)) {
            a.gateway = Some(gw);
        }
    }
    Ok(out)
}

/// Every configured address must be in the previous result, with the configured gateway.
fn check(args: &CmdArgs) -> Result<()> {
    let conf = Config::load(&args.stdin, &args.args)?;
    let prev = conf
        .prev_result
        .as_ref()
        .ok_or_else(|| Error::config("Required prevResult missing"))?;
    let prev = CniResult::from_value(prev)?;
    for want in &conf.addresses {
        let ip = want.address.addr();
        let found = prev.ips.iter().find(|have| have.address.addr() == ip);
        match found {
            Some(have) if want.gateway.is_none() || want.gateway == have.gateway => {}
            Some(have) => {
                return Err(Error::Mismatch(format!(
                    "static: address {ip} on interface {} has gateway {}, the config says {}",
                    args.ifname,
                    have.gateway.map_or("none".into(), |g| g.to_string()),
                    want.gateway.map_or("none".into(), |g| g.to_string()),
                )))
            }
            None => {
                return Err(Error::Mismatch(format!(
                    "static: address {ip} is not in the previous result for interface {}",
                    args.ifname
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(json: &str, args: &str) -> Result<Vec<String>> {
        Config::load(json.as_bytes(), args).map(|c| {
            c.addresses
                .iter()
                .map(|a| match a.gateway {
                    Some(g) => format!("{} gw {g}", a.address),
                    None => a.address.to_string(),
                })
                .collect()
        })
    }

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static",
        "addresses":[{"address":"10.10.0.5/24","gateway":"10.10.0.1"},{"address":"fd00::5/64"}]}}"#;

    #[test]
    fn config_addresses_keep_host_bits() {
        assert_eq!(
            load(CONF, "").unwrap(),
            ["10.10.0.5/24 gw 10.10.0.1", "fd00::5/64"]
        );
    }

    #[test]
    fn cni_args_append_with_gateways() {
        let got = load(
            CONF,
            "IP=10.20.0.5/24, 10.30.0.5/16;GATEWAY=10.30.0.1,10.10.0.9",
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "10.10.0.5/24 gw 10.10.0.1",
                "fd00::5/64",
                "10.20.0.5/24",
                "10.30.0.5/16 gw 10.30.0.1",
            ]
        );
    }

    #[test]
    fn args_then_runtime_replace() {
        let with_args = CONF.replacen(
            "\"ipam\"",
            r#""args":{"cni":{"ips":["10.40.0.5/24"]}},"ipam""#,
            1,
        );
        assert_eq!(
            load(&with_args, "IP=10.20.0.5/24").unwrap(),
            ["10.40.0.5/24"]
        );
        let with_both = with_args.replacen(
            "\"ipam\"",
            r#""runtimeConfig":{"ips":["10.50.0.5/24","fd00::9/64"]},"ipam""#,
            1,
        );
        assert_eq!(
            load(&with_both, "").unwrap(),
            ["10.50.0.5/24", "fd00::9/64"]
        );
    }

    #[test]
    fn errors() {
        let e = |json: &str, args: &str| load(json, args).unwrap_err().to_string();
        assert_eq!(
            e(CONF, "IP=10.20.0.5"),
            r#"CNI_ARGS IP: "10.20.0.5" is not a CIDR like 10.1.2.0/24 (an address needs a prefix length)"#
        );
        assert_eq!(
            e(CONF, "IP=10.20.0.5/24;GATEWAY=x"),
            r#"CNI_ARGS GATEWAY: "x" is not an IP address"#
        );
        assert!(e(CONF, "FOO=1").contains("unknown args"));
        assert!(load(CONF, "FOO=1;IgnoreUnknown=1").is_ok());
        assert_eq!(
            e(r#"{"name":"n"}"#, ""),
            "ipam: required, but missing (IPAM config missing 'ipam' key)"
        );
        assert_eq!(
            e(
                r#"{"name":"n","ipam":{"addresses":[{"address":"10.1.1.1"}]}}"#,
                ""
            ),
            r#"ipam.addresses[0].address: "10.1.1.1" is not a CIDR like 10.1.2.0/24 (an address needs a prefix length)"#
        );
        assert_eq!(
            e(
                r#"{"name":"n","runtimeConfig":{"ips":["x"]},"ipam":{}}"#,
                ""
            ),
            r#"runtimeConfig.ips[0]: "x" is not a CIDR like 10.1.2.0/24"#
        );
        assert_eq!(
            e(
                r#"{"cniVersion":"0.2.0","name":"n","ipam":{"addresses":[{"address":"10.1.1.1/24"},{"address":"10.1.2.1/24"}]}}"#,
                ""
            ),
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
    }

    #[test]
    fn gateway_of_the_wrong_family_is_refused() {
        let conf = |gw: &str| {
            format!(
                r#"{{"cniVersion":"1.0.0","name":"n","ipam":{{"addresses":[{{"address":"10.1.1.5/24","gateway":"{gw}"}}]}}}}"#
            )
        };
        let e = Config::load(conf("fd00::1").as_bytes(), "").err().unwrap();
        assert_eq!(
            e.to_string(),
            "ipam.addresses[0].gateway: fd00::1 and 10.1.1.5/24 are of different address families"
        );
        assert_eq!(CniError::from(e).code, 7);
        // A gateway outside the subnet is accepted, as by the reference.
        assert_eq!(
            load(&conf("10.9.9.1"), "").unwrap(),
            ["10.1.1.5/24 gw 10.9.9.1"]
        );
        // Config addresses that runtimeConfig replaces are not used, so not checked.
        let replaced = conf("fd00::1").replacen(
            "\"ipam\"",
            r#""runtimeConfig":{"ips":["10.2.2.2/24"]},"ipam""#,
            1,
        );
        assert_eq!(load(&replaced, "").unwrap(), ["10.2.2.2/24"]);
    }

    #[test]
    fn mapped_v4_is_v4() {
        assert_eq!(
            parse_address("x", "::ffff:10.1.1.1/120")
                .unwrap()
                .to_string(),
            "10.1.1.1/24"
        );
    }
}
