//! Links: lookup, creation (veth, bridge, macvlan, ipvlan, vlan, dummy, vrf, ifb) and
//! attribute changes.

use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVeth, InfoVlan, InfoVrf,
    LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Netlink;
use crate::error::{Error, Result};
use crate::netns::NetNs;

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
const MAX_IFNAME: usize = 15;

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND`: "bridge", "veth", "macvlan", ...; `None` for physical devices and lo.
    pub kind: Option<String>,
    pub mtu: u32,
    pub mac: Option<[u8; 6]>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operationally up (`IFF_RUNNING`): it has a carrier; a bridge port's veth, once its peer
    /// is up.
    pub running: bool,
    /// All `IFF_*` flags.
    pub flags: u32,
    pub promisc: bool,
    /// The bridge (or other master) this link is enslaved to.
    pub master: Option<u32>,
    /// `IFLA_LINK`: the parent of a macvlan/ipvlan, the peer index of a veth.
    pub link: Option<u32>,
    /// The namespace id (as seen from this namespace) where `link` lives.
    pub link_netnsid: Option<i32>,
    pub macvlan_mode: Option<u32>,
    pub ipvlan_mode: Option<u16>,
    /// The 802.1Q id of a vlan link.
    pub vlan_id: Option<u16>,
    /// The routing table of a vrf.
    pub vrf_table: Option<u32>,
    pub txqlen: Option<u32>,
    /// For bridges: whether VLAN filtering is on.
    pub vlan_filtering: Option<bool>,
    /// `IFLA_IFALIAS`, when set.
    pub alias: Option<String>,
}

impl Link {
    fn from_message(msg: LinkMessage) -> Link {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mtu: 0,
            mac: None,
            up: msg.header.flags.contains(LinkFlags::Up),
            running: msg.header.flags.contains(LinkFlags::Running),
            flags: msg.header.flags.bits(),
            promisc: msg.header.flags.contains(LinkFlags::Promisc),
            master: None,
            link: None,
            link_netnsid: None,
            macvlan_mode: None,
            ipvlan_mode: None,
            vlan_id: None,
            vrf_table: None,
            txqlen: None,
            vlan_filtering: None,
            alias: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n,
                LinkAttribute::Mtu(m) => link.mtu = m,
                LinkAttribute::Address(a) => link.mac = a.as_slice().try_into().ok(),
                LinkAttribute::Controller(m) if m != 0 => link.master = Some(m),
                LinkAttribute::Link(l) if l != 0 => link.link = Some(l),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(id),
                LinkAttribute::TxQueueLen(q) => link.txqlen = Some(q),
                LinkAttribute::IfAlias(a) if !a.is_empty() => link.alias = Some(a),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        link.apply_info(info);
                    }
                }
                _ => {}
            }
        }
        link
    }

    fn apply_info(&mut self, info: LinkInfo) {
        match info {
            LinkInfo::Kind(kind) => self.kind = Some(kind.to_string()),
            LinkInfo::Data(InfoData::MacVlan(data)) => {
                for d in data {
                    if let InfoMacVlan::Mode(m) = d {
                        self.macvlan_mode = Some(m.into());
                    }
                }
            }
            LinkInfo::Data(InfoData::IpVlan(data)) => {
                for d in data {
                    if let InfoIpVlan::Mode(m) = d {
                        self.ipvlan_mode = Some(m.into());
                    }
                }
            }
            LinkInfo::Data(InfoData::Vlan(data)) => {
                for d in data {
                    if let InfoVlan::Id(id) = d {
                        self.vlan_id = Some(id);
                    }
                }
            }
            LinkInfo::Data(InfoData::Vrf(data)) => {
                for d in data {
                    if let InfoVrf::TableId(t) = d {
                        self.vrf_table = Some(t);
                    }
                }
            }
            LinkInfo::Data(InfoData::Bridge(data)) => {
                for d in data {
                    if let InfoBridge::VlanFiltering(on) = d {
                        self.vlan_filtering = Some(on);
                    }
                }
            }
            _ => {}
        }
    }
}

/// txqueuelen 0 for a veth's node end and an ifb, as the reference (v1.9.1) asks for them, so a
/// node switching implementations sees the same links (these devices have no queue of their
/// own either way). The links it puts in pods (a veth's other end, macvlan, ipvlan, vlan) and
/// vrf keep the kernel's default, as there.
pub const UNQUEUED: LinkAttribute = LinkAttribute::TxQueueLen(0);

/// Options for a new bridge.
#[derive(Debug, Clone, Default)]
pub struct BridgeOpts {
    pub mtu: Option<u32>,
    pub vlan_filtering: bool,
    pub mac: Option<[u8; 6]>,
}

/// macvlan modes, with the kernel's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacvlanMode {
    Private = 1,
    Vepa = 2,
    Bridge = 4,
    Passthru = 8,
}

/// Options for a new macvlan.
#[derive(Debug, Clone, Copy)]
pub struct MacvlanOpts {
    pub mode: MacvlanMode,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    /// Length of the queue for broadcast and multicast frames to the macvlans of one parent
    /// (`IFLA_MACVLAN_BC_QUEUE_LEN`); `None` leaves the kernel's default.
    pub bc_queue_len: Option<u32>,
}

/// ipvlan modes, with the kernel's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvlanMode {
    L2 = 0,
    L3 = 1,
    L3S = 2,
}

/// Checks a name against the kernel's `dev_valid_name` rules. Every call here that takes a
/// name checks it first, so the error says what is wrong instead of a bare EINVAL.
pub fn validate_ifname(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > MAX_IFNAME
        || name == "."
        || name == ".."
        || name.contains(|c: char| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
    {
        return Err(Error::Invalid(format!(
            "invalid interface name {name:?}: 1 to {MAX_IFNAME} bytes, no '/', ':' or spaces"
        )));
    }
    Ok(())
}

fn link_message(index: u32, attributes: Vec<LinkAttribute>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.attributes = attributes;
    msg
}

/// The attributes every new link may carry: name, MTU, MAC and the namespace to create it in.
fn base_attrs(
    name: &str,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
    ns: Option<&NetNs>,
) -> Result<Vec<LinkAttribute>> {
    validate_ifname(name)?;
    let mut attrs = vec![LinkAttribute::IfName(name.to_string())];
    attrs.extend(mtu.map(LinkAttribute::Mtu));
    attrs.extend(mac.map(|m| LinkAttribute::Address(m.to_vec())));
    attrs.extend(ns.map(|ns| LinkAttribute::NetNsFd(ns.as_raw_fd())));
    Ok(attrs)
}

/// Names the namespace a link is created in, when it is not the socket's.
fn ns_note(ns: Option<&NetNs>, what: &str) -> String {
    ns.map(|ns| format!(" ({what} netns {})", ns.path().display()))
        .unwrap_or_default()
}

fn with_info(
    mut attrs: Vec<LinkAttribute>,
    kind: InfoKind,
    data: Option<InfoData>,
) -> Vec<LinkAttribute> {
    let mut info = vec![LinkInfo::Kind(kind)];
    info.extend(data.map(LinkInfo::Data));
    attrs.push(LinkAttribute::LinkInfo(info));
    attrs
}

impl Netlink {
    /// The link called `name`, if any.
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        validate_ifname(name)?;
        let msg = link_message(
            0,
            vec![
                LinkAttribute::IfName(name.to_string()),
                LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]),
            ],
        );
        self.get_link(msg, || format!("looking up link {name:?}"))
    }

    /// The link with this index, if any.
    pub fn link_by_index(&self, index: u32) -> Result<Option<Link>> {
        let msg = link_message(
            index,
            vec![LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats])],
        );
        self.get_link(msg, || format!("looking up link {index}"))
    }

    /// Like [`Netlink::link_by_name`], but a missing link is an error.
    pub fn link(&self, name: &str) -> Result<Link> {
        self.link_by_name(name)?.ok_or_else(|| Error::NotFound {
            what: self.op(format!("link {name:?}")),
        })
    }

    fn get_link(&self, msg: LinkMessage, what: impl Fn() -> String) -> Result<Option<Link>> {
        let reply = self.get_one(RouteNetlinkMessage::GetLink(msg), &[libc::ENODEV], what)?;
        Ok(match reply {
            Some(RouteNetlinkMessage::NewLink(m)) => Some(Link::from_message(m)),
            _ => None,
        })
    }

    /// All links in the socket's namespace.
    pub fn links(&self) -> Result<Vec<Link>> {
        let msg = link_message(
            0,
            vec![LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats])],
        );
        let replies = self.dump(RouteNetlinkMessage::GetLink(msg), || "listing links".into())?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewLink(m) => Some(Link::from_message(m)),
                _ => None,
            })
            .collect())
    }

    fn create_link(&self, attrs: Vec<LinkAttribute>, what: impl Fn() -> String) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::NewLink(link_message(0, attrs)),
            NLM_F_CREATE | NLM_F_EXCL,
            what,
        )
    }

    /// Creates a veth pair; the peer is created directly in `peer_ns` when given. `mtu` applies
    /// to both ends, `mac` to the `name` end. The `name` end, the node's, has txqueuelen 0
    /// (see [`UNQUEUED`]).
    pub fn add_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_ns: Option<&NetNs>,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
    ) -> Result<()> {
        let peer = link_message(0, base_attrs(peer_name, mtu, None, peer_ns)?);
        let mut own = base_attrs(name, mtu, mac, None)?;
        own.push(UNQUEUED);
        let attrs = with_info(
            own,
            InfoKind::Veth,
            Some(InfoData::Veth(InfoVeth::Peer(peer))),
        );
        self.create_link(attrs, || {
            format!(
                "creating veth {name:?} with peer {peer_name:?}{}",
                ns_note(peer_ns, "peer in")
            )
        })
    }

    /// Creates a bridge.
    pub fn add_bridge(&self, name: &str, opts: &BridgeOpts) -> Result<()> {
        let data = opts
            .vlan_filtering
            .then(|| InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)]));
        let attrs = with_info(
            base_attrs(name, opts.mtu, opts.mac, None)?,
            InfoKind::Bridge,
            data,
        );
        self.create_link(attrs, || format!("creating bridge {name:?}"))
            .map_err(|e| match e {
                // The kernel gives no reason text for this one.
                Error::Netlink { op, errno, msg }
                    if errno == libc::EOPNOTSUPP && opts.vlan_filtering =>
                {
                    let msg =
                        format!("{msg} (is the kernel built with CONFIG_BRIDGE_VLAN_FILTERING?)");
                    Error::Netlink { op, errno, msg }
                }
                other => other,
            })
    }

    /// Creates a macvlan on `parent_index` (in the socket's namespace), directly in `target_ns`
    /// when given.
    pub fn add_macvlan(
        &self,
        name: &str,
        parent_index: u32,
        opts: &MacvlanOpts,
        target_ns: Option<&NetNs>,
    ) -> Result<()> {
        let mut attrs = base_attrs(name, opts.mtu, opts.mac, target_ns)?;
        attrs.push(LinkAttribute::Link(parent_index));
        let mut data = vec![InfoMacVlan::Mode((opts.mode as u32).into())];
        data.extend(opts.bc_queue_len.map(InfoMacVlan::BcQueueLen));
        let attrs = with_info(attrs, InfoKind::MacVlan, Some(InfoData::MacVlan(data)));
        self.create_link(attrs, || {
            format!(
                "creating macvlan {name:?} on link {parent_index}{}",
                ns_note(target_ns, "into")
            )
        })
    }

    /// Creates an ipvlan on `parent_index` (in the socket's namespace), directly in `target_ns`
    /// when given.
    pub fn add_ipvlan(
        &self,
        name: &str,
        parent_index: u32,
        mode: IpvlanMode,
        target_ns: Option<&NetNs>,
        mtu: Option<u32>,
    ) -> Result<()> {
        let mut attrs = base_attrs(name, mtu, None, target_ns)?;
        attrs.push(LinkAttribute::Link(parent_index));
        let data = InfoData::IpVlan(vec![InfoIpVlan::Mode((mode as u16).into())]);
        let attrs = with_info(attrs, InfoKind::IpVlan, Some(data));
        self.create_link(attrs, || {
            format!(
                "creating ipvlan {name:?} on link {parent_index}{}",
                ns_note(target_ns, "into")
            )
        })
    }

    /// Creates an 802.1Q vlan link with id `vlan_id` on `parent_index` (in the socket's
    /// namespace), directly in `target_ns` when given.
    pub fn add_vlan(
        &self,
        name: &str,
        parent_index: u32,
        vlan_id: u16,
        target_ns: Option<&NetNs>,
        mtu: Option<u32>,
    ) -> Result<()> {
        let mut attrs = base_attrs(name, mtu, None, target_ns)?;
        attrs.push(LinkAttribute::Link(parent_index));
        let data = InfoData::Vlan(vec![InfoVlan::Id(vlan_id)]);
        let attrs = with_info(attrs, InfoKind::Vlan, Some(data));
        self.create_link(attrs, || {
            format!(
                "creating vlan {name:?} with id {vlan_id} on link {parent_index}{}",
                ns_note(target_ns, "into")
            )
        })
        .map_err(|e| match e {
            // The kernel allows one vlan per id and parent.
            Error::Netlink { op, errno, msg } if errno == libc::EEXIST => {
                let msg = format!("{msg} (a vlan with id {vlan_id} is already on that link)");
                Error::Netlink { op, errno, msg }
            }
            other => other,
        })
    }

    /// Creates a vrf whose routes live in `table`.
    pub fn add_vrf(&self, name: &str, table: u32) -> Result<()> {
        let data = InfoData::Vrf(vec![InfoVrf::TableId(table)]);
        let attrs = with_info(
            base_attrs(name, None, None, None)?,
            InfoKind::Vrf,
            Some(data),
        );
        self.create_link(attrs, || {
            format!("creating vrf {name:?} with table {table}")
        })
    }

    /// Creates an ifb device (what a redirect sends packets through, to be shaped there),
    /// with txqueuelen 0 as the reference makes it ([`UNQUEUED`]).
    pub fn add_ifb(&self, name: &str, mtu: Option<u32>) -> Result<()> {
        let mut attrs = base_attrs(name, mtu, None, None)?;
        attrs.push(UNQUEUED);
        let attrs = with_info(attrs, InfoKind::Ifb, None);
        self.create_link(attrs, || format!("creating ifb {name:?}"))
    }

    /// Creates a dummy link, directly in `target_ns` when given.
    pub fn add_dummy(
        &self,
        name: &str,
        target_ns: Option<&NetNs>,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
    ) -> Result<()> {
        let attrs = with_info(
            base_attrs(name, mtu, mac, target_ns)?,
            InfoKind::Dummy,
            None,
        );
        self.create_link(attrs, || {
            format!("creating dummy {name:?}{}", ns_note(target_ns, "in"))
        })
    }

    /// One RTM_SETLINK for `index`: attributes plus the `IFF_*` bits in `change` set to `flags`.
    fn set_link(
        &self,
        index: u32,
        attrs: Vec<LinkAttribute>,
        flags: LinkFlags,
        change: LinkFlags,
        what: impl Fn() -> String,
    ) -> Result<()> {
        let mut msg = link_message(index, attrs);
        msg.header.flags = flags;
        msg.header.change_mask = change;
        self.ack(RouteNetlinkMessage::SetLink(msg), 0, what)
    }

    fn set_attr(&self, index: u32, attr: LinkAttribute, what: impl Fn() -> String) -> Result<()> {
        self.set_link(
            index,
            vec![attr],
            LinkFlags::empty(),
            LinkFlags::empty(),
            what,
        )
    }

    pub fn set_up(&self, index: u32) -> Result<()> {
        self.set_link(index, vec![], LinkFlags::Up, LinkFlags::Up, || {
            format!("setting link {index} up")
        })
        .map_err(|e| match e {
            // A vlan, macvlan or ipvlan on a master that is down.
            Error::Netlink { op, errno, msg } if errno == libc::ENETDOWN => {
                let msg = format!("{msg} (the link it sits on is down: bring the master up)");
                Error::Netlink { op, errno, msg }
            }
            other => other,
        })
    }

    pub fn set_down(&self, index: u32) -> Result<()> {
        self.set_link(index, vec![], LinkFlags::empty(), LinkFlags::Up, || {
            format!("setting link {index} down")
        })
    }

    pub fn set_promisc(&self, index: u32, on: bool) -> Result<()> {
        let flags = if on {
            LinkFlags::Promisc
        } else {
            LinkFlags::empty()
        };
        self.set_link(index, vec![], flags, LinkFlags::Promisc, || {
            format!(
                "setting promisc {} on link {index}",
                if on { "on" } else { "off" }
            )
        })
    }

    pub fn set_allmulti(&self, index: u32, on: bool) -> Result<()> {
        let flags = if on {
            LinkFlags::Allmulti
        } else {
            LinkFlags::empty()
        };
        self.set_link(index, vec![], flags, LinkFlags::Allmulti, || {
            format!(
                "setting all-multicast {} on link {index}",
                if on { "on" } else { "off" }
            )
        })
    }

    /// Enslaves `index` to `master`, or frees it with `None`.
    pub fn set_master(&self, index: u32, master: Option<u32>) -> Result<()> {
        self.set_attr(
            index,
            LinkAttribute::Controller(master.unwrap_or(0)),
            || match master {
                Some(m) => format!("attaching link {index} to master {m}"),
                None => format!("detaching link {index} from its master"),
            },
        )
    }

    pub fn set_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        self.set_attr(index, LinkAttribute::Mtu(mtu), || {
            format!("setting MTU {mtu} on link {index}")
        })
    }

    pub fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<()> {
        self.set_attr(index, LinkAttribute::Address(mac.to_vec()), || {
            format!("setting MAC {} on link {index}", crate::format_mac(&mac))
        })
    }

    pub fn set_name(&self, index: u32, name: &str) -> Result<()> {
        validate_ifname(name)?;
        self.set_attr(index, LinkAttribute::IfName(name.to_string()), || {
            format!("renaming link {index} to {name:?}")
        })
    }

    pub fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<()> {
        self.set_attr(index, LinkAttribute::TxQueueLen(txqlen), || {
            format!("setting txqueuelen {txqlen} on link {index}")
        })
    }

    /// Sets the link's alias (`IFLA_IFALIAS`); an empty one clears it.
    pub fn set_alias(&self, index: u32, alias: &str) -> Result<()> {
        self.set_attr(index, LinkAttribute::IfAlias(alias.to_string()), || {
            format!("setting alias {alias:?} on link {index}")
        })
    }

    /// Moves a link into another namespace under another name, in one request. The kernel
    /// gives it the new name as it moves it when its old name is taken there, and renames it
    /// right after the move otherwise: if that rename fails, the link is in `ns` under its old
    /// name.
    pub fn move_to_ns_as(&self, index: u32, ns: &NetNs, name: &str) -> Result<()> {
        validate_ifname(name)?;
        let attrs = vec![
            LinkAttribute::NetNsFd(ns.as_raw_fd()),
            LinkAttribute::IfName(name.to_string()),
        ];
        self.set_link(index, attrs, LinkFlags::empty(), LinkFlags::empty(), || {
            format!(
                "moving link {index} to netns {} as {name:?}",
                ns.path().display()
            )
        })
    }

    /// Moves a link into another namespace (it keeps its name there).
    pub fn move_to_ns(&self, index: u32, ns: &NetNs) -> Result<()> {
        self.set_attr(index, LinkAttribute::NetNsFd(ns.as_raw_fd()), || {
            format!("moving link {index} to netns {}", ns.path().display())
        })
    }

    pub fn del_link(&self, index: u32) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::DelLink(link_message(index, vec![])),
            0,
            || format!("deleting link {index}"),
        )
    }

    /// Deletes the link with this index; `Ok(false)` when there is none (already gone).
    pub fn del_link_if_exists(&self, index: u32) -> Result<bool> {
        gone_is_false(self.del_link(index))
    }

    /// Deletes the link called `name`; `Ok(false)` when there is none.
    pub fn del_link_by_name(&self, name: &str) -> Result<bool> {
        validate_ifname(name)?;
        let msg = link_message(0, vec![LinkAttribute::IfName(name.to_string())]);
        gone_is_false(self.ack(RouteNetlinkMessage::DelLink(msg), 0, || {
            format!("deleting link {name:?}")
        }))
    }
}

/// A delete's outcome: `true` when it deleted, `false` when the link did not exist (ENODEV).
fn gone_is_false(deleted: Result<()>) -> Result<bool> {
    match deleted {
        Ok(()) => Ok(true),
        Err(e) if e.errno() == Some(libc::ENODEV) => Ok(false),
        Err(e) => Err(e),
    }
}
