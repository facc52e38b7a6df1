//! The node admin's policy ([`TenantPolicy`]) over what a pod's annotation asks of a network,
//! checked before anything runs: the host ports it maps, the addresses and the MAC it asks
//! for. The runtime's own runtime config (the pod spec's `hostPort`s) is Kubernetes' to
//! police and is not looked at here.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use netkit::sockets::Protocol;
use serde_json::Value;

use super::Attachment;
use crate::config::TenantPolicy;
use crate::delegate::Delegate;
use crate::error::{Error, Result};
use npwg::selection::Selection;

/// What the node has that a tenant must not take, read once per command when first needed:
/// each is a netlink dump, and on a node starting many pods the link dump is long and races
/// with their links, so it is taken only when a MAC is asked for.
#[derive(Default)]
pub struct NodeFacts {
    listening: OnceCell<BTreeSet<(Protocol, u16)>>,
    addrs: OnceCell<Vec<IpAddr>>,
    macs: OnceCell<Vec<[u8; 6]>>,
}

impl NodeFacts {
    fn listening(&self) -> Result<&BTreeSet<(Protocol, u16)>> {
        if let Some(ports) = self.listening.get() {
            return Ok(ports);
        }
        let ports = netkit::sockets::listening()
            .map_err(|e| Error::netlink("reading the node's listening sockets", e))?;
        Ok(self.listening.get_or_init(|| ports))
    }

    /// The node's addresses.
    fn addrs(&self) -> Result<&Vec<IpAddr>> {
        if let Some(addrs) = self.addrs.get() {
            return Ok(addrs);
        }
        let addrs = netlink()?
            .addrs(None, None)
            .map_err(|e| Error::netlink("listing the node's addresses", e))?
            .into_iter()
            .map(|a| a.net.addr())
            .collect();
        Ok(self.addrs.get_or_init(|| addrs))
    }

    /// The MACs of the node's links.
    fn macs(&self) -> Result<&Vec<[u8; 6]>> {
        if let Some(macs) = self.macs.get() {
            return Ok(macs);
        }
        let macs = netlink()?
            .links()
            .map_err(|e| Error::netlink("listing the node's links", e))?
            .into_iter()
            .filter_map(|l| l.mac)
            .filter(|mac| *mac != [0; 6])
            .collect();
        Ok(self.macs.get_or_init(|| macs))
    }

    /// Whether `ip` is one of the node's own addresses.
    pub fn holds(&self, ip: IpAddr) -> Result<bool> {
        Ok(self.addrs()?.contains(&ip))
    }
}

fn netlink() -> Result<netkit::Netlink> {
    netkit::Netlink::new().map_err(|e| Error::netlink("opening netlink in the node's namespace", e))
}

/// Checks every attachment's annotation requests against `policy`.
pub fn check(policy: &TenantPolicy, node: &NodeFacts, attachments: &[Attachment]) -> Result<()> {
    for a in attachments {
        let refuse = |msg: String| Error::Request {
            network: a.delegate.name.clone(),
            ifname: a.ifname.clone(),
            msg,
        };
        let d = &a.delegate;
        if let Some(mappings) = &d.port_mappings {
            check_host_ports(policy, node, mappings).map_err(refuse)?;
        }
        for text in requested_ips(d) {
            check_address(policy, node, &text).map_err(refuse)?;
        }
        for text in requested_macs(d) {
            check_mac(node, &text).map_err(refuse)?;
        }
    }
    Ok(())
}

fn check_host_ports(
    policy: &TenantPolicy,
    node: &NodeFacts,
    mappings: &Value,
) -> std::result::Result<(), String> {
    for (port, protocol) in Selection::host_ports(mappings) {
        if !policy.host_ports.iter().any(|range| range.contains(&port)) {
            let ranges: Vec<String> = policy
                .host_ports
                .iter()
                .map(|r| format!("{}-{}", r.start(), r.end()))
                .collect();
            return Err(format!(
                "portMappings: host port {port}/{protocol} is not one a pod may map on this \
                 node (hostPortRanges: {}); the node's own services use the ports below 1024",
                if ranges.is_empty() {
                    "none".to_owned()
                } else {
                    ranges.join(", ")
                }
            ));
        }
        let transport = match protocol.as_str() {
            "udp" => Some(Protocol::Udp),
            "sctp" => None,
            _ => Some(Protocol::Tcp),
        };
        let listened = transport
            .map(|t| node.listening().map(|ports| ports.contains(&(t, port))))
            .transpose()
            .map_err(|e| e.to_string())?
            .unwrap_or(false);
        if listened {
            return Err(format!(
                "portMappings: host port {port}/{protocol} is one the node listens on: a pod's \
                 mapping would take it from the node's own service"
            ));
        }
    }
    Ok(())
}

/// The addresses a network is asked for: the selection's `ips`, and `ips` in the plugins'
/// `args.cni` (from the selection's `cni-args` or the NAD itself), which host-local and static
/// honour too.
fn requested_ips(d: &Delegate) -> Vec<String> {
    let mut ips = d.ips.clone();
    ips.extend(args_cni_strings(d, "ips"));
    ips
}

fn requested_macs(d: &Delegate) -> Vec<String> {
    d.mac
        .iter()
        .cloned()
        .chain(args_cni_strings(d, "mac"))
        .collect()
}

/// The strings under `key` in every plugin's `args.cni` (a string or a list of them).
fn args_cni_strings(d: &Delegate, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for plugin in d.network.plugins() {
        match plugin
            .get("args")
            .and_then(|a| a.get("cni"))
            .and_then(|c| c.get(key))
        {
            Some(Value::String(s)) => out.push(s.clone()),
            Some(Value::Array(items)) => {
                out.extend(items.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            _ => {}
        }
    }
    out
}

/// An address inside the cluster's networks, or one the node holds, is refused unless the
/// admin allows it: a second holder of a pod's or the node's address takes its traffic.
fn check_address(
    policy: &TenantPolicy,
    node: &NodeFacts,
    text: &str,
) -> std::result::Result<(), String> {
    if policy.allow_cluster_addresses {
        return Ok(());
    }
    let Some(ip) = text
        .parse::<IpNet>()
        .map(|n| n.addr())
        .or_else(|_| text.parse::<IpAddr>())
        .ok()
    else {
        // The selection's own check, or the plugin, says what is wrong with it.
        return Ok(());
    };
    if let Some(cidr) = policy.cluster_cidrs.iter().find(|c| c.contains(&ip)) {
        return Err(cluster_address(
            ip,
            &format!("the cluster's network {cidr}"),
        ));
    }
    if node.holds(ip).map_err(|e| e.to_string())? {
        return Err(cluster_address(ip, "an address of the node"));
    }
    Ok(())
}

pub fn cluster_address(ip: IpAddr, what: &str) -> String {
    format!(
        "address {ip} is {what}: a pod holding it too would take that traffic \
         (allowClusterAddresses in the multus config allows it)"
    )
}

fn check_mac(node: &NodeFacts, text: &str) -> std::result::Result<(), String> {
    let Ok(mac) = netkit::parse_mac(text) else {
        return Ok(());
    };
    if mac[0] & 1 != 0 {
        return Err(format!(
            "mac {text} is a multicast address, which no interface may have"
        ));
    }
    if node.macs().map_err(|e| e.to_string())?.contains(&mac) {
        return Err(format!(
            "mac {text} is the MAC of one of the node's interfaces: a pod holding it would \
             take the node's frames"
        ));
    }
    Ok(())
}
