//! The node side: the bridge itself, and veth pairs plugged into it as ports.

use std::collections::HashSet;

use cni::CniError;
use netkit::netlink::{BridgeOpts, BridgePortOpts, Link};
use netkit::{NetNs, Netlink};

use super::config::BridgeConf;
use crate::support::container;
use crate::support::sys::{sys, sys_ctx};

/// The VLAN a trunk-only port gets as its untagged native VLAN.
const NATIVE_VLAN: u16 = 1;

/// Finds or creates the bridge, makes sure it is a bridge, and brings it up. Also says whether
/// this call created it.
/// How often ADD looks for (or makes) its bridge, or joins it, before giving up.
pub const BRIDGE_ATTEMPTS: usize = 3;

pub fn ensure_bridge(nl: &Netlink, conf: &BridgeConf) -> Result<(Link, bool), CniError> {
    let name = conf.bridge.as_str();
    let mut created = false;
    let mut found = None;
    // Other ADDs create it, or remove the one they created when they fail, meanwhile.
    for _ in 0..BRIDGE_ATTEMPTS {
        if let Some(link) = nl.link_by_name(name).map_err(sys)? {
            found = Some(link);
            break;
        }
        let opts = BridgeOpts {
            mtu: conf.mtu,
            vlan_filtering: conf.vlan_filtering(),
            mac: None,
        };
        match nl.add_bridge(name, &opts) {
            Ok(()) => created = true,
            Err(e) if e.errno() == Some(libc::EEXIST) => {}
            Err(e) => return Err(sys(e)),
        }
    }
    let mut br = found.ok_or_else(|| {
        CniError::internal(format!(
            "bridge {name:?} kept disappearing while this ADD created it: other ADDs on it fail \
             and remove it"
        ))
    })?;
    if br.kind.as_deref() != Some("bridge") {
        return Err(CniError::invalid_config(format!(
            "{name:?} already exists but is not a bridge (it is a {}): set \"bridge\" to \
             another name, or remove that link",
            br.kind.as_deref().unwrap_or("device without a kind")
        )));
    }
    if conf.promisc && !br.promisc {
        nl.set_promisc(br.index, true)
            .map_err(sys_ctx(format_args!("bridge {name:?}")))?;
        br.promisc = true;
    }
    // The plugin owns the bridge's routes; router advertisements must not add any. Best
    // effort, as IPv6 may be disabled.
    let _ = netkit::sysctl::write(&format!("net/ipv6/conf/{name}/accept_ra"), "0");
    if !br.up {
        nl.set_up(br.index)
            .map_err(sys_ctx(format_args!("bridge {name:?}")))?;
        br.up = true;
    }
    Ok((br, created))
}

/// Deletes a bridge this ADD created when no port uses it any more, as the failed ADD was its
/// only user.
pub fn remove_if_unused(nl: &Netlink, index: u32) -> netkit::Result<()> {
    let in_use = nl.links()?.iter().any(|l| l.master == Some(index));
    if in_use {
        return Ok(());
    }
    nl.del_link_if_exists(index).map(drop)
}

/// Deletes the bridge-side `port` of a VLAN gateway pair this ADD created, unless another port
/// of its bridge is in `vlan`: an attachment that started using the gateway meanwhile.
pub fn remove_vlan_port_if_unused(nl: &Netlink, port: u32, vlan: u16) -> netkit::Result<()> {
    let Some(link) = nl.link_by_index(port)? else {
        return Ok(());
    };
    if let Some(bridge) = link.master {
        let others: HashSet<u32> = nl
            .links()?
            .iter()
            .filter(|l| l.master == Some(bridge) && l.index != port)
            .map(|l| l.index)
            .collect();
        let in_use = nl
            .bridge_vlans(None)?
            .iter()
            .any(|(i, vlans)| others.contains(i) && vlans.iter().any(|v| v.vid == vlan));
        if in_use {
            return Ok(());
        }
    }
    nl.del_link_if_exists(port).map(drop)
}

/// VLAN settings of one port.
#[derive(Debug, Clone, Copy)]
pub struct PortVlans<'a> {
    /// Access VLAN (untagged, pvid); 0 for none.
    pub access: u16,
    pub trunk: &'a [u16],
    pub preserve_default: bool,
}

/// Port settings besides VLANs.
#[derive(Debug, Clone, Copy)]
pub struct PortOpts<'a> {
    pub mtu: Option<u32>,
    pub hairpin: bool,
    pub isolated: bool,
    pub vlans: PortVlans<'a>,
}

/// Creates a veth pair whose host end (random `vethXXXXXXXX` name) is a port of `bridge` and
/// whose other end, `peer_name`, is created directly in `peer_ns` (or beside the host end with
/// `None`). Returns the host end. On failure nothing is left behind.
pub fn create_port(
    nl: &Netlink,
    bridge: &Link,
    peer_name: &str,
    peer_ns: Option<&NetNs>,
    opts: &PortOpts,
) -> Result<Link, CniError> {
    let host = container::create_veth(nl, peer_name, peer_ns, opts.mtu)?;
    match configure_port(nl, bridge, &host, opts) {
        Ok(()) => Ok(host),
        Err(e) => {
            // Deleting one end removes the pair.
            let _ = nl.del_link(host.index);
            Err(e)
        }
    }
}

