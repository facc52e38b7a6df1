//! MAC spoof checking for a bridge port (the bridge plugin's `macspoofchk`), with nftables.
//!
//! Laid out like the reference plugins' rules, so either implementation can remove what the
//! other added: table `bridge nat`, base chain `PREROUTING` (filter hook, priority -300) with one
//! rule per port `iifname <port> jump cni-br-iface-<id>`; that chain jumps to
//! `cni-br-iface-<id>-mac`, which returns frames from the allowed source MAC and drops the rest.
//! Every rule carries the comment `macspoofchk-<id>`, with `<id>` = `<containerID>-<ifname>`.
//!
//! Commands run in the caller's network namespace.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

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
    // Stale rules of an earlier attachment with the same id would jump to a flushed chain.
    let stale = base_rule_handles(id)?;
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
    apply(&cmds).map_err(|msg| Error::Command {
        op: format!("setting up MAC spoof check for port {port:?}"),
        msg,
    })
}

/// Removes the rules and chains of `id`. Idempotent: nothing to remove is success.
pub fn teardown(id: &str) -> Result<()> {
    let mut cmds: Vec<String> = base_rule_handles(id)?
        .into_iter()
        .map(delete_base_rule)
        .collect();
    let existing = list_chains()?;
    for chain in [iface_chain(id), mac_chain(id)] {
        if existing.contains(&chain) {
            cmds.push(format!(r#"{{"delete":{{"chain":{}}}}}"#, chain_obj(&chain)));
        }
    }
    if cmds.is_empty() {
        return Ok(());
    }
    apply(&cmds).map_err(|msg| Error::Command {
        op: format!("removing MAC spoof check rules {}", comment(id)),
        msg,
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

/// Handles of the base-chain rules tagged for `id` (none when the chain does not exist).
fn base_rule_handles(id: &str) -> Result<Vec<u64>> {
    let Some(listing) = list(&["-a", "list", "chain", FAMILY, TABLE, BASE_CHAIN])? else {
        return Ok(Vec::new());
    };
    let tag = format!("comment \"{}\"", comment(id));
    Ok(listing
        .lines()
        .filter(|line| line.contains(&tag))
        .filter_map(|line| line.rsplit_once("# handle ")?.1.trim().parse().ok())
        .collect())
}

/// Chain names of the `bridge nat` table (none when it does not exist).
fn list_chains() -> Result<Vec<String>> {
    let Some(listing) = list(&["list", "table", FAMILY, TABLE])? else {
        return Ok(Vec::new());
    };
    Ok(listing
        .lines()
        .filter_map(|line| line.trim().strip_prefix("chain "))
        .filter_map(|rest| rest.strip_suffix('{'))
        .map(|name| name.trim().trim_matches('"').to_owned())
        .collect())
}

/// `nft <args>`'s output; `None` when the object does not exist (nft says ENOENT).
fn list(args: &[&str]) -> Result<Option<String>> {
    let op = || format!("running nft {}", args.join(" "));
    let out = Command::new("nft")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(op(), e))?;
    if out.status.success() {
        return Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No such file or directory") {
        return Ok(None);
    }
    Err(Error::Command {
        op: op(),
        msg: format!("{}: {}", out.status, stderr.trim()),
    })
}

/// Applies JSON commands in one nft transaction.
fn apply(cmds: &[String]) -> std::result::Result<(), String> {
    let input = format!(r#"{{"nftables":[{}]}}"#, cmds.join(","));
    let mut child = Command::new("nft")
        .args(["-j", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("writing to nft: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
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
