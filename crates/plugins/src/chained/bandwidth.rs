//! The `bandwidth` plugin, chained after a plugin that makes a veth pair (bridge, ptp): limits
//! the pod's traffic with token-bucket qdiscs on the node's end of the pair.
//!
//! As the reference (1.1.1): `ingressRate`/`ingressBurst` (bits per second, bits) shape what
//! the pod receives, with a tbf on the node's veth; `egressRate`/`egressBurst` shape what it
//! sends, redirected from the veth's ingress to an ifb device named `bwp<hash of network and
//! container>`, where a tbf shapes it. The keys come from the config, or else from
//! `runtimeConfig.bandwidth` (the runtime's, from a pod's bandwidth annotations). DEL deletes
//! the ifb; the veth's qdiscs go with the veth.
//!
//! The qdiscs and filter are made over netlink with the parameters the reference's netlink
//! library sends. Deliberate changes: a failed ADD removes what it added; DEL of a config that no longer
//! validates still deletes the ifb; a rate below 8 bits per second is refused (the reference
//! divides by zero); CHECK also checks the egress side and the latency.

use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, Interface, NetConf};
use netkit::netlink::{Bucket, Link, LATENCY_USEC};
use netkit::Netlink;
use serde::Deserialize;

use crate::support::check;
use crate::support::sys::{open_netns, sys, sys_ctx, with_cleanup_failures};

/// The plugin, as registered in the multi-call binary's table.
pub struct Bandwidth;

const IFB_PREFIX: &str = "bwp";
/// The longest interface name.
const IFNAME_MAX: usize = 15;

/// The four keys, where they are written (the config, or `runtimeConfig.bandwidth`).
#[derive(Deserialize, Default, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    ingress_rate: Option<u64>,
    #[serde(default)]
    ingress_burst: Option<u64>,
    #[serde(default)]
    egress_rate: Option<u64>,
    #[serde(default)]
    egress_burst: Option<u64>,
}

impl Entry {
    fn is_written(&self) -> bool {
        *self != Entry::default()
    }
}

#[derive(Deserialize, Default)]
struct RawRuntime {
    #[serde(default)]
    bandwidth: Option<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRuntimeConfig {
    #[serde(default)]
    runtime_config: Option<RawRuntime>,
}

/// The checked limits; each `None` leaves that direction alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    /// What the pod receives.
    ingress: Option<Bucket>,
    /// What the pod sends.
    egress: Option<Bucket>,
}

/// The keys of its own bandwidth reads: the limits (which `runtimeConfig.bandwidth` gives
/// too), and the subnets of one release it refuses.
pub(crate) fn keys() -> Keys {
    Keys::of::<Entry>().named(&UNSUPPORTED)
}

/// Keys that the reference v1.5 had and v1.6 removed again: current releases ignore them and
/// shape all of the pod's traffic, and so would this plugin, so a config with them is refused
/// rather than shaped against what it says.
const UNSUPPORTED: [&str; 2] = ["shapedSubnets", "unshapedSubnets"];

struct BandwidthConf {
    net: NetConf,
    limits: Limits,
}

impl BandwidthConf {
    fn parse(stdin: &[u8]) -> Result<BandwidthConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let top: Entry = cni::decode::from_value(&config)?;
        let runtime: RawRuntimeConfig = cni::decode::from_value(&config)?;
        net.version()?;
        for key in UNSUPPORTED {
            if config.get(key).is_some() {
                return Err(CniError::invalid_config(format!(
                    "{key}: not supported: the reference plugin had it in v1.5 only, and current \
                     releases (like this one) shape all of the pod's traffic: leave it out"
                )));
            }
        }
        // As the reference: keys in the config hide the runtime's.
        let (entry, at) = if top.is_written() {
            (top, "")
        } else {
            let entry = runtime
                .runtime_config
                .and_then(|r| r.bandwidth)
                .unwrap_or_default();
            (entry, "runtimeConfig.bandwidth.")
        };
        let limits = Limits {
            ingress: bucket(at, "ingress", entry.ingress_rate, entry.ingress_burst)?,
            egress: bucket(at, "egress", entry.egress_rate, entry.egress_burst)?,
        };
        Ok(BandwidthConf { net, limits })
    }

    fn prev_result(&self) -> Result<CniResult, CniError> {
        let prev = self.net.prev_result.as_ref().ok_or_else(|| {
            CniError::invalid_config(
                "bandwidth needs prevResult: chain it after the plugin that makes the veth pair",
            )
        })?;
        CniResult::from_value_at(prev, Some("prevResult"))
    }
}

