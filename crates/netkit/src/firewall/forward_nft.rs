//! The firewall plugin's rules with nftables, for nodes without iptables. The reference has no
//! such backend (its firewall plugin fails where iptables is missing); this one mirrors the
//! iptables rules of [`crate::firewall::forward`] in one table, `inet cni_plugins_firewall`:
//!
//! - `forward` (filter hook forward, priority filter, policy accept): `jump isolation`, then a
//!   jump to each admin chain a config named (`CNI-ADMIN` unless configured), then `jump pods`;
//! - `pods`: per pod address, `ip daddr <ip> ct state established,related accept` and
//!   `ip saddr <ip> accept`, each commented `<container id> <ifname> <ip>`, which is how DEL
//!   finds them;
//! - `isolation`, over three sets of bridge names, so that isolating a bridge only adds
//!   elements: what goes from one isolating bridge to another is dropped (`isolating`), and
//!   with `isolated` what goes from the bridge back to itself (`closed`); `same-bridge` lets
//!   that through (`own`).
//!
//! nftables evaluates every table's chains at a hook: an `accept` here does not overrule a
//! `drop` in the admin's own tables, while a `drop` here (isolation, the admin chain's) holds.
//! Each change is one `nft -f` transaction, planned from a listing taken under a lock file of
//! root's (`/run/cni/firewall-nftables.lock`), so that two calls never write from the same
//! stale listing. `forward` and `isolation` are the plugin's: each change rewrites them. An
//! admin chain other than `CNI-ADMIN` is jumped to only once the admin has made it, so configs
//! cannot add chains and jumps without end.

use std::fs::File;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::firewall::forward::{Isolation, ADMIN_CHAIN};
use crate::firewall::nftables;
use crate::tool;

const TABLE: &str = "inet cni_plugins_firewall";
const TABLE_NAME: &str = "cni_plugins_firewall";
/// The chains of the table that are not the admin's.
const OWN_CHAINS: [&str; 3] = ["forward", "isolation", "pods"];
/// nftables' limit on a comment, as knftables applies it.
const COMMENT_MAX: usize = 128;
/// How long a call waits for another one's change to the table.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// A file of root's: a lock on the namespace's own file could be held by any process in it.
const LOCK_DIR: &str = "/run/cni";
const LOCK_FILE: &str = "/run/cni/firewall-nftables.lock";

/// The lock of the table's changes, held until dropped; past [`LOCK_WAIT`], `EAGAIN`.
fn lock() -> Result<File> {
    let op = || format!("locking {LOCK_FILE}");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(LOCK_DIR)
        .map_err(|e| Error::io(op(), e))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(LOCK_FILE)
        .map_err(|e| Error::io(op(), e))?;
    crate::netns::lock_within(&file, LOCK_WAIT, LOCK_FILE, "another firewall call")?;
    Ok(file)
}

/// The comment of the rules of `ip` in the attachment `container_id`, `ifname`.
fn pod_comment(container_id: &str, ifname: &str, ip: &IpAddr) -> Result<String> {
    let op = "letting a pod through with nftables";
    let id = nftables::id_comment(container_id, op)?;
    if ifname.is_empty()
        || !ifname
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(Error::Invalid(format!(
            "{op}: interface name {ifname:?} cannot be part of a rule's comment"
        )));
    }
    let comment = format!("{id} {ifname} {ip}");
    if comment.len() > COMMENT_MAX {
        return Err(Error::Invalid(format!(
            "{op}: container ID {container_id:?} is too long for a rule's comment"
        )));
    }
    Ok(comment)
}

/// The `pods` rules of `ip`, without their comment.
fn pod_rules(ip: &IpAddr) -> [String; 2] {
    let family = if ip.is_ipv4() { "ip" } else { "ip6" };
    [
        format!("{family} daddr {ip} ct state established,related accept"),
        format!("{family} saddr {ip} accept"),
    ]
}

/// The admin chain's name as nft reads it: a letter or '_' first, then letters, digits, '-'
/// and '_' (nft takes no quoted chain names).
fn admin_name(admin: &str) -> Result<&str> {
    let mut chars = admin.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !OWN_CHAINS.contains(&admin);
    if ok {
        Ok(admin)
    } else {
        Err(Error::Invalid(format!(
            "{admin:?} cannot name the admin chain in nftables: a letter or '_' first, then \
             letters, digits, '-' and '_', and none of {OWN_CHAINS:?}"
        )))
    }
}

/// The objects of the table (none when it does not exist); an error when nft is missing.
fn listing(op: impl Fn() -> String) -> Result<Vec<Value>> {
    tool::nft_list(&["table", "inet", TABLE_NAME])?.ok_or_else(|| tool::not_installed(op(), "nft"))
}

fn rules<'a>(items: &'a [Value], chain: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    items
        .iter()
        .filter_map(|item| item.get("rule"))
        .filter(move |rule| rule["chain"].as_str() == Some(chain))
}

