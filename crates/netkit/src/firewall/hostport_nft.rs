//! Host port forwarding with nftables (portmap's `backend: "nftables"`), in the table, chains
//! and comments of the reference's nftables backend (v1.6 and later), so either implementation
//! removes the other's rules. Per family, table `ip cni_hostport` or `ip6 cni_hostport`:
//!
//! - `prerouting` and `output` (nat hooks, priority -100, dstnat): `fib daddr type local jump
//!   hostports_all`;
//! - `hostports_all`: `jump hostip_hostports`, then `jump hostports`;
//! - `hostports`: per mapping, `[<conditions>] [ip daddr <hostIP>] <proto> dport <port> dnat to
//!   <pod>:<port>`. The reference puts the conditions in the shared entry rules instead, where
//!   each ADD rewrites them for every pod on the node: one tenant's `conditionsV4` would decide
//!   who reaches everyone's host ports;
//! - with `snat`, `masquerading` (nat hook postrouting, priority 100, srcnat): the hairpin,
//!   `ip saddr <pod> ip daddr <pod> masquerade`, and for IPv4 the same from 127.0.0.1.
//!
//! An attachment's rules are commented with its container ID, which is how DEL finds them
//! (`hostip_hostports` is searched too: older releases put the rules with a host address
//! there). Each change is one `nft -f` transaction per family.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::firewall::hostport::Forwarding;
use crate::firewall::nftables;
use crate::tool;

const TABLE: &str = "cni_hostport";
/// The chains that hold an attachment's rules.
const OWN_CHAINS: [&str; 3] = ["hostports", "hostip_hostports", "masquerading"];

/// nft's name of the family of `v4`, and the kernel's.
fn family(v4: bool) -> (&'static str, u8) {
    if v4 {
        ("ip", nftables::IPV4)
    } else {
        ("ip6", nftables::IPV6)
    }
}

/// The container ID as a rule's comment (see [`nftables::id_comment`]).
fn comment(container_id: &str) -> Result<&str> {
    nftables::id_comment(container_id, "forwarding host ports with nftables")
}

/// The handles of the rules commented `id` in the table of `v4`'s family, by chain; `None`
/// when nft is not installed.
fn own_rules(v4: bool, id: &str) -> Result<Option<Vec<(String, u64)>>> {
    let (name, _) = family(v4);
    let Some(items) = tool::nft_list(&["table", name, TABLE])? else {
        return Ok(None);
    };
    Ok(Some(
        items
            .iter()
            .filter_map(|item| item.get("rule"))
            .filter(|rule| rule["comment"].as_str() == Some(id))
            .filter_map(|rule| {
                let chain = rule["chain"].as_str()?;
                OWN_CHAINS
                    .contains(&chain)
                    .then(|| Some((chain.to_owned(), rule["handle"].as_u64()?)))
                    .flatten()
            })
            .collect(),
    ))
}

fn deletions(v4: bool, rules: &[(String, u64)]) -> String {
    let (name, _) = family(v4);
    rules
        .iter()
        .map(|(chain, handle)| format!("delete rule {name} {TABLE} {chain} handle {handle}\n"))
        .collect()
}

impl Forwarding<'_> {
    /// The `hostports` rules of this forwarding: the mappings of the pod's family (a host
    /// address of the other family leaves its mapping out).
    fn nft_dnat_rules(&self) -> Vec<String> {
        let v4 = self.pod.addr().is_ipv4();
        let (ip, _) = family(v4);
        let pod = self.pod.addr();
        self.mappings
            .iter()
            .filter(|m| m.host_ip.is_none_or(|h| h.is_ipv4() == v4))
            .map(|m| {
                let to = if v4 {
                    format!("{pod}:{}", m.container_port)
                } else {
                    format!("[{pod}]:{}", m.container_port)
                };
                let only = match m.host_ip {
                    Some(h) if !h.is_unspecified() => format!("{ip} daddr {h} "),
                    _ => String::new(),
                };
                let conditions: String = self.conditions.iter().map(|c| format!("{c} ")).collect();
                format!(
                    "{conditions}{only}{} dport {} dnat to {to}",
                    m.protocol.to_ascii_lowercase(),
                    m.host_port
                )
            })
            .collect()
    }

    /// The `masquerading` rules: the hairpin, and for IPv4 localhost.
    fn nft_masq_rules(&self) -> Vec<String> {
        let v4 = self.pod.addr().is_ipv4();
        let (ip, _) = family(v4);
        let pod = self.pod.addr();
        let mut rules = vec![format!("{ip} saddr {pod} {ip} daddr {pod} masquerade")];
        if v4 {
            rules.push(format!("{ip} saddr 127.0.0.1 {ip} daddr {pod} masquerade"));
        }
        rules
    }

    /// The whole transaction of an ADD: the table and chains, the entry rules, this
    /// attachment's earlier rules deleted, and its rules.
    fn nft_script(&self, stale: &[(String, u64)]) -> Result<String> {
        let v4 = self.pod.addr().is_ipv4();
        let (name, _) = family(v4);
        let id = comment(self.container_id)?;
        let t = format!("{name} {TABLE}");
        let entry = "fib daddr type local jump hostports_all";
        let mut script = format!(
            "add table {t} {{ comment \"CNI portmap plugin\" ; }}\n\
             add chain {t} hostports\n\
             add chain {t} hostip_hostports\n\
             add chain {t} hostports_all\n\
             flush chain {t} hostports_all\n\
             add rule {t} hostports_all jump hostip_hostports\n\
             add rule {t} hostports_all jump hostports\n\
             add chain {t} prerouting {{ type nat hook prerouting priority -100 ; }}\n\
             flush chain {t} prerouting\n\
             add rule {t} prerouting {entry}\n\
             add chain {t} output {{ type nat hook output priority -100 ; }}\n\
             flush chain {t} output\n\
             add rule {t} output {entry}\n"
        );
        if self.snat {
            script.push_str(&format!(
                "add chain {t} masquerading {{ type nat hook postrouting priority 100 ; }}\n"
            ));
        }
        script.push_str(&deletions(v4, stale));
        for rule in self.nft_dnat_rules() {
            script.push_str(&format!("add rule {t} hostports {rule} comment \"{id}\"\n"));
        }
        if self.snat {
            for rule in self.nft_masq_rules() {
                script.push_str(&format!(
                    "add rule {t} masquerading {rule} comment \"{id}\"\n"
                ));
            }
        }
        Ok(script)
    }
}

