//! Host port forwarding (the portmap plugin's iptables rules), named, ordered and commented
//! exactly as the reference's, so either implementation tears down the other's. All in the
//! nat table of the caller's namespace:
//!
//! - `PREROUTING`, `OUTPUT`: `-m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT`;
//! - `CNI-HOSTPORT-DNAT`: per protocol and up to 15 ports, a multiport rule commented
//!   `dnat name: "<net>" id: "<cid>"` jumping to the attachment's `CNI-DN-<hash>`;
//! - `CNI-DN-<hash>`: per mapping, the hairpin and (IPv4) localhost rules jumping to
//!   `CNI-HOSTPORT-SETMARK` (with `masq_all`, one rule for every source instead), then the
//!   DNAT to the pod;
//! - `CNI-HOSTPORT-SETMARK` marks with the masquerade bit, and `CNI-HOSTPORT-MASQ`, first in
//!   `POSTROUTING`, masquerades what is marked.
//!
//! Each change is one iptables-save and one iptables-restore per family.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::{Error, Result};
use crate::firewall::ipt::{self, declared, jumps_to, quote, SharedRule};
use crate::tool;

pub const TOP_DNAT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
pub const SET_MARK_CHAIN: &str = "CNI-HOSTPORT-SETMARK";
pub const MASQ_CHAIN: &str = "CNI-HOSTPORT-MASQ";
/// Made by old reference releases; DEL removes an attachment's chain from it too.
const OLD_SNAT_CHAIN: &str = "CNI-HOSTPORT-SNAT";
/// iptables' longest chain name.
const CHAIN_MAX: usize = 28;
/// multiport takes at most this many ports.
const MULTIPORT_MAX: usize = 15;
/// iptables' longest comment.
const COMMENT_MAX: usize = 255;

/// One forwarded port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub host_port: u16,
    pub container_port: u16,
    /// `tcp`, `udp` or `sctp`, as written.
    pub protocol: String,
    /// Only traffic to this address of the node; `None` or unspecified: any local address.
    pub host_ip: Option<IpAddr>,
}

/// An attachment's forwarding, for one of the pod's addresses.
#[derive(Debug, Clone)]
pub struct Forwarding<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    /// The pod's address, with its prefix (the hairpin rule matches the subnet).
    pub pod: IpNet,
    pub mappings: &'a [Mapping],
    /// Mark hairpin and localhost traffic for masquerading.
    pub snat: bool,
    /// With `snat`: mark traffic from every source for masquerading, not only the pod's subnet
    /// and localhost (the reference's `masqAll`).
    pub masq_all: bool,
    /// The masquerade mark bit (0 to 31).
    pub mark_bit: u8,
    /// A chain of the admin's that marks instead of `CNI-HOSTPORT-SETMARK` (which is then
    /// neither made nor filled).
    pub external_set_mark: Option<&'a str>,
    /// Extra match arguments for the entry rules (`conditionsV4` or `conditionsV6`, for the
    /// pod address's family), checked by the caller.
    pub conditions: &'a [String],
}

/// `CNI-DN-` and a hash of the network and container.
pub fn dnat_chain(network: &str, container_id: &str) -> String {
    chain_name("CNI-DN-", network, container_id)
}

fn chain_name(prefix: &str, network: &str, container_id: &str) -> String {
    let hash = crate::sha512_hex_prefix(
        &format!("{network}{container_id}"),
        CHAIN_MAX - prefix.len(),
    );
    format!("{prefix}{hash}")
}

fn mark(bit: u8) -> String {
    let value = 1u32 << bit;
    format!("{value:#x}/{value:#x}")
}

