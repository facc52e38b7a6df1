//! Neighbour (ARP/NDP) entries, read-only.

use std::net::IpAddr;

use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::Netlink;
use crate::error::Result;

/// A neighbour entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub index: u32,
    pub ip: IpAddr,
    pub mac: Option<[u8; 6]>,
    /// `NUD_*` state bits.
    pub state: u16,
}

impl Neighbour {
    fn from_message(msg: NeighbourMessage) -> Option<Neighbour> {
        let mut ip = None;
        let mut mac = None;
        for attr in msg.attributes {
            match attr {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => ip = Some(a.into()),
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => ip = Some(a.into()),
                NeighbourAttribute::LinkLayerAddress(l) => mac = l.as_slice().try_into().ok(),
                _ => {}
            }
        }
        Some(Neighbour {
            index: msg.header.ifindex,
            ip: ip?,
            mac,
            state: msg.header.state.into(),
        })
    }
}

impl Netlink {
    /// IPv4 and IPv6 neighbours, optionally of one link only.
    pub fn neighbours(&self, index: Option<u32>) -> Result<Vec<Neighbour>> {
        let replies = self.dump(
            RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
            || "listing neighbours".into(),
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewNeighbour(m) => Neighbour::from_message(m),
                _ => None,
            })
            .filter(|n| index.is_none_or(|i| n.index == i))
            .collect())
    }
}
