//! The `portmap` plugin, chained after an interface plugin: forwards the node's ports to the
//! pod (Kubernetes' `hostPort`), from `runtimeConfig.portMappings`, with iptables DNAT rules
//! in the node's namespace (see [`netkit::firewall::hostport`] for their names and shapes).
//!
//! As the reference (v1.9.1): for the pod's first IPv4 and first IPv6 address on `CNI_IFNAME`,
//! each mapping's DNAT, with `snat` (the default) marking hairpin and IPv4 localhost traffic for
//! masquerade and turning `route_localnet` on for the interface that routes to the pod;
//! `markMasqBit`, `externalSetMarkChain`, `conditionsV4` and `conditionsV6`, and `masqAll` of
//! later releases (with `snat`, traffic from any source is masqueraded); DEL removes the
//! attachment's chain and the rules jumping to it; UDP's stale conntrack entries for the host
//! ports are dropped after ADD (with the `conntrack` tool, when the node has it).
//!
//! Deliberate changes: ports, protocols, host addresses and conditions are checked before
//! anything is written (a condition is a tenant's text in the node's firewall); CHECK checks
//! only the families the pod has; a second ADD replaces the attachment's rules instead of
//! adding to them; DEL removes the attachment's rules from both backends.
//!
//! `backend: "nftables"` (or no backend on a node without `iptables`) writes the reference's
//! nftables rules instead, through [`netkit::firewall::hostport_nft`].

use std::net::IpAddr;

use cni::keys::Keys;
use cni::quote::quote;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use ipnet::IpNet;
use netkit::firewall::hostport::{Forwarding, Mapping};
use netkit::{Family, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::sys::{sys, sys_ctx};

/// The plugin, as registered in the multi-call binary's table.
pub struct Portmap;

/// The masquerade mark bit Kubernetes leaves free (it uses 14 and 15).
const DEFAULT_MARK_BIT: u8 = 13;
/// The most mappings one attachment may have.
const MAPPINGS_MAX: usize = 1024;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMapping {
    #[serde(default)]
    host_port: i64,
    #[serde(default)]
    container_port: i64,
    #[serde(default)]
    protocol: String,
    #[serde(default, rename = "hostIP")]
    host_ip: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawRuntime {
    #[serde(default)]
    port_mappings: Vec<RawMapping>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    snat: Option<bool>,
    #[serde(default)]
    masq_all: bool,
    #[serde(default)]
    conditions_v4: Option<Vec<String>>,
    #[serde(default)]
    conditions_v6: Option<Vec<String>>,
    #[serde(default)]
    mark_masq_bit: Option<i64>,
    #[serde(default)]
    external_set_mark_chain: Option<String>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    runtime_config: Option<RawRuntime>,
}

/// Which tool holds the forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Iptables,
    Nftables,
}

/// The checked configuration.
struct PortmapConf {
    net: NetConf,
    backend: Backend,
    mappings: Vec<Mapping>,
    snat: bool,
    masq_all: bool,
    mark_bit: u8,
    external_set_mark: Option<String>,
    conditions_v4: Vec<String>,
    conditions_v6: Vec<String>,
}

impl PortmapConf {
    fn parse(stdin: &[u8]) -> Result<PortmapConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        let backend = backend(&raw)?;
        if raw.mark_masq_bit.is_some() && raw.external_set_mark_chain.is_some() {
            return Err(CniError::invalid_config(
                "markMasqBit and externalSetMarkChain cannot both be set: choose one",
            ));
        }
        let mark_bit = match raw.mark_masq_bit {
            None => DEFAULT_MARK_BIT,
            Some(b) => u8::try_from(b).ok().filter(|b| *b <= 31).ok_or_else(|| {
                CniError::invalid_config(format!("markMasqBit: {b} is not a bit: use 0 to 31"))
            })?,
        };
        if let Some(chain) = &raw.external_set_mark_chain {
            check_chain_name(chain)?;
        }
        let raw_maps = raw.runtime_config.unwrap_or_default().port_mappings;
        if raw_maps.len() > MAPPINGS_MAX {
            return Err(CniError::invalid_config(format!(
                "runtimeConfig.portMappings: {} mappings, more than the {MAPPINGS_MAX} one pod \
                 may have",
                raw_maps.len()
            )));
        }
        let mappings = raw_maps
            .iter()
            .enumerate()
            .map(|(i, m)| mapping(i, m))
            .collect::<Result<_, _>>()?;
        let conditions = |key: &str, list: Option<Vec<String>>| match backend {
            Backend::Iptables => iptables_conditions(key, list),
            Backend::Nftables => nftables_conditions(key, list),
        };
        Ok(PortmapConf {
            net,
            backend,
            mappings,
            snat: raw.snat.unwrap_or(true),
            masq_all: raw.masq_all,
            mark_bit,
            external_set_mark: raw.external_set_mark_chain,
            conditions_v4: conditions("conditionsV4", raw.conditions_v4)?,
            conditions_v6: conditions("conditionsV6", raw.conditions_v6)?,
        })
    }

    fn prev_result(&self) -> Result<CniResult, CniError> {
        let prev = self.net.prev_result.as_ref().ok_or_else(|| {
            CniError::invalid_config(
                "portmap needs prevResult: chain it after the plugin that makes the interface",
            )
        })?;
        CniResult::from_value_at(prev, Some("prevResult"))
    }

    fn forwarding<'a>(&'a self, args: &'a CmdArgs, pod: IpNet) -> Forwarding<'a> {
        Forwarding {
            network: &self.net.name,
            container_id: &args.container_id,
            pod,
            mappings: &self.mappings,
            snat: self.snat,
            masq_all: self.masq_all,
            mark_bit: self.mark_bit,
            external_set_mark: self.external_set_mark.as_deref(),
            conditions: if pod.addr().is_ipv4() {
                &self.conditions_v4
            } else {
                &self.conditions_v6
            },
        }
    }
}

