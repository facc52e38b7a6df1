//! The pod's interfaces: whether a name is taken, the default routes `default-route` moves, and
//! the secondary networks' default routes kept behind the pod's own.

use std::net::IpAddr;

use cni::CniResult;
use ipnet::IpNet;
use netkit::netlink::{Route, RT_TABLE_MAIN};
use netkit::{Family, NetNs, Netlink};

use crate::error::{Error, Result};

/// A netlink socket in the pod's namespace, opened once per command.
pub struct PodNetns {
    path: String,
    nl: Netlink,
}

impl PodNetns {
    /// Opens `netns`; an unusable path is code 8, naming it.
    pub fn open(netns: &str) -> Result<PodNetns> {
        let ns = NetNs::open(netns).map_err(|e| {
            Error::from(cni::CniError::new(
                cni::Code::InvalidNetns,
                format!("CNI_NETNS {netns}: {e}"),
            ))
        })?;
        let nl = Netlink::in_ns(&ns)
            .map_err(|e| Error::netlink(format!("opening netlink in {netns}"), e))?;
        Ok(PodNetns {
            path: netns.to_owned(),
            nl,
        })
    }

    /// Whether the pod already has an interface named `ifname`.
    pub fn has_interface(&self, ifname: &str) -> Result<bool> {
        self.nl
            .link_by_name(ifname)
            .map(|l| l.is_some())
            .map_err(|e| Error::netlink(format!("looking up {ifname} in {}", self.path), e))
    }
}

/// A secondary network's default route, given a metric behind the one leading the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demoted {
    pub gateway: Option<IpAddr>,
    pub metric: u32,
    /// The interface whose default route leads.
    pub leader: String,
}

impl std::fmt::Display for Demoted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "its default route")?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        write!(
            f,
            " got metric {}, behind the pod's default route on {}",
            self.metric, self.leader
        )
    }
}

/// Puts interface `ifname`'s default routes of each of `families` behind every other default
/// route of that family in the pod's main table, so that a secondary network never takes the
/// pod's traffic unless the pod asks for it. A family with no other default route keeps its
/// route as it is. `result` gets the new metrics, so that the cache and CHECK match the kernel.
pub fn demote_defaults(
    pod: &PodNetns,
    ifname: &str,
    families: &[Family],
    result: &mut CniResult,
) -> Result<Vec<Demoted>> {
    let (nl, netns) = (&pod.nl, &pod.path);
    let fail = |what: &str, e: netkit::Error| {
        Error::netlink(format!("{what} on interface {ifname} in {netns}"), e)
    };
    let mut demoted = Vec::new();
    for &family in families {
        if !result
            .routes
            .iter()
            .any(|r| r.dst.prefix_len() == 0 && Family::of_net(&r.dst) == family)
        {
            continue;
        }
        let link = nl
            .link_by_name(ifname)
            .map_err(|e| fail("looking up the interface", e))?
            .ok_or_else(|| Error::PodState(format!("interface {ifname} is not in {netns}")))?;
        let defaults: Vec<Route> = nl
            .routes(family, Some(RT_TABLE_MAIN))
            .map_err(|e| fail("listing routes", e))?
            .into_iter()
            .filter(Route::is_default)
            .collect();
        let metric = |r: &Route| r.metric.unwrap_or(0);
        // Of equal metrics the first listed leads, as the kernel picks it.
        let Some((lead_metric, lead_oif)) = defaults
            .iter()
            .filter(|r| r.oif != Some(link.index))
            .map(|r| (metric(r), r.oif))
            .min_by_key(|&(m, _)| m)
        else {
            continue;
        };
        let leader = match lead_oif {
            Some(oif) => nl
                .link_by_index(oif)
                .map_err(|e| fail("looking up the leading interface", e))?
                .map_or_else(|| format!("interface {oif}"), |l| l.name),
            None => "no interface".to_owned(),
        };
        for ours in defaults.iter().filter(|r| r.oif == Some(link.index)) {
            if metric(ours) > lead_metric {
                continue;
            }
            let new_metric = lead_metric.saturating_add(1);
            // Deleted first: a delete without a metric would match the new route too.
            nl.del_route(ours)
                .map_err(|e| fail("removing a default route", e))?;
            let moved = Route {
                metric: Some(new_metric),
                ..ours.clone()
            };
            nl.add_route_beside(&moved)
                .map_err(|e| fail("adding the default route back behind the pod's", e))?;
            for r in result.routes.iter_mut().filter(|r| {
                r.dst.prefix_len() == 0
                    && Family::of_net(&r.dst) == family
                    && r.table.is_none_or(|t| t == RT_TABLE_MAIN)
                    && (r.gw.is_none() || r.gw == ours.gateway)
            }) {
                r.priority = Some(new_metric);
            }
            demoted.push(Demoted {
                gateway: ours.gateway,
                metric: new_metric,
                leader: leader.clone(),
            });
        }
    }
    Ok(demoted)
}

