//! The `macvlan` plugin: a macvlan link on a master interface, moved into the pod, with its own
//! MAC address on the master's network; addresses from an IPAM plugin, or none (layer 2 only).
//!
//! Behaviour follows containernetworking/plugins' macvlan, with these deliberate changes: a
//! failed ADD removes the link and releases IPAM; the result keeps the DNS settings IPAM
//! returned; DEL needs neither the master nor a default route; IPv6 addresses are added
//! without DAD unless `enabledad` is set, so ADD never waits for it.

mod config;

pub(crate) use config::keys;

use cni::{CmdArgs, CniError, CniResult};
use netkit::netlink::{Link, MacvlanMode, MacvlanOpts};
use netkit::{NetNs, Netlink};

use crate::support::sublink::{self, Flavor, SubConf};
pub use config::MacvlanConf;

/// The plugin, as registered in the multi-call binary's table.
pub struct Macvlan;

impl cni::Plugin for Macvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        sublink::add(args, &MacvlanConf::parse(&args.stdin, &args.args)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::del(args, MacvlanConf::KIND)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::check(args, &MacvlanConf::parse(&args.stdin, &args.args)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        MacvlanConf::parse(&args.stdin, &args.args)?;
        sublink::with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::with_ipam(args, |ipam| ipam.gc())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        sublink::validate(&MacvlanConf::parse(config, "")?, config)
    }
}

impl Flavor for MacvlanConf {
    const KIND: &'static str = "macvlan";

    fn conf(&self) -> &SubConf {
        &self.common
    }

    fn create(&self, nl: &Netlink, name: &str, master: u32, pod: &NetNs) -> netkit::Result<()> {
        let opts = MacvlanOpts {
            mode: self.mode,
            mtu: self.common.mtu,
            mac: self.mac,
            bc_queue_len: self.bc_queue_len,
        };
        nl.add_macvlan(name, master, &opts, Some(pod))
    }

    /// passthru hands the master's every frame, and its MAC, to the pod: never on a link the
    /// node uses itself.
    fn check_master(&self, master: &crate::support::master::Master) -> Result<(), CniError> {
        if self.mode != MacvlanMode::Passthru
            || self.common.link_in_container
            || !master.is_the_nodes()?
        {
            return Ok(());
        }
        Err(CniError::invalid_config(format!(
            "mode: passthru on {:?}, which the node itself uses (it holds the node's addresses or \
             carries its default route), would take the node's traffic: use bridge mode, or a \
             master the node does not use",
            master.link.name
        )))
    }

    fn check_link(&self, link: &Link) -> Result<(), CniError> {
        sublink::check_mode(
            link,
            &config::MODES,
            self.mode,
            |m| m as u32,
            link.macvlan_mode,
        )
    }

    fn without_ipam(&self) -> Result<CniResult, CniError> {
        // Layer 2 only: the interface is just brought up.
        Ok(CniResult::default())
    }
}
