//! The `host-device` plugin: moves a link of the node into the pod as `CNI_IFNAME` (ADD) and
//! gives it back under its own name (DEL). The link is chosen by `device` (its name), `hwaddr`,
//! `kernelpath` (its sysfs device), `pciBusID`, or the `deviceID` a device plugin put in
//! `runtimeConfig`; a PCI device bound to a userspace (DPDK) driver has no link and only gets
//! addresses in the result.
//!
//! Behaviour follows containernetworking/plugins' host-device, with these deliberate changes:
//! the move and the rename are one request each way, so the node never sees the link renamed;
//! DEL gives back the link ADD recorded on the node, never one the pod names or aliases, and
//! succeeds once it is back (a second DEL, or one after the pod is gone); links the node
//! cannot lose (loopback, its uplink, addresses or routes, tunnels, bridges and their ports,
//! parents of its stacked links, another pod's veth) are refused; `kernelpath`, `pciBusID` and
//! `deviceID` must name a device, not a path elsewhere in sysfs.

use std::path::{Component, Path, PathBuf};

use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, Interface, NetConf};
use netkit::netlink::Link;
use netkit::{Family, NetNs, Netlink};
use serde::Deserialize;

use crate::support::container::{self, ContainerIface};
use crate::support::ipam_call::{self, Ipam};
use crate::support::state_file::StateFile;
use crate::support::sys::{open_netns, open_netns_for_del, sys, sys_ctx, with_cleanup_failures};

/// The plugin, as registered in the multi-call binary's table.
pub struct HostDevice;

const SYS_BUS_PCI: &str = "/sys/bus/pci/devices";
const SYS_BUS_AUXILIARY: &str = "/sys/bus/auxiliary/devices";
/// Drivers that take a PCI device away from the kernel's network stack (DPDK).
const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

/// host-device's own keys, as written.
#[derive(Deserialize, Default)]
struct Raw {
    #[serde(default)]
    device: String,
    #[serde(default)]
    hwaddr: String,
    #[serde(default)]
    kernelpath: String,
    #[serde(default, rename = "pciBusID")]
    pci_bus_id: String,
    /// The reference's untagged `DPDKMode` field: without a PCI address to ask, the config says
    /// the device is a DPDK one.
    #[serde(default, rename = "DPDKMode")]
    dpdk_mode: bool,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: RawRuntime,
}

#[derive(Deserialize, Default)]
struct RawRuntime {
    #[serde(default, rename = "deviceID")]
    device_id: String,
}

/// How the node's link is found, in the reference's order of precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Select {
    Name(String),
    Mac([u8; 6]),
    /// A directory under /sys/devices whose `net` holds the link.
    KernelPath(PathBuf),
    Pci(String),
    Auxiliary(String),
}

/// The checked configuration.
struct Conf {
    net: NetConf,
    select: Select,
    /// The PCI device is bound to a userspace driver: there is no link to move.
    dpdk: bool,
}