/// One direction's rate and burst (bits per second, bits) as a bucket in bytes.
fn bucket(
    at: &str,
    direction: &str,
    rate: Option<u64>,
    burst: Option<u64>,
) -> Result<Option<Bucket>, CniError> {
    let (rate, burst) = (rate.unwrap_or(0), burst.unwrap_or(0));
    let key = |what: &str| format!("{at}{direction}{what}");
    match (rate, burst) {
        (0, 0) => Ok(None),
        (_, 0) => Err(CniError::invalid_config(format!(
            "{}: set it too, in bits, when {} is set",
            key("Burst"),
            key("Rate")
        ))),
        (0, _) => Err(CniError::invalid_config(format!(
            "{}: set it too, in bits per second, when {} is set",
            key("Rate"),
            key("Burst")
        ))),
        (1..=7, _) => Err(CniError::invalid_config(format!(
            "{}: {rate} is below 8 bits per second, the least a qdisc can shape to",
            key("Rate")
        ))),
        (_, b) if b / 8 >= u64::from(u32::MAX) => Err(CniError::invalid_config(format!(
            "{}: {b} bits is more than 4 GB, the most a qdisc holds",
            key("Burst")
        ))),
        (r, b) => Ok(Some(Bucket {
            rate: r / 8,
            burst: b / 8,
        })),
    }
}

/// The ifb of attachment (`network`, `container_id`), named as the reference names it.
fn ifb_name(network: &str, container_id: &str) -> String {
    let hash = netkit::sha512_hex_prefix(
        &format!("{network}{container_id}"),
        IFNAME_MAX - IFB_PREFIX.len(),
    );
    format!("{IFB_PREFIX}{hash}")
}

/// The node's end of the pod's veth `ifname`, which `prev` must list (without a sandbox).
fn host_veth(
    pod_nl: &Netlink,
    node: &Netlink,
    prev: &CniResult,
    args: &CmdArgs,
) -> Result<Link, CniError> {
    let cont = pod_nl
        .link_by_name(&args.ifname)
        .map_err(sys)?
        .filter(|l| l.kind.as_deref() == Some("veth"))
        .ok_or_else(|| {
            CniError::invalid_config(format!(
                "interface {:?} in netns {} is not a veth: bandwidth shapes a veth pair's node \
                 end (chain it after bridge or ptp)",
                args.ifname, args.netns
            ))
        })?;
    let host = cont
        .link
        .map(|peer| node.link_by_index(peer))
        .transpose()
        .map_err(sys)?
        .flatten()
        .filter(|h| {
            prev.interfaces
                .iter()
                .any(|i| i.sandbox.is_empty() && i.name == h.name)
        });
    host.ok_or_else(|| {
        CniError::invalid_config(format!(
            "the peer of {:?} is not a node interface of prevResult: bandwidth shapes the \
             veth's node end, which the previous plugin's result names",
            args.ifname
        ))
    })
}

/// What a failing ADD has to undo.
#[derive(Default)]
struct Done {
    /// The node link ADD gave qdiscs to.
    qdiscs_on: Option<u32>,
    ifb: Option<String>,
}

