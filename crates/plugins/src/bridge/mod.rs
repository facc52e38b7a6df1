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
mod iface;
mod port;

use cni::{CmdArgs, CniError, CniResult, Code};
use netkit::NetNs;

use crate::ipam_call::Ipam;
pub use config::{BridgeConf, MasqBackend};

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

/// A kernel or system failure, with the text that says what and where (errno kept).
fn sys(e: netkit::Error) -> CniError {
    let code = match (&e, e.errno()) {
        (netkit::Error::Invalid(_), _) => Code::InvalidConfig,
        // The kernel is busy; the runtime may retry the whole call.
        (_, Some(libc::EAGAIN | libc::EBUSY)) => Code::TryAgainLater,
        _ => Code::Internal,
    };
    CniError::new(code, e.to_string())
}

/// The same, with the step that failed in front.
fn sys_ctx(what: impl std::fmt::Display) -> impl FnOnce(netkit::Error) -> CniError {
    move |e| {
        let mut err = sys(e);
        err.msg = format!("{what}: {}", err.msg);
        err
    }
}

/// Opens the pod's namespace (code 8 when it cannot be used).
fn open_netns(path: &str) -> Result<NetNs, CniError> {
    NetNs::open(path).map_err(|e| netns_error(path, &e))
}

fn netns_error(path: &str, e: &netkit::Error) -> CniError {
    CniError::new(
        Code::InvalidNetns,
        format!("cannot open the pod's network namespace {path:?} (CNI_NETNS): {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netkit_errors_map_to_codes_a_runtime_can_act_on() {
        let busy = netkit::Error::Netlink {
            op: "adding link".into(),
            errno: libc::EBUSY,
            msg: String::new(),
        };
        assert!(sys(busy).is(Code::TryAgainLater));
        assert!(sys(netkit::Error::Invalid("bad name".into())).is(Code::InvalidConfig));
        let exists = netkit::Error::Netlink {
            op: "adding link".into(),
            errno: libc::EEXIST,
            msg: String::new(),
        };
        let err = sys(exists);
        assert!(err.is(Code::Internal));
        assert!(err.msg.contains("adding link"), "{err}");
    }
}
