//! The `firewall` plugin, chained after an interface plugin: lets the pod's forwarded traffic
//! through a node whose `FORWARD` policy drops, with iptables rules in the node's namespace
//! (see [`netkit::firewall::forward`] for their names and shapes).
//!
//! As the reference (v1.9.1, iptables backend): `CNI-FORWARD` accepts traffic from each pod
//! address and the replies to it, after a jump to the admin's override chain (`CNI-ADMIN`, or
//! `iptablesAdminChainName`); `ingressPolicy: "same-bridge"` also isolates the bridge the
//! previous plugin made (the first interface of its result) from other interfaces, and
//! `"isolated"` also isolates its pods from each other. DEL removes the pod's rules; the shared
//! chains stay.
//!
//! The firewalld backend (`backend: "firewalld"`, or no backend while firewalld runs on the
//! system bus) binds each address to `firewalldZone` (`trusted` unless set) through
//! [`netkit::firewall::firewalld`] instead; `same-bridge` and `isolated` still write the
//! isolation rules.
//!
//! The nftables backend (`backend: "nftables"`, or no backend on a node without iptables) is
//! ours: the reference's firewall fails where iptables is missing. It writes the same rules in
//! a table of its own ([`netkit::firewall::forward_nft`]); the isolation of an ingress policy
//! goes there too whenever iptables is missing.
//!
//! Deliberate changes: an unknown `backend` is refused instead of falling back to whatever is
//! there; the admin chain's and the zone's names are checked; an ADD that fails halfway takes
//! back what it bound; CHECK asks firewalld whether each address is in the zone (the reference
//! only checks that the question can be asked); DEL with no backend set removes every kind
//! (firewalld may have started or stopped, iptables been installed or removed, since ADD); DEL
//! of a config that no longer validates still removes the pod's rules.

use std::net::IpAddr;

use cni::keys::Keys;
use cni::quote::quote;
use cni::{CmdArgs, CniError, CniResult, Code, NetConf};
use netkit::firewall::firewalld::Firewalld;
use netkit::firewall::forward::{self, Isolation};
use netkit::firewall::forward_nft;
use serde::Deserialize;

use crate::support::check;
use crate::support::sys::sys;

/// The plugin, as registered in the multi-call binary's table.
pub struct Firewall;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    backend: String,
    #[serde(default)]
    iptables_admin_chain_name: String,
    #[serde(default)]
    ingress_policy: String,
    #[serde(default)]
    firewalld_zone: String,
}

/// Where the pod's addresses are let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Iptables,
    Nftables,
    Firewalld,
    /// None set: firewalld when it runs on the system bus, else iptables when it is
    /// installed, else nftables.
    Either,
}

/// Which tool writes the rules firewalld does not hold: the pods' rules without firewalld, and
/// the isolation of an `ingressPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tables {
    Iptables,
    Nftables,
}

impl Backend {
    /// The tool of this backend; with firewalld or none named, iptables as the reference has
    /// it, or nftables on a node without iptables.
    fn tables(self) -> Tables {
        match self {
            Backend::Iptables => Tables::Iptables,
            Backend::Nftables => Tables::Nftables,
            Backend::Firewalld | Backend::Either if netkit::firewall::iptables_installed() => {
                Tables::Iptables
            }
            Backend::Firewalld | Backend::Either => Tables::Nftables,
        }
    }
}

/// The checked configuration.
struct FirewallConf {
    net: NetConf,
    backend: Backend,
    admin_chain: String,
    zone: String,
    /// `ingressPolicy`, when it isolates the bridge.
    isolation: Option<Isolation>,
}

/// The firewalld zone to use: `firewalldZone`, or the default; `None` when it is not a name
/// firewalld could have (letters, digits, '_', '-' and one inner '/', up to 64).
fn zone_name(raw: &str) -> Option<String> {
    if raw.is_empty() {
        return Some(netkit::firewall::firewalld::DEFAULT_ZONE.to_owned());
    }
    let ok = raw.len() <= 64
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/'))
        && !raw.starts_with('/')
        && !raw.ends_with('/')
        && raw.matches('/').count() <= 1;
    ok.then(|| raw.to_owned())
}

/// The backend `backend` names, `None` for an unknown one.
fn backend(raw: &str) -> Option<Backend> {
    match raw {
        "" => Some(Backend::Either),
        "iptables" => Some(Backend::Iptables),
        "nftables" => Some(Backend::Nftables),
        "firewalld" => Some(Backend::Firewalld),
        _ => None,
    }
}

