//! The `bridge` plugin: a Linux bridge in the node's namespace, a veth pair per attachment with
//! one end in the pod, addresses from an IPAM plugin, and optionally the gateway, masquerade,
//! VLANs and MAC spoof checking.
//!
//! Behaviour follows containernetworking/plugins' bridge, with these deliberate changes: a
//! failed ADD undoes everything it did for the attachment (veth, IPAM reservation, rules); DEL
//! releases the IPAM reservation while the interface still exists; IPv6 addresses are added
//! without DAD unless `enabledad` is set, so ADD never waits for it.

mod add;
mod check;
mod config;
mod del;
mod gateway;
mod port;

pub(crate) use config::keys;

use cni::{CmdArgs, CniError, CniResult};

use crate::support::ipam_call::{self, Ipam};
pub use config::{BridgeConf, MasqBackend};
/// DEL of a veth attachment: the IPAM reservation, the pair, and the attachment's masquerade
/// and spoof-check rules. ptp's DEL is the same.
pub use del::del;

/// The plugin, as registered in the multi-call binary's table.
pub struct Bridge;

impl cni::Plugin for Bridge {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check::check(args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        with_ipam(args, |ipam| ipam.gc())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = BridgeConf::parse(config, "")?;
        ipam_call::validate(&conf.net, config)
    }
}

/// STATUS and GC are the IPAM plugin's business; a layer-2 network has nothing to report.
fn with_ipam(
    args: &CmdArgs,
    f: impl FnOnce(&Ipam) -> Result<(), CniError>,
) -> Result<(), CniError> {
    let conf = BridgeConf::parse(&args.stdin, &args.args)?;
    match conf.ipam_type() {
        Some(t) => f(&Ipam::new(t, args)),
        None => Ok(()),
    }
}
