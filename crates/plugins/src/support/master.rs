//! The master (parent) interface of a macvlan or ipvlan: named in the config, or the one that
//! carries the default route, in the node's namespace or, with `linkInContainer`, in the pod's.

use cni::quote::quote;
use cni::CniError;
use netkit::netlink::Link;
use netkit::{NetNs, Netlink};

use crate::support::sys::sys;

/// The master link and a socket in the namespace where it lives.
pub struct Master {
    pub nl: Netlink,
    pub link: Link,
}

/// Where the master is looked up.
fn place(in_pod: bool) -> &'static str {
    if in_pod {
        "the pod's netns (linkInContainer)"
    } else {
        "the node's netns"
    }
}

/// Finds the master: `name`, or else the interface of the default route (IPv4 first).
pub fn resolve(name: Option<&str>, pod: &NetNs, in_pod: bool) -> Result<Master, CniError> {
    let nl = if in_pod {
        Netlink::in_ns(pod).map_err(sys)?
    } else {
        Netlink::new().map_err(sys)?
    };
    let link = match name {
        Some(name) => {
            // netkit's own message quotes the name whole.
            netkit::netlink::validate_ifname(name).map_err(|_| {
                CniError::invalid_config(format!(
                    "master: {} is not an interface name: 1 to 15 bytes, no '/', ':' or spaces",
                    quote(name)
                ))
            })?;
            nl.link_by_name(name).map_err(sys)?.ok_or_else(|| {
                CniError::invalid_config(format!(
                    "master: {} is not found in {}: set \"master\" to an existing interface",
                    quote(name),
                    place(in_pod)
                ))
            })?
        }
        None => {
            let index = nl.default_route_iface(None).map_err(sys)?.ok_or_else(|| {
                CniError::invalid_config(format!(
                    "master: not given, and {} has no default route to take it from: set \
                     \"master\"",
                    place(in_pod)
                ))
            })?;
            nl.link_by_index(index).map_err(sys)?.ok_or_else(|| {
                CniError::internal(format!(
                    "the default route's interface {index} disappeared in {}",
                    place(in_pod)
                ))
            })?
        }
    };
    Ok(Master { nl, link })
}

impl Master {
    /// Whether the node uses this link itself: it holds one of the node's addresses (but an
    /// IPv6 link-local one) or carries a default route.
    pub fn is_the_nodes(&self) -> Result<bool, CniError> {
        let index = self.link.index;
        let addressed = self
            .nl
            .addrs(Some(index), None)
            .map_err(sys)?
            .iter()
            .any(|a| !matches!(a.net.addr(), std::net::IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80));
        Ok(addressed || self.nl.default_route_iface(None).map_err(sys)? == Some(index))
    }
}

/// An MTU for a link on `master`: 0 (the master's) up to the master's MTU.
pub fn check_mtu(mtu: Option<u32>, master: &Link) -> Result<(), CniError> {
    match mtu {
        Some(mtu) if mtu > master.mtu => Err(CniError::invalid_config(format!(
            "mtu: {mtu} is larger than the MTU {} of master {}: use at most {}, or 0 for the \
             master's",
            master.mtu,
            quote(&master.name),
            master.mtu
        ))),
        _ => Ok(()),
    }
}

/// The `mtu` key as written: 0 means the master's MTU; negative or beyond u32 is refused.
pub fn parse_mtu(raw: i64) -> Result<Option<u32>, CniError> {
    match u32::try_from(raw) {
        Ok(0) => Ok(None),
        Ok(mtu) => Ok(Some(mtu)),
        Err(_) => Err(CniError::invalid_config(format!(
            "mtu: {raw} is out of range: use 0 (the master's MTU) up to the master's MTU"
        ))),
    }
}