impl FirewallConf {
    fn parse(stdin: &[u8]) -> Result<FirewallConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        let backend = backend(&raw.backend).ok_or_else(|| {
            CniError::invalid_config(format!(
                "backend: {} is not a backend: use \"iptables\", \"nftables\" or \"firewalld\" \
                 (or leave it out: firewalld when it runs, else iptables when installed, else \
                 nftables)",
                quote(&raw.backend)
            ))
        })?;
        let zone = zone_name(&raw.firewalld_zone).ok_or_else(|| {
            CniError::invalid_config(format!(
                "firewalldZone: {} is not a firewalld zone name: up to 64 letters, digits, '-' \
                 and '_', with at most one '/' inside",
                quote(&raw.firewalld_zone)
            ))
        })?;
        let admin_chain = if raw.iptables_admin_chain_name.is_empty() {
            forward::ADMIN_CHAIN.to_owned()
        } else {
            let name = raw.iptables_admin_chain_name;
            let ok = name.len() <= 28
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(CniError::invalid_config(format!(
                    "iptablesAdminChainName: {} is not an iptables chain name: up to 28 \
                     letters, digits, '-' and '_'",
                    quote(&name)
                )));
            }
            name
        };
        let isolation = match raw.ingress_policy.as_str() {
            "" | "open" => None,
            "same-bridge" => Some(Isolation::SameBridge),
            "isolated" => Some(Isolation::Isolated),
            other => {
                return Err(CniError::invalid_config(format!(
                    "ingressPolicy: {} is not a policy: use \"open\" (the default), \
                     \"same-bridge\" or \"isolated\"",
                    quote(other)
                )))
            }
        };
        Ok(FirewallConf {
            net,
            backend,
            admin_chain,
            zone,
            isolation,
        })
    }

    fn prev_result(&self) -> Result<CniResult, CniError> {
        let prev = self.net.prev_result.as_ref().ok_or_else(|| {
            CniError::invalid_config(
                "firewall needs prevResult: chain it after the plugin that makes the interface",
            )
        })?;
        CniResult::from_value_at(prev, Some("prevResult"))
    }

    /// With an isolating policy, the bridge to isolate: the first interface of `prev`, as
    /// bridge's result names it.
    fn isolated_bridge(&self, prev: &CniResult) -> Result<Option<(String, Isolation)>, CniError> {
        let Some(policy) = self.isolation else {
            return Ok(None);
        };
        match prev.interfaces.first().map(|i| i.name.as_str()) {
            // iptables reads a final '+' as "every interface named so far", nft a '*'.
            Some(name) if name.contains(['+', '*']) => Err(CniError::invalid_config(format!(
                "ingressPolicy \"{}\": the bridge's name {} holds a '+' or '*', which the \
                 node's firewall reads as a wildcard over many interfaces",
                policy.name(),
                quote(name)
            ))),
            Some(name) if !name.is_empty() => Ok(Some((name.to_owned(), policy))),
            _ => Err(CniError::invalid_config(format!(
                "ingressPolicy \"{}\" needs the bridge: chain firewall after bridge, whose \
                 result names it first",
                policy.name()
            ))),
        }
    }
}

/// The interface an ingress policy isolates must be a bridge of the node's: the first interface
/// of any other plugin's result (a pod's link, the node's uplink) would cut the node's own
/// traffic off.
fn node_bridge(name: &str, policy: Isolation) -> Result<(), CniError> {
    let nl = netkit::Netlink::new().map_err(sys)?;
    match nl.link_by_name(name).map_err(sys)? {
        Some(link) if link.kind.as_deref() == Some("bridge") => Ok(()),
        found => Err(CniError::invalid_config(format!(
            "ingressPolicy \"{}\" isolates bridges: the first interface of prevResult, {}, is {} \
             (chain firewall after bridge)",
            policy.name(),
            quote(name),
            if found.is_some() {
                "not a bridge on the node"
            } else {
                "not a link of the node"
            }
        ))),
    }
}

/// Every address of the result, as the reference allows them.
fn addresses(prev: &CniResult) -> Vec<IpAddr> {
    prev.ips.iter().map(|ip| ip.address.addr()).collect()
}

