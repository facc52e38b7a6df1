//! The `vrf` plugin, chained after an interface plugin: puts `CNI_IFNAME` into a VRF of the
//! pod (made on first use, with its own routing table), so the interface's traffic is routed
//! apart from the pod's other interfaces.
//!
//! As the reference: a missing VRF is created (with `table`, or the first table no other VRF
//! uses) and brought up; the interface joins it, keeping its IPv6 addresses and, as current
//! releases do, its routes, which move to the VRF's table; DEL takes the interface out and
//! deletes the VRF with its last member.
//!
//! Deliberate changes: a table that holds routes or is named by a rule is never picked for a
//! new VRF; DEL succeeds when the interface is gone; CHECK also checks the VRF's table.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cni::keys::Keys;
use cni::quote::quote;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use netkit::netlink::{AddrOpts, Link, Route, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN};
use netkit::{Family, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::sys::{open_netns, open_netns_for_del, sys, sys_ctx};

/// The plugin, as registered in the multi-call binary's table.
pub struct Vrf;

/// How long ADD waits for the kernel to list a restored IPv6 address in the VRF's table.
const ADDRESS_WAIT: Duration = Duration::from_millis(2500);
const ADDRESS_POLL: Duration = Duration::from_millis(10);

/// vrf's own keys, as written.
#[derive(Deserialize)]
struct Raw {
    #[serde(default, rename = "vrfname")]
    vrf_name: String,
    #[serde(default)]
    table: u32,
}

/// The checked configuration.
struct VrfConf {
    net: NetConf,
    name: String,
    /// `None`: a free table, for a VRF this call creates.
    table: Option<u32>,
}

impl VrfConf {
    fn parse(stdin: &[u8]) -> Result<VrfConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        if raw.vrf_name.is_empty() {
            return Err(CniError::invalid_config(
                "vrfname: required: the name of the VRF to put the interface in",
            ));
        }
        netkit::netlink::validate_ifname(&raw.vrf_name).map_err(|_| {
            CniError::invalid_config(format!(
                "vrfname: {} is not an interface name: 1 to 15 bytes, no '/', ':' or spaces",
                quote(&raw.vrf_name)
            ))
        })?;
        Ok(VrfConf {
            net,
            name: raw.vrf_name,
            table: (raw.table != 0).then_some(raw.table),
        })
    }

    fn prev_result(&self) -> Result<CniResult, CniError> {
        let prev = self.net.prev_result.as_ref().ok_or_else(|| {
            CniError::invalid_config(
                "vrf needs prevResult: chain it after the plugin that makes the interface",
            )
        })?;
        CniResult::from_value_at(prev, Some("prevResult"))
    }
}

/// The VRF called `name` in the pod, if there is one; a link of that name that is not a VRF
/// is an error.
fn find_vrf(nl: &Netlink, name: &str) -> Result<Option<Link>, CniError> {
    match nl.link_by_name(name).map_err(sys)? {
        Some(link) if link.kind.as_deref() == Some("vrf") => Ok(Some(link)),
        Some(link) => Err(CniError::invalid_config(format!(
            "vrfname: the pod's {} is a {}, not a VRF: choose another name",
            quote(name),
            link.kind.as_deref().unwrap_or("device")
        ))),
        None => Ok(None),
    }
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for Vrf {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = VrfConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        let pod = open_netns(&args.netns)?;
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let ctx = format!("vrf {:?} in netns {}", conf.name, args.netns);
        let iface = nl.link(&args.ifname).map_err(sys_ctx(&ctx))?;
        if let Some(master) = iface.master {
            let name = nl
                .link_by_index(master)
                .map_err(sys)?
                .map_or_else(|| master.to_string(), |m| m.name);
            return Err(CniError::invalid_config(format!(
                "interface {:?} already has a master, {name:?}: it cannot join a VRF too",
                args.ifname
            )));
        }
        let vrf = match find_vrf(&nl, &conf.name)? {
            Some(vrf) => {
                if let (Some(want), Some(has)) = (conf.table, vrf.vrf_table) {
                    if want != has {
                        return Err(CniError::invalid_config(format!(
                            "table: the pod's VRF {} uses table {has}, not {want}: leave \
                             \"table\" out or give {has}",
                            quote(&conf.name)
                        )));
                    }
                }
                vrf
            }
            None => {
                let table = match conf.table {
                    Some(t) => t,
                    None => free_table(&nl).map_err(sys_ctx(&ctx))?,
                };
                nl.add_vrf(&conf.name, table).map_err(sys_ctx(&ctx))?;
                let vrf = nl.link(&conf.name).map_err(sys_ctx(&ctx))?;
                nl.set_up(vrf.index).map_err(sys_ctx(&ctx))?;
                vrf
            }
        };
        join(&nl, &vrf, &iface).map_err(sys_ctx(&ctx))?;
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // A config ADD refuses joined nothing to any VRF: nothing to undo.
        let _: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        let Ok(conf) = VrfConf::parse(&args.stdin) else {
            return Ok(());
        };
        let Some(pod) = open_netns_for_del(&args.netns)? else {
            return Ok(());
        };
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let ctx = format!("vrf {:?} in netns {}", conf.name, args.netns);
        // No VRF of that name (or a link of another kind, which ADD refused to use): nothing
        // joined it.
        let Ok(Some(vrf)) = find_vrf(&nl, &conf.name) else {
            return Ok(());
        };
        if let Some(iface) = nl.link_by_name(&args.ifname).map_err(sys)? {
            if iface.master == Some(vrf.index) {
                nl.set_master(iface.index, None).map_err(sys_ctx(&ctx))?;
            }
        }
        let members = nl
            .links()
            .map_err(sys)?
            .into_iter()
            .filter(|l| l.master == Some(vrf.index))
            .count();
        if members == 0 {
            nl.del_link_if_exists(vrf.index).map_err(sys_ctx(&ctx))?;
        }
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = VrfConf::parse(&args.stdin)?;
        conf.prev_result()?;
        let pod = open_netns(&args.netns)?;
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let vrf = find_vrf(&nl, &conf.name)?
            .ok_or_else(|| check::fail(format!("the pod has no VRF {:?}", conf.name)))?;
        let iface = check::pod_link(&nl, args)?;
        if iface.master != Some(vrf.index) {
            return Err(check::fail(format!(
                "interface {:?} is not in VRF {:?}",
                args.ifname, conf.name
            )));
        }
        match (conf.table, vrf.vrf_table) {
            (Some(want), Some(has)) if want != has => Err(check::fail(format!(
                "VRF {:?} uses table {has}, the config says {want}",
                conf.name
            ))),
            _ => Ok(()),
        }
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = VrfConf::parse(config)?;
        if conf.net.prev_result.is_some() {
            conf.prev_result()?;
        }
        Ok(())
    }
}

