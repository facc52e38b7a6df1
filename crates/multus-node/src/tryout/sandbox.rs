//! The throwaway node: namespaces `<name>-node`, `<name>-lan` and `<name>-pod`, and the state
//! directory `/run/multus-try/<name>`. Everything `multus try` creates lives in these; removing
//! them removes all of it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use netkit::netlink::{AddrOpts, BridgeOpts, Route};
use netkit::{NetNs, Netlink};
use serde_json::Value;

use super::Error;

/// Where kept sandboxes are found by `multus try --clean`.
pub const STATE_ROOT: &str = "/run/multus-try";
/// The runs' path roots file, in [`STATE_ROOT`].
pub const PATH_ROOTS_FILE: &str = "path-roots.json";
/// Every sandbox name starts with this.
pub const PREFIX: &str = "mtry";
/// The node's uplink and its peer's address on the lan (a benchmarking range, unlikely to
/// collide with what a NAD uses).
pub const UPLINK: &str = "eth0";
pub const LAN_BRIDGE: &str = "lan0";
const LAN_GATEWAY: &str = "198.18.0.1/24";
const NODE_UPLINK_ADDR: &str = "198.18.0.2/24";
/// The plugin names the `cni-plugins` binary answers to.
const PLUGINS: [&str; 7] = [
    "bridge",
    "macvlan",
    "ipvlan",
    "host-local",
    "static",
    "dhcp",
    "passthru",
];
const ROLES: [&str; 3] = ["pod", "node", "lan"];

fn net(text: &str) -> Result<IpNet, Error> {
    text.parse()
        .map_err(|e| Error::Sandbox(format!("address {text}: {e}")))
}

fn nk(what: &str) -> impl Fn(netkit::Error) -> Error + '_ {
    move |e| Error::Sandbox(format!("{what}: {e}"))
}

pub struct Sandbox {
    pub name: String,
    pub dir: PathBuf,
    /// The node: our own namespace, or with `--on-host` this machine's (only read).
    pub node: NetNs,
    /// The simulated lan; `None` on the host.
    pub lan: Option<NetNs>,
    pub pod: NetNs,
    pub keep: bool,
    /// Servers this process started (dnsmasq, the dhcp daemon); stopped unless kept.
    pub servers: Vec<std::process::Child>,
}

/// The cluster network's interface parent with `--on-host`: one end of a veth pair inside the
/// pod, so that nothing is created on the host.
pub const ON_HOST_CLUSTER_PARENT: &str = "cluster0";

impl Sandbox {
    /// Builds the node: a lan bridge with a gateway address, and for each of `masters` (always
    /// including the uplink) a veth whose node end has that name and whose other end is on
    /// the lan bridge. The uplink carries the node's default route.
    pub fn create(name: &str, plugins_bin: &Path, masters: &[String]) -> Result<Sandbox, Error> {
        let dir = state_dir(name, plugins_bin)?;
        // Until every namespace exists, a failure removes what was made so far.
        let partial = |e: Error| {
            remove(name);
            e
        };
        let mut made = Vec::new();
        for role in ROLES {
            let ns = NetNs::create_named(&format!("{name}-{role}"))
                .map_err(|e| partial(Error::Sandbox(format!("creating namespace: {e}"))))?;
            made.push(ns);
        }
        let (Some(lan), Some(node), Some(pod)) = (made.pop(), made.pop(), made.pop()) else {
            return Err(partial(Error::Sandbox("namespaces".into())));
        };
        let sb = Sandbox {
            name: name.to_owned(),
            dir,
            node,
            lan: Some(lan),
            pod,
            keep: false,
            servers: Vec::new(),
        };
        if let Some(lan) = &sb.lan {
            sb.wire(lan, masters)?;
        }
        Ok(sb)
    }

