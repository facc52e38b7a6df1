//! The `dummy` plugin: a dummy link in the pod (no master, no traffic leaves it) with addresses
//! from an IPAM plugin, for services that need an address of their own inside the pod.
//!
//! Behaviour follows containernetworking/plugins' dummy, with these deliberate changes: the
//! link is created under a temporary name and renamed, so a failed ADD never leaves a
//! half-made `CNI_IFNAME`; DEL deletes only a dummy link of that name (never the pod's other
//! interface of the same name); the result keeps the DNS settings IPAM returned; IPv6
//! addresses are added without DAD unless `enabledad` is set; CHECK also checks routes.

use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use serde::Deserialize;

use crate::support::check;
use crate::support::container::{self, ContainerIface};
use crate::support::ipam_call::{self, Ipam};
use crate::support::sublink;
use crate::support::sys::{open_netns, sys};

/// The plugin, as registered in the multi-call binary's table.
pub struct Dummy;

const KIND: &str = "dummy";

/// The keys dummy reads besides the common ones.
#[derive(Deserialize)]
struct Raw {
    #[serde(default, rename = "enabledad")]
    enable_dad: bool,
}

struct DummyConf {
    net: NetConf,
    enable_dad: bool,
}

impl DummyConf {
    fn parse(stdin: &[u8]) -> Result<DummyConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        if net.ipam_type().is_none() {
            return Err(CniError::invalid_config(
                "dummy needs addresses: set \"ipam\"",
            ));
        }
        Ok(DummyConf {
            net,
            enable_dad: raw.enable_dad,
        })
    }
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for Dummy {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = DummyConf::parse(&args.stdin)?;
        let ipam = conf.net.ipam_type().map(|t| Ipam::new(t, args));
        let pod = open_netns(&args.netns)?;
        let pod_nl = netkit::Netlink::in_ns(&pod).map_err(sys)?;
        let attachment = (args.container_id.as_str(), args.ifname.as_str());
        let link = container::create_renamed(&pod_nl, &pod, attachment, KIND, |temp| {
            pod_nl.add_dummy(temp, None, None, None)
        })?;
        let iface = ContainerIface {
            ns: &pod,
            nl: &pod_nl,
            name: &args.ifname,
            index: link.index,
        };
        sublink::attach(
            args,
            &conf.net,
            conf.enable_dad,
            &iface,
            ipam.as_ref(),
            None,
            None,
        )
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::del(args, KIND)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = DummyConf::parse(&args.stdin)?;
        let pod = open_netns(&args.netns)?;
        if let Some(t) = conf.net.ipam_type() {
            Ipam::new(t, args).check()?;
        }
        let prev = check::prev_result(&conf.net)?;
        let entry = check::container_entry(&prev, args)?;
        let pod_nl = netkit::Netlink::in_ns(&pod).map_err(sys)?;
        let link = check::pod_link(&pod_nl, args)?;
        check::kind(&link, KIND)?;
        check::mac(entry, &link)?;
        if !link.up {
            return Err(check::fail(format!("interface {:?} is down", link.name)));
        }
        check::addresses(&pod_nl, &link, &prev)?;
        check::routes(&pod_nl, &prev)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        DummyConf::parse(&args.stdin)?;
        sublink::with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::with_ipam(args, |ipam| ipam.gc())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = DummyConf::parse(config)?;
        ipam_call::validate(&conf.net, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipam_is_required() {
        let e = DummyConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"dummy"}"#)
            .err()
            .expect("refused");
        assert_eq!(e.code, 7);
        assert_eq!(e.msg, "dummy needs addresses: set \"ipam\"");
        let c = DummyConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"dummy","enabledad":true,"ipam":{"type":"static"}}"#,
        ).expect("parsed");
        assert!(c.enable_dad);
    }
}
