//! IP masquerade for an attachment (the bridge plugin's `ipMasq`), with nftables or iptables.
//!
//! Rules are named and tagged exactly like the reference plugins' (same nftables table, chain
//! and comment hashes; same iptables chain names and comments), so either implementation can
//! tear down what the other set up. The commands run in the caller's network namespace.
//!
//! - nftables: table `inet cni_plugins_masquerade`; chain `postrouting` (nat hook) skips
//!   multicast and jumps to `masq_checks`, which holds one rule per address:
//!   `ip saddr <ip> ip daddr != <subnet> masquerade`, commented with a hash of the network and
//!   of the (ifname, container id) pair.
//! - iptables: a chain `CNI-<hash of network+container id>` in the nat table accepting the
//!   subnet and masquerading the rest except multicast, jumped to from POSTROUTING for the
//!   source address, every rule commented `name: "<net>" id: "<cid>"`.

use ipnet::IpNet;

use crate::error::{Error, Result};
use crate::firewall::ipt;
use crate::tool;

const NFT_TABLE: &str = "cni_plugins_masquerade";
const NFT_CHAIN: &str = "masq_checks";
/// knftables' comment length limit, which the reference applies.
const NFT_COMMENT_MAX: usize = 128;

/// Which firewall tool to program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Nftables,
    Iptables,
}

/// Masquerades traffic from each of `addrs` to anything outside its subnet (multicast
/// excepted). Running it again for the same attachment replaces its rules.
///
/// `backend: None` picks iptables when the `iptables` binary is installed, else nftables. This
/// is the reference's preference, so a node that goes back to the reference plugins can still
/// remove the rules (the reference's Debian build, 1.1.1, tears down iptables rules only).
pub fn setup(
    backend: Option<Backend>,
    network: &str,
    container_id: &str,
    ifname: &str,
    addrs: &[IpNet],
) -> Result<()> {
    let backend = backend.unwrap_or(if crate::firewall::iptables_installed() {
        Backend::Iptables
    } else {
        Backend::Nftables
    });
    match backend {
        Backend::Iptables => ipt_setup(network, container_id, addrs),
        Backend::Nftables => nft_setup(network, container_id, ifname, addrs),
    }
}

/// Removes this attachment's masquerade rules from both backends (a backend whose tools are
/// not installed, or whose rules cannot be listed, has none of ours). Idempotent; needs no
/// namespace of the pod. nftables rules are found by their tag; iptables chains are looked for
/// in the families of `addrs` (both when `addrs` is empty) and removed with every POSTROUTING
/// rule that jumps to them.
pub fn teardown(network: &str, container_id: &str, ifname: &str, addrs: &[IpNet]) -> Result<()> {
    let errors: Vec<String> = [
        nft_teardown(network, container_id, ifname),
        ipt_teardown(network, container_id, addrs),
    ]
    .into_iter()
    .filter_map(|r| r.err().map(|e| e.to_string()))
    .collect();
    match errors.len() {
        0 => Ok(()),
        _ => Err(Error::Command {
            op: format!("removing masquerade rules of {network}/{container_id}/{ifname}"),
            msg: errors.join("; "),
        }),
    }
}

// ---- nftables ----

/// The hash prefix of this attachment's rule comments (the reference's `hashForInstance`).
fn nft_tag(network: &str, ifname: &str, container_id: &str) -> String {
    format!(
        "{}-{}",
        crate::sha512_hex_prefix(network, 16),
        crate::sha512_hex_prefix(&format!("{ifname}:{container_id}"), 16)
    )
}

fn nft_comment(network: &str, ifname: &str, container_id: &str) -> String {
    let clean = |s: &str| s.replace('"', "");
    let mut comment = format!(
        "{}, net: {}, if: {}, id: {}",
        nft_tag(network, ifname, container_id),
        clean(network),
        clean(ifname),
        clean(container_id)
    );
    if comment.len() > NFT_COMMENT_MAX {
        let mut cut = NFT_COMMENT_MAX;
        while !comment.is_char_boundary(cut) {
            cut -= 1;
        }
        comment.truncate(cut);
    }
    comment
}