/// Sets up the forwarding to `f.pod` with nftables. Running it again for the attachment
/// replaces its rules.
pub fn setup(f: &Forwarding) -> Result<()> {
    let v4 = f.pod.addr().is_ipv4();
    let op = || format!("forwarding host ports to {} with nftables", f.pod);
    let stale =
        own_rules(v4, comment(f.container_id)?)?.ok_or_else(|| tool::not_installed(op(), "nft"))?;
    let script = f.nft_script(&stale)?;
    nftables::apply(&script, op)
}

/// Removes the attachment's rules from both families' tables. Idempotent; without the table,
/// or without nft, there is nothing of ours.
pub fn teardown(container_id: &str) -> Result<()> {
    let Ok(id) = comment(container_id) else {
        // An ID that could not have been a comment named no rule.
        return Ok(());
    };
    for v4 in [true, false] {
        let (_, kernel_family) = family(v4);
        if !nftables::table_exists(kernel_family, TABLE).unwrap_or(true) {
            continue;
        }
        let rules = match own_rules(v4, id) {
            Ok(Some(rules)) if !rules.is_empty() => rules,
            _ => continue,
        };
        tool::run_installed("nft", &["-f", "-"], Some(&deletions(v4, &rules)))?;
    }
    Ok(())
}

/// Whether the forwarding to `f.pod` is in place: the entry rules, and every rule of the
/// attachment; the first one missing as an error.
pub fn check(f: &Forwarding) -> Result<()> {
    let v4 = f.pod.addr().is_ipv4();
    let (name, _) = family(v4);
    let id = comment(f.container_id)?;
    let missing = |what: String| Error::NotFound {
        what: format!("nftables {what} in table {name} {TABLE}"),
    };
    let items = tool::nft_list(&["table", name, TABLE])?
        .ok_or_else(|| tool::not_installed("checking host ports".into(), "nft"))?;
    let rules: Vec<&Value> = items.iter().filter_map(|i| i.get("rule")).collect();
    let in_chain = |chain: &str| {
        rules
            .iter()
            .filter(|r| r["chain"].as_str() == Some(chain))
            .count()
    };
    for chain in ["prerouting", "output", "hostports_all"] {
        if in_chain(chain) == 0 {
            return Err(missing(format!("rules of chain {chain}")));
        }
    }
    let own = |chain: &str| {
        rules
            .iter()
            .filter(|r| r["chain"].as_str() == Some(chain) && r["comment"].as_str() == Some(id))
            .count()
    };
    let want = f.nft_dnat_rules().len();
    if own("hostports") + own("hostip_hostports") < want {
        return Err(missing(format!("host port rules of {id}")));
    }
    if f.snat && own("masquerading") < f.nft_masq_rules().len() {
        return Err(missing(format!("masquerade rules of {id}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::hostport::Mapping;

    #[test]
    fn the_transaction_as_the_reference_writes_it() {
        let maps = [
            Mapping {
                host_port: 8080,
                container_port: 80,
                protocol: "TCP".into(),
                host_ip: None,
            },
            Mapping {
                host_port: 5353,
                container_port: 53,
                protocol: "udp".into(),
                host_ip: Some("192.0.2.1".parse().expect("ip")),
            },
        ];
        let conditions = ["iifname".to_owned(), "eth0".to_owned()];
        let f = Forwarding {
            network: "net",
            container_id: "c1",
            pod: "10.20.0.5/24".parse().expect("net"),
            mappings: &maps,
            snat: true,
            masq_all: false,
            mark_bit: 13,
            external_set_mark: None,
            conditions: &conditions,
        };
        let script = f.nft_script(&[("hostports".into(), 7)]).expect("script");
        for line in [
            "add rule ip cni_hostport prerouting fib daddr type local jump hostports_all",
            "delete rule ip cni_hostport hostports handle 7",
            "add rule ip cni_hostport hostports iifname eth0 tcp dport 8080 dnat to 10.20.0.5:80 comment \"c1\"",
            "add rule ip cni_hostport hostports iifname eth0 ip daddr 192.0.2.1 udp dport 5353 dnat to 10.20.0.5:53 comment \"c1\"",
            "add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr 10.20.0.5 masquerade comment \"c1\"",
        ] {
            assert!(script.lines().any(|l| l == line), "{line}\n{script}");
        }
        // IPv6: the address in brackets, no localhost rule, the IPv4 host address's mapping
        // left out.
        let f = Forwarding {
            pod: "fd20::5/64".parse().expect("net"),
            conditions: &[],
            ..f
        };
        assert_eq!(f.nft_dnat_rules(), ["tcp dport 8080 dnat to [fd20::5]:80"]);
        assert_eq!(
            f.nft_masq_rules(),
            ["ip6 saddr fd20::5 ip6 daddr fd20::5 masquerade"]
        );
        // A container ID that is not one cannot reach the rule text.
        let f = Forwarding {
            container_id: "c1\" ; flush ruleset ; \"",
            ..f
        };
        assert!(f.nft_script(&[]).is_err());
    }
}