fn configure_port(
    nl: &Netlink,
    bridge: &Link,
    host: &Link,
    opts: &PortOpts,
) -> Result<(), CniError> {
    let ctx = || format!("host veth {:?} on bridge {:?}", host.name, bridge.name);
    nl.set_up(host.index).map_err(sys_ctx(ctx()))?;
    // The plugin owns this interface's routes. Best effort, as IPv6 may be disabled.
    let _ = netkit::sysctl::write(&format!("net/ipv6/conf/{}/accept_ra", host.name), "0");
    nl.set_master(host.index, Some(bridge.index))
        .map_err(sys_ctx(ctx()))?;
    // Both default to off on a new port.
    if opts.hairpin || opts.isolated {
        let port_opts = BridgePortOpts {
            hairpin: Some(opts.hairpin),
            isolated: Some(opts.isolated),
            learning: None,
        };
        nl.set_bridge_port_opts(host.index, &port_opts)
            .map_err(sys_ctx(ctx()))?;
    }
    set_port_vlans(nl, host.index, &opts.vlans).map_err(sys_ctx(ctx()))
}

fn set_port_vlans(nl: &Netlink, port: u32, vlans: &PortVlans) -> netkit::Result<()> {
    let tagged = vlans.access != 0 || !vlans.trunk.is_empty();
    if tagged && !vlans.preserve_default {
        // The bridge's default VLAN would make the port a member of the untagged LAN too.
        for (_, entries) in nl.bridge_vlans(Some(port))? {
            for v in entries {
                nl.bridge_vlan_del(port, v.vid, false)?;
            }
        }
    }
    if vlans.access != 0 {
        nl.bridge_vlan_add(port, vlans.access, true, true, false)?;
    }
    for &vid in vlans.trunk {
        nl.bridge_vlan_add(port, vid, false, false, false)?;
    }
    if vlans.access == 0 && !vlans.trunk.is_empty() {
        nl.bridge_vlan_add(port, NATIVE_VLAN, true, true, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_VLANS: PortVlans = PortVlans {
        access: 0,
        trunk: &[],
        preserve_default: false,
    };

    fn port_opts(vlans: PortVlans) -> PortOpts {
        PortOpts {
            mtu: None,
            hairpin: false,
            isolated: false,
            vlans,
        }
    }

    fn access(vid: u16) -> PortVlans<'static> {
        PortVlans {
            access: vid,
            ..NO_VLANS
        }
    }

    #[test]
    fn vlan_gateway_port_stays_while_another_port_is_in_its_vlan() {
        let sandbox = testkit::Netns::new("vlanport");
        let ns = NetNs::open(sandbox.path()).unwrap();
        let nl = Netlink::in_ns(&ns).unwrap();
        let filtering = BridgeOpts {
            vlan_filtering: true,
            ..BridgeOpts::default()
        };
        let vlan_kernel = match nl.add_bridge("vp0", &filtering) {
            Ok(()) => true,
            // No VLAN filtering in this kernel: only the no-VLAN case can run (never in the
            // `cargo xtask vm-test` kernel).
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
                assert!(
                    std::env::var_os("MULTUS_RS_VM").is_none(),
                    "MULTUS_RS_VM is set but this kernel has no VLAN filtering: {e}"
                );
                nl.add_bridge("vp0", &BridgeOpts::default()).unwrap();
                false
            }
            Err(e) => panic!("{e}"),
        };
        let bridge = nl.link("vp0").unwrap();

        // Nobody else in the VLAN (a port without VLANs does not count): deleted, twice fine.
        let other = create_port(&nl, &bridge, "o0", None, &port_opts(NO_VLANS)).unwrap();
        let gw = create_port(&nl, &bridge, "vp0.7", None, &port_opts(NO_VLANS)).unwrap();
        remove_vlan_port_if_unused(&nl, gw.index, 7).unwrap();
        assert!(nl.link_by_index(gw.index).unwrap().is_none());
        assert!(nl.link_by_name("vp0.7").unwrap().is_none());
        remove_vlan_port_if_unused(&nl, gw.index, 7).unwrap();
        nl.del_link(other.index).unwrap();
        if !vlan_kernel {
            eprintln!("skipped the VLAN part: this kernel has no bridge VLAN filtering");
            return;
        }

        let gw = create_port(&nl, &bridge, "vp0.7", None, &port_opts(access(7))).unwrap();
        let elsewhere = create_port(&nl, &bridge, "e0", None, &port_opts(access(8))).unwrap();
        let user = create_port(&nl, &bridge, "u0", None, &port_opts(access(7))).unwrap();
        remove_vlan_port_if_unused(&nl, gw.index, 7).unwrap();
        assert!(
            nl.link_by_index(gw.index).unwrap().is_some(),
            "another attachment uses VLAN 7's gateway"
        );
        nl.del_link(user.index).unwrap();
        remove_vlan_port_if_unused(&nl, gw.index, 7).unwrap();
        assert!(
            nl.link_by_index(gw.index).unwrap().is_none(),
            "a port in VLAN 8 does not keep VLAN 7's gateway"
        );
        assert!(nl.link_by_index(elsewhere.index).unwrap().is_some());
    }
}