fn host_port(ip: &IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

impl Forwarding<'_> {
    fn comment(&self) -> String {
        let mut c = format!(
            "dnat name: \"{}\" id: \"{}\"",
            self.network, self.container_id
        );
        if c.len() > COMMENT_MAX {
            let mut cut = COMMENT_MAX - 2;
            while !c.is_char_boundary(cut) {
                cut -= 1;
            }
            c.truncate(cut);
            c.push_str("...");
        }
        c
    }

    /// The entry rules (without `-A CHAIN` and the jump): per protocol in name order, up to
    /// 15 ports each, over every mapping (as the reference, whatever the family).
    fn entry_rules(&self) -> Vec<String> {
        let mut protocols: Vec<&str> = self.mappings.iter().map(|m| m.protocol.as_str()).collect();
        protocols.sort_unstable();
        protocols.dedup();
        let mut rules = Vec::new();
        for proto in protocols {
            let ports: Vec<String> = self
                .mappings
                .iter()
                .filter(|m| m.protocol == proto)
                .map(|m| m.host_port.to_string())
                .collect();
            for group in ports.chunks(MULTIPORT_MAX) {
                let mut rule = format!(
                    "-m comment --comment {} -m multiport -p {proto} --destination-ports {}",
                    quote(&self.comment()),
                    group.join(",")
                );
                if !self.conditions.is_empty() {
                    rule.push(' ');
                    rule.push_str(&self.conditions.join(" "));
                }
                rules.push(rule);
            }
        }
        rules
    }

    /// The rules of the attachment's chain, in order.
    fn dnat_rules(&self) -> Vec<String> {
        let pod_ip = self.pod.addr();
        let set_mark = self.external_set_mark.unwrap_or(SET_MARK_CHAIN);
        let mut rules = Vec::new();
        for m in self.mappings {
            let mut base = format!("-p {} --dport {}", m.protocol, m.host_port);
            if let Some(ip) = m.host_ip {
                if ip.is_ipv4() != pod_ip.is_ipv4() {
                    continue;
                }
                if !ip.is_unspecified() {
                    base.push_str(&format!(" -d {ip}"));
                }
            }
            if self.snat && self.masq_all {
                let any = if pod_ip.is_ipv4() {
                    "0.0.0.0/0"
                } else {
                    "::/0"
                };
                rules.push(format!("{base} -s {any} -j {set_mark}"));
            } else if self.snat {
                rules.push(format!("{base} -s {} -j {set_mark}", self.pod));
                // IPv4 only: the reference marks no IPv6 localhost traffic.
                if pod_ip.is_ipv4() {
                    rules.push(format!("{base} -s 127.0.0.1 -j {set_mark}"));
                }
            }
            rules.push(format!(
                "{base} -j DNAT --to-destination {}",
                host_port(&pod_ip, m.container_port)
            ));
        }
        rules
    }

    /// What the forwarding needs of the chains every attachment shares, in the order the
    /// reference makes it (the order nftables lists the chains in): `CNI-HOSTPORT-DNAT` and
    /// the jumps of local traffic to it and, with `snat`, the chains and rules that mark and
    /// masquerade.
    fn shared(&self) -> Vec<Shared> {
        let mark = mark(self.mark_bit);
        let rule = |chain: &str, first: bool, words: &[&str], rule: String| {
            Shared::Rule(SharedRule {
                chain: chain.into(),
                first,
                words: words.iter().map(|w| (*w).to_owned()).collect(),
                rule,
            })
        };
        let mut shared = Vec::new();
        if self.marks_itself() {
            shared.extend([
                Shared::Chain(SET_MARK_CHAIN),
                rule(
                    SET_MARK_CHAIN,
                    false,
                    &["--set-xmark", &mark],
                    format!(
                        "-m comment --comment {} -j MARK --set-xmark {mark}",
                        quote("CNI portfwd masquerade mark")
                    ),
                ),
                Shared::Chain(MASQ_CHAIN),
                rule(
                    MASQ_CHAIN,
                    false,
                    &["--mark", &mark, "MASQUERADE"],
                    format!("-m mark --mark {mark} -j MASQUERADE"),
                ),
                rule(
                    "POSTROUTING",
                    true,
                    &[MASQ_CHAIN],
                    format!(
                        "-m comment --comment {} -j {MASQ_CHAIN}",
                        quote("CNI portfwd requiring masquerade")
                    ),
                ),
            ]);
        }
        shared.push(Shared::Chain(TOP_DNAT_CHAIN));
        for entry in ["PREROUTING", "OUTPUT"] {
            shared.push(rule(
                entry,
                false,
                &[TOP_DNAT_CHAIN],
                format!("-m addrtype --dst-type LOCAL -j {TOP_DNAT_CHAIN}"),
            ));
        }
        shared
    }

    /// Whether the forwarding marks for masquerade in `CNI-HOSTPORT-SETMARK` (not in an
    /// admin's chain).
    fn marks_itself(&self) -> bool {
        self.snat && self.external_set_mark.is_none()
    }

    /// The iptables-restore lines that set up the forwarding on a table listed as `saved`.
    fn setup_lines(&self, saved: &str) -> Vec<String> {
        let chain = dnat_chain(self.network, self.container_id);
        let mut lines = Vec::new();
        for piece in self.shared() {
            match piece {
                Shared::Chain(c) => lines.extend(ipt::create(saved, c)),
                Shared::Rule(r) if !r.is_in(saved) => lines.push(r.line()),
                Shared::Rule(_) => {}
            }
        }
        // The attachment's own chain is declared (which flushes it) and filled again, and its
        // entry rules replaced.
        lines.extend(jumps_to(saved, TOP_DNAT_CHAIN, &chain));
        lines.push(format!(":{chain} - [0:0]"));
        lines.extend(
            self.dnat_rules()
                .into_iter()
                .map(|r| format!("-A {chain} {r}")),
        );
        lines.extend(
            self.entry_rules()
                .into_iter()
                .map(|r| format!("-A {TOP_DNAT_CHAIN} {r} -j {chain}")),
        );
        lines
    }
}