impl cni::Plugin for Bandwidth {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = BandwidthConf::parse(&args.stdin)?;
        let Limits { ingress, egress } = conf.limits;
        if ingress.is_none() && egress.is_none() {
            return Ok(conf.prev_result().unwrap_or_default());
        }
        let mut result = conf.prev_result()?;
        let pod = open_netns(&args.netns)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        let node = Netlink::new().map_err(sys)?;
        let host = host_veth(&pod_nl, &node, &result, args)?;
        let ticks = netkit::netlink::ticks_per_usec().map_err(sys)?;
        let ctx = format!("shaping {:?}", host.name);
        let mut done = Done::default();
        let outcome = (|| -> Result<(), CniError> {
            if let Some(bucket) = ingress {
                done.qdiscs_on = Some(host.index);
                node.add_tbf(host.index, bucket, ticks)
                    .map_err(sys_ctx(&ctx))?;
            }
            if let Some(bucket) = egress {
                let name = ifb_name(&conf.net.name, &args.container_id);
                let ctx = format!("ifb {name:?} for {:?}", host.name);
                node.add_ifb(&name, Some(host.mtu)).map_err(sys_ctx(&ctx))?;
                done.ifb = Some(name.clone());
                let ifb = node.link(&name).map_err(sys_ctx(&ctx))?;
                node.set_up(ifb.index).map_err(sys_ctx(&ctx))?;
                done.qdiscs_on = Some(host.index);
                node.add_redirect(host.index, ifb.index)
                    .map_err(sys_ctx(&ctx))?;
                node.add_tbf(ifb.index, bucket, ticks)
                    .map_err(sys_ctx(&ctx))?;
                result.interfaces.push(Interface {
                    name,
                    mac: ifb.mac.map(|m| netkit::format_mac(&m)).unwrap_or_default(),
                    ..Interface::default()
                });
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => Ok(result),
            Err(e) => Err(undo(e, &node, &done)),
        }
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Only the network's name: a config whose limits no longer validate must still let
        // the attachment go.
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        let name = ifb_name(&net.name, &args.container_id);
        let node = Netlink::new().map_err(sys)?;
        let ctx = format!("deleting ifb {name:?}");
        // Only an ifb: a link of that name of another kind is not ours.
        match node.link_by_name(&name).map_err(sys_ctx(&ctx))? {
            Some(link) if link.kind.as_deref() == Some("ifb") => node
                .del_link_if_exists(link.index)
                .map(drop)
                .map_err(sys_ctx(&ctx)),
            _ => Ok(()),
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = BandwidthConf::parse(&args.stdin)?;
        let prev = conf.prev_result()?;
        let pod = open_netns(&args.netns)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        let node = Netlink::new().map_err(sys)?;
        let host = host_veth(&pod_nl, &node, &prev, args)?;
        let ticks = netkit::netlink::ticks_per_usec().map_err(sys)?;
        if let Some(bucket) = conf.limits.ingress {
            check_tbf(&node, &host, bucket, ticks)?;
        }
        if let Some(bucket) = conf.limits.egress {
            let name = ifb_name(&conf.net.name, &args.container_id);
            let (on_host, _) = node.qdiscs(host.index).map_err(sys)?;
            if !on_host.iter().any(|kind| kind == "ingress") {
                return Err(check::fail(format!(
                    "{:?} has no ingress qdisc to redirect the pod's traffic",
                    host.name
                )));
            }
            let ifb = node
                .link_by_name(&name)
                .map_err(sys)?
                .ok_or_else(|| check::fail(format!("the ifb {name:?} is missing")))?;
            if !node
                .ingress_redirects(host.index)
                .map_err(sys)?
                .contains(&ifb.index)
            {
                return Err(check::fail(format!(
                    "{:?} has no redirect to {name:?} for the pod's traffic",
                    host.name
                )));
            }
            check_tbf(&node, &ifb, bucket, ticks)?;
        }
        Ok(())
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = BandwidthConf::parse(config)?;
        if conf.net.prev_result.is_some() {
            conf.prev_result()?;
        }
        Ok(())
    }
}

/// `link` has a root tbf of `bucket`, as ADD makes it.
fn check_tbf(node: &Netlink, link: &Link, bucket: Bucket, ticks: f64) -> Result<(), CniError> {
    let (_, tbf) = node.qdiscs(link.index).map_err(sys)?;
    let Some(tbf) = tbf else {
        return Err(check::fail(format!(
            "{:?} has no root tbf qdisc",
            link.name
        )));
    };
    let (buffer, limit) = (bucket.buffer(ticks), bucket.limit());
    if (tbf.rate, tbf.buffer, tbf.limit) != (bucket.rate, buffer, limit) {
        return Err(check::fail(format!(
            "{:?} shapes to {} bytes/s with a buffer of {} ticks and a {}-byte limit, the \
             config says {} bytes/s, {buffer} ticks and {limit} bytes ({LATENCY_USEC} us of \
             queue)",
            link.name, tbf.rate, tbf.buffer, tbf.limit, bucket.rate
        )));
    }
    Ok(())
}

/// Undoes a failed ADD; cleanup failures are added to the error's details.
fn undo(err: CniError, node: &Netlink, done: &Done) -> CniError {
    let mut failures = Vec::new();
    if let Some(name) = &done.ifb {
        if let Err(e) = node.del_link_by_name(name) {
            failures.push(e.to_string());
        }
    }
    if let Some(index) = done.qdiscs_on {
        if let Err(e) = node.del_qdiscs(index) {
            failures.push(e.to_string());
        }
    }
    with_cleanup_failures(err, &failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<BandwidthConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"bandwidth"{extra}}}"#);
        BandwidthConf::parse(json.as_bytes())
    }

