//! The `sbr` plugin (source-based routing), chained after an interface plugin: traffic from
//! each of the interface's addresses is looked up in a table of its own, which holds a default
//! route via the address's gateway and the interface's routes, moved out of the main table.
//! A pod with two interfaces then answers on each from the address it was reached on.
//!
//! As the reference: each address gets the first table from 100 up that no rule uses, a rule
//! `from <address> lookup <table>`, and the interface's main-table routes that belong to it
//! (source or gateway in its subnet, or neither); the interface's main-table routes then go.
//! With `table`, only the rules are added, to that table. `gateways` overrides the gateway per
//! family; `addSourceHints` keeps the subnet routes in the main table with the address as
//! source.
//!
//! Deliberate changes: a table that holds routes (a VRF's, say) is not picked even without a
//! rule; a prevResult without an address on `CNI_IFNAME` is refused instead of emptying the
//! interface's routes; DEL also finds the rules of addresses the interface no longer has (from
//! prevResult), and succeeds when the interface or namespace is gone; CHECK checks the rules
//! and tables.

use std::collections::BTreeSet;
use std::net::IpAddr;

use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, IpConfig, NetConf};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use netkit::netlink::{Link, Route, Rule, RT_SCOPE_LINK, RT_TABLE_MAIN};
use netkit::{Family, NetNs, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::sys::{open_netns, open_netns_for_del, sys, sys_ctx};

/// The plugin, as registered in the multi-call binary's table.
pub struct Sbr;

/// The first table ADD considers.
const FIRST_TABLE: u32 = 100;

/// sbr's own keys, as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    gateways: Vec<String>,
    #[serde(default)]
    add_source_hints: bool,
}

/// The checked configuration.
struct SbrConf {
    net: NetConf,
    table: Option<u32>,
    /// At most one gateway per family.
    gateways: Vec<IpAddr>,
    add_source_hints: bool,
}

impl SbrConf {
    fn parse(stdin: &[u8]) -> Result<SbrConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        let mut gateways: Vec<IpAddr> = Vec::new();
        for (i, text) in raw.gateways.iter().enumerate() {
            let gw: IpAddr = text.parse().map_err(|_| {
                CniError::invalid_config(format!(
                    "gateways[{i}]: {} is not an IP address",
                    cni::quote::quote(text)
                ))
            })?;
            if let Some(other) = gateways.iter().find(|g| g.is_ipv4() == gw.is_ipv4()) {
                return Err(CniError::invalid_config(format!(
                    "gateways[{i}]: {gw} is a second gateway of the family of {other}: give at \
                     most one IPv4 and one IPv6 gateway"
                )));
            }
            gateways.push(gw);
        }
        Ok(SbrConf {
            net,
            table: raw.table,
            gateways,
            add_source_hints: raw.add_source_hints,
        })
    }

    fn prev_result(&self) -> Result<Option<CniResult>, CniError> {
        self.net
            .prev_result
            .as_ref()
            .map(|prev| CniResult::from_value_at(prev, Some("prevResult")))
            .transpose()
    }

    /// The `gateways` entry of the address's family.
    fn configured_gateway(&self, ip: &IpConfig) -> Option<IpAddr> {
        let v4 = ip.address.addr().is_ipv4();
        self.gateways.iter().copied().find(|g| g.is_ipv4() == v4)
    }
}

/// The addresses of `prev` that are on `ifname`: those pointing at an interface of that name,
/// and those that name no interface (or one the result does not have).
fn addresses_on<'a>(prev: &'a CniResult, ifname: &str) -> Vec<&'a IpConfig> {
    prev.ips
        .iter()
        .filter(|ip| {
            ip.interface
                .and_then(|i| prev.interfaces.get(i))
                .is_none_or(|iface| iface.name == ifname)
        })
        .collect()
}