    /// A pod namespace on this machine, with the dummy parent of the cluster network inside
    /// it; the host's namespace is the node and is never changed.
    pub fn on_host(name: &str, plugins_bin: &Path) -> Result<Sandbox, Error> {
        let dir = state_dir(name, plugins_bin)?;
        let node = NetNs::current().map_err(nk("this namespace"))?;
        let pod = NetNs::create_named(&format!("{name}-pod")).map_err(|e| {
            remove(name);
            Error::Sandbox(format!("creating namespace: {e}"))
        })?;
        let sb = Sandbox {
            name: name.to_owned(),
            dir,
            node,
            lan: None,
            pod,
            keep: false,
            servers: Vec::new(),
        };
        let nl = Netlink::in_ns(&sb.pod).map_err(nk("pod"))?;
        let lo = nl.link("lo").map_err(nk("loopback"))?;
        nl.set_up(lo.index).map_err(nk("loopback"))?;
        // A veth pair with both ends in the pod: a parent that needs nothing on the host.
        let peer = format!("{ON_HOST_CLUSTER_PARENT}p");
        nl.add_veth(ON_HOST_CLUSTER_PARENT, &peer, None, None, None)
            .map_err(nk(ON_HOST_CLUSTER_PARENT))?;
        for end in [ON_HOST_CLUSTER_PARENT, peer.as_str()] {
            // As for the node's uplinks (`wire`): without DAD, and waited for below, the
            // link-local addresses and their routes are there before the trial's first look,
            // not in the middle of its before/after.
            let no_dad = format!("net/ipv6/conf/{end}/accept_dad");
            let _ = sb.pod.run(|| netkit::sysctl::write(&no_dad, "0"));
            let link = nl.link(end).map_err(nk(ON_HOST_CLUSTER_PARENT))?;
            nl.set_up(link.index).map_err(nk(ON_HOST_CLUSTER_PARENT))?;
        }
        settle_link_local(&nl, 2);
        Ok(sb)
    }

    fn wire(&self, lan_ns: &NetNs, masters: &[String]) -> Result<(), Error> {
        for ns in [&self.node, lan_ns, &self.pod] {
            let nl = Netlink::in_ns(ns).map_err(nk("netlink"))?;
            let lo = nl.link("lo").map_err(nk("loopback"))?;
            nl.set_up(lo.index).map_err(nk("loopback"))?;
        }
        let lan = Netlink::in_ns(lan_ns).map_err(nk("lan"))?;
        lan.add_bridge(LAN_BRIDGE, &BridgeOpts::default())
            .map_err(nk("lan bridge"))?;
        let bridge = lan.link(LAN_BRIDGE).map_err(nk("lan bridge"))?;
        lan.add_addr(bridge.index, net(LAN_GATEWAY)?, AddrOpts::default())
            .map_err(nk("lan bridge"))?;
        lan.set_up(bridge.index).map_err(nk("lan bridge"))?;
        let node = Netlink::in_ns(&self.node).map_err(nk("node"))?;
        let mut names: Vec<&str> = vec![UPLINK];
        names.extend(masters.iter().map(String::as_str).filter(|m| *m != UPLINK));
        for (i, master) in names.iter().enumerate() {
            let peer = format!("to-node{i}");
            node.add_veth(master, &peer, Some(lan_ns), None, None)
                .map_err(nk(master))?;
            // Without DAD the link-local address (and its local route) is there when the
            // link comes up, not a second later, in the middle of the trial's before/after.
            let no_dad = format!("net/ipv6/conf/{master}/accept_dad");
            let _ = self.node.run(|| netkit::sysctl::write(&no_dad, "0"));
            let link = node.link(master).map_err(nk(master))?;
            node.set_up(link.index).map_err(nk(master))?;
            let p = lan.link(&peer).map_err(nk(master))?;
            lan.set_master(p.index, Some(bridge.index))
                .map_err(nk(master))?;
            lan.set_up(p.index).map_err(nk(master))?;
        }
        let uplink = node.link(UPLINK).map_err(nk(UPLINK))?;
        node.add_addr(uplink.index, net(NODE_UPLINK_ADDR)?, AddrOpts::default())
            .map_err(nk(UPLINK))?;
        let gateway = net(LAN_GATEWAY)?.addr();
        node.add_route(&Route::new(net("0.0.0.0/0")?).via(gateway).dev(uplink.index))
            .map_err(nk("node default route"))?;
        settle_link_local(&node, names.len());
        Ok(())
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.dir.join("bin")
    }

