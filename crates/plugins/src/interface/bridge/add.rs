//! ADD: bridge, veth port, IPAM, container addressing, gateway, masquerade, spoof check.
//!
//! Whatever fails after the veth exists undoes this attachment's work (rules, IPAM reservation,
//! veth) before the error is returned; shared things (the bridge, its gateway address) stay.

use std::time::Duration;

use cni::in_use::InUse;
use cni::{CmdArgs, CniError, CniResult, Interface};
use ipnet::IpNet;
use netkit::netlink::Link;
use netkit::{NetNs, Netlink};

use super::config::BridgeConf;
use super::gateway;
use super::port::{self, PortOpts, PortVlans};
use crate::support::conflict::Probe;
use crate::support::container::{self, ContainerIface};
use crate::support::ip_masq;
use crate::support::ipam_call::{self, Ipam};
use crate::support::sys::{open_netns, sys, sys_ctx, with_cleanup_failures};

/// Waits between looks at the host veth's state; the kernel settles it within microseconds,
/// so the first look almost always succeeds.
const OPER_UP_WAITS_MS: [u64; 8] = [0, 1, 5, 20, 100, 300, 1000, 1000];

/// What has been done for this attachment so far, to undo on failure.
#[derive(Default)]
struct Done {
    /// The bridge, when this ADD created it: removed again if no other port joined meanwhile.
    bridge: Option<u32>,
    /// The VLAN gateway pair's bridge side and VLAN, when this ADD created it: removed again
    /// if no other port joined that VLAN meanwhile.
    vlan_port: Option<(u32, u16)>,
    host_veth: Option<u32>,
    spoofcheck: bool,
    ipam: bool,
    /// The addresses another host answered the conflict probe for.
    in_use: Vec<InUse>,
    /// The addresses masqueraded, once the rules exist.
    masq: Option<Vec<IpNet>>,
}

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = BridgeConf::parse(&args.stdin, &args.args)?;
    let version = conf.net.version()?;
    let pod = open_netns(&args.netns)?;
    let node = Netlink::new().map_err(sys)?;
    let ipam = conf.ipam_type().map(|t| Ipam::new(t, args));
    let mut done = Done::default();
    let outcome = attach(args, &conf, &pod, &node, ipam.as_ref(), &mut done);
    let mut result = match outcome {
        Ok(r) => r,
        Err(e) => return Err(undo(e, args, &conf, &node, ipam.as_ref(), &done)),
    };
    result.cni_version = version.to_string();
    Ok(result)
}