/// Handles of the rules in `masq_checks` whose comment starts with `tag`; `None` when nft is
/// not installed. A missing table or chain means no rules.
fn nft_rule_handles(tag: &str) -> Result<Option<Vec<u64>>> {
    let Some(items) = tool::nft_list(&["chain", "inet", NFT_TABLE, NFT_CHAIN])? else {
        return Ok(None);
    };
    Ok(Some(
        items
            .iter()
            .filter_map(|item| item.get("rule"))
            .filter(|rule| rule["comment"].as_str().is_some_and(|c| c.starts_with(tag)))
            .filter_map(|rule| rule["handle"].as_u64())
            .collect(),
    ))
}

fn nft_setup(network: &str, container_id: &str, ifname: &str, addrs: &[IpNet]) -> Result<()> {
    let stale = nft_rule_handles(&nft_tag(network, ifname, container_id))?
        .ok_or_else(|| tool::not_installed("setting up masquerade with nftables".into(), "nft"))?;
    let t = format!("inet {NFT_TABLE}");
    let mut script = format!(
        "add table {t} {{ comment \"Masquerading for plugins from github.com/containernetworking/plugins\" ; }}\n\
         add chain {t} {NFT_CHAIN} {{ comment \"Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet\" ; }}\n\
         add chain {t} postrouting {{ type nat hook postrouting priority srcnat ; }}\n\
         flush chain {t} postrouting\n\
         add rule {t} postrouting ip daddr 224.0.0.0/4 return\n\
         add rule {t} postrouting ip6 daddr ff00::/8 return\n\
         add rule {t} postrouting goto {NFT_CHAIN}\n"
    );
    for handle in &stale {
        script.push_str(&format!("delete rule {t} {NFT_CHAIN} handle {handle}\n"));
    }
    let comment = nft_comment(network, ifname, container_id);
    for net in addrs {
        let ip = if net.addr().is_ipv4() { "ip" } else { "ip6" };
        script.push_str(&format!(
            "add rule {t} {NFT_CHAIN} {ip} saddr {} {ip} daddr != {} masquerade comment \"{comment}\"\n",
            net.addr(),
            net.trunc()
        ));
    }
    tool::run_installed("nft", &["-f", "-"], Some(&script)).map(drop)
}

fn nft_teardown(network: &str, container_id: &str, ifname: &str) -> Result<()> {
    // No table, no rule of ours: one netlink request instead of running nft (the common case,
    // iptables masquerade, pays nothing more). When the kernel cannot say, nft decides.
    if !crate::firewall::nftables::table_exists(crate::firewall::nftables::INET, NFT_TABLE)
        .unwrap_or(true)
    {
        return Ok(());
    }
    // Without a working nft (not installed, or nf_tables unusable) no rule of ours can exist.
    let handles = match nft_rule_handles(&nft_tag(network, ifname, container_id)) {
        Ok(Some(h)) if !h.is_empty() => h,
        _ => return Ok(()),
    };
    let script: String = handles
        .iter()
        .map(|h| format!("delete rule inet {NFT_TABLE} {NFT_CHAIN} handle {h}\n"))
        .collect();
    tool::run_installed("nft", &["-f", "-"], Some(&script)).map(drop)
}

// ---- iptables ----

/// The reference's `FormatChainName`: "CNI-" and 24 hex digits of sha512(network + id).
fn ipt_chain(network: &str, container_id: &str) -> String {
    format!(
        "CNI-{}",
        crate::sha512_hex_prefix(&format!("{network}{container_id}"), 24)
    )
}

/// The reference's `FormatComment`: `name: %q id: %q`.
fn ipt_comment(network: &str, container_id: &str) -> String {
    format!("name: {} id: {}", go_quote(network), go_quote(container_id))
}

/// Go's `%q` for the characters that can occur in names and ids.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The multicast range the masquerade rule leaves alone, per family.
fn multicast(v4: bool) -> &'static str {
    if v4 {
        "224.0.0.0/4"
    } else {
        "ff00::/8"
    }
}