    pub fn multus_dir(&self) -> PathBuf {
        self.dir.join("multus")
    }

    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.join("ipam")
    }

    /// Puts `addr` on the lan bridge so something answers there; `false` when it already is.
    pub fn lan_peer(&self, addr: IpNet) -> Result<bool, Error> {
        let Some(lan_ns) = &self.lan else {
            return Ok(false);
        };
        let lan = Netlink::in_ns(lan_ns).map_err(nk("lan"))?;
        let bridge = lan.link(LAN_BRIDGE).map_err(nk("lan bridge"))?;
        let present = lan
            .addrs(Some(bridge.index), None)
            .map_err(nk("lan bridge"))?
            .iter()
            .any(|a| a.net.addr() == addr.addr());
        if !present {
            let opts = AddrOpts {
                nodad: true,
                ..AddrOpts::default()
            };
            lan.add_addr(bridge.index, addr, opts)
                .map_err(nk("lan bridge"))?;
        }
        Ok(!present)
    }

    /// Whether the node namespace holds `ip` on one of its links.
    pub fn node_has(&self, ip: IpAddr) -> Result<bool, Error> {
        let node = Netlink::in_ns(&self.node).map_err(nk("node"))?;
        Ok(node
            .addrs(None, None)
            .map_err(nk("node"))?
            .iter()
            .any(|a| a.net.addr() == ip))
    }

    /// An address the node holds in `net`'s subnet (a bridge's gateway address), if any.
    pub fn node_addr_in(&self, net: IpNet) -> Result<Option<IpAddr>, Error> {
        let node = Netlink::in_ns(&self.node).map_err(nk("node"))?;
        Ok(node
            .addrs(None, None)
            .map_err(nk("node"))?
            .iter()
            .map(|a| a.net.addr())
            .find(|ip| *ip != net.addr() && net.trunc().contains(ip)))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.keep {
            super::dhcp::stop(std::mem::take(&mut self.servers));
            remove(&self.name);
        }
    }
}

/// `/run/multus-try/<name>` with the multus cache, host-local's store and a plugin directory.
fn state_dir(name: &str, plugins_bin: &Path) -> Result<PathBuf, Error> {
    let dir = Path::new(STATE_ROOT).join(name);
    for sub in ["multus", "ipam", "bin"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| Error::Sandbox(format!("creating {}: {e}", dir.display())))?;
    }
    for plugin in PLUGINS {
        std::os::unix::fs::symlink(plugins_bin, dir.join("bin").join(plugin))
            .map_err(|e| Error::Sandbox(format!("linking {plugin}: {e}")))?;
    }
    // whereabouts is in this binary, which carries the Kubernetes client.
    let multus =
        std::env::current_exe().map_err(|e| Error::Sandbox(format!("finding this binary: {e}")))?;
    std::os::unix::fs::symlink(multus, dir.join("bin").join("whereabouts"))
        .map_err(|e| Error::Sandbox(format!("linking whereabouts: {e}")))?;
    Ok(dir)
}

/// The node's path roots for the plugins this process runs: the defaults, and the sandboxes'
/// state, where their stores and the dhcp daemon's socket are. Written once per run.
pub fn path_roots_file() -> Result<PathBuf, Error> {
    let file = Path::new(STATE_ROOT).join(PATH_ROOTS_FILE);
    let mut roots: Vec<&str> = cni::path_roots::DEFAULT_ROOTS.to_vec();
    roots.push(STATE_ROOT);
    let text = serde_json::json!({ "roots": roots }).to_string();
    std::fs::create_dir_all(STATE_ROOT)
        .and_then(|()| cni::atomic_file::write(&file, text.as_bytes(), 0o644))
        .map_err(|e| Error::Sandbox(format!("writing {}: {e}", file.display())))?;
    Ok(file)
}

/// Where the whereabouts plugin keeps its node record in `multus try`.
pub fn whereabouts_records() -> PathBuf {
    Path::new(STATE_ROOT).join("whereabouts")
}