/// The chains `forward` jumps to, in order.
fn jumps(items: &[Value]) -> Vec<String> {
    rules(items, "forward")
        .filter_map(|rule| rule["expr"][0]["jump"]["target"].as_str())
        .map(str::to_owned)
        .collect()
}

/// The admin chains `forward` jumps to: the jumps but the plugin's own, and but a name that
/// could not be written back (a chain someone made through another interface than nft's).
fn admin_jumps(items: &[Value]) -> Vec<String> {
    jumps(items)
        .into_iter()
        .filter(|chain| admin_name(chain).is_ok())
        .collect()
}

/// The handles of the `pods` rules whose comment is one of `comments`.
fn handles(items: &[Value], comments: &[String]) -> Vec<u64> {
    rules(items, "pods")
        .filter(|rule| {
            rule["comment"]
                .as_str()
                .is_some_and(|c| comments.iter().any(|own| own == c))
        })
        .filter_map(|rule| rule["handle"].as_u64())
        .collect()
}

/// The table, its sets and chains, and `forward` rewritten to jump to `admins` between the
/// isolation and the pods.
fn skeleton(admins: &[String]) -> String {
    let t = TABLE;
    let mut script = format!(
        "add table {t} {{ comment \"CNI firewall plugin\" ; }}\n\
         add set {t} isolating {{ type ifname ; }}\n\
         add set {t} own {{ type ifname . ifname ; }}\n\
         add set {t} closed {{ type ifname . ifname ; }}\n\
         add chain {t} forward {{ type filter hook forward priority filter ; policy accept ; }}\n\
         add chain {t} isolation\n\
         add chain {t} pods\n\
         flush chain {t} isolation\n\
         add rule {t} isolation iifname . oifname @closed drop\n\
         add rule {t} isolation iifname . oifname @own return\n\
         add rule {t} isolation iifname @isolating oifname @isolating drop\n\
         flush chain {t} forward\n\
         add rule {t} forward jump isolation\n"
    );
    for admin in admins {
        script.push_str(&format!("add chain {t} {admin}\n"));
        script.push_str(&format!("add rule {t} forward jump {admin}\n"));
    }
    script.push_str(&format!("add rule {t} forward jump pods\n"));
    script
}

/// The comments of the rules of `ips` in the attachment `container_id`, `ifname`.
fn pod_comments(container_id: &str, ifname: &str, ips: &[IpAddr]) -> Result<Vec<String>> {
    ips.iter()
        .map(|ip| pod_comment(container_id, ifname, ip))
        .collect()
}

/// Accepts forwarded traffic from `ips` and back to them, with the admin chain `admin` ahead:
/// `CNI-ADMIN` is made when missing, another name must be a chain the admin made. Running it
/// again for the attachment replaces its rules.
pub fn allow(container_id: &str, ifname: &str, ips: &[IpAddr], admin: &str) -> Result<()> {
    let op = || format!("letting {ips:?} through with nftables");
    let admin = admin_name(admin)?;
    let comments = pod_comments(container_id, ifname, ips)?;
    let _lock = lock()?;
    let items = listing(op)?;
    if admin != ADMIN_CHAIN && !nftables::has_chain(&items, admin) {
        return Err(Error::Invalid(format!(
            "admin chain {admin:?} is not in table {TABLE}: the node's admin makes it first \
             (nft add chain {TABLE} {admin}); only {ADMIN_CHAIN} is made when missing"
        )));
    }
    let mut admins = admin_jumps(&items);
    if !admins.iter().any(|a| a == admin) {
        admins.push(admin.to_owned());
    }
    let mut script = skeleton(&admins);
    for handle in handles(&items, &comments) {
        script.push_str(&format!("delete rule {TABLE} pods handle {handle}\n"));
    }
    for (ip, comment) in ips.iter().zip(&comments) {
        for rule in pod_rules(ip) {
            script.push_str(&format!(
                "add rule {TABLE} pods {rule} comment \"{comment}\"\n"
            ));
        }
    }
    nftables::apply(&script, op)
}

/// Removes the rules of `ips` in the attachment `container_id`, `ifname`; the table stays,
/// shared. Idempotent; without the table, or without nft, there is nothing of ours.
pub fn revoke(container_id: &str, ifname: &str, ips: &[IpAddr]) -> Result<()> {
    let Ok(comments) = pod_comments(container_id, ifname, ips) else {
        // An ID that could not have been a comment named no rule.
        return Ok(());
    };
    if ips.is_empty() || !nftables::table_exists(nftables::INET, TABLE_NAME).unwrap_or(true) {
        return Ok(());
    }
    let _lock = lock()?;
    let Some(items) = tool::nft_list(&["table", "inet", TABLE_NAME])? else {
        return Ok(());
    };
    let script: String = handles(&items, &comments)
        .into_iter()
        .map(|handle| format!("delete rule {TABLE} pods handle {handle}\n"))
        .collect();
    if script.is_empty() {
        return Ok(());
    }
    nftables::apply(&script, || {
        format!("removing the rules of {ips:?} with nftables")
    })
}