    #[test]
    fn limits_from_the_config_or_the_runtime() {
        let c = parse(r#","ingressRate":1000000,"ingressBurst":100000"#).expect("parsed");
        assert_eq!(
            c.limits.ingress,
            Some(Bucket {
                rate: 125_000,
                burst: 12_500
            })
        );
        assert_eq!(c.limits.egress, None);
        let rt = r#","runtimeConfig":{"bandwidth":{"egressRate":800,"egressBurst":80}}"#;
        let c = parse(rt).expect("parsed");
        assert_eq!(
            c.limits.egress,
            Some(Bucket {
                rate: 100,
                burst: 10
            })
        );
        // Any key in the config hides the runtime's.
        let c = parse(&format!(r#","ingressRate":0{rt}"#)).expect("parsed");
        assert_eq!(c.limits.egress, None);
    }

    #[test]
    fn bad_limits() {
        let msg = |extra: &str| parse(extra).err().map(|e| (e.code, e.msg));
        assert_eq!(
            msg(r#","ingressRate":1000"#),
            Some((
                7,
                "ingressBurst: set it too, in bits, when ingressRate is set".into()
            ))
        );
        let m = msg(r#","runtimeConfig":{"bandwidth":{"egressBurst":1000}}"#);
        assert!(
            m.as_ref().is_some_and(
                |(c, m)| *c == 7 && m.starts_with("runtimeConfig.bandwidth.egressRate")
            ),
            "{m:?}"
        );
        assert_eq!(
            msg(r#","egressRate":7,"egressBurst":80"#).map(|m| m.0),
            Some(7)
        );
        assert_eq!(
            msg(r#","egressRate":8000,"egressBurst":40000000000"#).map(|m| m.0),
            Some(7)
        );
        assert_eq!(msg(r#","egressRate":-1"#).map(|m| m.0), Some(6));
        let m = msg(r#","unshapedSubnets":["10.0.0.0/8"]"#);
        assert!(
            m.as_ref().is_some_and(|(c, m)| *c == 7
                && m.starts_with(
                    "unshapedSubnets: not supported: the reference plugin had it in v1.5 only"
                )),
            "{m:?}"
        );
    }

    #[test]
    fn ifb_names_as_the_reference() {
        // Seen from Debian's 1.1.1 for network "bw" and container "c1".
        assert_eq!(ifb_name("bw", "c1"), "bwpc3cc976dc7e3");
    }
}