/// A firewalld failure, coded for what the user can do about it.
fn firewalld_error(e: netkit::Error) -> CniError {
    if netkit::firewall::firewalld::not_running(&e) {
        CniError::new(Code::TryAgainLater, e.to_string())
    } else if netkit::firewall::firewalld::code(&e) == Some("INVALID_ZONE") {
        CniError::invalid_config(format!("firewalldZone: firewalld has no such zone: {e}"))
    } else {
        sys(e)
    }
}

/// The firewalld connection this config's backend uses; `None` for iptables and nftables.
fn firewalld_for(backend: Backend) -> Result<Option<Firewalld>, CniError> {
    match backend {
        Backend::Iptables | Backend::Nftables => Ok(None),
        Backend::Either => Ok(Firewalld::if_running()),
        Backend::Firewalld => Firewalld::connect().map(Some).map_err(|e| {
            CniError::new(
                Code::TryAgainLater,
                format!("backend \"firewalld\": {e}: is firewalld running on this node?"),
            )
        }),
    }
}

/// Binds every address to `zone`; a failure unbinds those bound before it.
fn bind(fw: &mut Firewalld, zone: &str, ips: &[IpAddr]) -> Result<(), CniError> {
    for (n, ip) in ips.iter().enumerate() {
        if let Err(e) = fw.add_source(zone, *ip) {
            let failures: Vec<String> = ips[..n]
                .iter()
                .filter_map(|ip| fw.remove_source(zone, *ip).err())
                .map(|e| e.to_string())
                .collect();
            return Err(crate::support::sys::with_cleanup_failures(
                firewalld_error(e),
                &failures,
            ));
        }
    }
    Ok(())
}

/// Unbinds every address from `zone`, when there is a bus to ask: without one firewalld is
/// not running, and its runtime sources went with it.
fn unbind(zone: &str, ips: &[IpAddr]) -> Result<(), CniError> {
    let mut fw = match Firewalld::connect() {
        Ok(fw) => fw,
        Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::ECONNREFUSED)) => return Ok(()),
        Err(e) => return Err(firewalld_error(e)),
    };
    for ip in ips {
        fw.remove_source(zone, *ip).map_err(firewalld_error)?;
    }
    Ok(())
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

/// Lets `ips` through with `tables`, behind the admin chain `admin`.
fn allow(tables: Tables, args: &CmdArgs, ips: &[IpAddr], admin: &str) -> netkit::Result<()> {
    match tables {
        Tables::Iptables => forward::allow(ips, admin),
        Tables::Nftables => forward_nft::allow(&args.container_id, &args.ifname, ips, admin),
    }
}

/// Takes back what [`allow`] did.
fn revoke(tables: Tables, args: &CmdArgs, ips: &[IpAddr]) -> netkit::Result<()> {
    match tables {
        Tables::Iptables => forward::revoke(ips),
        Tables::Nftables => forward_nft::revoke(&args.container_id, &args.ifname, ips),
    }
}

/// Isolates `bridge` with `tables`, in the families of `ips`.
fn isolate(tables: Tables, bridge: &str, policy: Isolation, ips: &[IpAddr]) -> netkit::Result<()> {
    match tables {
        Tables::Iptables => forward::isolate_bridge(
            bridge,
            policy,
            ips.iter().any(IpAddr::is_ipv4),
            ips.iter().any(IpAddr::is_ipv6),
        ),
        Tables::Nftables => forward_nft::isolate_bridge(bridge, policy),
    }
}

