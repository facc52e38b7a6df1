//! The `firewall` plugin, chained after an interface plugin: lets the pod's forwarded traffic
//! through a node whose `FORWARD` policy drops, with iptables rules in the node's namespace
//! (see [`netkit::forward`] for their names and shapes).
//!
//! As the reference (1.1.1, iptables backend): `CNI-FORWARD` accepts traffic from each pod
//! address and the replies to it, after a jump to the admin's override chain (`CNI-ADMIN`, or
//! `iptablesAdminChainName`); `ingressPolicy: "same-bridge"` also isolates the bridge the
//! previous plugin made (the first interface of its result). DEL removes the pod's rules; the
//! shared chains stay.
//!
//! Deliberate changes: `backend` must be `iptables` (or absent): an unknown one is refused
//! instead of falling back to whatever is there, and the firewalld backend is not implemented
//! yet; the admin chain's name is checked; DEL of a config that no longer validates still
//! removes the pod's rules.

use std::net::IpAddr;

use cni::quote::quote;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use serde::Deserialize;

use crate::check;
use crate::sys::sys;

/// The plugin, as registered in the multi-call binary's table.
pub struct Firewall;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    backend: String,
    #[serde(default)]
    iptables_admin_chain_name: String,
    #[serde(default)]
    ingress_policy: String,
}

/// The checked configuration.
struct FirewallConf {
    net: NetConf,
    admin_chain: String,
    same_bridge: bool,
}

impl FirewallConf {
    fn parse(stdin: &[u8]) -> Result<FirewallConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        match raw.backend.as_str() {
            "" | "iptables" => {}
            "firewalld" => {
                return Err(CniError::invalid_config(
                    "backend: \"firewalld\" is not supported by this firewall plugin yet: set \
                     \"iptables\", or use the reference plugin for this network",
                ))
            }
            other => {
                return Err(CniError::invalid_config(format!(
                    "backend: {} is not a backend: use \"iptables\" (or \"firewalld\" with the \
                     reference plugin)",
                    quote(other)
                )))
            }
        }
        let admin_chain = if raw.iptables_admin_chain_name.is_empty() {
            netkit::forward::ADMIN_CHAIN.to_owned()
        } else {
            let name = raw.iptables_admin_chain_name;
            let ok = name.len() <= 28
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(CniError::invalid_config(format!(
                    "iptablesAdminChainName: {} is not an iptables chain name: up to 28 \
                     letters, digits, '-' and '_'",
                    quote(&name)
                )));
            }
            name
        };
        let same_bridge = match raw.ingress_policy.as_str() {
            "" | "open" => false,
            "same-bridge" => true,
            other => {
                return Err(CniError::invalid_config(format!(
                    "ingressPolicy: {} is not a policy: use \"open\" (the default) or \
                     \"same-bridge\"",
                    quote(other)
                )))
            }
        };
        Ok(FirewallConf {
            net,
            admin_chain,
            same_bridge,
        })
    }

    fn prev_result(&self) -> Result<CniResult, CniError> {
        let prev = self.net.prev_result.as_ref().ok_or_else(|| {
            CniError::invalid_config(
                "firewall needs prevResult: chain it after the plugin that makes the interface",
            )
        })?;
        CniResult::from_value_at(prev, Some("prevResult"))
    }
}

/// Every address of the result, as the reference allows them.
fn addresses(prev: &CniResult) -> Vec<IpAddr> {
    prev.ips.iter().map(|ip| ip.address.addr()).collect()
}

impl cni::Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = FirewallConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        let ips = addresses(&prev);
        let bridge = if conf.same_bridge {
            let name = prev
                .interfaces
                .first()
                .map(|i| i.name.as_str())
                .unwrap_or("");
            if name.is_empty() {
                return Err(CniError::invalid_config(
                    "ingressPolicy \"same-bridge\" needs the bridge: chain firewall after \
                     bridge, whose result names it first",
                ));
            }
            Some(name.to_owned())
        } else {
            None
        };
        netkit::forward::allow(&ips, &conf.admin_chain).map_err(sys)?;
        if let Some(bridge) = bridge {
            let v4 = ips.iter().any(IpAddr::is_ipv4);
            let v6 = ips.iter().any(IpAddr::is_ipv6);
            if let Err(e) = netkit::forward::isolate_bridge(&bridge, v4, v6) {
                let failures: Vec<String> = netkit::forward::revoke(&ips)
                    .err()
                    .map(|e| e.to_string())
                    .into_iter()
                    .collect();
                return Err(crate::sys::with_cleanup_failures(sys(e), &failures));
            }
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // The pod's addresses are all DEL needs: a config whose other keys no longer validate
        // must still let the attachment go.
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        let Some(prev) = net.prev_result.as_ref() else {
            return Ok(());
        };
        let prev = CniResult::from_value_at(prev, Some("prevResult"))?;
        netkit::forward::revoke(&addresses(&prev)).map_err(sys)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = FirewallConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        netkit::forward::check(&addresses(&prev), &conf.admin_chain)
            .map_err(|e| check::fail(e.to_string()))
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = FirewallConf::parse(config)?;
        if conf.net.prev_result.is_some() {
            conf.prev_result()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<FirewallConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"firewall"{extra}}}"#);
        FirewallConf::parse(json.as_bytes())
    }

    #[test]
    fn options() {
        let c = parse("").expect("parsed");
        assert_eq!(c.admin_chain, "CNI-ADMIN");
        assert!(!c.same_bridge);
        let c = parse(r#","backend":"iptables","iptablesAdminChainName":"MY-ADMIN","ingressPolicy":"same-bridge""#)
            .expect("parsed");
        assert_eq!(c.admin_chain, "MY-ADMIN");
        assert!(c.same_bridge);
        for bad in [
            r#","backend":"nft""#,
            r#","backend":"firewalld""#,
            r#","iptablesAdminChainName":"a b""#,
            r#","ingressPolicy":"closed""#,
        ] {
            assert_eq!(parse(bad).err().map(|e| e.code), Some(7), "{bad}");
        }
    }
}
