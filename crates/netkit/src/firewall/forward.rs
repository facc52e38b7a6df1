//! The firewall plugin's iptables rules, in the filter table of the caller's namespace, named
//! and commented as the reference's so either implementation removes the other's:
//!
//! - `FORWARD`, first: `-m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD`;
//! - `CNI-FORWARD`, first: the jump to the admin chain (`CNI-ADMIN` unless configured), where
//!   the node's admin puts overrides; then per pod address
//!   `-d <ip> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT` and `-s <ip> -j ACCEPT`;
//! - for the `same-bridge` and `isolated` ingress policies, `CNI-ISOLATION-STAGE-1` (first in
//!   `FORWARD`) and `CNI-ISOLATION-STAGE-2`, which drop what enters a bridge from another
//!   interface; with `isolated`, also what goes from the bridge to itself (pod to pod).
//!
//! Each change is one iptables-save and one iptables-restore per family (see [`ipt`] for what
//! happens when another call changes the table in between).

use std::net::IpAddr;

use crate::error::Result;
use crate::firewall::ipt::{self, has_exact, quote, tools, SharedRule};

pub const FORWARD_CHAIN: &str = "CNI-FORWARD";
pub const ADMIN_CHAIN: &str = "CNI-ADMIN";
const STAGE1: &str = "CNI-ISOLATION-STAGE-1";
const STAGE2: &str = "CNI-ISOLATION-STAGE-2";
const PLUGIN_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_COMMENT: &str = "CNI firewall plugin admin overrides";
/// On the isolation rules that either policy needs; the rules of one policy name it instead.
const ISOLATION_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)";

/// Who may reach a pod on a bridge, besides the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Pods on the same bridge only (`same-bridge`).
    SameBridge,
    /// No other pod either (`isolated`).
    Isolated,
}

impl Isolation {
    /// The policy's name in `ingressPolicy`.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::SameBridge => "same-bridge",
            Isolation::Isolated => "isolated",
        }
    }
}