/// One iptables-save and one iptables-restore per family, instead of a run of the tool per
/// rule. The chain is declared (which flushes it when it exists) and filled again, and a
/// POSTROUTING jump is added for each source that has none: the same rules as the
/// reference's, in the same order.
fn ipt_setup(network: &str, container_id: &str, addrs: &[IpNet]) -> Result<()> {
    let chain = ipt_chain(network, container_id);
    let comment = ipt::quote(&ipt_comment(network, container_id));
    for v4 in [true, false] {
        let nets: Vec<&IpNet> = addrs.iter().filter(|a| a.addr().is_ipv4() == v4).collect();
        if nets.is_empty() {
            continue;
        }
        let tools = ipt::tools(v4);
        let saved = ipt::save(tools, "nat")?.ok_or_else(|| {
            tool::not_installed(format!("masquerading for {network}"), tools.save)
        })?;
        let mut lines = vec![format!(":{chain} - [0:0]")];
        let mut subnets: Vec<IpNet> = Vec::new();
        for net in &nets {
            let subnet = net.trunc();
            if !subnets.contains(&subnet) {
                lines.push(format!(
                    "-A {chain} -d {subnet} -m comment --comment {comment} -j ACCEPT"
                ));
                subnets.push(subnet);
            }
        }
        lines.push(format!(
            "-A {chain} ! -d {} -m comment --comment {comment} -j MASQUERADE",
            multicast(v4)
        ));
        for net in &nets {
            let source = IpNet::from(net.addr()).to_string();
            if !ipt::has_rule(&saved, "POSTROUTING", &["-s", &source, &chain]) {
                lines.push(format!(
                    "-A POSTROUTING -s {source} -m comment --comment {comment} -j {chain}"
                ));
            }
        }
        ipt::restore(tools, "nat", &lines)?;
    }
    Ok(())
}

/// Deletes the attachment's chain and every POSTROUTING rule jumping to it, in one
/// iptables-restore per family: the families of `addrs`, both when it is empty. Tools that are
/// not installed have no rules; an iptables-save that fails is an error, as its empty output
/// would hide them.
fn ipt_teardown(network: &str, container_id: &str, addrs: &[IpNet]) -> Result<()> {
    let chain = ipt_chain(network, container_id);
    let mut first_err = None;
    for v4 in [true, false] {
        if !addrs.is_empty() && !addrs.iter().any(|a| a.addr().is_ipv4() == v4) {
            continue;
        }
        let tools = ipt::tools(v4);
        let removed = ipt::save(tools, "nat").and_then(|saved| {
            let Some(saved) = saved else { return Ok(()) };
            let mut lines = ipt::jumps_to(&saved, "POSTROUTING", &chain);
            if ipt::declared(&saved, &chain) {
                lines.push(format!("-F {chain}"));
                lines.push(format!("-X {chain}"));
            }
            ipt::restore(tools, "nat", &lines)
        });
        if let Err(e) = removed {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_prefixes_of_known_digests() {
        assert_eq!(
            crate::sha512_hex_prefix("abc", 32),
            "ddaf35a193617abacc417349ae204131"
        );
        assert_eq!(
            crate::sha512_hex_prefix("", 32),
            "cf83e1357eefb8bdf1542850d66d8007"
        );
        // Two blocks of input.
        assert_eq!(
            crate::sha512_hex_prefix(&"a".repeat(200), 128),
            "4b11459c33f52a22ee8236782714c150a3b2c60994e9acee17fe68947a3e6789\
             f31e7668394592da7bef827cddca88c4e6f86e4df7ed1ae6cba71f3e98faee9f"
        );
    }

    #[test]
    fn names_match_the_reference() {
        // sha512("mynetc0ffee") starts with 15815ef49e0fdf04a746924c.
        assert_eq!(ipt_chain("mynet", "c0ffee"), "CNI-15815ef49e0fdf04a746924c");
        assert_eq!(
            ipt_comment("mynet", "c0ffee"),
            r#"name: "mynet" id: "c0ffee""#
        );
        assert_eq!(go_quote("a\"b\\c\u{1}"), r#""a\"b\\c\x01""#);
        let c = nft_comment("mynet", "eth0", "c0ffee");
        assert!(c.starts_with(&nft_tag("mynet", "eth0", "c0ffee")));
        assert!(c.ends_with(", net: mynet, if: eth0, id: c0ffee"), "{c}");
        assert_eq!(nft_tag("mynet", "eth0", "c0ffee").len(), 33);
        assert_eq!(
            nft_comment("n", "eth0", &"x".repeat(300)).len(),
            NFT_COMMENT_MAX
        );
    }
}
