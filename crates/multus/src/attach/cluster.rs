//! What the cluster network holds, which a secondary network must not take: its networks (the
//! admin's `clusterCIDRs`, the subnets of the cluster network's addresses, its routes) and its
//! interfaces on the node (the cluster network's bridge, the host ends its result names).

use std::net::IpAddr;

use cni::CniResult;
use ipnet::IpNet;
use serde_json::Value;

use crate::config::TenantPolicy;
use crate::error::{Error, Result};
use crate::plan::policy::{self, NodeFacts};
use crate::plan::Attachment;

/// The plugin keys that name an interface of the node a network attaches to.
const NODE_INTERFACE_KEYS: &[&str] = &["bridge", "master", "device"];

pub struct ClusterView {
    nets: Vec<IpNet>,
    node_interfaces: Vec<String>,
}

impl ClusterView {
    /// The view once the cluster network (`cluster`) is attached with `result`.
    pub fn new(policy: &TenantPolicy, cluster: &Attachment, result: &CniResult) -> ClusterView {
        let mut nets = policy.cluster_cidrs.clone();
        nets.extend(result.ips.iter().map(|ip| ip.address.trunc()));
        nets.extend(
            result
                .routes
                .iter()
                .filter(|r| r.dst.prefix_len() != 0)
                .map(|r| r.dst.trunc()),
        );
        nets.retain(|n| !is_link_local_or_multicast(n));
        nets.sort();
        nets.dedup();
        let mut node_interfaces: Vec<String> = result
            .interfaces
            .iter()
            .filter(|i| i.sandbox.is_empty())
            .map(|i| i.name.clone())
            .collect();
        node_interfaces.extend(node_interface_names(cluster));
        ClusterView {
            nets,
            node_interfaces,
        }
    }

    /// Refuses a secondary network whose plugins attach to the cluster network's bridge or its
    /// host interfaces: its pod would sit on the cluster network beside the others, with
    /// addresses of its choosing.
    pub fn check_interfaces(&self, policy: &TenantPolicy, a: &Attachment) -> Result<()> {
        if policy.allow_cluster_interfaces {
            return Ok(());
        }
        for name in node_interface_names(a) {
            if self.node_interfaces.contains(&name) {
                return Err(Error::Request {
                    network: a.delegate.name.clone(),
                    ifname: a.ifname.clone(),
                    msg: format!(
                        "it attaches to {name}, an interface of the cluster network on the node: \
                         a pod there would join the cluster network with addresses of its own \
                         choosing (allowClusterInterfaces in the multus config allows it)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Refuses a secondary network's addresses inside the cluster's networks or held by the
    /// node.
    pub fn check_addresses(
        &self,
        policy: &TenantPolicy,
        node: &NodeFacts,
        a: &Attachment,
        result: &CniResult,
    ) -> Result<()> {
        let refuse = |msg: String| Error::Request {
            network: a.delegate.name.clone(),
            ifname: a.ifname.clone(),
            msg,
        };
        if policy.allow_cluster_addresses {
            return Ok(());
        }
        for ip in result.ips.iter().map(|ip| ip.address.addr()) {
            if let Some(net) = self.nets.iter().find(|n| n.contains(&ip)) {
                return Err(refuse(policy::cluster_address(
                    ip,
                    &format!("in the cluster's network {net}"),
                )));
            }
            if node.holds(ip)? {
                return Err(refuse(policy::cluster_address(
                    ip,
                    "an address of the node",
                )));
            }
        }
        Ok(())
    }

    /// The cluster's network that `dst` overlaps, if any; a default route overlaps them all
    /// and is left to [`super::route::demote_defaults`].
    pub fn overlapped_by(&self, dst: &IpNet) -> Option<IpNet> {
        if dst.prefix_len() == 0 || is_link_local_or_multicast(dst) {
            return None;
        }
        self.nets
            .iter()
            .find(|n| n.contains(&dst.network()) || dst.contains(&n.network()))
            .copied()
    }
}

/// The node interfaces an attachment's plugins name (`bridge`, `master`, `device`).
fn node_interface_names(a: &Attachment) -> Vec<String> {
    a.delegate
        .network
        .plugins()
        .iter()
        .flat_map(|p| NODE_INTERFACE_KEYS.iter().filter_map(|k| p.get(*k)))
        .filter_map(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

fn is_link_local_or_multicast(net: &IpNet) -> bool {
    match net.addr() {
        IpAddr::V4(a) => a.is_link_local() || a.is_multicast(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80 || a.is_multicast(),
    }
}