/// prevResult, which ADD and CHECK need, and its addresses on `CNI_IFNAME`.
fn required(conf: &SbrConf, args: &CmdArgs) -> Result<(CniResult, Vec<IpConfig>), CniError> {
    let prev = conf.prev_result()?.ok_or_else(|| {
        CniError::invalid_config(
            "sbr needs prevResult: chain it after the plugin that makes the interface",
        )
    })?;
    let ips: Vec<IpConfig> = addresses_on(&prev, &args.ifname)
        .into_iter()
        .cloned()
        .collect();
    if ips.is_empty() {
        return Err(CniError::invalid_config(format!(
            "prevResult has no IP address on {:?}: sbr routes by the interface's addresses",
            args.ifname
        )));
    }
    Ok((prev, ips))
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for Sbr {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = SbrConf::parse(&args.stdin)?;
        let (prev, ips) = required(&conf, args)?;
        let pod = open_netns(&args.netns)?;
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let ctx = format!("sbr for {:?} in netns {}", args.ifname, args.netns);
        match conf.table {
            Some(table) => {
                for ip in &ips {
                    nl.add_rule(&Rule::to_table(host(ip), table))
                        .map_err(sys_ctx(&ctx))?;
                }
            }
            None => {
                let link = nl.link(&args.ifname).map_err(sys_ctx(&ctx))?;
                route_by_source(&nl, &link, &conf, &ips).map_err(sys_ctx(&ctx))?;
            }
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Only what DEL needs: a config whose other keys no longer validate must still let
        // the attachment go.
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        let raw: Raw = cni::config::parse_plugin_config(&args.stdin).unwrap_or(Raw {
            table: None,
            gateways: Vec::new(),
            add_source_hints: false,
        });
        let Some(pod) = open_netns_for_del(&args.netns)? else {
            return Ok(());
        };
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let mut addrs: BTreeSet<IpAddr> = BTreeSet::new();
        if let Some(link) = nl.link_by_name(&args.ifname).map_err(sys)? {
            addrs.extend(
                nl.addrs(Some(link.index), None)
                    .map_err(sys)?
                    .into_iter()
                    .map(|a| a.net.addr()),
            );
        }
        // The addresses ADD routed, when the interface has lost them (or is gone).
        if let Some(prev) = net
            .prev_result
            .as_ref()
            .and_then(|p| CniResult::from_value_at(p, Some("prevResult")).ok())
        {
            addrs.extend(
                addresses_on(&prev, &args.ifname)
                    .iter()
                    .map(|ip| ip.address.addr()),
            );
        }
        tidy_rules(&nl, &pod, &addrs, raw.table)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = SbrConf::parse(&args.stdin)?;
        let (_, ips) = required(&conf, args)?;
        let pod = open_netns(&args.netns)?;
        let nl = Netlink::in_ns(&pod).map_err(sys)?;
        let link = check::pod_link(&nl, args)?;
        for ip in &ips {
            let family = Family::of_net(&ip.address);
            let want = host(ip);
            let rule = nl
                .rules(family)
                .map_err(sys)?
                .into_iter()
                .find(|r| r.to_table && r.src == Some(want))
                .ok_or_else(|| check::fail(format!("no rule routes traffic from {want}")))?;
            if conf.table.is_some_and(|t| t != rule.table) {
                return Err(check::fail(format!(
                    "traffic from {want} is looked up in table {}, the config says {}",
                    rule.table,
                    conf.table.unwrap_or_default()
                )));
            }
            if conf.table.is_none() {
                let routes = nl.routes(family, Some(rule.table)).map_err(sys)?;
                if !routes.iter().any(|r| r.oif == Some(link.index)) {
                    return Err(check::fail(format!(
                        "table {} (for traffic from {want}) has no route out of {:?}",
                        rule.table, args.ifname
                    )));
                }
            }
        }
        Ok(())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = SbrConf::parse(config)?;
        conf.prev_result().map(drop)
    }
}

/// The address alone, as the rules match it.
fn host(ip: &IpConfig) -> IpNet {
    IpNet::from(ip.address.addr())
}

/// A table for each address, the rules to them, and the interface's main-table routes moved.
fn route_by_source(
    nl: &Netlink,
    link: &Link,
    conf: &SbrConf,
    ips: &[IpConfig],
) -> netkit::Result<()> {
    let mut used: BTreeSet<u32> = BTreeSet::new();
    let mut moved: Vec<Route> = Vec::new();
    for family in [Family::V4, Family::V6] {
        used.extend(nl.rules(family)?.into_iter().map(|r| r.table));
        for r in nl.routes(family, None)? {
            if r.table == RT_TABLE_MAIN && r.oif == Some(link.index) {
                moved.push(r.clone());
            }
            used.insert(r.table);
        }
    }
    let free_from = |mut table: u32, used: &BTreeSet<u32>| {
        while used.contains(&table) {
            table += 1;
        }
        table
    };
    let mut table = free_from(FIRST_TABLE, &used);
    for ip in ips {
        nl.add_rule(&Rule::to_table(host(ip), table))?;
        used.insert(table);
        let configured = conf.configured_gateway(ip);
        if let Some(gw) = configured.or(ip.gateway) {
            // ipnet's defaults are 0.0.0.0/0 and ::/0.
            let default: IpNet = match gw {
                IpAddr::V4(_) => Ipv4Net::default().into(),
                IpAddr::V6(_) => Ipv6Net::default().into(),
            };
            nl.add_route(&Route::new(default).via(gw).dev(link.index).table(table))?;
        }
        // A route belongs to the address when its source or gateway is in the address's
        // subnet, or when it has neither.
        for r in &moved {
            let belongs = r.src.is_some_and(|s| ip.address.contains(&s))
                || r.gateway.is_some_and(|g| ip.address.contains(&g))
                || (r.src.is_none() && r.gateway.is_none());
            // The configured gateway's default route stays the table's.
            let replaces_configured = configured
                .is_some_and(|gw| r.is_default() && Family::of(&gw) == Family::of_net(&r.dst));
            if belongs && !replaces_configured {
                nl.replace_route(&Route { table, ..r.clone() })?;
            }
        }
        table = free_from(table + 1, &used);
    }
    if conf.add_source_hints {
        for ip in ips {
            let hint = Route::new(ip.address.trunc())
                .dev(link.index)
                .src(ip.address.addr())
                .scope(RT_SCOPE_LINK);
            // Best effort, as the reference: the moved routes are there either way.
            if let Err(e) = nl.replace_route(&hint) {
                eprintln!("sbr: adding the source hint for {}: {e}", ip.address);
            }
        }
        for r in moved.iter().filter(|r| r.scope != RT_SCOPE_LINK) {
            if let Err(e) = nl.del_route(r) {
                eprintln!("sbr: deleting a moved route from the main table: {e}");
            }
        }
        return Ok(());
    }
    // Only now: the gateways above had to stay reachable through the main table.
    for r in &moved {
        nl.del_route(r)?;
    }
    Ok(())
}

/// Deletes the rules from any of `addrs` (in `table` only, when set). Keeps going past a
/// failure and reports them all.
fn tidy_rules(
    nl: &Netlink,
    pod: &NetNs,
    addrs: &BTreeSet<IpAddr>,
    table: Option<u32>,
) -> Result<(), CniError> {
    let mut failures = Vec::new();
    for family in [Family::V4, Family::V6] {
        for rule in nl.rules(family).map_err(sys)? {
            let ours = rule.src.is_some_and(|s| addrs.contains(&s.addr()))
                && table.is_none_or(|t| t == rule.table);
            if !ours {
                continue;
            }
            match nl.del_rule(&rule) {
                Err(e) if e.errno() != Some(libc::ENOENT) => failures.push(e.to_string()),
                _ => {}
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "sbr DEL in netns {}: {}",
            pod.path().display(),
            failures.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<SbrConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"sbr"{extra}}}"#);
        SbrConf::parse(json.as_bytes())
    }

    #[test]
    fn options() {
        let c = parse(r#","table":500,"gateways":["10.0.0.1","fd00::1"],"addSourceHints":true"#)
            .expect("parsed");
        assert_eq!(c.table, Some(500));
        assert_eq!(c.gateways.len(), 2);
        assert!(c.add_source_hints);
        let code = |extra: &str| parse(extra).err().map(|e| e.code);
        assert_eq!(code(r#","table":-1"#), Some(6));
        assert_eq!(code(r#","gateways":["10.0.0.1","10.0.0.2"]"#), Some(7));
        assert_eq!(code(r#","gateways":["10.0.0.1/24"]"#), Some(7));
        assert_eq!(code(r#","gateways":"10.0.0.1""#), Some(6));
    }

    #[test]
    fn addresses_on_the_interface() {
        let prev = CniResult::from_value_at(
            &serde_json::json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0"}, {"name": "net1"}],
                "ips": [
                    {"address": "10.0.0.5/24", "interface": 0},
                    {"address": "10.1.0.5/24", "interface": 1},
                    {"address": "10.2.0.5/24"},
                    {"address": "10.3.0.5/24", "interface": 7}
                ]
            }),
            None,
        )
        .expect("a result");
        let on: Vec<String> = addresses_on(&prev, "net1")
            .iter()
            .map(|ip| ip.address.to_string())
            .collect();
        assert_eq!(on, ["10.1.0.5/24", "10.2.0.5/24", "10.3.0.5/24"]);
    }
}