/// A secondary network's route that was removed: it led into the cluster's network `into`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    pub dst: IpNet,
    pub gateway: Option<IpAddr>,
    pub into: IpNet,
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "its route to {}", self.dst)?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        write!(
            f,
            " was removed: it overlaps the cluster's network {}, whose traffic it would take",
            self.into
        )
    }
}

/// Removes interface `ifname`'s routes (main table, both families) whose destination overlaps
/// a network of the cluster (`overlapped_by` tells which), from the pod and from `result`.
pub fn drop_overlapping(
    pod: &PodNetns,
    ifname: &str,
    overlapped_by: impl Fn(&IpNet) -> Option<IpNet>,
    result: &mut CniResult,
) -> Result<Vec<Dropped>> {
    let (nl, netns) = (&pod.nl, &pod.path);
    let fail = |what: &str, e: netkit::Error| {
        Error::netlink(format!("{what} on interface {ifname} in {netns}"), e)
    };
    let mut dropped = Vec::new();
    // A delegate that made no interface of this name (a chain that only configures) has no
    // routes on it either.
    let link = nl
        .link_by_name(ifname)
        .map_err(|e| fail("looking up the interface", e))?;
    if let Some(link) = link {
        for family in [Family::V4, Family::V6] {
            let routes = nl
                .routes(family, Some(RT_TABLE_MAIN))
                .map_err(|e| fail("listing routes", e))?;
            for route in routes.iter().filter(|r| r.oif == Some(link.index)) {
                let Some(into) = overlapped_by(&route.dst) else {
                    continue;
                };
                match nl.del_route(route) {
                    Err(e) if e.errno() != Some(libc::ESRCH) => {
                        return Err(fail("removing a route into the cluster's network", e))
                    }
                    _ => {}
                }
                dropped.push(Dropped {
                    dst: route.dst,
                    gateway: route.gateway,
                    into,
                });
            }
        }
    }
    result.routes.retain(|r| overlapped_by(&r.dst).is_none());
    Ok(dropped)
}

/// What to do with one interface's default routes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefaultRouteChange<'a> {
    pub remove_v4: bool,
    pub remove_v6: bool,
    pub add: &'a [IpAddr],
}

impl DefaultRouteChange<'_> {
    pub fn is_empty(&self) -> bool {
        !self.remove_v4 && !self.remove_v6 && self.add.is_empty()
    }

    fn removes(&self, family: Family) -> bool {
        match family {
            Family::V4 => self.remove_v4,
            Family::V6 => self.remove_v6,
        }
    }
}

/// Applies `change` to interface `ifname` in the pod, and to `result` so that what is cached
/// and reported matches the kernel.
pub fn apply(
    pod: &PodNetns,
    ifname: &str,
    change: &DefaultRouteChange,
    result: &mut CniResult,
) -> Result<()> {
    let (nl, netns) = (&pod.nl, &pod.path);
    let fail = |what: &str, e: netkit::Error| {
        Error::netlink(format!("{what} on interface {ifname} in {netns}"), e)
    };
    let link = nl
        .link_by_name(ifname)
        .map_err(|e| fail("looking up the interface", e))?
        .ok_or_else(|| Error::PodState(format!("interface {ifname} is not in {netns}")))?;
    for family in [Family::V4, Family::V6] {
        if !change.removes(family) {
            continue;
        }
        let routes = nl
            .routes(family, Some(RT_TABLE_MAIN))
            .map_err(|e| fail("listing routes", e))?;
        for route in routes
            .iter()
            .filter(|r| r.is_default() && r.oif == Some(link.index))
        {
            match nl.del_route(route) {
                Err(e) if e.errno() != Some(libc::ESRCH) => {
                    return Err(fail("removing a default route", e))
                }
                _ => {}
            }
        }
        result
            .routes
            .retain(|r| !(r.dst.prefix_len() == 0 && Family::of_net(&r.dst) == family));
    }
    for gw in change.add {
        let dst = match gw {
            IpAddr::V4(_) => IpNet::new(IpAddr::from([0u8; 4]), 0),
            IpAddr::V6(_) => IpNet::new(IpAddr::from([0u16; 8]), 0),
        }
        .map_err(|e| Error::Config {
            key: "default-route".to_owned(),
            msg: e.to_string(),
        })?;
        let route = Route::new(dst).via(*gw).dev(link.index);
        match nl.add_route(&route) {
            Err(e) if e.errno() != Some(libc::EEXIST) => {
                return Err(fail(&format!("adding the default route via {gw}"), e))
            }
            _ => {}
        }
        result.routes.push(cni::Route::new(dst, Some(*gw)));
    }
    Ok(())
}