impl Conf {
    /// Parses and checks a config (code 7 for what is wrong, 6 for a value of the wrong type).
    /// With `on_node`, what only the node can answer too: whether a `deviceID` is there and
    /// whether a PCI device is bound to a userspace driver.
    fn parse(stdin: &[u8], on_node: bool) -> Result<Conf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        let mut pci = Some(raw.pci_bus_id).filter(|p| !p.is_empty());
        let mut aux = None;
        // A device plugin's deviceID stands for the PCI or auxiliary device it names.
        let device_id = raw.runtime_config.device_id;
        if !device_id.is_empty() && !on_node {
            if !is_pci_address(&device_id) && !is_device_name(&device_id) {
                return Err(CniError::invalid_config(format!(
                    "runtimeConfig.deviceID: {} is neither a PCI address nor a device name",
                    cni::quote::quote(&device_id)
                )));
            }
            if is_pci_address(&device_id) {
                pci = Some(device_id);
            } else {
                aux = Some(device_id);
            }
        } else if !device_id.is_empty() {
            if is_pci_address(&device_id) && Path::new(SYS_BUS_PCI).join(&device_id).exists() {
                pci = Some(device_id);
            } else if is_device_name(&device_id)
                && Path::new(SYS_BUS_AUXILIARY).join(&device_id).exists()
            {
                pci = None;
                aux = Some(device_id);
            } else {
                return Err(CniError::invalid_config(format!(
                    "runtimeConfig.deviceID: {} is neither a PCI device in {SYS_BUS_PCI} nor an auxiliary device in {SYS_BUS_AUXILIARY}",
                    cni::quote::quote(&device_id)
                )));
            }
        }
        if let Some(p) = pci.as_ref().filter(|p| !is_pci_address(p)) {
            return Err(CniError::invalid_config(format!(
                "pciBusID: {} is not a PCI address (domain:bus:device.function, as 0000:03:00.1)",
                cni::quote::quote(p)
            )));
        }
        let select = if !raw.device.is_empty() {
            netkit::netlink::validate_ifname(&raw.device)
                .map_err(|e| CniError::invalid_config(format!("device: {e}")))?;
            Select::Name(raw.device)
        } else if !raw.hwaddr.is_empty() {
            let mac = netkit::parse_mac(&raw.hwaddr).map_err(|_| {
                CniError::invalid_config(format!(
                    "hwaddr: {} is not a MAC address",
                    cni::quote::quote(&raw.hwaddr)
                ))
            })?;
            Select::Mac(mac)
        } else if !raw.kernelpath.is_empty() {
            Select::KernelPath(kernel_path(&raw.kernelpath)?)
        } else if let Some(pci) = pci.clone() {
            Select::Pci(pci)
        } else if let Some(aux) = aux {
            Select::Auxiliary(aux)
        } else {
            return Err(CniError::invalid_config(
                r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#,
            ));
        };
        // With a PCI address, its driver decides, as in the reference.
        let dpdk = match &pci {
            Some(pci) if on_node => has_userspace_driver(Path::new(SYS_BUS_PCI), pci)?,
            Some(_) => false,
            None => raw.dpdk_mode,
        };
        Ok(Conf { net, select, dpdk })
    }
}

/// `domain:bus:device.function` in hex, as the kernel names PCI devices.
fn is_pci_address(s: &str) -> bool {
    let hex =
        |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit());
    let Some((domain, rest)) = s.split_once(':') else {
        return false;
    };
    let Some((bus, rest)) = rest.split_once(':') else {
        return false;
    };
    let Some((device, function)) = rest.split_once('.') else {
        return false;
    };
    hex(domain, 4) && hex(bus, 2) && hex(device, 2) && hex(function, 1)
}

/// A name that stays one directory entry: no separator, no `.` or `..`.
fn is_device_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// `kernelpath`: absolute, under /sys/devices, and no `..` that would leave it.
fn kernel_path(text: &str) -> Result<PathBuf, CniError> {
    let path = PathBuf::from(text);
    let escapes = path.components().any(|c| c == Component::ParentDir);
    if !path.starts_with("/sys/devices/") || escapes || path == Path::new("/sys/devices") {
        return Err(CniError::invalid_config(format!(
            "kernelpath: {} must be a device's absolute path under /sys/devices/, without ..",
            cni::quote::quote(text)
        )));
    }
    Ok(path)
}

/// Whether the PCI device (under `devices`, /sys/bus/pci/devices) is bound to a userspace
/// (DPDK) driver. A device that is not there, or has no driver, fails ADD here, naming it.
fn has_userspace_driver(devices: &Path, pci: &str) -> Result<bool, CniError> {
    let link = devices.join(pci).join("driver");
    let driver = std::fs::read_link(&link).map_err(|e| {
        CniError::invalid_config(format!(
            "pciBusID {pci}: cannot read its driver at {}: {e}",
            link.display()
        ))
    })?;
    let name = driver
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(USERSPACE_DRIVERS.contains(&name.as_str()))
}

/// The first link in a sysfs `net` directory, by name.
fn link_in_sysfs(net_dir: &Path) -> Result<String, CniError> {
    let mut names: Vec<String> = std::fs::read_dir(net_dir)
        .map_err(|e| {
            CniError::invalid_config(format!("no network device in {}: {e}", net_dir.display()))
        })?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names.into_iter().next().ok_or_else(|| {
        CniError::invalid_config(format!("no network device in {}", net_dir.display()))
    })
}