impl cni::Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = FirewallConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        let ips = addresses(&prev);
        let bridge = conf.isolated_bridge(&prev)?;
        if let Some((name, policy)) = &bridge {
            node_bridge(name, *policy)?;
        }
        let tables = conf.backend.tables();
        let mut firewalld = firewalld_for(conf.backend)?;
        match firewalld.as_mut() {
            Some(fw) => bind(fw, &conf.zone, &ips)?,
            None => allow(tables, args, &ips, &conf.admin_chain).map_err(sys)?,
        }
        if let Some((bridge, policy)) = bridge {
            if let Err(e) = isolate(tables, &bridge, policy, &ips) {
                let failures: Vec<String> = match firewalld.as_mut() {
                    Some(fw) => ips
                        .iter()
                        .filter_map(|ip| fw.remove_source(&conf.zone, *ip).err())
                        .map(|e| e.to_string())
                        .collect(),
                    None => revoke(tables, args, &ips)
                        .err()
                        .map(|e| e.to_string())
                        .into_iter()
                        .collect(),
                };
                return Err(crate::support::sys::with_cleanup_failures(
                    sys(e),
                    &failures,
                ));
            }
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // The pod's addresses are all DEL needs: a config whose other keys no longer validate
        // must still let the attachment go, from wherever ADD may have put it.
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        let Some(prev) = net.prev_result.as_ref() else {
            return Ok(());
        };
        let ips = addresses(&CniResult::from_value_at(prev, Some("prevResult"))?);
        let raw: Option<Raw> = cni::decode::read(&args.stdin)
            .ok()
            .and_then(|config| cni::decode::from_value(&config).ok());
        let backend = raw
            .as_ref()
            .and_then(|r| backend(&r.backend))
            .unwrap_or(Backend::Either);
        // A zone firewalld could not have is one nothing was bound to.
        let zone = raw.as_ref().and_then(|r| zone_name(&r.firewalld_zone));
        if let (Backend::Firewalld | Backend::Either, Some(zone)) = (backend, zone) {
            unbind(&zone, &ips)?;
        }
        // Both tools, the second also when the first fails: iptables may have been installed
        // or removed since ADD.
        if backend != Backend::Firewalld {
            let mut failures = [Tables::Iptables, Tables::Nftables]
                .into_iter()
                .filter_map(|tables| revoke(tables, args, &ips).err())
                .map(sys);
            if let Some(mut first) = failures.next() {
                for other in failures {
                    first.msg = format!("{}; also: {}", first.msg, other.msg);
                }
                return Err(first);
            }
        }
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = FirewallConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        let ips = addresses(&prev);
        let bridge = conf.isolated_bridge(&prev)?;
        let tables = conf.backend.tables();
        let fail = |e: netkit::Error| check::fail(e.to_string());
        if let Some((bridge, policy)) = &bridge {
            match tables {
                Tables::Iptables => forward::check_isolation(bridge, *policy, &ips),
                Tables::Nftables => forward_nft::check_isolation(bridge, *policy),
            }
            .map_err(fail)?;
        }
        let Some(mut fw) = firewalld_for(conf.backend)? else {
            return match tables {
                Tables::Iptables => forward::check(&ips, &conf.admin_chain),
                Tables::Nftables => {
                    forward_nft::check(&args.container_id, &args.ifname, &ips, &conf.admin_chain)
                }
            }
            .map_err(fail);
        };
        for ip in ips {
            match fw.has_source(&conf.zone, ip) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(check::fail(format!(
                        "{} is not in firewalld zone {}",
                        netkit::firewall::firewalld::source(ip),
                        quote(&conf.zone)
                    )))
                }
                Err(e) => return Err(check::fail(e.to_string())),
            }
        }
        Ok(())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = FirewallConf::parse(config)?;
        if conf.net.prev_result.is_some() {
            conf.prev_result()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<FirewallConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"firewall"{extra}}}"#);
        FirewallConf::parse(json.as_bytes())
    }

    #[test]
    fn options() {
        let c = parse("").expect("parsed");
        assert_eq!(c.admin_chain, "CNI-ADMIN");
        assert_eq!(c.isolation, None);
        let c = parse(r#","backend":"iptables","iptablesAdminChainName":"MY-ADMIN","ingressPolicy":"same-bridge""#)
            .expect("parsed");
        assert_eq!(c.admin_chain, "MY-ADMIN");
        assert_eq!(c.isolation, Some(Isolation::SameBridge));
        let c = parse(r#","ingressPolicy":"isolated""#).expect("parsed");
        assert_eq!(c.isolation, Some(Isolation::Isolated));
        let c = parse(r#","backend":"firewalld","firewalldZone":"pods""#).expect("parsed");
        assert_eq!((c.backend, c.zone.as_str()), (Backend::Firewalld, "pods"));
        assert_eq!(parse("").expect("parsed").zone, "trusted");
        assert_eq!(parse("").expect("parsed").backend, Backend::Either);
        let c = parse(r#","backend":"nftables""#).expect("parsed");
        assert_eq!(c.backend.tables(), Tables::Nftables);
        for bad in [
            r#","backend":"nft""#,
            r#","firewalldZone":"a b""#,
            r#","firewalldZone":"/pods""#,
            r#","firewalldZone":"a/b/c""#,
            r#","iptablesAdminChainName":"a b""#,
            r#","ingressPolicy":"closed""#,
        ] {
            assert_eq!(parse(bad).err().map(|e| e.code), Some(7), "{bad}");
        }
    }
}
