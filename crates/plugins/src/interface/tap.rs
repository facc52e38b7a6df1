//! The `tap` plugin: a persistent tap device in the pod, for a VM running in it (KubeVirt,
//! Kata) to attach to; optionally a port of a bridge in the pod, optionally addressed by IPAM.
//!
//! Behaviour follows containernetworking/plugins' tap (`multiQueue`, `mtu`, `mac` with
//! `CNI_ARGS` `MAC=` and `runtimeConfig.mac`, `owner`, `group`, `selinuxContext`, `bridge`),
//! with these deliberate changes: every value is checked before anything is made (the
//! reference notices a bad MAC only after the tap exists, and leaves it); the tap is made
//! under a temporary name and renamed; a failure after that removes it and releases IPAM; DEL
//! deletes only a tun/tap device of that name; the result keeps the DNS settings IPAM returned;
//! CHECK also checks the kind and the MAC.

use cni::keys::Keys;
use cni::quote::quote;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use netkit::netlink::Link;
use netkit::tap::TapOpts;
use netkit::{NetNs, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::container::{self, ContainerIface};
use crate::support::ipam_call::{self, Ipam};
use crate::support::sublink;
use crate::support::sys::{open_netns, sys, sys_ctx, with_cleanup_failures};

/// The plugin, as registered in the multi-call binary's table.
pub struct Tap;

/// The kernel's kind for tun and tap devices.
const KIND: &str = "tun";

/// Longest SELinux context accepted.
const MAX_CONTEXT: usize = 255;

/// tap's own keys, as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    multi_queue: bool,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    owner: Option<u32>,
    #[serde(default)]
    group: Option<u32>,
    #[serde(default)]
    selinux_context: String,
    #[serde(default)]
    bridge: String,
}

/// The checked configuration.
struct TapConf {
    net: NetConf,
    opts: TapOpts,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
    selinux_context: Option<String>,
    bridge: Option<String>,
}

impl TapConf {
    fn parse(stdin: &[u8], cni_args: &str) -> Result<TapConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        let mac = crate::support::mac::resolve(Some(&raw.mac), &net, cni_args, false)?;
        let selinux_context = Some(raw.selinux_context)
            .filter(|c| !c.is_empty())
            .map(check_context)
            .transpose()?;
        let bridge = Some(raw.bridge).filter(|b| !b.is_empty());
        if let Some(name) = &bridge {
            netkit::netlink::validate_ifname(name).map_err(|_| {
                CniError::invalid_config(format!(
                    "bridge: {} is not an interface name: 1 to 15 bytes, no '/', ':' or spaces",
                    quote(name)
                ))
            })?;
        }
        Ok(TapConf {
            opts: TapOpts {
                multi_queue: raw.multi_queue,
                owner: raw.owner,
                group: raw.group,
            },
            mtu: (raw.mtu != 0).then_some(raw.mtu),
            mac,
            selinux_context,
            bridge,
            net,
        })
    }
}

/// An SELinux context is `user:role:type[:level]`, in the characters contexts use: nothing
/// else reaches the kernel's label file.
fn check_context(context: String) -> Result<String, CniError> {
    let fields = context.split(':').count();
    let chars_ok = context
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.,:-".contains(c));
    if context.len() > MAX_CONTEXT || fields < 3 || !chars_ok || context.contains("::") {
        return Err(CniError::invalid_config(format!(
            "selinuxContext: {} is not an SELinux context like \
             \"system_u:system_r:container_t:s0\"",
            quote(&context)
        )));
    }
    Ok(context)
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for Tap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = TapConf::parse(&args.stdin, &args.args)?;
        let ipam = conf.net.ipam_type().map(|t| Ipam::new(t, args));
        let pod = open_netns(&args.netns)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        let attachment = (args.container_id.as_str(), args.ifname.as_str());
        let link = container::create_renamed(&pod_nl, &pod, attachment, KIND, |temp| {
            pod.run(|| match &conf.selinux_context {
                Some(context) => netkit::tap::create_labelled(temp, conf.opts, context),
                None => netkit::tap::create(temp, conf.opts),
            })
            .and_then(|made| made)
        })?;
        if let Err(e) = set_up_link(&conf, &pod, &pod_nl, &link) {
            let failures: Vec<String> = pod_nl
                .del_link_if_exists(link.index)
                .err()
                .map(|e| e.to_string())
                .into_iter()
                .collect();
            return Err(with_cleanup_failures(e, &failures));
        }
        let iface = ContainerIface {
            ns: &pod,
            nl: &pod_nl,
            name: &args.ifname,
            index: link.index,
        };
        sublink::attach(args, &conf.net, false, &iface, ipam.as_ref(), None, None)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::del(args, KIND)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = TapConf::parse(&args.stdin, &args.args)?;
        let pod = open_netns(&args.netns)?;
        if let Some(t) = conf.net.ipam_type() {
            Ipam::new(t, args).check()?;
        }
        let prev = check::prev_result(&conf.net)?;
        let entry = check::container_entry(&prev, args)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        let link = check::pod_link(&pod_nl, args)?;
        check::kind(&link, KIND)?;
        check::mac(entry, &link)?;
        check::addresses(&pod_nl, &link, &prev)?;
        check::routes(&pod_nl, &prev)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        TapConf::parse(&args.stdin, &args.args)?;
        sublink::with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        sublink::with_ipam(args, |ipam| ipam.gc())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = TapConf::parse(config, "")?;
        ipam_call::validate(&conf.net, config)
    }
}