/// A piece of the chains every attachment shares: a chain, made when missing, or a rule.
enum Shared {
    Chain(&'static str),
    Rule(SharedRule),
}

/// Sets up the forwarding to `f.pod`. Running it again for the attachment replaces its
/// rules; the shared chains get what they lack.
pub fn setup(f: &Forwarding) -> Result<()> {
    let tools = ipt::tools(f.pod.addr().is_ipv4());
    ipt::update(tools, "nat", |saved| f.setup_lines(saved)).map_err(|e| match e {
        Error::Command { msg, .. } => Error::Command {
            op: format!("forwarding host ports to {}", f.pod),
            msg,
        },
        other => other,
    })
}

/// Removes the attachment's chains (and the old releases' SNAT chain) with every rule that
/// jumps to them, in both families. Idempotent; a family whose tools are missing has none.
pub fn teardown(network: &str, container_id: &str) -> Result<()> {
    let dnat = dnat_chain(network, container_id);
    let snat = chain_name("CNI-SN-", network, container_id);
    for tools in [&ipt::V4, &ipt::V6] {
        let Some(saved) = ipt::save(tools, "nat")? else {
            continue;
        };
        let mut lines = Vec::new();
        for (chain, from) in [(&dnat, TOP_DNAT_CHAIN), (&snat, OLD_SNAT_CHAIN)] {
            lines.extend(jumps_to(&saved, from, chain));
            if declared(&saved, chain) {
                lines.push(format!("-F {chain}"));
                lines.push(format!("-X {chain}"));
            }
        }
        ipt::restore(tools, "nat", &lines)?;
    }
    Ok(())
}

/// Whether every rule of the forwarding to `f.pod` is in place; the first one missing as an
/// error.
pub fn check(f: &Forwarding) -> Result<()> {
    let tools = ipt::tools(f.pod.addr().is_ipv4());
    let chain = dnat_chain(f.network, f.container_id);
    let missing = |what: String| Error::NotFound {
        what: format!("{} {what}", tools.cmd),
    };
    let saved = ipt::save(tools, "nat")?.ok_or_else(|| missing("nat table".into()))?;
    if !declared(&saved, &chain) {
        return Err(missing(format!("chain {chain}")));
    }
    for piece in f.shared() {
        match piece {
            Shared::Rule(r) if !r.is_in(&saved) => return Err(r.missing(tools)),
            _ => {}
        }
    }
    let checks = f
        .dnat_rules()
        .into_iter()
        .map(|r| (chain.clone(), r))
        .chain(
            f.entry_rules()
                .into_iter()
                .map(|r| (TOP_DNAT_CHAIN.to_owned(), format!("{r} -j {chain}"))),
        );
    for (in_chain, rule) in checks {
        let mut args = vec!["-w", "-t", "nat", "-C", in_chain.as_str()];
        let words = split_words(&rule);
        args.extend(words.iter().map(String::as_str));
        if tool::run(tools.cmd, &args, None).is_err() {
            return Err(missing(format!("rule {rule:?} in chain {in_chain}")));
        }
    }
    Ok(())
}

/// The words of a rule as iptables-restore reads them: spaces split, double quotes group.
fn split_words(rule: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut chars = rule.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => word.extend(chars.next()),
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd<'a>(mappings: &'a [Mapping], pod: &str) -> Forwarding<'a> {
        Forwarding {
            network: "net",
            container_id: "c1",
            pod: pod.parse().expect("net"),
            mappings,
            snat: true,
            masq_all: false,
            mark_bit: 13,
            external_set_mark: None,
            conditions: &[],
        }
    }

    fn m(host: u16, cont: u16, proto: &str, ip: Option<&str>) -> Mapping {
        Mapping {
            host_port: host,
            container_port: cont,
            protocol: proto.into(),
            host_ip: ip.map(|i| i.parse().expect("ip")),
        }
    }

    #[test]
    fn rules_as_the_reference_writes_them() {
        let maps = [
            m(8080, 80, "tcp", None),
            m(5353, 53, "udp", Some("192.0.2.1")),
        ];
        let f = fwd(&maps, "10.20.0.5/24");
        assert_eq!(
            f.dnat_rules(),
            [
                "-p tcp --dport 8080 -s 10.20.0.5/24 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -j DNAT --to-destination 10.20.0.5:80",
                "-p udp --dport 5353 -d 192.0.2.1 -s 10.20.0.5/24 -j CNI-HOSTPORT-SETMARK",
                "-p udp --dport 5353 -d 192.0.2.1 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK",
                "-p udp --dport 5353 -d 192.0.2.1 -j DNAT --to-destination 10.20.0.5:53",
            ]
        );
        assert_eq!(
            f.entry_rules(),
            [
                r#"-m comment --comment "dnat name: \"net\" id: \"c1\"" -m multiport -p tcp --destination-ports 8080"#,
                r#"-m comment --comment "dnat name: \"net\" id: \"c1\"" -m multiport -p udp --destination-ports 5353"#,
            ]
        );
        // IPv6: no localhost rule, the address in brackets, IPv4 host addresses skipped.
        let f = fwd(&maps, "fd20::5/64");
        assert_eq!(
            f.dnat_rules(),
            [
                "-p tcp --dport 8080 -s fd20::5/64 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -j DNAT --to-destination [fd20::5]:80",
            ]
        );
        // masqAll: every source is marked, in one rule.
        let f = Forwarding {
            masq_all: true,
            ..fwd(&maps[..1], "10.20.0.5/24")
        };
        assert_eq!(
            f.dnat_rules(),
            [
                "-p tcp --dport 8080 -s 0.0.0.0/0 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -j DNAT --to-destination 10.20.0.5:80",
            ]
        );
        let f = Forwarding {
            masq_all: true,
            ..fwd(&maps[..1], "fd20::5/64")
        };
        assert_eq!(
            f.dnat_rules()[0],
            "-p tcp --dport 8080 -s ::/0 -j CNI-HOSTPORT-SETMARK"
        );
        assert_eq!(dnat_chain("net", "c1").len(), 28);
        assert_eq!(mark(13), "0x2000/0x2000");
    }

    #[test]
    fn sixteen_ports_take_two_multiport_rules() {
        let maps: Vec<Mapping> = (1..=16).map(|p| m(p, p, "tcp", None)).collect();
        let rules = fwd(&maps, "10.0.0.5/24").entry_rules();
        assert_eq!(rules.len(), 2);
        assert!(rules[1].ends_with("--destination-ports 16"), "{}", rules[1]);
    }

    #[test]
    fn words_split_as_restore_reads_them() {
        assert_eq!(
            split_words(r#"-m comment --comment "a \"b\" c" -j X"#),
            ["-m", "comment", "--comment", r#"a "b" c"#, "-j", "X"]
        );
    }
}