/// The error for a missing part of the table.
fn missing(what: String) -> Error {
    Error::NotFound {
        what: format!("nftables {what} in table {TABLE}"),
    }
}

/// Whether the rules [`allow`] makes are all there; the first missing as an error.
pub fn check(container_id: &str, ifname: &str, ips: &[IpAddr], admin: &str) -> Result<()> {
    let items = listing(|| "checking the firewall's rules".into())?;
    let jumps = jumps(&items);
    for chain in ["isolation", admin, "pods"] {
        if !jumps.iter().any(|j| j == chain) {
            return Err(missing(format!("jump from chain forward to {chain}")));
        }
    }
    for ip in ips {
        let comment = pod_comment(container_id, ifname, ip)?;
        if handles(&items, std::slice::from_ref(&comment)).len() < pod_rules(ip).len() {
            return Err(missing(format!("rules {comment:?} of chain pods")));
        }
    }
    Ok(())
}

/// The bridge name as a set element: quoted, so nothing in it may end the quote.
fn element(bridge: &str) -> Result<String> {
    crate::netlink::validate_ifname(bridge)?;
    if bridge.contains(['"', '\\']) {
        return Err(Error::Invalid(format!(
            "bridge {bridge:?}: a name with quotes or backslashes cannot be isolated with nftables"
        )));
    }
    Ok(format!("\"{bridge}\""))
}

/// The sets `policy` puts `bridge` in, with the element it adds to each.
fn memberships(bridge: &str, policy: Isolation) -> Result<Vec<(&'static str, String)>> {
    let one = element(bridge)?;
    let pair = format!("{one} . {one}");
    let mut sets = vec![("isolating", one), ("own", pair.clone())];
    if policy == Isolation::Isolated {
        sets.push(("closed", pair));
    }
    Ok(sets)
}

/// The ingress `policy` for `bridge`: what goes from it to another isolating bridge is dropped,
/// and with `isolated` what goes from it back to itself. It stays after DEL: other pods on the
/// bridge need it.
pub fn isolate_bridge(bridge: &str, policy: Isolation) -> Result<()> {
    let op = || format!("isolating bridge {bridge} with nftables");
    let sets = memberships(bridge, policy)?;
    let _lock = lock()?;
    let items = listing(op)?;
    let mut script = skeleton(&admin_jumps(&items));
    for (set, elem) in sets {
        script.push_str(&format!("add element {TABLE} {set} {{ {elem} }}\n"));
    }
    nftables::apply(&script, op)
}

/// Whether [`isolate_bridge`]'s elements for `bridge` are there; the first missing as an error.
pub fn check_isolation(bridge: &str, policy: Isolation) -> Result<()> {
    let items = listing(|| "checking the firewall's isolation".into())?;
    for (set, _) in memberships(bridge, policy)? {
        let has = items
            .iter()
            .filter_map(|item| item.get("set"))
            .filter(|s| s["name"].as_str() == Some(set))
            .filter_map(|s| s["elem"].as_array())
            .flatten()
            .any(|e| match e {
                Value::String(name) => name == bridge,
                other => other["concat"]
                    .as_array()
                    .is_some_and(|pair| pair.iter().all(|n| n.as_str() == Some(bridge))),
            });
        if !has {
            return Err(missing(format!("bridge {bridge} in set {set}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_rules() {
        let ip: IpAddr = "10.1.0.5".parse().expect("ip");
        assert_eq!(
            pod_comment("abc", "net1", &ip).expect("comment"),
            "abc net1 10.1.0.5"
        );
        assert!(pod_comment("abc", "a\"b", &ip).is_err());
        assert_eq!(
            pod_rules(&"fd01::5".parse().expect("ip"))[1],
            "ip6 saddr fd01::5 accept"
        );
        assert!(pod_comment("a\" ; flush ruleset ; \"", "eth0", &ip).is_err());
        assert!(pod_comment(&"a".repeat(120), "eth0", &ip).is_err());
        assert_eq!(admin_name("CNI-ADMIN").expect("name"), "CNI-ADMIN");
        for bad in ["1ADMIN", "-x", "pods", "a b", ""] {
            assert!(admin_name(bad).is_err(), "{bad}");
        }
        assert!(element("br\"0").is_err());
        let sets = memberships("br0", Isolation::Isolated).expect("sets");
        assert_eq!(sets[2], ("closed", "\"br0\" . \"br0\"".to_owned()));
        let script = skeleton(&["CNI-ADMIN".into()]);
        assert!(script.ends_with(
            "jump isolation\nadd chain inet cni_plugins_firewall CNI-ADMIN\n\
             add rule inet cni_plugins_firewall forward jump CNI-ADMIN\n\
             add rule inet cni_plugins_firewall forward jump pods\n"
        ));
    }
}