fn mapping(i: usize, m: &RawMapping) -> Result<Mapping, CniError> {
    let at = |key: &str| format!("runtimeConfig.portMappings[{i}].{key}");
    let port = |key: &str, value: i64| {
        u16::try_from(value)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                CniError::invalid_config(format!(
                    "{}: {value} is not a port: use 1 to 65535",
                    at(key)
                ))
            })
    };
    if !["tcp", "udp", "sctp"].contains(&m.protocol.to_ascii_lowercase().as_str()) {
        return Err(CniError::invalid_config(format!(
            "{}: {} is not tcp, udp or sctp",
            at("protocol"),
            quote(&m.protocol)
        )));
    }
    let host_ip = if m.host_ip.is_empty() {
        None
    } else {
        Some(m.host_ip.parse::<IpAddr>().map_err(|_| {
            CniError::invalid_config(format!(
                "{}: {} is not an IP address",
                at("hostIP"),
                quote(&m.host_ip)
            ))
        })?)
    };
    Ok(Mapping {
        host_port: port("hostPort", m.host_port)?,
        container_port: port("containerPort", m.container_port)?,
        protocol: m.protocol.clone(),
        host_ip,
    })
}

/// The backend: as named, or as the reference picks it, iptables unless only nft is there.
/// Options of the other backend are refused, as the reference refuses them.
fn backend(raw: &Raw) -> Result<Backend, CniError> {
    // The reference tells conditions apart by their first word: iptables' start with - or !.
    let syntax = |list: &Option<Vec<String>>| {
        list.as_ref()
            .and_then(|l| l.first())
            .and_then(|c| c.chars().next())
            .map(|c| {
                if c == '-' || c == '!' {
                    Backend::Iptables
                } else {
                    Backend::Nftables
                }
            })
    };
    let backend = match raw.backend.as_deref() {
        Some("iptables") => Backend::Iptables,
        Some("nftables") => Backend::Nftables,
        Some(other) => {
            return Err(CniError::invalid_config(format!(
                "backend: {} is not a backend: use \"iptables\" or \"nftables\" (or leave it \
                 out: iptables when it is installed, else nftables)",
                quote(other)
            )))
        }
        None if netkit::firewall::iptables_installed() => Backend::Iptables,
        None => Backend::Nftables,
    };
    let mut other = Vec::new();
    for (key, list) in [
        ("conditionsV4", &raw.conditions_v4),
        ("conditionsV6", &raw.conditions_v6),
    ] {
        if syntax(list).is_some_and(|b| b != backend) {
            other.push(key);
        }
    }
    if backend == Backend::Nftables {
        if raw.external_set_mark_chain.is_some() {
            other.push("externalSetMarkChain");
        }
        if raw.masq_all {
            other.push("masqAll");
        }
    }
    if !other.is_empty() {
        let name = |b: Backend| match b {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
        };
        let theirs = match backend {
            Backend::Iptables => Backend::Nftables,
            Backend::Nftables => Backend::Iptables,
        };
        return Err(CniError::invalid_config(format!(
            "{} {} for the {} backend, and this config uses the {} backend{}",
            other.join(", "),
            if other.len() == 1 { "is" } else { "are" },
            name(theirs),
            name(backend),
            match (raw.backend.is_none(), backend) {
                (true, Backend::Iptables) => " (no \"backend\" set, and iptables is installed)",
                (true, Backend::Nftables) => " (no \"backend\" set, and iptables is not installed)",
                (false, _) => "",
            }
        )));
    }
    Ok(backend)
}

