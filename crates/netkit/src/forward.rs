//! The firewall plugin's iptables rules, in the filter table of the caller's namespace, named
//! and commented as the reference's so either implementation removes the other's:
//!
//! - `FORWARD`, first: `-m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD`;
//! - `CNI-FORWARD`, first: the jump to the admin chain (`CNI-ADMIN` unless configured), where
//!   the node's admin puts overrides; then per pod address
//!   `-d <ip> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT` and `-s <ip> -j ACCEPT`;
//! - for the `same-bridge` ingress policy, `CNI-ISOLATION-STAGE-1` (first in `FORWARD`) and
//!   `CNI-ISOLATION-STAGE-2`, which drop what enters a bridge from another interface.
//!
//! Each change is one iptables-save and one iptables-restore per family (see [`ipt`] for what
//! happens when another call changes the table in between).

use std::net::IpAddr;

use crate::error::Result;
use crate::ipt::{self, has_exact, has_rule, quote, tools};

pub const FORWARD_CHAIN: &str = "CNI-FORWARD";
pub const ADMIN_CHAIN: &str = "CNI-ADMIN";
const STAGE1: &str = "CNI-ISOLATION-STAGE-1";
const STAGE2: &str = "CNI-ISOLATION-STAGE-2";
const PLUGIN_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_COMMENT: &str = "CNI firewall plugin admin overrides";
const ISOLATION_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";

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

/// Accepts forwarded traffic from `ips` and back to them, with the admin's chain `admin` ahead.
pub fn allow(ips: &[IpAddr], admin: &str) -> Result<()> {
    for (t, family) in by_family(ips) {
        ipt::update(t, "filter", |saved| {
            let mut lines: Vec<String> = [FORWARD_CHAIN, admin]
                .into_iter()
                .filter_map(|chain| ipt::create(saved, chain))
                .collect();
            if !has_rule(saved, "FORWARD", &["-j", FORWARD_CHAIN]) {
                lines.push(format!(
                    "-I FORWARD 1 -m comment --comment {} -j {FORWARD_CHAIN}",
                    quote(PLUGIN_COMMENT)
                ));
            }
            if !has_rule(saved, FORWARD_CHAIN, &["-j", admin]) {
                lines.push(format!(
                    "-I {FORWARD_CHAIN} 1 -m comment --comment {} -j {admin}",
                    quote(ADMIN_COMMENT)
                ));
            }
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
        let missing = |what: String| crate::error::Error::NotFound {
            what: format!("{} {what}", t.cmd),
        };
        if !has_rule(&saved, "FORWARD", &["-j", FORWARD_CHAIN]) {
            return Err(missing(format!("FORWARD's jump to {FORWARD_CHAIN}")));
        }
        if !has_rule(&saved, FORWARD_CHAIN, &["-j", admin]) {
            return Err(missing(format!("{FORWARD_CHAIN}'s jump to {admin}")));
        }
        for ip in family {
            for rule in pod_rules(ip) {
                if !has_exact(&saved, FORWARD_CHAIN, &rule) {
                    return Err(missing(format!("rule {rule:?} in {FORWARD_CHAIN}")));
                }
            }
        }
    }
    Ok(())
}

/// The `same-bridge` ingress policy for `bridge`, in the families given: what enters the
/// bridge from another interface is dropped. The chains stay after DEL: other pods on the
/// bridge need them.
pub fn isolate_bridge(bridge: &str, v4: bool, v6: bool) -> Result<()> {
    crate::netlink::validate_ifname(bridge)?;
    let comment = quote(ISOLATION_COMMENT);
    for (family, on) in [(true, v4), (false, v6)] {
        if !on {
            continue;
        }
        ipt::update(tools(family), "filter", |saved| {
            let mut lines: Vec<String> = [STAGE1, STAGE2]
                .into_iter()
                .filter_map(|chain| ipt::create(saved, chain))
                .collect();
            if !has_rule(saved, "FORWARD", &["-j", STAGE1]) {
                lines.push(format!(
                    "-I FORWARD 1 -j {STAGE1} -m comment --comment {comment}"
                ));
            }
            if !has_rule(saved, STAGE1, &["-i", bridge, "-j", STAGE2]) {
                lines.push(format!(
                    "-I {STAGE1} 1 -i {bridge} ! -o {bridge} -j {STAGE2} -m comment --comment {comment}"
                ));
            }
            if !has_rule(saved, STAGE1, &["RETURN"]) {
                lines.push(format!(
                    "-A {STAGE1} -j RETURN -m comment --comment {comment}"
                ));
            }
            if !has_rule(saved, STAGE2, &["-o", bridge, "DROP"]) {
                lines.push(format!(
                    "-I {STAGE2} 1 -o {bridge} -j DROP -m comment --comment {comment}"
                ));
            }
            if !has_rule(saved, STAGE2, &["RETURN"]) {
                lines.push(format!(
                    "-A {STAGE2} -j RETURN -m comment --comment {comment}"
                ));
            }
            lines
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