/// The new tap's MTU, MAC and bridge, before it comes up.
fn set_up_link(conf: &TapConf, pod: &NetNs, pod_nl: &Netlink, link: &Link) -> Result<(), CniError> {
    let ctx = || format!("tap {:?} in netns {}", link.name, pod.path().display());
    if let Some(mtu) = conf.mtu {
        pod_nl.set_mtu(link.index, mtu).map_err(sys_ctx(ctx()))?;
    }
    if let Some(mac) = conf.mac {
        pod_nl.set_mac(link.index, mac).map_err(sys_ctx(ctx()))?;
    }
    if let Some(name) = &conf.bridge {
        let bridge = pod_nl
            .link_by_name(name)
            .map_err(sys_ctx(ctx()))?
            .filter(|b| b.kind.as_deref() == Some("bridge"))
            .ok_or_else(|| {
                CniError::invalid_config(format!(
                    "bridge: {} is not a bridge in netns {}: create it in the pod first, or \
                     leave \"bridge\" out",
                    quote(name),
                    pod.path().display()
                ))
            })?;
        pod_nl
            .set_master(link.index, Some(bridge.index))
            .map_err(sys_ctx(ctx()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str, args: &str) -> Result<TapConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"tap"{extra}}}"#);
        TapConf::parse(json.as_bytes(), args)
    }

    #[test]
    fn options() {
        let c = parse(
            r#","multiQueue":true,"mtu":1400,"mac":"02:00:00:00:00:01","owner":107,"group":108,"bridge":"br0","selinuxContext":"system_u:system_r:container_t:s0:c1,c2""#,
            "",
        )
        .expect("parsed");
        assert_eq!(
            c.opts,
            TapOpts {
                multi_queue: true,
                owner: Some(107),
                group: Some(108)
            }
        );
        assert_eq!(c.mtu, Some(1400));
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(c.bridge.as_deref(), Some("br0"));
        assert_eq!(
            c.selinux_context.as_deref(),
            Some("system_u:system_r:container_t:s0:c1,c2")
        );
        let c = parse("", "").expect("parsed");
        assert!(c.opts == TapOpts::default() && c.mtu.is_none() && c.mac.is_none());
        assert!(c.selinux_context.is_none() && c.bridge.is_none());
    }

    #[test]
    fn mac_precedence() {
        let mac = |extra: &str, args: &str| parse(extra, args).expect("parsed").mac;
        let conf = r#","mac":"02:00:00:00:00:01""#;
        assert_eq!(mac(conf, "MAC=02:00:00:00:00:02"), Some([2, 0, 0, 0, 0, 2]));
        let rc = r#","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}"#;
        assert_eq!(mac(rc, "MAC=02:00:00:00:00:02"), Some([2, 0, 0, 0, 0, 3]));
    }

    #[test]
    fn bad_values() {
        let code = |extra: &str| parse(extra, "").err().map(|e| e.code);
        assert_eq!(code(r#","mac":"zz""#), Some(7));
        assert_eq!(code(r#","owner":-1"#), Some(6));
        assert_eq!(code(r#","group":"wheel""#), Some(6));
        assert_eq!(code(r#","mtu":-1"#), Some(6));
        assert_eq!(code(r#","bridge":"a/b""#), Some(7));
        for bad in ["container_t", "a:b", "a:b:c\n", "a::b:c", "a:b:c;rm"] {
            let extra = format!(r#","selinuxContext":{}"#, serde_json::json!(bad));
            assert_eq!(code(&extra), Some(7), "{bad:?}");
        }
        let long = format!("u:r:{}", "t".repeat(300));
        assert_eq!(code(&format!(r#","selinuxContext":"{long}""#)), Some(7));
    }
}