/// nftables conditions are words a tenant writes into a rule of the node's nftables: matches
/// only, of the characters of addresses, ports, interface names and keywords, and none of the
/// words that make a statement (a verdict, a NAT, a `set`).
fn nftables_conditions(key: &str, list: Option<Vec<String>>) -> Result<Vec<String>, CniError> {
    const STATEMENTS: [&str; 24] = [
        "accept",
        "drop",
        "reject",
        "return",
        "jump",
        "goto",
        "queue",
        "continue",
        "dnat",
        "snat",
        "masquerade",
        "redirect",
        "set",
        "log",
        "counter",
        "notrack",
        "limit",
        "dup",
        "fwd",
        "tproxy",
        "synproxy",
        "quota",
        "meter",
        "flow",
    ];
    let list = list.unwrap_or_default();
    for (i, c) in list.iter().enumerate() {
        let words: Vec<&str> = c.split_whitespace().collect();
        let ok = !words.is_empty()
            && words.iter().all(|w| {
                w.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "-_.:/,!=<>".contains(ch))
                    && !STATEMENTS.contains(&w.to_ascii_lowercase().as_str())
            });
        if !ok {
            return Err(CniError::invalid_config(format!(
                "{key}[{i}]: {} is not an nftables match: words of letters, digits and \
                 -_.:/,!=<>, and no statement (accept, jump, dnat, set, ...)",
                quote(c)
            )));
        }
    }
    Ok(list)
}

/// iptables conditions are match arguments a tenant writes into the node's firewall: only the
/// characters of addresses, ports, interface names and options, and no jump of their own.
fn iptables_conditions(key: &str, list: Option<Vec<String>>) -> Result<Vec<String>, CniError> {
    let list = list.unwrap_or_default();
    for (i, c) in list.iter().enumerate() {
        let ok_chars = !c.is_empty()
            && c.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.:/,!+=".contains(ch));
        let jump = ["-j", "--jump", "-g", "--goto"].contains(&c.as_str());
        if !ok_chars || jump {
            return Err(CniError::invalid_config(format!(
                "{key}[{i}]: {} is not a match argument: one word of letters, digits and \
                 -_.:/,!+=, and no jump",
                quote(c)
            )));
        }
    }
    Ok(list)
}

fn check_chain_name(chain: &str) -> Result<(), CniError> {
    let ok = !chain.is_empty()
        && chain.len() <= 28
        && chain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(CniError::invalid_config(format!(
            "externalSetMarkChain: {} is not an iptables chain name",
            quote(chain)
        )))
    }
}

/// The pod's first IPv4 and first IPv6 address on `CNI_IFNAME` (an address naming no
/// interface counts; one of an interface without a sandbox does not).
fn pod_addresses(prev: &CniResult, ifname: &str) -> Vec<IpNet> {
    let mut out: Vec<IpNet> = Vec::new();
    for ip in &prev.ips {
        let on_pod = ip
            .interface
            .and_then(|i| prev.interfaces.get(i))
            .is_none_or(|iface| iface.name == ifname && !iface.sandbox.is_empty());
        let family = Family::of_net(&ip.address);
        if on_pod && !out.iter().any(|a| Family::of_net(a) == family) {
            out.push(ip.address);
        }
    }
    out
}

