//! The `vlan` plugin: an 802.1Q link with the config's `vlanId` on a master interface, created
//! straight into the pod; addresses from an IPAM plugin.
//!
//! Behaviour follows containernetworking/plugins' vlan (`master`, `vlanId`, `mtu`,
//! `linkInContainer`), with these deliberate changes: a failed ADD removes the link and
//! releases IPAM; the result keeps the DNS settings IPAM returned; DEL needs no master; a
//! config without `ipam` is refused before anything is created, with a message that says so;
//! IPv6 addresses are added without DAD unless `enabledad` is set.

use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult};
use netkit::netlink::Link;
use netkit::{NetNs, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::sublink::{self, Flavor, SubConf};

/// The plugin, as registered in the multi-call binary's table.
pub struct Vlan;

/// The highest 802.1Q id a link can have (4095 is reserved).
const MAX_VLAN_ID: i64 = 4094;

/// vlan has no modes: the `mode` key is not one of its keys.
const NO_MODES: [(&str, ()); 1] = [("", ())];

/// vlan's own keys, as written.
#[derive(Deserialize)]
struct Raw {
    #[serde(default, rename = "vlanId")]
    vlan_id: i64,
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct VlanConf {
    pub common: SubConf,
    pub vlan_id: u16,
}

impl VlanConf {
    /// Parses stdin; every problem is a code-7 error saying what to fix (code 6 for a value of
    /// the wrong JSON type).
    pub fn parse(stdin: &[u8]) -> Result<VlanConf, CniError> {
        let (common, (), raw): (_, _, Raw) = SubConf::parse(stdin, "vlan", &NO_MODES)?;
        let vlan_id = u16::try_from(raw.vlan_id)
            .ok()
            .filter(|id| i64::from(*id) <= MAX_VLAN_ID)
            .ok_or_else(|| {
                CniError::invalid_config(format!(
                    "vlanId: {} is not a VLAN id: use 0 to {MAX_VLAN_ID}",
                    raw.vlan_id
                ))
            })?;
        Ok(VlanConf { common, vlan_id })
    }
}

/// The keys vlan reads: those it shares with macvlan and ipvlan but `mode`, and `vlanId`.
pub(crate) fn keys() -> Keys {
    sublink::keys().without("mode").and::<Raw>()
}

impl cni::Plugin for Vlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        sublink::add(args, &VlanConf::parse(&args.stdin)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::del(args, VlanConf::KIND)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::check(args, &VlanConf::parse(&args.stdin)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        VlanConf::parse(&args.stdin)?;
        sublink::with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::with_ipam(args, |ipam| ipam.gc())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        sublink::validate(&VlanConf::parse(config)?, config)
    }
}

impl Flavor for VlanConf {
    const KIND: &'static str = "vlan";

    fn conf(&self) -> &SubConf {
        &self.common
    }

    fn create(&self, nl: &Netlink, name: &str, master: u32, pod: &NetNs) -> netkit::Result<()> {
        nl.add_vlan(name, master, self.vlan_id, Some(pod), self.common.mtu)
    }

    fn check_link(&self, link: &Link) -> Result<(), CniError> {
        if link.vlan_id != Some(self.vlan_id) {
            return Err(check::fail(format!(
                "vlan {:?} has VLAN id {}, the config says {}",
                link.name,
                link.vlan_id.map_or("none".into(), |id| id.to_string()),
                self.vlan_id
            )));
        }
        match self.common.mtu {
            Some(mtu) if mtu != link.mtu => Err(check::fail(format!(
                "vlan {:?} has MTU {}, the config says {mtu}",
                link.name, link.mtu
            ))),
            _ => Ok(()),
        }
    }

    fn without_ipam(&self) -> Result<CniResult, CniError> {
        Err(CniError::invalid_config(
            "vlan needs addresses: set \"ipam\"",
        ))
    }

    fn implied_master(&self) -> Result<Option<String>, CniError> {
        Err(CniError::invalid_config(
            "master: required: name the interface to create the VLAN on",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<VlanConf, CniError> {
        let json =
            format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"vlan","master":"eth1"{extra}}}"#);
        VlanConf::parse(json.as_bytes())
    }

    #[test]
    fn ids() {
        assert_eq!(parse("").unwrap().vlan_id, 0);
        assert_eq!(parse(r#","vlanId":4094"#).unwrap().vlan_id, 4094);
        for bad in ["-1", "4095", "65536", "99999999999"] {
            let e = parse(&format!(r#","vlanId":{bad}"#)).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert_eq!(
                e.msg,
                format!("vlanId: {bad} is not a VLAN id: use 0 to 4094")
            );
        }
        assert_eq!(parse(r#","vlanId":"5""#).unwrap_err().code, 6);
    }

    #[test]
    fn options() {
        let c = parse(r#","vlanId":7,"mtu":1400,"linkInContainer":true,"mode":"x""#).unwrap();
        assert_eq!(c.vlan_id, 7);
        assert_eq!(c.common.mtu, Some(1400));
        assert!(c.common.link_in_container);
        assert_eq!(parse(r#","mtu":-5"#).unwrap_err().code, 7);
    }

    #[test]
    fn master_and_ipam_are_required() {
        let c = parse("").unwrap();
        let e = c.implied_master().unwrap_err();
        assert!(e.msg.starts_with("master: required"), "{}", e.msg);
        let e = sublink::validate(&c, br#"{"cniVersion":"1.0.0","name":"n","type":"vlan"}"#)
            .unwrap_err();
        assert!(e.msg.starts_with("vlan needs addresses"), "{}", e.msg);
    }
}
