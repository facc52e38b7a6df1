//! The `ipvlan` plugin: an ipvlan link on a master interface, moved into the pod; it shares the
//! master's MAC address. Addresses come from an IPAM plugin or, when it runs chained after
//! another plugin without `ipam`, from that plugin's result (`prevResult`), which may also name
//! the master.
//!
//! Behaviour follows containernetworking/plugins' ipvlan, with these deliberate changes: a
//! failed ADD removes the link and releases IPAM; the result keeps the DNS settings IPAM
//! returned; DEL needs neither the master nor a default route; an MTU above the master's is
//! refused before anything is created; IPv6 addresses are added without DAD unless
//! `enabledad` is set.

mod config;

use cni::{CmdArgs, CniError, CniResult};
use netkit::netlink::Link;
use netkit::{NetNs, Netlink};

use crate::support::sublink::{self, Flavor, SubConf};
pub use config::IpvlanConf;

/// The plugin, as registered in the multi-call binary's table.
pub struct Ipvlan;

impl cni::Plugin for Ipvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        sublink::add(args, &IpvlanConf::parse(&args.stdin)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::del(args, IpvlanConf::KIND)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::check(args, &IpvlanConf::parse(&args.stdin)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        IpvlanConf::parse(&args.stdin)?;
        sublink::with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::with_ipam(args, |ipam| ipam.gc())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        sublink::validate(&IpvlanConf::parse(config)?, config)
    }
}

impl Flavor for IpvlanConf {
    const KIND: &'static str = "ipvlan";

    fn conf(&self) -> &SubConf {
        &self.common
    }

    const PROBE_ON_MASTER: bool = true;

    fn create(&self, nl: &Netlink, name: &str, master: u32, pod: &NetNs) -> netkit::Result<()> {
        nl.add_ipvlan(name, master, self.mode, Some(pod), self.common.mtu)
    }

    fn check_link(&self, link: &Link) -> Result<(), CniError> {
        sublink::check_mode(
            link,
            &config::MODES,
            self.mode,
            |m| u32::from(m as u16),
            link.ipvlan_mode.map(u32::from),
        )
    }

    fn without_ipam(&self) -> Result<CniResult, CniError> {
        match &self.prev {
            Some(prev) if !prev.ips.is_empty() => Ok(prev.clone()),
            _ => Err(CniError::invalid_config(
                "ipvlan needs addresses: set \"ipam\", or chain it after a plugin whose result \
                 has IP addresses (an ipvlan cannot work at layer 2 alone)",
            )),
        }
    }

    fn implied_master(&self) -> Result<Option<String>, CniError> {
        let Some(prev) = &self.prev else {
            return Ok(None);
        };
        match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => Ok(Some(only.name.clone())),
            _ => Err(CniError::invalid_config(format!(
                "no \"master\" given and prevResult does not name exactly one interface to use \
                 as the master (it has {}): set \"master\"",
                prev.interfaces.len()
            ))),
        }
    }
}