/// Removes a sandbox: the processes it recorded, its namespaces, its directory. Returns what
/// could not be removed.
pub fn remove(name: &str) -> Vec<String> {
    let mut failed = Vec::new();
    let dir = Path::new(STATE_ROOT).join(name);
    super::dhcp::stop_recorded(&dir);
    for role in ROLES {
        if let Err(e) = NetNs::delete_named(&format!("{name}-{role}")) {
            failed.push(format!("namespace {name}-{role}: {e}"));
        }
    }
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            failed.push(format!("{}: {e}", dir.display()));
        }
    }
    failed
}

/// Names of sandboxes on this machine: state directories and namespaces with our prefix.
pub fn existing() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: String| {
        if !names.contains(&n) {
            names.push(n);
        }
    };
    if let Ok(entries) = std::fs::read_dir(STATE_ROOT) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(PREFIX) {
                add(n);
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(netkit::netns::NETNS_RUN_DIR) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if !n.starts_with(PREFIX) {
                continue;
            }
            if let Some(base) = ROLES.iter().find_map(|r| n.strip_suffix(&format!("-{r}"))) {
                add(base.to_owned());
            }
        }
    }
    names.sort();
    names
}

/// A network config as the sandbox runs it: host-local keeps its reservations in the
/// sandbox, and dhcp talks to the sandbox's daemon. Returns the config unchanged when it is
/// not JSON (multus reports that).
/// Where a sandbox's networks keep their state.
pub struct Local {
    pub ipam_dir: PathBuf,
    pub dhcp_socket: PathBuf,
    /// whereabouts' flat file, when a network uses it.
    pub whereabouts_flat_file: Option<PathBuf>,
}

pub fn localize(config: &str, local: &Local) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(config) else {
        return config.to_owned();
    };
    let mut fix = |plugin: &mut Value| {
        let Some(ipam) = plugin.get_mut("ipam").and_then(Value::as_object_mut) else {
            return;
        };
        match ipam.get("type").and_then(Value::as_str) {
            Some("host-local") => {
                ipam.insert(
                    "dataDir".into(),
                    local.ipam_dir.display().to_string().into(),
                );
            }
            Some("dhcp") => {
                ipam.insert(
                    "daemonSocketPath".into(),
                    local.dhcp_socket.display().to_string().into(),
                );
            }
            Some("whereabouts") => {
                if let Some(flat_file) = &local.whereabouts_flat_file {
                    ipam.insert(
                        "configuration_path".into(),
                        flat_file.display().to_string().into(),
                    );
                }
            }
            _ => {}
        }
    };
    match value.get_mut("plugins").and_then(Value::as_array_mut) {
        Some(plugins) => plugins.iter_mut().for_each(&mut fix),
        None => fix(&mut value),
    }
    value.to_string()
}

/// The `master` interfaces the configs name (the node gets an uplink of each name).
pub fn masters(configs: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for config in configs {
        let Ok(value) = serde_json::from_str::<Value>(config) else {
            continue;
        };
        for p in plugin_configs(&value) {
            if let Some(m) = p.get("master").and_then(Value::as_str) {
                if !m.is_empty() && !out.iter().any(|o| o == m) {
                    out.push(m.to_owned());
                }
            }
        }
    }
    out
}

/// The plugin configs of a network: a conf itself, or the `plugins` of a conflist.
pub fn plugin_configs(network: &Value) -> Vec<&Value> {
    match network.get("plugins").and_then(Value::as_array) {
        Some(list) => list.iter().collect(),
        None => vec![network],
    }
}

/// Waits, up to a second, until `links` IPv6 link-local addresses in a namespace (the node, or
/// the pod with `--on-host`) are usable (the kernel adds their local routes then), so that
/// what the trial compares before ADD and after DEL does not include the kernel finishing them.
fn settle_link_local(node: &Netlink, links: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let usable = node
            .addrs(None, Some(netkit::Family::V6))
            .map_or(0, |addrs| {
                addrs
                    .iter()
                    .filter(|a| super::is_link_local(a.net.addr()) && !a.is_tentative())
                    .count()
            });
        if usable >= links {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
