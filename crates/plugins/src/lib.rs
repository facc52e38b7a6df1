//! Interface plugins (bridge, ptp, macvlan, ipvlan, vlan, dummy, tap, host-device) and loopback
//! in [`interface`]; the chained tuning, sbr, vrf, bandwidth, portmap, firewall and passthru in
//! [`chained`]; what they share in `support`; and the table of plugins in the `cni-plugins`
//! multi-call binary.

pub mod chained;
pub mod interface;
mod support;
pub mod validate;

use chained::{bandwidth, firewall, passthru, portmap, sbr, tuning, vrf};
use cni::keys::Keys;
use interface::{bridge, dummy, host_device, ipvlan, loopback, macvlan, ptp, tap, vlan};
use support::sublink;

/// A plugin in the multi-call binary: the name it is installed under, and its implementation.
pub struct Entry {
    pub name: &'static str,
    pub kind: Kind,
    pub about: &'static str,
    pub plugin: &'static dyn cni::Plugin,
    /// The keys it reads besides those every config carries: for an IPAM plugin, in `ipam`.
    pub keys: fn() -> Keys,
}

/// What a plugin does: only IPAM plugins may stand in an interface plugin's `ipam`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Interface,
    Ipam,
}

/// Every plugin `cni-plugins` can act as.
pub const PLUGINS: &[Entry] = &[
    Entry {
        name: "bridge",
        kind: Kind::Interface,
        about: "bridge: a veth pair per attachment on a Linux bridge",
        plugin: &bridge::Bridge,
        keys: bridge::keys,
    },
    Entry {
        name: "macvlan",
        kind: Kind::Interface,
        about: "macvlan: a link with its own MAC address on a master interface",
        plugin: &macvlan::Macvlan,
        keys: macvlan::keys,
    },
    Entry {
        name: "ipvlan",
        kind: Kind::Interface,
        about: "ipvlan: a link sharing the MAC address of a master interface",
        plugin: &ipvlan::Ipvlan,
        keys: sublink::keys,
    },
    Entry {
        name: "vlan",
        kind: Kind::Interface,
        about: "vlan: an 802.1Q link on a master interface",
        plugin: &vlan::Vlan,
        keys: vlan::keys,
    },
    Entry {
        name: "ptp",
        kind: Kind::Interface,
        about: "ptp: a veth pair per attachment, routed by the node without a bridge",
        plugin: &ptp::Ptp,
        keys: ptp::keys,
    },
    Entry {
        name: "dummy",
        kind: Kind::Interface,
        about: "dummy: a link of its own in the pod, with addresses but no traffic out",
        plugin: &dummy::Dummy,
        keys: dummy::keys,
    },
    Entry {
        name: "tap",
        kind: Kind::Interface,
        about: "tap: a persistent tap device in the pod, for a VM inside it",
        plugin: &tap::Tap,
        keys: tap::keys,
    },
    Entry {
        name: "host-local",
        kind: Kind::Ipam,
        about: "host-local IPAM: addresses from local ranges, reservations on disk",
        plugin: &ipam::host_local::HostLocal,
        keys: ipam::host_local::keys,
    },
    Entry {
        name: "static",
        kind: Kind::Ipam,
        about: "static IPAM: addresses given in the config or the runtime's args",
        plugin: &ipam::static_ipam::StaticIpam,
        keys: ipam::static_ipam::keys,
    },
    Entry {
        name: "dhcp",
        kind: Kind::Ipam,
        about: "dhcp IPAM: leases from a DHCP server, held by `dhcp daemon`",
        plugin: &ipam::dhcp::Dhcp,
        keys: ipam::dhcp::config::keys,
    },
    Entry {
        name: "host-device",
        kind: Kind::Interface,
        about: "host-device: moves a link of the node into the pod, and back",
        plugin: &host_device::HostDevice,
        keys: host_device::keys,
    },
    Entry {
        name: "loopback",
        kind: Kind::Interface,
        about: "loopback: brings the pod's lo up",
        plugin: &loopback::Loopback,
        keys: Keys::default,
    },
    Entry {
        name: "tuning",
        kind: Kind::Interface,
        about: "tuning: sysctls, MAC, MTU and link modes of an attachment, put back by DEL",
        plugin: &tuning::Tuning,
        keys: tuning::keys,
    },
    Entry {
        name: "sbr",
        kind: Kind::Interface,
        about: "sbr: source-based routing, a table per address of the interface it follows",
        plugin: &sbr::Sbr,
        keys: sbr::keys,
    },
    Entry {
        name: "vrf",
        kind: Kind::Interface,
        about: "vrf: puts the interface it follows into a VRF of the pod",
        plugin: &vrf::Vrf,
        keys: vrf::keys,
    },
    Entry {
        name: "bandwidth",
        kind: Kind::Interface,
        about: "bandwidth: limits a veth attachment's traffic with token buckets on the node",
        plugin: &bandwidth::Bandwidth,
        keys: bandwidth::keys,
    },
    Entry {
        name: "portmap",
        kind: Kind::Interface,
        about: "portmap: forwards the node's ports to the pod (hostPort), with iptables DNAT",
        plugin: &portmap::Portmap,
        keys: portmap::keys,
    },
    Entry {
        name: "firewall",
        kind: Kind::Interface,
        about: "firewall: lets the pod's forwarded traffic through the node's FORWARD chain",
        plugin: &firewall::Firewall,
        keys: firewall::keys,
    },
    Entry {
        name: "passthru",
        kind: Kind::Interface,
        about: "passthru: returns an empty result; first in multus's auxiliary CNI chain",
        plugin: &passthru::Passthru,
        keys: Keys::default,
    },
];

/// Looks a plugin up by the name it was called under.
pub fn find(name: &str) -> Option<&'static Entry> {
    PLUGINS.iter().find(|e| e.name == name)
}
