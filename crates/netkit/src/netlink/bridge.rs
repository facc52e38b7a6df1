//! Bridge ports: port flags and VLANs, through the AF_BRIDGE side of rtnetlink.

use netlink_packet_core::DefaultNla;
use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, LinkAttribute, LinkExtentMask,
    LinkMessage, LinkProtoInfoBridge,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Netlink;
use crate::error::{Error, Result};

const IFLA_BRPORT_MODE: u16 = 4;
const IFLA_BRPORT_LEARNING: u16 = 8;
const IFLA_BRPORT_ISOLATED: u16 = 33;

/// Bridge port flags to change; `None` leaves a flag as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct BridgePortOpts {
    /// Hairpin mode: frames may go back out of the port they came in on.
    pub hairpin: Option<bool>,
    /// Isolated ports cannot talk to each other, only to non-isolated ports.
    pub isolated: Option<bool>,
    pub learning: Option<bool>,
}

/// A VLAN on a bridge port (or on the bridge itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeVlan {
    pub vid: u16,
    /// Untagged ingress frames get this VLAN.
    pub pvid: bool,
    /// Egress frames leave untagged.
    pub untagged: bool,
}

fn bridge_message(index: u32, attributes: Vec<LinkAttribute>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.header.index = index;
    msg.attributes = attributes;
    msg
}

/// `IFLA_AF_SPEC` for one VLAN; `self_` targets the device itself (the bridge) rather than its
/// master.
fn vlan_spec(vid: u16, flags: BridgeVlanInfoFlags, self_: bool) -> LinkAttribute {
    let mut spec = Vec::with_capacity(2);
    if self_ {
        spec.push(AfSpecBridge::Flags(BridgeFlag::LowerDev));
    }
    spec.push(AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid }));
    LinkAttribute::AfSpecBridge(spec)
}

impl Netlink {
    /// Changes bridge port flags of an enslaved link.
    pub fn set_bridge_port_opts(&self, port_index: u32, opts: &BridgePortOpts) -> Result<()> {
        let nlas: Vec<LinkProtoInfoBridge> = [
            (IFLA_BRPORT_MODE, opts.hairpin),
            (IFLA_BRPORT_ISOLATED, opts.isolated),
            (IFLA_BRPORT_LEARNING, opts.learning),
        ]
        .into_iter()
        .filter_map(|(kind, v)| v.map(|on| DefaultNla::new(kind, vec![u8::from(on)])))
        .map(LinkProtoInfoBridge::Other)
        .collect();
        if nlas.is_empty() {
            return Ok(());
        }
        let msg = bridge_message(port_index, vec![LinkAttribute::ProtoInfoBridge(nlas)]);
        self.ack(RouteNetlinkMessage::SetLink(msg), 0, || {
            format!("setting bridge port options {opts:?} on link {port_index}")
        })
    }

    /// Adds VLAN `vid` to a bridge port (or to the bridge itself with `self_`).
    pub fn bridge_vlan_add(
        &self,
        port_index: u32,
        vid: u16,
        pvid: bool,
        untagged: bool,
        self_: bool,
    ) -> Result<()> {
        let mut flags = BridgeVlanInfoFlags::empty();
        flags.set(BridgeVlanInfoFlags::Pvid, pvid);
        flags.set(BridgeVlanInfoFlags::Untagged, untagged);
        let msg = bridge_message(port_index, vec![vlan_spec(vid, flags, self_)]);
        self.ack(RouteNetlinkMessage::SetLink(msg), 0, || {
            format!("adding VLAN {vid} to bridge port {port_index}")
        })
    }

    /// Removes VLAN `vid` from a bridge port (or from the bridge itself with `self_`).
    pub fn bridge_vlan_del(&self, port_index: u32, vid: u16, self_: bool) -> Result<()> {
        let spec = vlan_spec(vid, BridgeVlanInfoFlags::empty(), self_);
        let msg = bridge_message(port_index, vec![spec]);
        self.ack(RouteNetlinkMessage::DelLink(msg), 0, || {
            format!("removing VLAN {vid} from bridge port {port_index}")
        })
    }

    /// VLANs per bridge port (bridges included), optionally of one link only.
    pub fn bridge_vlans(&self, port_index: Option<u32>) -> Result<Vec<(u32, Vec<BridgeVlan>)>> {
        // Plain (not compressed) RTEXT_FILTER_BRVLAN: one entry per VLAN, no ranges.
        let msg = bridge_message(
            0,
            vec![LinkAttribute::ExtMask(vec![LinkExtentMask::Brvlan])],
        );
        let replies = self.dump(RouteNetlinkMessage::GetLink(msg), || {
            "listing bridge VLANs".into()
        })?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewLink(m) = reply else {
                continue;
            };
            if port_index.is_some_and(|p| p != m.header.index) {
                continue;
            }
            let vlans = m
                .attributes
                .iter()
                .filter_map(|a| match a {
                    LinkAttribute::AfSpecBridge(spec) => Some(spec),
                    _ => None,
                })
                .flatten()
                .filter_map(|s| match s {
                    AfSpecBridge::VlanInfo(v) => Some(BridgeVlan {
                        vid: v.vid,
                        pvid: v.flags.contains(BridgeVlanInfoFlags::Pvid),
                        untagged: v.flags.contains(BridgeVlanInfoFlags::Untagged),
                    }),
                    _ => None,
                })
                .collect();
            out.push((m.header.index, vlans));
        }
        Ok(out)
    }

    /// Whether VLAN filtering is on for a bridge.
    pub fn bridge_vlan_filtering(&self, bridge_index: u32) -> Result<bool> {
        let link = self
            .link_by_index(bridge_index)?
            .ok_or_else(|| Error::NotFound {
                what: self.op(format!("link {bridge_index}")),
            })?;
        match link.kind.as_deref() {
            // Kernels built without VLAN filtering do not report the attribute.
            Some("bridge") => Ok(link.vlan_filtering.unwrap_or(false)),
            _ => Err(Error::Invalid(format!(
                "link {:?} ({bridge_index}) is not a bridge",
                link.name
            ))),
        }
    }
}
