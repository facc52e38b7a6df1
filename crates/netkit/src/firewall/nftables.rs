//! nf_tables over netlink, as much as a DEL needs to skip `nft`: whether a table exists in the
//! caller's namespace. One request and its ack; the rules themselves stay with the `nft` tool.
//! Also what the backends share: comments from container IDs, running a script, finding a
//! chain in a listing.

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::error::{Error, Result};

/// `NFPROTO_INET`: the family of an `inet` table.
pub const INET: u8 = 1;
/// `NFPROTO_IPV4`: the family of an `ip` table.
pub const IPV4: u8 = 2;
/// `NFPROTO_IPV6`: the family of an `ip6` table.
pub const IPV6: u8 = 10;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFTA_TABLE_NAME: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;

/// Whether table `name` of `family` exists here. A kernel without nf_tables answers with an
/// error, which is returned: the caller decides what that means.
pub fn table_exists(family: u8, name: &str) -> Result<bool> {
    let op = || format!("looking up nftables table {name:?}");
    let mut socket =
        Socket::new(NETLINK_NETFILTER).map_err(|e| Error::io("opening a netfilter socket", e))?;
    socket.bind_auto().map_err(|e| Error::io(op(), e))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| Error::io(op(), e))?;
    socket
        .send(&request(family, name), 0)
        .map_err(|e| Error::io(op(), e))?;
    let mut found = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = socket
            .recv(&mut &mut buf[..], 0)
            .map_err(|e| Error::io(op(), e))?;
        let mut at = 0;
        while at + 16 <= n {
            let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            if len < 16 || at + len > n {
                return Err(Error::Decode {
                    op: op(),
                    msg: format!("a message of {len} bytes in a reply of {n}"),
                });
            }
            if kind == NLMSG_ERROR {
                let code = buf.get(at + 16..at + 20).ok_or_else(|| Error::Decode {
                    op: op(),
                    msg: "an error message without its code".into(),
                })?;
                let errno = -i32::from_ne_bytes([code[0], code[1], code[2], code[3]]);
                return match errno {
                    0 => Ok(found),
                    libc::ENOENT => Ok(false),
                    errno => Err(Error::netlink(op(), errno, None)),
                };
            }
            if kind == NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE {
                found = true;
            }
            at += len.next_multiple_of(4);
        }
    }
}

/// Runs `script` (nft's own syntax) as one `nft -f` transaction; its failure is told as `op`'s.
pub(crate) fn apply(script: &str, op: impl Fn() -> String) -> Result<()> {
    crate::tool::run_installed("nft", &["-f", "-"], Some(script))
        .map(drop)
        .map_err(|e| match e {
            Error::Command { msg, .. } => Error::Command { op: op(), msg },
            other => other,
        })
}

/// Whether the objects of an `nft -j list` hold a chain named `name`.
pub(crate) fn has_chain(items: &[serde_json::Value], name: &str) -> bool {
    items
        .iter()
        .filter_map(|item| item.get("chain"))
        .any(|chain| chain["name"].as_str() == Some(name))
}

/// `container_id` as (part of) a rule's comment: runtimes give hex digits, and nothing else may
/// reach a rule's text. An error for `op` when it cannot be one.
pub(crate) fn id_comment<'a>(container_id: &'a str, op: &str) -> Result<&'a str> {
    let ok = !container_id.is_empty()
        && container_id.len() <= 128
        && container_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(container_id)
    } else {
        Err(Error::Invalid(format!(
            "{op}: container ID {container_id:?} cannot be a rule's comment"
        )))
    }
}

/// A `GETTABLE` request for `name`, asking for an ack.
fn request(family: u8, name: &str) -> Vec<u8> {
    let attr_len = 4 + name.len() + 1;
    let len = 16 + 4 + attr_len.next_multiple_of(4);
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    m.extend_from_slice(&(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE).to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
    m.extend_from_slice(&[family, 0, 0, 0]); // nfgenmsg: family, version 0, resource 0
    m.extend_from_slice(&u16::try_from(attr_len).unwrap_or(u16::MAX).to_ne_bytes());
    m.extend_from_slice(&NFTA_TABLE_NAME.to_ne_bytes());
    m.extend_from_slice(name.as_bytes());
    m.push(0);
    m.resize(len, 0);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a namespace of the test's own: absent, made with `nft`, found, deleted, absent.
    #[test]
    fn a_table_is_found_exactly_while_it_exists() {
        let ns = testkit::Netns::new("nftq");
        let netns = crate::NetNs::open(ns.path()).expect("netns");
        let exists = || {
            netns
                .run(|| table_exists(INET, "cni_plugins_masquerade"))
                .expect("enter")
                .expect("asked")
        };
        let nft = |script: &str| {
            let ok = ns
                .command("nft")
                .arg(script)
                .status()
                .expect("nft")
                .success();
            assert!(ok, "nft {script}");
        };
        assert!(!exists());
        // Another family's table of the same name is another table.
        nft("add table ip cni_plugins_masquerade");
        assert!(!exists());
        nft("add table inet cni_plugins_masquerade");
        assert!(exists());
        nft("delete table inet cni_plugins_masquerade");
        assert!(!exists());
    }
}