/// `route_localnet` on the interface whose main-table route (longest prefix) reaches `pod`,
/// so that 127.0.0.1 may be DNATed to it. Only a pods' link (a bridge or a veth) gets it: a
/// pod whose address is routed through the node's uplink would otherwise open the node's
/// localhost-only services to its neighbours on that link; its host ports then answer on the
/// node's other addresses, not on 127.0.0.1.
fn enable_localnet(pod: IpAddr) -> Result<(), CniError> {
    let nl = Netlink::new().map_err(sys)?;
    let best = nl
        .routes(Family::V4, Some(netkit::netlink::RT_TABLE_MAIN))
        .map_err(sys)?
        .into_iter()
        .filter(|r| r.dst.contains(&pod))
        .max_by_key(|r| r.dst.prefix_len())
        .and_then(|r| r.oif);
    let Some(index) = best else { return Ok(()) };
    let Some(link) = nl.link_by_index(index).map_err(sys)? else {
        return Ok(());
    };
    if !matches!(link.kind.as_deref(), Some("bridge" | "veth")) {
        eprintln!(
            "portmap: route_localnet left off on {:?}, which routes to {pod} but is not a pods' \
             bridge or veth: the pod's host ports do not answer on 127.0.0.1",
            link.name
        );
        return Ok(());
    }
    netkit::sysctl::write(&format!("net/ipv4/conf/{}/route_localnet", link.name), "1").map_err(
        sys_ctx(format!("enabling route_localnet on {:?}", link.name)),
    )
}

/// Drops UDP conntrack entries to the mapped host ports, which would keep sending a client's
/// packets where they went before the mapping existed. Informative only, as in the reference.
fn drop_stale_udp(conf: &PortmapConf, family: Family) {
    let family = match family {
        Family::V4 => "ipv4",
        Family::V6 => "ipv6",
    };
    for m in conf
        .mappings
        .iter()
        .filter(|m| m.protocol.eq_ignore_ascii_case("udp"))
    {
        let port = m.host_port.to_string();
        let args = ["-D", "-f", family, "-p", "udp", "--dport", port.as_str()];
        match std::process::Command::new("conntrack")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
        {
            // No entry to delete is a failure exit; nothing to report.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => eprintln!("portmap: running conntrack for UDP port {port}: {e}"),
        }
    }
}