fn attach(
    args: &CmdArgs,
    conf: &BridgeConf,
    pod: &NetNs,
    node: &Netlink,
    ipam: Option<&Ipam>,
    done: &mut Done,
) -> Result<CniResult, CniError> {
    let pod_nl = Netlink::in_ns(pod).map_err(sys)?;
    let opts = PortOpts {
        mtu: conf.mtu,
        hairpin: conf.hairpin,
        isolated: conf.port_isolation,
        vlans: PortVlans {
            access: conf.vlan,
            trunk: &conf.trunk,
            preserve_default: conf.preserve_default_vlan,
        },
    };
    // A bridge removed by another pod's failed ADD just as this one joins it is made again.
    let mut attempt = 1;
    let (bridge, host) = loop {
        let (bridge, created) = port::ensure_bridge(node, conf)?;
        if created {
            done.bridge = Some(bridge.index);
        }
        match port::create_port(node, &bridge, &args.ifname, Some(pod), &opts) {
            Err(_)
                if attempt < port::BRIDGE_ATTEMPTS
                    && node.link_by_index(bridge.index).map_err(sys)?.is_none() =>
            {
                attempt += 1;
            }
            port => break (bridge, port?),
        }
    };
    done.host_veth = Some(host.index);

    let cont_ctx = || format!("interface {:?} in netns {}", args.ifname, args.netns);
    let mut cont = pod_nl.link(&args.ifname).map_err(sys_ctx(cont_ctx()))?;
    if let Some(mac) = conf.mac {
        pod_nl
            .set_mac(cont.index, mac)
            .map_err(sys_ctx(cont_ctx()))?;
        cont.mac = Some(mac);
    }

    if conf.mac_spoof_check {
        let mac = cont
            .mac
            .ok_or_else(|| CniError::internal(format!("{} has no MAC to enforce", cont_ctx())))?;
        done.spoofcheck = true;
        netkit::firewall::spoofcheck::setup(&host.name, &mac, &unique_id(args)).map_err(sys)?;
    }

    let mut result = CniResult::default();
    let container = ContainerIface {
        ns: pod,
        nl: &pod_nl,
        name: &args.ifname,
        index: cont.index,
    };
    let mut vlan_iface = None;
    if let Some(ipam) = ipam {
        let version = conf.net.version()?;
        result = ipam.add_addresses(version, &mut done.ipam)?;
        if let Some(wait) = conf.conflict_probe {
            // The bridge forwards the probe only once the port is up, which the kernel reports
            // on the node's end a moment after the pod's end is up.
            pod_nl.set_up(cont.index).map_err(sys_ctx(cont_ctx()))?;
            wait_oper_up(node, &host)?;
            let probe = Probe {
                ns: pod,
                nl: &pod_nl,
                index: cont.index,
                wait,
            };
            probe.check(&result, &args.ifname, &mut done.in_use)?;
        }
        let gws = gateway::calc(&mut result, conf);
        container.apply(&result, conf.enable_dad, false)?;
        if conf.is_gateway {
            let applied = gateway::apply(node, &bridge, conf, &gws, &mut vlan_iface);
            done.vlan_port = vlan_iface
                .as_ref()
                .and_then(|v| v.created_port)
                .map(|port| (port, conf.vlan));
            applied?;
        }
        if conf.ip_masq {
            ip_masq::setup(
                conf.ip_masq_backend,
                &conf.net.name,
                args,
                &result,
                &mut done.masq,
            )?;
        }
    } else if !conf.disable_container_interface {
        pod_nl.set_up(cont.index).map_err(sys_ctx(cont_ctx()))?;
    }

    let host = if conf.disable_container_interface {
        node.link_by_index(host.index).map_err(sys)?.unwrap_or(host)
    } else {
        wait_oper_up(node, &host)?
    };
    let bridge_now = node.link(&bridge.name).map_err(sys)?;

    let mac_of = |l: &Link| l.mac.map(|m| netkit::format_mac(&m)).unwrap_or_default();
    result.interfaces = vec![
        Interface {
            name: bridge_now.name.clone(),
            mac: mac_of(&bridge_now),
            ..Interface::default()
        },
        Interface {
            name: host.name.clone(),
            mac: mac_of(&host),
            ..Interface::default()
        },
        container::result_entry(&cont, &args.netns),
    ];
    if let Some(v) = vlan_iface {
        result.interfaces.push(Interface {
            name: v.link.name.clone(),
            mac: mac_of(&v.link),
            ..Interface::default()
        });
    }
    result.dns = ipam_call::result_dns(conf.net.dns.as_ref(), &result.dns);
    Ok(result)
}

/// The host veth once the kernel reports it operationally up (it is a bridge port whose
/// peer is up).
fn wait_oper_up(node: &Netlink, host: &Link) -> Result<Link, CniError> {
    let mut last = host.clone();
    for wait in OPER_UP_WAITS_MS {
        std::thread::sleep(Duration::from_millis(wait));
        last = node
            .link_by_index(host.index)
            .map_err(sys)?
            .ok_or_else(|| {
                CniError::internal(format!("host veth {:?} disappeared during ADD", host.name))
            })?;
        if last.running {
            return Ok(last);
        }
    }
    Err(CniError::internal(format!(
        "bridge port {:?} did not come up (flags {:#x})",
        last.name, last.flags
    )))
}

/// The id that tags this attachment's spoof-check rules.
pub fn unique_id(args: &CmdArgs) -> String {
    format!("{}-{}", args.container_id, args.ifname)
}

/// Undoes a failed ADD; cleanup failures are added to the error's details.
fn undo(
    err: CniError,
    args: &CmdArgs,
    conf: &BridgeConf,
    node: &Netlink,
    ipam: Option<&Ipam>,
    done: &Done,
) -> CniError {
    let mut failures = Vec::new();
    if let Some(addrs) = &done.masq {
        failures.extend(ip_masq::undo(&conf.net.name, args, addrs));
    }
    if done.spoofcheck {
        if let Err(e) = netkit::firewall::spoofcheck::teardown(&unique_id(args)) {
            failures.push(e.to_string());
        }
    }
    // IPAM first, while the interface still exists.
    if let (true, Some(ipam)) = (done.ipam, ipam) {
        if let Err(e) = ipam.release(&done.in_use) {
            failures.push(format!("releasing the IPAM reservation: {e}"));
        }
    }
    if let Some(index) = done.host_veth {
        if let Err(e) = node.del_link_if_exists(index) {
            failures.push(e.to_string());
        }
    }
    // After the host veth is gone, so this attachment does not count as a user of the VLAN.
    if let Some((port, vlan)) = done.vlan_port {
        if let Err(e) = port::remove_vlan_port_if_unused(node, port, vlan) {
            failures.push(e.to_string());
        }
    }
    if let Some(index) = done.bridge {
        if let Err(e) = port::remove_if_unused(node, index) {
            failures.push(e.to_string());
        }
    }
    with_cleanup_failures(err, &failures)
}