/// The node's link the config selects.
fn find_link(nl: &Netlink, select: &Select) -> Result<Link, CniError> {
    let by_name = |name: &str| {
        nl.link_by_name(name).map_err(sys)?.ok_or_else(|| {
            CniError::invalid_config(format!(
                "the node has no link {name:?} to move into the pod"
            ))
        })
    };
    match select {
        Select::Name(name) => by_name(name),
        Select::Mac(mac) => nl
            .links()
            .map_err(sys)?
            .into_iter()
            .find(|l| l.mac.as_ref() == Some(mac))
            .ok_or_else(|| {
                CniError::invalid_config(format!(
                    "the node has no link with hwaddr {}",
                    netkit::format_mac(mac)
                ))
            }),
        Select::KernelPath(path) => by_name(&link_in_sysfs(&path.join("net"))?),
        Select::Pci(pci) => {
            let device = Path::new(SYS_BUS_PCI).join(pci);
            let net = device.join("net");
            let dir = if net.is_dir() {
                net
            } else {
                // A virtio device has its link one level down.
                std::fs::read_dir(&device)
                    .ok()
                    .into_iter()
                    .flatten()
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| {
                        p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("virtio"))
                            && p.join("net").is_dir()
                    })
                    .map(|p| p.join("net"))
                    .ok_or_else(|| {
                        CniError::invalid_config(format!("no net directory under PCI device {pci}"))
                    })?
            };
            by_name(&link_in_sysfs(&dir)?)
        }
        Select::Auxiliary(aux) => by_name(&link_in_sysfs(
            &Path::new(SYS_BUS_AUXILIARY).join(aux).join("net"),
        )?),
    }
}

/// Kinds of link that carry the node's overlay or tunnels (flannel, calico, cilium, wireguard).
const TUNNEL_KINDS: [&str; 14] = [
    "vxlan",
    "geneve",
    "wireguard",
    "ipip",
    "gre",
    "gretap",
    "ip6gre",
    "ip6gretap",
    "ip6tnl",
    "sit",
    "vti",
    "vti6",
    "bareudp",
    "erspan",
];

/// Refuses a link the node cannot give away: what carries its traffic or another pod's.
fn refuse_node_links(nl: &Netlink, link: &Link) -> Result<(), CniError> {
    let refuse = |why: String| {
        Err(CniError::invalid_config(format!(
            "host-device will not move the node's link {:?} into a pod: {why}",
            link.name
        )))
    };
    if link.name == "lo" {
        return refuse("it is the node's loopback".into());
    }
    let kind = link.kind.as_deref();
    if let Some(tunnel) = kind.filter(|k| TUNNEL_KINDS.contains(k)) {
        return refuse(format!(
            "it is a {tunnel} tunnel, which the node's networking uses"
        ));
    }
    if kind == Some("bridge") {
        return refuse("it is a bridge, which other links are attached to".into());
    }
    if link.master.is_some() {
        return refuse("it is attached to a bridge or bond".into());
    }
    if kind == Some("veth") && link.link_netnsid.is_some() {
        return refuse("it is a veth whose peer is in another namespace (another pod's)".into());
    }
    let links = nl.links().map_err(sys)?;
    if let Some(upper) = links.iter().find(|l| {
        l.link == Some(link.index) && l.link_netnsid.is_none() && l.kind.as_deref() != Some("veth")
    }) {
        return refuse(format!("the node's link {:?} is stacked on it", upper.name));
    }
    let mut routes = Vec::new();
    for family in [Family::V4, Family::V6] {
        let all = nl
            .routes(family, Some(netkit::netlink::RT_TABLE_MAIN))
            .map_err(sys)?;
        routes.extend(
            all.into_iter()
                .filter(|r| r.oif == Some(link.index) && !is_link_local(&r.dst)),
        );
    }
    if routes.iter().any(|r| r.dst.prefix_len() == 0) {
        return refuse("it carries the node's default route".into());
    }
    let addrs = nl.addrs(Some(link.index), None).map_err(sys)?;
    if let Some(addr) = addrs.iter().find(|a| a.scope == 0) {
        return refuse(format!("it holds the node's address {}", addr.net));
    }
    if let Some(route) = routes.first() {
        return refuse(format!("the node routes {} through it", route.dst));
    }
    Ok(())
}