/// The first table from 1 that no VRF, rule or route of the pod uses.
fn free_table(nl: &Netlink) -> netkit::Result<u32> {
    let mut used: BTreeSet<u32> = nl
        .links()?
        .into_iter()
        .filter_map(|l| l.vrf_table)
        .collect();
    for family in [Family::V4, Family::V6] {
        used.extend(nl.rules(family)?.into_iter().map(|r| r.table));
        used.extend(nl.routes(family, None)?.into_iter().map(|r| r.table));
    }
    let mut table = 1;
    while used.contains(&table) {
        table += 1;
    }
    Ok(table)
}

/// Puts `iface` into `vrf`. The kernel drops the interface's routes, and its IPv6 addresses
/// unless `keep_addr_on_down` is set, as it joins: the addresses are added back, and the routes
/// go to the VRF's table.
fn join(nl: &Netlink, vrf: &Link, iface: &Link) -> netkit::Result<()> {
    let global_v6: Vec<_> = nl
        .addrs(Some(iface.index), Some(Family::V6))?
        .into_iter()
        .filter(|a| a.scope == RT_SCOPE_UNIVERSE)
        .collect();
    let mut routes: Vec<Route> = Vec::new();
    for family in [Family::V4, Family::V6] {
        routes.extend(
            nl.routes(family, Some(RT_TABLE_MAIN))?
                .into_iter()
                .filter(|r| r.oif == Some(iface.index) && r.scope == RT_SCOPE_UNIVERSE),
        );
    }
    nl.set_master(iface.index, Some(vrf.index))?;
    let table = vrf.vrf_table.unwrap_or(RT_TABLE_MAIN);
    let after = nl.addrs(Some(iface.index), Some(Family::V6))?;
    for addr in global_v6
        .iter()
        .filter(|a| !after.iter().any(|b| b.net == a.net))
    {
        let opts = AddrOpts {
            nodad: addr.flags & libc::IFA_F_NODAD != 0,
            noprefixroute: false,
        };
        nl.add_addr(iface.index, addr.net, opts)?;
        // The gateway routes below need the address's local route in the VRF's table.
        let deadline = Instant::now() + ADDRESS_WAIT;
        while !nl
            .routes(Family::V6, None)?
            .iter()
            .any(|r| r.dst.addr() == addr.net.addr() && r.oif == Some(iface.index))
        {
            if Instant::now() > deadline {
                return Err(netkit::Error::Invalid(format!(
                    "the kernel did not list {} in table {table} within {ADDRESS_WAIT:?}",
                    addr.net
                )));
            }
            std::thread::sleep(ADDRESS_POLL);
        }
    }
    for r in routes {
        nl.replace_route(&Route { table, ..r })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<VrfConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"vrf"{extra}}}"#);
        VrfConf::parse(json.as_bytes())
    }

    #[test]
    fn options() {
        let c = parse(r#","vrfname":"blue","table":42"#).expect("parsed");
        assert_eq!((c.name.as_str(), c.table), ("blue", Some(42)));
        assert_eq!(parse(r#","vrfname":"blue""#).expect("parsed").table, None);
        let code = |extra: &str| parse(extra).err().map(|e| e.code);
        assert_eq!(code(""), Some(7));
        assert_eq!(code(r#","vrfname":"a/b""#), Some(7));
        assert_eq!(code(r#","vrfname":"blue","table":-1"#), Some(6));
        assert_eq!(code(r#","vrfname":7"#), Some(6));
    }
}
