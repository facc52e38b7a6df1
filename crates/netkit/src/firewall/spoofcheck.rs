//! MAC spoof checking for a bridge port (the bridge plugin's `macspoofchk`), with nftables.
//!
//! Laid out like the reference plugins' rules, so either implementation can remove what the
//! other added: table `bridge nat`, base chain `PREROUTING` (filter hook, priority -300) with one
//! rule per port `iifname <port> jump cni-br-iface-<id>`; that chain jumps to
//! `cni-br-iface-<id>-mac`, which returns frames from the allowed source MAC and drops the rest.
//! Every rule carries the comment `macspoofchk-<id>`, with `<id>` = `<containerID>-<ifname>`.
//!
//! Commands run in the caller's network namespace.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::tool;

const FAMILY: &str = "bridge";
const TABLE: &str = "nat";
const BASE_CHAIN: &str = "PREROUTING";

fn iface_chain(id: &str) -> String {
    format!("cni-br-iface-{id}")
}

fn mac_chain(id: &str) -> String {
    format!("cni-br-iface-{id}-mac")
}

fn comment(id: &str) -> String {
    format!("macspoofchk-{id}")
}

/// Only frames with source `mac` may enter the bridge through `port`. Applied in one nft
/// transaction; running it again for the same `id` replaces the rules.
pub fn setup(port: &str, mac: &[u8; 6], id: &str) -> Result<()> {
    let op = || format!("setting up MAC spoof check for port {port:?}");
    let table = list_table()?.ok_or_else(|| tool::not_installed(op(), "nft"))?;
    // Stale rules of an earlier attachment with the same id would jump to a flushed chain.
    let stale = base_rule_handles(&table, id);
    let (ichain, mchain) = (iface_chain(id), mac_chain(id));
    let mut cmds = vec![
        format!(r#"{{"add":{{"table":{{"family":"{FAMILY}","name":"{TABLE}"}}}}}}"#),
        format!(
            r#"{{"add":{{"chain":{{"family":"{FAMILY}","table":"{TABLE}","name":"{BASE_CHAIN}","type":"filter","hook":"prerouting","prio":-300,"policy":"accept"}}}}}}"#
        ),
    ];
    for chain in [&ichain, &mchain] {
        cmds.push(format!(r#"{{"add":{{"chain":{}}}}}"#, chain_obj(chain)));
        cmds.push(format!(r#"{{"flush":{{"chain":{}}}}}"#, chain_obj(chain)));
    }
    cmds.extend(stale.iter().map(|h| delete_base_rule(*h)));
    let rules = [
        (
            BASE_CHAIN,
            format!(
                r#"{{"match":{{"op":"==","left":{{"meta":{{"key":"iifname"}}}},"right":{}}}}},{{"jump":{{"target":{}}}}}"#,
                json_str(port),
                json_str(&ichain)
            ),
        ),
        (
            ichain.as_str(),
            format!(r#"{{"jump":{{"target":{}}}}}"#, json_str(&mchain)),
        ),
        (
            mchain.as_str(),
            format!(
                r#"{{"match":{{"op":"==","left":{{"payload":{{"protocol":"ether","field":"saddr"}}}},"right":"{}"}}}},{{"return":null}}"#,
                crate::format_mac(mac)
            ),
        ),
        (mchain.as_str(), r#"{"drop":null}"#.to_owned()),
    ];
    for (chain, expr) in rules {
        cmds.push(format!(
            r#"{{"add":{{"rule":{{"family":"{FAMILY}","table":"{TABLE}","chain":{},"expr":[{expr}],"comment":{}}}}}}}"#,
            json_str(chain),
            json_str(&comment(id))
        ));
    }
    apply(&cmds, op)
}

/// Removes the rules and chains of `id`. Idempotent: nothing to remove is success, and so is a
/// node without nft, where no rules can exist.
pub fn teardown(id: &str) -> Result<()> {
    let Some(table) = list_table()? else {
        return Ok(());
    };
    let mut cmds: Vec<String> = base_rule_handles(&table, id)
        .into_iter()
        .map(delete_base_rule)
        .collect();
    for chain in [iface_chain(id), mac_chain(id)] {
        if crate::firewall::nftables::has_chain(&table, &chain) {
            cmds.push(format!(r#"{{"delete":{{"chain":{}}}}}"#, chain_obj(&chain)));
        }
    }
    if cmds.is_empty() {
        return Ok(());
    }
    apply(&cmds, || {
        format!("removing MAC spoof check rules {}", comment(id))
    })
}

fn chain_obj(name: &str) -> String {
    format!(
        r#"{{"family":"{FAMILY}","table":"{TABLE}","name":{}}}"#,
        json_str(name)
    )
}

fn delete_base_rule(handle: u64) -> String {
    format!(
        r#"{{"delete":{{"rule":{{"family":"{FAMILY}","table":"{TABLE}","chain":"{BASE_CHAIN}","handle":{handle}}}}}}}"#
    )
}

/// The objects of the `bridge nat` table (none when it does not exist); `None` when nft is not
/// installed.
fn list_table() -> Result<Option<Vec<Value>>> {
    tool::nft_list(&["table", FAMILY, TABLE])
}

/// Handles of the base-chain rules tagged for `id`.
fn base_rule_handles(table: &[Value], id: &str) -> Vec<u64> {
    let tag = comment(id);
    table
        .iter()
        .filter_map(|item| item.get("rule"))
        .filter(|rule| rule["chain"] == BASE_CHAIN && rule["comment"] == tag.as_str())
        .filter_map(|rule| rule["handle"].as_u64())
        .collect()
}

/// Applies JSON commands in one nft transaction.
fn apply(cmds: &[String], op: impl Fn() -> String) -> Result<()> {
    let input = format!(r#"{{"nftables":[{}]}}"#, cmds.join(","));
    tool::run_installed("nft", &["-j", "-f", "-"], Some(&input))
        .map(drop)
        .map_err(|e| Error::Command {
            op: op(),
            msg: e.to_string(),
        })
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_reference() {
        assert_eq!(iface_chain("c1-eth0"), "cni-br-iface-c1-eth0");
        assert_eq!(mac_chain("c1-eth0"), "cni-br-iface-c1-eth0-mac");
        assert_eq!(comment("c1-eth0"), "macspoofchk-c1-eth0");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(json_str("x\n"), r#""x\n""#);
    }
}