fn is_link_local(net: &ipnet::IpNet) -> bool {
    match net.addr() {
        std::net::IpAddr::V4(a) => a.is_link_local(),
        std::net::IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// What ADD records on the node for DEL: which link in the pod is the node's, its name and
/// its alias there. DEL trusts this, not what the pod can change (names, aliases).
#[derive(serde::Serialize, Deserialize)]
struct Moved {
    name: String,
    /// The link's index in the pod.
    index: u32,
    #[serde(default)]
    alias: String,
}

/// The node's own directory for it (not a config's): gone with a reboot, as the pods are.
const STATE_DIR: &str = "/run/cni/host-device";

fn record_file(args: &CmdArgs) -> Result<StateFile, CniError> {
    StateFile::in_node_dir(
        Path::new(STATE_DIR),
        format!("{}_{}.json", args.container_id, args.ifname),
    )
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for HostDevice {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = Conf::parse(&args.stdin, true)?;
        let version = conf.net.version()?;
        let ipam = conf.net.ipam_type().map(|t| Ipam::new(t, args));
        let pod = open_netns(&args.netns)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        if pod_nl.link_by_name(&args.ifname).map_err(sys)?.is_some() {
            return Err(CniError::internal(format!(
                "interface {:?} already exists in netns {}: DEL the attachment that owns it, or choose another CNI_IFNAME",
                args.ifname, args.netns
            )));
        }
        let mut result = if conf.dpdk {
            dpdk_result(args, ipam.as_ref(), version)?
        } else {
            move_in_and_configure(args, &conf, &pod, &pod_nl, ipam.as_ref(), version)?
        };
        result.cni_version = version.to_string();
        Ok(result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Only what DEL needs: the device it selected may be gone by now.
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        let pod = open_netns_for_del(&args.netns)?;
        // A failed release stops here, leaving the link for the runtime's retry.
        if let Some(t) = net.ipam_type() {
            Ipam::new(t, args).del()?;
        }
        let record: Option<Moved> = record_file(args)?.load("host-device's record")?;
        let node = NetNs::current().map_err(sys)?;
        let given_back = match (&pod, &record) {
            (Some(pod), Some(moved)) => {
                let pod_nl = Netlink::in_ns(pod).map_err(sys)?;
                match pod_nl.link_by_index(moved.index).map_err(sys)? {
                    Some(link) => move_out(&pod_nl, &node, &link, &moved.name, &moved.alias),
                    None => Ok(()),
                }
            }
            // The namespace is gone: the kernel gave a physical link back under its pod name.
            (None, Some(moved)) => rename_returned(&moved.name, &moved.alias),
            (Some(pod), None) => give_back_by_alias(args, pod, &node),
            (None, None) => Ok(()),
        };
        given_back.map_err(|mut e| {
            e.msg = format!(
                "giving {:?} in netns {} back to the node: {}",
                args.ifname, args.netns, e.msg
            );
            e
        })?;
        record_file(args)?.remove()
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = Conf::parse(&args.stdin, true)?;
        let pod = open_netns(&args.netns)?;
        if let Some(t) = conf.net.ipam_type() {
            Ipam::new(t, args).check()?;
        }
        let prev = crate::support::check::prev_result(&conf.net)?;
        if conf.dpdk {
            return Ok(());
        }
        let entry = crate::support::check::container_entry(&prev, args)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        let link = crate::support::check::pod_link(&pod_nl, args)?;
        crate::support::check::up(&link)?;
        crate::support::check::mac(entry, &link)?;
        crate::support::check::addresses(&pod_nl, &link, &prev)?;
        crate::support::check::routes(&pod_nl, &prev)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        crate::support::sublink::with_ipam(args, |ipam| ipam.status())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        crate::support::sublink::with_ipam(args, |ipam| ipam.gc())
    }

    /// The selection's form (not whether the node has the link) and a built-in IPAM section.
    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = Conf::parse(config, false)?;
        ipam_call::validate(&conf.net, config)
    }
}

/// A DPDK device: nothing moves; the result names the interface and, with IPAM, the addresses
/// the userspace driver is to use.
fn dpdk_result(
    args: &CmdArgs,
    ipam: Option<&Ipam>,
    version: cni::Version,
) -> Result<CniResult, CniError> {
    let mut result = match ipam {
        Some(ipam) => ipam.add_addresses(version, &mut false)?,
        None => CniResult::default(),
    };
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    result.interfaces = vec![Interface {
        name: args.ifname.clone(),
        sandbox: args.netns.clone(),
        ..Interface::default()
    }];
    Ok(result)
}

fn move_in_and_configure(
    args: &CmdArgs,
    conf: &Conf,
    pod: &NetNs,
    pod_nl: &Netlink,
    ipam: Option<&Ipam>,
    version: cni::Version,
) -> Result<CniResult, CniError> {
    let node = NetNs::current().map_err(sys)?;
    let node_nl = Netlink::new().map_err(sys)?;
    let host = find_link(&node_nl, &conf.select)?;
    refuse_node_links(&node_nl, &host)?;
    let node_ctx = format!("the node's link {:?}", host.name);
    // The node's name for it rides along, for DEL.
    node_nl
        .set_alias(host.index, &host.name)
        .map_err(sys_ctx(&node_ctx))?;
    if let Err(e) = node_nl.move_to_ns_as(host.index, pod, &args.ifname) {
        let _ = node_nl.set_alias(host.index, host.alias.as_deref().unwrap_or(""));
        return Err(sys_ctx(format!(
            "moving {node_ctx} into netns {}",
            args.netns
        ))(e));
    }
    let mut reserved = false;
    let configured = (|| {
        let link = pod_nl.link(&args.ifname).map_err(sys)?;
        record_file(args)?.save(&Moved {
            name: host.name.clone(),
            index: link.index,
            alias: host.alias.clone().unwrap_or_default(),
        })?;
        let iface = ContainerIface {
            ns: pod,
            nl: pod_nl,
            name: &args.ifname,
            index: link.index,
        };
        let mut result = match ipam {
            Some(ipam) => ipam.add_addresses(version, &mut reserved)?,
            None => CniResult::default(),
        };
        if result.ips.is_empty() {
            pod_nl.set_up(link.index).map_err(sys)?;
        } else {
            for ip in &mut result.ips {
                ip.interface = Some(0);
            }
            iface.apply(&result, false, true)?;
        }
        let link = pod_nl.link(&args.ifname).map_err(sys)?;
        result.interfaces = vec![container::result_entry(&link, &args.netns)];
        result.dns = ipam_call::result_dns(conf.net.dns.as_ref(), &result.dns);
        Ok(result)
    })();
    let Err(err) = configured else {
        return configured;
    };
    let mut failures = Vec::new();
    if let (true, Some(ipam)) = (reserved, ipam) {
        if let Err(e) = ipam.del() {
            failures.push(format!("releasing the IPAM reservation: {e}"));
        }
    }
    let _ = record_file(args)?.remove();
    let original_alias = host.alias.as_deref().unwrap_or("");
    let back = pod_nl
        .link(&args.ifname)
        .map_err(sys)
        .and_then(|link| move_out(pod_nl, &node, &link, &host.name, original_alias));
    match back {
        Ok(()) => {
            if host.up {
                if let Ok(link) = node_nl.link(&host.name) {
                    let _ = node_nl.set_up(link.index);
                }
            }
        }
        Err(e) => failures.push(format!("giving {node_ctx} back: {e}")),
    }
    Err(with_cleanup_failures(err, &failures))
}

/// Moves the pod's `link` back to the node as `name`, with the alias it had there.
fn move_out(
    pod_nl: &Netlink,
    node: &NetNs,
    link: &Link,
    name: &str,
    alias: &str,
) -> Result<(), CniError> {
    let node_nl = Netlink::new().map_err(sys)?;
    if node_nl.link_by_name(name).map_err(sys)?.is_some() {
        return Err(CniError::internal(format!(
            "the node has another link named {name:?} now: rename or delete it, then DEL again"
        )));
    }
    pod_nl.move_to_ns_as(link.index, node, name).map_err(sys)?;
    let back = node_nl.link(name).map_err(sys)?;
    node_nl.set_alias(back.index, alias).map_err(sys)
}

/// An attachment ADD made without a record (an earlier version, or the reference's): the
/// link named `CNI_IFNAME` with a node name in its alias, as the reference finds it. A link
/// without one was not moved in by host-device and stays. So does a link the pod could have
/// made itself, name and alias included: only a device (no kind: a NIC, a VF) or a veth whose
/// peer is on the node came from the node.
fn give_back_by_alias(args: &CmdArgs, pod: &NetNs, node: &NetNs) -> Result<(), CniError> {
    let pod_nl = Netlink::in_ns(pod).map_err(sys)?;
    let Some(link) = pod_nl.link_by_name(&args.ifname).map_err(sys)? else {
        return Ok(());
    };
    let Some(name) = link.alias.clone() else {
        return Ok(());
    };
    if netkit::netlink::validate_ifname(&name).is_err() {
        return Ok(());
    }
    if !came_from_the_node(&link)? {
        eprintln!(
            "DEL leaves {:?} in the pod: it is a {} link the pod could have made itself, and \
             host-device has no record of moving it in",
            args.ifname,
            link.kind.as_deref().unwrap_or_default()
        );
        return Ok(());
    }
    move_out(&pod_nl, node, &link, &name, "")
}

/// Whether the pod's `link` is one a pod cannot make: a device, or a veth whose peer is a
/// veth of the node's pointing back at it.
fn came_from_the_node(link: &Link) -> Result<bool, CniError> {
    match link.kind.as_deref() {
        None => Ok(true),
        Some("veth") if link.link_netnsid.is_some() => {
            let node_nl = Netlink::new().map_err(sys)?;
            let peer = link
                .link
                .and_then(|index| node_nl.link_by_index(index).ok().flatten());
            Ok(peer
                .is_some_and(|p| p.kind.as_deref() == Some("veth") && p.link == Some(link.index)))
        }
        Some(_) => Ok(false),
    }
}

/// After the pod's namespace went away the kernel moved a physical link back to the initial
/// namespace under its pod name, with host-device's alias: it gets its own name again.
fn rename_returned(name: &str, alias: &str) -> Result<(), CniError> {
    let nl = Netlink::new().map_err(sys)?;
    let links = nl.links().map_err(sys)?;
    if links.iter().any(|l| l.name == name) {
        return Ok(());
    }
    match links.iter().find(|l| l.alias.as_deref() == Some(name)) {
        Some(link) => {
            nl.set_down(link.index).map_err(sys)?;
            nl.set_name(link.index, name).map_err(sys)?;
            nl.set_alias(link.index, alias).map_err(sys)
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<Conf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"host-device"{extra}}}"#);
        Conf::parse(json.as_bytes(), true)
    }

    #[test]
    fn the_reference_order_of_selection() {
        let c = parse(r#","device":"eth1","hwaddr":"02:00:00:00:00:01""#).unwrap();
        assert_eq!(c.select, Select::Name("eth1".into()));
        let c = parse(r#","hwaddr":"02:00:00:00:00:01","kernelpath":"/sys/devices/x""#).unwrap();
        assert_eq!(c.select, Select::Mac([2, 0, 0, 0, 0, 1]));
        let c = parse(r#","kernelpath":"/sys/devices/pci0000:00/0000:00:03.0""#).unwrap();
        assert_eq!(
            c.select,
            Select::KernelPath("/sys/devices/pci0000:00/0000:00:03.0".into())
        );
        let e = parse("").err().unwrap();
        assert_eq!(e.code, 7);
        assert!(
            e.msg
                .contains(r#""device", "hwaddr", "kernelpath" or "pciBusID""#),
            "{e}"
        );
    }

    #[test]
    fn paths_and_ids_stay_where_they_belong() {
        for bad in [
            "/sys/devices/../../etc",
            "sys/devices/x",
            "/sys/devices",
            "/sys/devicesx/y",
        ] {
            let e = parse(&format!(r#","kernelpath":"{bad}""#)).err().unwrap();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.starts_with("kernelpath: "), "{bad}: {e}");
        }
        for bad in [
            "../../../etc",
            "0000:00:1f",
            "0000:00:1f.6/..",
            "0:0:0.0",
            "zzzz:00:1f.6",
        ] {
            let e = parse(&format!(r#","pciBusID":"{bad}""#)).err().unwrap();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.starts_with("pciBusID: "), "{bad}: {e}");
        }
        let e = parse(r#","runtimeConfig":{"deviceID":"../../etc"}"#)
            .err()
            .unwrap();
        assert!(e.msg.starts_with("runtimeConfig.deviceID: "), "{e}");
        let e = parse(r#","device":"a/b""#).err().unwrap();
        assert!(e.msg.starts_with("device: "), "{e}");
        let e = parse(r#","hwaddr":"02:00""#).err().unwrap();
        assert!(e.msg.starts_with("hwaddr: "), "{e}");
        assert!(is_pci_address("0000:3b:00.1"));
        assert!(!is_pci_address("0000:3b:00.1 "));
        assert!(is_device_name("mlx5_core.sf.4"));
        assert!(!is_device_name(".."));
    }

    #[test]
    fn a_device_bound_to_a_userspace_driver_is_dpdk() {
        let sys = tempfile::tempdir().unwrap();
        for (pci, driver) in [("0000:03:00.0", "vfio-pci"), ("0000:03:00.1", "ixgbe")] {
            std::fs::create_dir_all(sys.path().join(pci)).unwrap();
            let target = format!("../../../bus/pci/drivers/{driver}");
            std::os::unix::fs::symlink(target, sys.path().join(pci).join("driver")).unwrap();
        }
        assert!(has_userspace_driver(sys.path(), "0000:03:00.0").unwrap());
        assert!(!has_userspace_driver(sys.path(), "0000:03:00.1").unwrap());
        let e = has_userspace_driver(sys.path(), "0000:03:00.2").unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("0000:03:00.2"), "{e}");
    }
}
