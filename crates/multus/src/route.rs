//! The pod's interfaces: whether a name is taken, and the default routes `default-route` moves.

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
        let nl = Netlink::in_ns(&ns).map_err(|e| Error::Netlink(e.to_string()))?;
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
            .map_err(|e| Error::Netlink(e.to_string()))
    }
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
        Error::Netlink(format!("{what} on interface {ifname} in {netns}: {e}"))
    };
    let link = nl
        .link_by_name(ifname)
        .map_err(|e| fail("looking up the interface", e))?
        .ok_or_else(|| Error::Netlink(format!("interface {ifname} is not in {netns}")))?;
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
        .map_err(|e| Error::Netlink(e.to_string()))?;
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