/// Removes the attachment's forwarding from both backends: the node may have changed tools
/// since ADD, and a node that ran the reference may hold either.
fn teardown(network: &str, container_id: &str) -> netkit::Result<()> {
    let iptables = netkit::firewall::hostport::teardown(network, container_id);
    let nftables = netkit::firewall::hostport_nft::teardown(container_id);
    iptables.and(nftables)
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for Portmap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = PortmapConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        if conf.mappings.is_empty() {
            return Ok(prev);
        }
        let pods = pod_addresses(&prev, &args.ifname);
        for pod in pods {
            let family = Family::of_net(&pod);
            if conf.snat && family == Family::V4 {
                enable_localnet(pod.addr())?;
            }
            let forwarding = conf.forwarding(args, pod);
            let set_up = match conf.backend {
                Backend::Iptables => netkit::firewall::hostport::setup(&forwarding),
                Backend::Nftables => netkit::firewall::hostport_nft::setup(&forwarding),
            };
            if let Err(e) = set_up {
                // What this ADD forwarded, in either family, goes again.
                let failures: Vec<String> = teardown(&conf.net.name, &args.container_id)
                    .err()
                    .map(|e| e.to_string())
                    .into_iter()
                    .collect();
                return Err(crate::support::sys::with_cleanup_failures(
                    sys(e),
                    &failures,
                ));
            }
            drop_stale_udp(&conf, family);
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Only the network's name: the rules are found by the chain it names, or by their
        // comment, in whichever backend holds them.
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        teardown(&net.name, &args.container_id).map_err(sys)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = PortmapConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        for pod in pod_addresses(&prev, &args.ifname) {
            let forwarding = conf.forwarding(args, pod);
            match conf.backend {
                Backend::Iptables => netkit::firewall::hostport::check(&forwarding),
                Backend::Nftables => netkit::firewall::hostport_nft::check(&forwarding),
            }
            .map_err(|e| check::fail(e.to_string()))?;
        }
        Ok(())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = PortmapConf::parse(config)?;
        if conf.net.prev_result.is_some() {
            conf.prev_result()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<PortmapConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"portmap"{extra}}}"#);
        PortmapConf::parse(json.as_bytes())
    }

    fn maps(list: &str) -> String {
        format!(r#","runtimeConfig":{{"portMappings":[{list}]}}"#)
    }

    #[test]
    fn options() {
        let c = parse(&format!(
            r#","snat":false,"masqAll":true,"markMasqBit":5,"conditionsV4":["-s","10.0.0.0/8"]{}"#,
            maps(r#"{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"192.0.2.1"}"#)
        ))
        .expect("parsed");
        assert!(!c.snat && c.masq_all);
        assert_eq!(c.mark_bit, 5);
        assert_eq!(c.conditions_v4, ["-s", "10.0.0.0/8"]);
        assert_eq!(c.mappings[0].host_port, 8080);
        assert_eq!(c.mappings[0].host_ip, "192.0.2.1".parse().ok());
        let c = parse("").expect("parsed");
        assert!(c.snat && !c.masq_all && c.mark_bit == 13 && c.mappings.is_empty());
        let c = parse(
            r#","backend":"nftables","conditionsV4":["ip saddr 10.0.0.0/8","iifname != lo"]"#,
        )
        .expect("parsed");
        assert_eq!(c.backend, Backend::Nftables);
        assert_eq!(c.conditions_v4, ["ip saddr 10.0.0.0/8", "iifname != lo"]);
    }

    #[test]
    fn bad_values() {
        let code = |extra: &str| parse(extra).err().map(|e| (e.code, e.msg));
        let bad = [
            maps(r#"{"hostPort":0,"containerPort":80,"protocol":"tcp"}"#),
            maps(r#"{"hostPort":70000,"containerPort":80,"protocol":"tcp"}"#),
            maps(r#"{"hostPort":80,"containerPort":80,"protocol":"icmp"}"#),
            maps(r#"{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"nope"}"#),
            r#","markMasqBit":32"#.into(),
            r#","markMasqBit":1,"externalSetMarkChain":"X""#.into(),
            r#","externalSetMarkChain":"a b""#.into(),
            r#","conditionsV4":["-j","ACCEPT"]"#.into(),
            r#","conditionsV4":["x\n-A PREROUTING"]"#.into(),
            r#","conditionsV6":["\"quoted\""]"#.into(),
            r#","backend":"pf""#.into(),
            r#","backend":"nftables","conditionsV4":["-s","10.0.0.0/8"]"#.into(),
            r#","backend":"iptables","conditionsV4":["ip saddr 10.0.0.0/8"]"#.into(),
            r#","backend":"nftables","conditionsV4":["ip saddr 10.0.0.0/8 accept"]"#.into(),
            r#","backend":"nftables","conditionsV4":["iifname eth0 ; flush ruleset"]"#.into(),
            r#","backend":"nftables","conditionsV6":["meta mark SET 1"]"#.into(),
            r#","backend":"nftables","conditionsV4":["dup to 192.0.2.9"]"#.into(),
            r#","backend":"nftables","conditionsV6":[""]"#.into(),
            r#","backend":"nftables","externalSetMarkChain":"X""#.into(),
            r#","backend":"nftables","masqAll":true"#.into(),
        ];
        for extra in bad {
            let got = code(&extra);
            assert_eq!(got.as_ref().map(|g| g.0), Some(7), "{extra}: {got:?}");
        }
        assert_eq!(
            code(&maps(
                r#"{"hostPort":0,"containerPort":80,"protocol":"tcp"}"#
            ))
            .map(|g| g.1),
            Some("runtimeConfig.portMappings[0].hostPort: 0 is not a port: use 1 to 65535".into())
        );
    }

    #[test]
    fn the_pods_first_address_of_each_family() {
        let prev = CniResult::from_value_at(
            &serde_json::json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "veth1"}, {"name": "eth0", "sandbox": "/x"}],
                "ips": [
                    {"address": "10.0.0.1/24", "interface": 0},
                    {"address": "10.0.0.5/24", "interface": 1},
                    {"address": "10.0.0.6/24", "interface": 1},
                    {"address": "fd00::5/64"}
                ]
            }),
            None,
        )
        .expect("a result");
        let got: Vec<String> = pod_addresses(&prev, "eth0")
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(got, ["10.0.0.5/24", "fd00::5/64"]);
    }
}