/// The rules `CNI-FORWARD` holds for `ip` (as `/32` or `/128`).
fn pod_rules(ip: &IpAddr) -> [String; 2] {
    let host = ipnet::IpNet::from(*ip);
    [
        format!("-d {host} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        format!("-s {host} -j ACCEPT"),
    ]
}

/// The families `ips` has, each with its tools and its addresses.
fn by_family(ips: &[IpAddr]) -> impl Iterator<Item = (&'static ipt::Tools, Vec<&IpAddr>)> {
    [true, false].into_iter().filter_map(move |v4| {
        let family: Vec<&IpAddr> = ips.iter().filter(|ip| ip.is_ipv4() == v4).collect();
        (!family.is_empty()).then(|| (tools(v4), family))
    })
}

/// The rules of the shared chains every pod's rules need: `FORWARD`'s jump to `CNI-FORWARD`,
/// and its jump to the admin's chain `admin` ahead of the pods' rules.
fn shared_rules(admin: &str) -> [SharedRule; 2] {
    [
        SharedRule {
            chain: "FORWARD".into(),
            first: true,
            words: vec!["-j".into(), FORWARD_CHAIN.into()],
            rule: format!(
                "-m comment --comment {} -j {FORWARD_CHAIN}",
                quote(PLUGIN_COMMENT)
            ),
        },
        SharedRule {
            chain: FORWARD_CHAIN.into(),
            first: true,
            words: vec!["-j".into(), admin.into()],
            rule: format!("-m comment --comment {} -j {admin}", quote(ADMIN_COMMENT)),
        },
    ]
}

/// Accepts forwarded traffic from `ips` and back to them, with the admin's chain `admin` ahead.
pub fn allow(ips: &[IpAddr], admin: &str) -> Result<()> {
    for (t, family) in by_family(ips) {
        ipt::update(t, "filter", |saved| {
            let mut lines = ipt::missing(saved, &[FORWARD_CHAIN, admin], &shared_rules(admin));
            for ip in &family {
                for rule in pod_rules(ip) {
                    if !has_exact(saved, FORWARD_CHAIN, &rule) {
                        lines.push(format!("-A {FORWARD_CHAIN} {rule}"));
                    }
                }
            }
            lines
        })?;
    }
    Ok(())
}

/// Removes the rules of `ips` from `CNI-FORWARD`; the chains stay, shared. Idempotent, and a
/// family whose tools are missing has nothing to remove.
pub fn revoke(ips: &[IpAddr]) -> Result<()> {
    for (t, family) in by_family(ips) {
        let Some(saved) = ipt::save(t, "filter")? else {
            continue;
        };
        let lines: Vec<String> = family
            .iter()
            .flat_map(|ip| pod_rules(ip))
            .filter(|rule| has_exact(&saved, FORWARD_CHAIN, rule))
            .map(|rule| format!("-D {FORWARD_CHAIN} {rule}"))
            .collect();
        ipt::restore(t, "filter", &lines)?;
    }
    Ok(())
}

/// Whether the rules [`allow`] makes for `ips` are all there; the first missing as an error.
pub fn check(ips: &[IpAddr], admin: &str) -> Result<()> {
    for (t, family) in by_family(ips) {
        let saved = ipt::listing(t, "filter")?;
        if let Some(r) = shared_rules(admin).iter().find(|r| !r.is_in(&saved)) {
            return Err(r.missing(t));
        }
        for ip in family {
            for rule in pod_rules(ip) {
                if !has_exact(&saved, FORWARD_CHAIN, &rule) {
                    return Err(crate::error::Error::NotFound {
                        what: format!("{} rule {rule:?} in chain {FORWARD_CHAIN}", t.cmd),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Whether the rules [`isolate_bridge`] makes for `bridge` are there, in the families of
/// `ips`; the first missing as an error.
pub fn check_isolation(bridge: &str, policy: Isolation, ips: &[IpAddr]) -> Result<()> {
    for (t, _) in by_family(ips) {
        let saved = ipt::listing(t, "filter")?;
        if let Some(r) = isolation_rules(bridge, policy)
            .iter()
            .find(|r| !r.is_in(&saved))
        {
            return Err(r.missing(t));
        }
    }
    Ok(())
}

/// The rules of `policy` for `bridge`: `FORWARD` sends to `CNI-ISOLATION-STAGE-1`, which
/// sends what comes in on the bridge and goes out elsewhere to `CNI-ISOLATION-STAGE-2`, which
/// drops what goes out to the bridge; each returns what it does not decide. `isolated` also
/// drops, first in `CNI-ISOLATION-STAGE-1`, what goes from the bridge back to it.
fn isolation_rules(bridge: &str, policy: Isolation) -> Vec<SharedRule> {
    let shared = quote(ISOLATION_COMMENT);
    let own = quote(&format!(
        "CNI firewall plugin rules (ingressPolicy: {})",
        policy.name()
    ));
    let rule = |chain: &str, first: bool, words: &[&str], rule: String, comment: &str| SharedRule {
        chain: chain.into(),
        first,
        words: words.iter().map(|w| (*w).to_owned()).collect(),
        rule: format!("{rule} -m comment --comment {comment}"),
    };
    let mut rules = vec![
        rule(
            "FORWARD",
            true,
            &["-j", STAGE1],
            format!("-j {STAGE1}"),
            &shared,
        ),
        rule(
            STAGE1,
            true,
            &["-i", bridge, "-j", STAGE2],
            format!("-i {bridge} ! -o {bridge} -j {STAGE2}"),
            &own,
        ),
    ];
    if policy == Isolation::Isolated {
        // After the rule above, and also inserted first: it ends up ahead of it.
        rules.push(rule(
            STAGE1,
            true,
            &["-i", bridge, "-o", bridge, "DROP"],
            format!("-i {bridge} -o {bridge} -j DROP"),
            &own,
        ));
    }
    rules.extend([
        rule(STAGE1, false, &["RETURN"], "-j RETURN".into(), &shared),
        rule(
            STAGE2,
            true,
            &["-o", bridge, "DROP"],
            format!("-o {bridge} -j DROP"),
            &shared,
        ),
        rule(STAGE2, false, &["RETURN"], "-j RETURN".into(), &shared),
    ]);
    rules
}

/// The ingress `policy` for `bridge`, in the families given: what enters the bridge from
/// another interface is dropped, and with `isolated` what goes between its ports too. The
/// chains stay after DEL: other pods on the bridge need them.
pub fn isolate_bridge(bridge: &str, policy: Isolation, v4: bool, v6: bool) -> Result<()> {
    crate::netlink::validate_ifname(bridge)?;
    for (family, on) in [(true, v4), (false, v6)] {
        if !on {
            continue;
        }
        ipt::update(tools(family), "filter", |saved| {
            ipt::missing(saved, &[STAGE1, STAGE2], &isolation_rules(bridge, policy))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_as_the_reference_writes_them() {
        let ip: IpAddr = "10.1.0.5".parse().expect("ip");
        assert_eq!(
            pod_rules(&ip),
            [
                "-d 10.1.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                "-s 10.1.0.5/32 -j ACCEPT"
            ]
        );
        let ip: IpAddr = "fd01::5".parse().expect("ip");
        assert_eq!(pod_rules(&ip)[1], "-s fd01::5/128 -j ACCEPT");
    }
}
