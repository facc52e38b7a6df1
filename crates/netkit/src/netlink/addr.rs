//! Interface addresses.

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Family, Netlink};
use crate::error::Result;

/// An address on an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addr {
    pub index: u32,
    /// The local address with its prefix length.
    pub net: IpNet,
    /// `RT_SCOPE_*`.
    pub scope: u8,
    /// `IFA_F_*` flags (tentative, dadfailed, nodad, permanent, ...).
    pub flags: u32,
}

impl Addr {
    /// IPv6 duplicate address detection has not finished yet.
    pub fn is_tentative(&self) -> bool {
        self.flags & libc::IFA_F_TENTATIVE != 0
    }

    /// IPv6 duplicate address detection found a duplicate.
    pub fn dad_failed(&self) -> bool {
        self.flags & libc::IFA_F_DADFAILED != 0
    }

    fn from_message(msg: AddressMessage) -> Option<Addr> {
        let mut local = None;
        let mut address = None;
        let mut flags = u32::from(msg.header.flags.bits());
        for attr in msg.attributes {
            match attr {
                AddressAttribute::Local(ip) => local = Some(ip),
                AddressAttribute::Address(ip) => address = Some(ip),
                // IFA_FLAGS carries all 32 bits; the header only the low 8.
                AddressAttribute::Flags(f) => flags = f.bits(),
                _ => {}
            }
        }
        // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point
        // links and the only one sent for IPv6.
        let ip = local.or(address)?;
        Some(Addr {
            index: msg.header.index,
            net: IpNet::new(ip, msg.header.prefix_len).ok()?,
            scope: msg.header.scope.into(),
            flags,
        })
    }
}

/// Options for [`Netlink::add_addr`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AddrOpts {
    /// Skip IPv6 duplicate address detection: the address is usable at once.
    pub nodad: bool,
    /// Do not add the prefix route for the address's subnet.
    pub noprefixroute: bool,
}

fn address_message(index: u32, net: &IpNet) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = Family::of_net(net).address_family();
    msg.header.prefix_len = net.prefix_len();
    msg.header.index = index;
    msg.attributes = vec![
        AddressAttribute::Local(net.addr()),
        AddressAttribute::Address(net.addr()),
    ];
    msg
}

impl Netlink {
    /// Adds an address; fails with EEXIST when it is already there. IPv4 addresses get the
    /// subnet's broadcast address, as `ip addr add ... brd +` does.
    pub fn add_addr(&self, index: u32, net: IpNet, opts: AddrOpts) -> Result<()> {
        let mut msg = address_message(index, &net);
        msg.header.scope = AddressScope::Universe;
        if let IpNet::V4(v4) = net {
            if v4.prefix_len() < 31 {
                msg.attributes
                    .push(AddressAttribute::Broadcast(v4.broadcast()));
            }
        }
        let mut flags = AddressFlags::empty();
        flags.set(AddressFlags::Nodad, opts.nodad);
        flags.set(AddressFlags::Noprefixroute, opts.noprefixroute);
        if !flags.is_empty() {
            // The header field only holds the low 8 bits; IFA_FLAGS carries the rest.
            let [low, ..] = flags.bits().to_le_bytes();
            msg.header.flags = AddressHeaderFlags::from_bits_truncate(low);
            msg.attributes.push(AddressAttribute::Flags(flags));
        }
        self.ack(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("adding address {net} to link {index}"),
        )
    }

    /// Removes an address; fails with EADDRNOTAVAIL when it is not there.
    pub fn del_addr(&self, index: u32, net: IpNet) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::DelAddress(address_message(index, &net)),
            0,
            || format!("removing address {net} from link {index}"),
        )
    }

    /// Addresses, optionally only those of one link and/or one family.
    pub fn addrs(&self, index: Option<u32>, family: Option<Family>) -> Result<Vec<Addr>> {
        let mut msg = AddressMessage::default();
        msg.header.family = family.map_or(AddressFamily::Unspec, Family::address_family);
        let replies = self.dump(RouteNetlinkMessage::GetAddress(msg), || {
            "listing addresses".into()
        })?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewAddress(m) => Addr::from_message(m),
                _ => None,
            })
            .filter(|a| index.is_none_or(|i| a.index == i))
            .filter(|a| family.is_none_or(|f| Family::of_net(&a.net) == f))
            .collect())
    }
}
