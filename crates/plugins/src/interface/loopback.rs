//! The `loopback` plugin: brings the pod's `lo` up (ADD) or down (DEL), whatever `CNI_IFNAME`
//! says. Runtimes run it for every sandbox (containerd will not start one without it).
//!
//! Behaviour follows containernetworking/plugins' loopback: the result names `lo` with the
//! all-zero MAC and its first IPv4 and first IPv6 address; chained after another plugin, ADD
//! passes the `prevResult` on instead; CHECK only asks that `lo` be up; DEL of a namespace that
//! is gone (or without one) succeeds. Its errors say which namespace, where the reference's
//! mostly do not.

use cni::{CmdArgs, CniError, CniResult, Interface, IpConfig, NetConf};
use netkit::{Family, NetNs, Netlink};

use crate::support::sys::{open_netns, open_netns_for_del, sys_ctx};

/// The plugin, as registered in the multi-call binary's table.
pub struct Loopback;

const LO: &str = "lo";

/// The MAC the result gives `lo`, as the reference's does.
const LO_MAC: &str = "00:00:00:00:00:00";

impl cni::Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let prev = parse(&args.stdin)?;
        let pod = open_netns(&args.netns)?;
        let (v4, v6) = bring_up(&pod)?;
        if let Some(prev) = prev {
            return Ok(prev);
        }
        let ips = [v4, v6]
            .into_iter()
            .flatten()
            .map(|address| IpConfig {
                address,
                gateway: None,
                interface: Some(0),
            })
            .collect();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: LO.into(),
                mac: LO_MAC.into(),
                sandbox: args.netns.clone(),
                ..Interface::default()
            }],
            ips,
            ..CniResult::default()
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let Some(pod) = open_netns_for_del(&args.netns)? else {
            return Ok(());
        };
        let what = where_lo(&pod);
        let nl = Netlink::in_ns(&pod).map_err(sys_ctx(&what))?;
        let lo = nl.link(LO).map_err(sys_ctx(&what))?;
        nl.set_down(lo.index)
            .map_err(sys_ctx(format!("setting {what} down")))
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        parse(&args.stdin)?;
        let pod = open_netns(&args.netns)?;
        let what = where_lo(&pod);
        let nl = Netlink::in_ns(&pod).map_err(sys_ctx(&what))?;
        let lo = nl.link(LO).map_err(sys_ctx(&what))?;
        if !lo.up {
            return Err(crate::support::check::fail(format!("{what} is down")));
        }
        Ok(())
    }

    /// loopback has no options; a `prevResult` must be a result.
    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        parse(config).map(drop)
    }
}

/// The config's `prevResult`, when loopback is chained after another plugin.
fn parse(config: &[u8]) -> Result<Option<CniResult>, CniError> {
    let conf: NetConf = cni::config::parse_plugin_config(config)?;
    conf.prev_result
        .as_ref()
        .map(|prev| CniResult::from_value_at(prev, Some("prevResult")))
        .transpose()
}

fn where_lo(pod: &NetNs) -> String {
    format!("{LO} in netns {}", pod.path().display())
}

/// Sets `lo` up and returns its first IPv4 and first IPv6 address, after checking that every
/// address it has is a loopback one.
fn bring_up(pod: &NetNs) -> Result<(Option<ipnet::IpNet>, Option<ipnet::IpNet>), CniError> {
    let what = where_lo(pod);
    let nl = Netlink::in_ns(pod).map_err(sys_ctx(&what))?;
    let lo = nl.link(LO).map_err(sys_ctx(&what))?;
    nl.set_up(lo.index)
        .map_err(sys_ctx(format!("setting {what} up")))?;
    let first = |family| -> Result<Option<ipnet::IpNet>, CniError> {
        let addrs = nl
            .addrs(Some(lo.index), Some(family))
            .map_err(sys_ctx(format!("listing the addresses of {what}")))?;
        if let Some(other) = addrs.iter().find(|a| !a.net.addr().is_loopback()) {
            return Err(CniError::internal(format!(
                "{what} has the address {}, which is not a loopback address",
                other.net
            )));
        }
        Ok(addrs.first().map(|a| a.net))
    };
    Ok((first(Family::V4)?, first(Family::V6)?))
}
