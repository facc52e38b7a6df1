//! Shared by the plugin tests: a sandbox per plugin run (node and pod namespaces, a host-local
//! data directory), calling the plugins as a runtime does, and reading kernel state back in a
//! form that can be compared between implementations.
use std::ops::Deref;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use testkit::{CniCall, CniOutput, Netns, PluginDir};

pub const CONTAINER_ID: &str = "c0ffee";

/// Which implementation a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Ours,
    /// The current reference release, built by the test support (`testkit::reference_dir`).
    Reference,
    /// Debian's packaged reference (1.1.1, from 2022), which older nodes still run: the second
    /// peer, where it differs from the current one.
    Debian,
}

/// `CNI_PATH` directories for both implementations.
pub struct Plugins {
    ours: PluginDir,
}

impl Plugins {
    pub fn new() -> Plugins {
        let bin = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
        Plugins {
            ours: PluginDir::new(
                bin,
                &[
                    "bridge",
                    "macvlan",
                    "ipvlan",
                    "host-local",
                    "static",
                    "loopback",
                    "host-device",
                    "tuning",
                    "vlan",
                    "dummy",
                    "ptp",
                    "tap",
                    "sbr",
                    "vrf",
                    "bandwidth",
                    "portmap",
                    "firewall",
                ],
            ),
        }
    }

    pub fn dir(&self, side: Side) -> PathBuf {
        match side {
            Side::Ours => self.ours.path().to_path_buf(),
            Side::Reference => testkit::reference_dir(),
            Side::Debian => PathBuf::from("/usr/lib/cni"),
        }
    }
}

/// testkit's sandbox (node, pod, scratch directory) with one implementation's plugins as
/// `CNI_PATH`; the scratch directory is host-local's data directory.
pub struct Sandbox {
    base: testkit::Sandbox,
}

impl Deref for Sandbox {
    type Target = testkit::Sandbox;

    fn deref(&self) -> &testkit::Sandbox {
        &self.base
    }
}

impl Sandbox {
    pub fn new(plugins: &Plugins, side: Side) -> Sandbox {
        Sandbox {
            base: testkit::Sandbox::new(&plugins.dir(side), CONTAINER_ID),
        }
    }

    /// A call of a plugin for the pod, `DATADIR` in `conf` replaced.
    pub fn call(&self, command: &str, conf: &str) -> CniCall {
        let conf = conf.replace("DATADIR", &self.dir.path().display().to_string());
        self.base.call(command, &conf)
    }

    /// Runs the plugin the call's config names in `type`, in the node namespace.
    pub fn run(&self, call: &CniCall) -> CniOutput {
        let conf: Value = serde_json::from_str(&call.stdin).unwrap_or(Value::Null);
        let plugin = conf["type"].as_str().unwrap_or("bridge");
        self.run_in_node(&self.cni_path.join(plugin), call)
    }

    pub fn add(&self, conf: &str) -> CniOutput {
        self.run(&self.call("ADD", conf))
    }

    pub fn del(&self, conf: &str) -> CniOutput {
        self.run(&self.call("DEL", conf))
    }

    /// Reservation files (named by an IP address) under the data directory.
    pub fn reservations(&self) -> Vec<String> {
        testkit::reservation_files(self.dir.path())
    }

    /// The node's masquerade and spoof-check rules (see [`Netns::firewall`]).
    /// nftables tables with nothing in them are left out (the reference's iptables-nft makes
    /// an empty `ip6 nat` just by looking for rules to delete), and so are packet counters,
    /// which traffic of the moment moves; the tables are sorted, as the reference's firewall
    /// plugin fills the two families in random order.
    pub fn firewall(&self) -> String {
        let mut out = String::new();
        let mut tables: Vec<String> = Vec::new();
        let text = self.node.firewall();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if !line.starts_with("table ") {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            let mut table = format!("{line}\n");
            for inner in lines.by_ref() {
                table.push_str(&without_counters(inner));
                table.push('\n');
                if inner == "}" {
                    break;
                }
            }
            if table.lines().count() > 2 {
                tables.push(table);
            }
        }
        tables.sort();
        out.extend(tables);
        out
    }

    /// `bridge -j vlan show` in the node: port name to sorted (vid, pvid, untagged).
    pub fn vlans(&self) -> Value {
        let o = self
            .node
            .command("bridge")
            .args(["-j", "vlan", "show"])
            .output()
            .expect("bridge vlan show");
        let all: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        let mut ports = Vec::new();
        for port in all.as_array().into_iter().flatten() {
            let name = port["ifname"].as_str().unwrap_or_default();
            let vlans: Vec<Value> = port["vlans"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| {
                    let flags = v["flags"].as_array().cloned().unwrap_or_default();
                    let has = |f: &str| flags.iter().any(|x| x == f);
                    json!([v["vlan"], v["vlanEnd"], has("PVID"), has("Egress Untagged")])
                })
                .collect();
            ports.push(json!([veth_alias(name), vlans]));
        }
        sort_values(&mut ports);
        Value::Array(ports)
    }

    /// The link `name` in the node, with `ip -d` details.
    pub fn node_link(&self, name: &str) -> Value {
        self.node.ip_json(&["-d", "link", "show", "dev", name])[0].clone()
    }

    /// Kernel state that both implementations should leave the same, with random names and
    /// MACs taken out.
    pub fn snapshot(&self) -> Value {
        let mut node_links = Vec::new();
        for l in self
            .node
            .ip_json(&["-d", "addr", "show"])
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = l["ifname"].as_str().unwrap_or_default();
            if name == "lo" {
                continue;
            }
            let slave = &l["linkinfo"]["info_slave_data"];
            node_links.push(json!({
                "name": veth_alias(name),
                "kind": l["linkinfo"]["info_kind"],
                "mtu": l["mtu"],
                "up": flags_has(l, "UP"),
                "promisc": l["promiscuity"].as_u64().unwrap_or(0) > 0,
                "txqlen": l["txqlen"],
                "master": l["master"],
                "hairpin": slave["hairpin"],
                "isolated": slave["isolated"],
                "vlan_filtering": l["linkinfo"]["info_data"]["vlan_filtering"],
                "addrs": addrs(l),
                "tc": tc_state(&self.node, name),
            }));
        }
        sort_values(&mut node_links);
        let pod_links: Vec<Value> = self
            .pod
            .ip_json(&["-d", "addr", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["ifname"] != "lo")
            .map(|l| {
                json!({
                    "name": l["ifname"],
                    "kind": l["linkinfo"]["info_kind"],
                    "mode": l["linkinfo"]["info_data"]["mode"],
                    "master": l["master"],
                    "vrf_table": l["linkinfo"]["info_data"]["table"],
                    "vlan": l["linkinfo"]["info_data"]["id"],
                    "vlan_protocol": l["linkinfo"]["info_data"]["protocol"],
                    "vlan_flags": l["linkinfo"]["info_data"]["flags"],
                    "mtu": l["mtu"],
                    "up": flags_has(l, "UP"),
                    "promisc": l["promiscuity"].as_u64().unwrap_or(0) > 0,
                    "allmulti": flags_has(l, "ALLMULTI"),
                    "txqlen": l["txqlen"],
                    "addrs": addrs(l),
                })
            })
            .collect();
        let sysctl = |key: &str| {
            let o = self
                .node
                .command("sysctl")
                .args(["-n", key])
                .output()
                .expect("sysctl");
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        };
        let pod_lo = self
            .pod
            .ip_json(&["addr", "show", "dev", "lo"])
            .as_array()
            .and_then(|links| links.first())
            .map(|l| json!({ "up": flags_has(l, "UP"), "addrs": addrs(l) }))
            .unwrap_or(Value::Null);
        let pod_sysctl = |key: &str| {
            let o = self
                .pod
                .command("sysctl")
                .args(["-n", key])
                .output()
                .expect("sysctl");
            let value = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            json!(if o.status.success() {
                Some(value)
            } else {
                None
            })
        };
        let pod_sysctls = json!({
            "eth0.arp_filter": pod_sysctl("net.ipv4.conf.eth0.arp_filter"),
            "eth0.accept_local": pod_sysctl("net.ipv4.conf.eth0.accept_local"),
            "somaxconn": pod_sysctl("net.core.somaxconn"),
        });
        json!({
            "node_links": node_links,
            "pod_links": pod_links,
            "pod_lo": pod_lo,
            "pod_sysctls": pod_sysctls,
            "pod_routes": routes(&self.pod),
            "node_routes": routes(&self.node),
            "pod_rules": rules(&self.pod),
            "vlans": self.vlans(),
            "ip_forward": sysctl("net.ipv4.ip_forward"),
            // Of the links with fixed names: a random veth may be going as this is read.
            "route_localnet": self
                .node_links()
                .iter()
                .filter(|l| veth_alias(l) != "veth*")
                .map(|l| (l.clone(), sysctl(&format!("net.ipv4.conf.{l}.route_localnet"))))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "ip6_forward": sysctl("net.ipv6.conf.all.forwarding"),
        })
    }
}

/// `counter packets N bytes M` as `counter`.
fn without_counters(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        out.push(words[i]);
        if words[i] == "counter"
            && words.get(i + 1) == Some(&"packets")
            && words.get(i + 3) == Some(&"bytes")
        {
            i += 5;
        } else {
            i += 1;
        }
    }
    out.join(" ")
}

/// The qdiscs of `dev` (kind, handle, where, and a tbf's rate, burst and latency) and the
/// first action of each filter on its ingress, as `tc -j` lists them.
fn tc_state(ns: &Netns, dev: &str) -> Value {
    let tc = |args: &[&str]| -> Value {
        let o = ns.command("tc").args(args).output().expect("run tc");
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    };
    let qdiscs: Vec<Value> = tc(&["-j", "qdisc", "show", "dev", dev])
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            json!({
                "kind": q["kind"],
                "handle": q["handle"],
                "root": q["root"],
                "parent": q["parent"],
                "rate": q["options"]["rate"],
                "burst": q["options"]["burst"],
                "lat": q["options"]["lat"],
            })
        })
        .collect();
    let filters: Vec<Value> = tc(&["-j", "filter", "show", "dev", dev, "ingress"])
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["options"]["flowid"].is_string())
        .map(|f| {
            let action = &f["options"]["actions"][0];
            json!({
                "kind": f["kind"],
                "protocol": f["protocol"],
                "pref": f["pref"],
                "flowid": f["options"]["flowid"],
                "action": [action["kind"], action["mirred_action"], action["direction"], action["to_dev"]],
            })
        })
        .collect();
    json!({ "qdiscs": qdiscs, "ingress_filters": filters })
}

/// Random host veth names become `veth*`.
fn veth_alias(name: &str) -> String {
    if name.starts_with("veth") && name.len() == 12 {
        "veth*".into()
    } else {
        name.to_owned()
    }
}

fn flags_has(link: &Value, flag: &str) -> bool {
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

/// Global addresses as `addr/len`, without link-local ones (derived from random MACs) and
/// without the `nodad` flag (ours sets it, see docs/compatibility.md).
fn addrs(link: &Value) -> Vec<String> {
    let mut out: Vec<String> = link["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["scope"] != "link")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    out.sort();
    out
}

/// IPv4 and IPv6 routes of all tables, without the kernel's link-local and multicast ones.
pub fn routes(ns: &Netns) -> Vec<Value> {
    let mut out = Vec::new();
    for family in ["-4", "-6"] {
        for r in ns
            .ip_json(&[family, "route", "show", "table", "all"])
            .as_array()
            .into_iter()
            .flatten()
        {
            let dst = r["dst"].as_str().unwrap_or_default();
            if dst.starts_with("fe80") || dst.starts_with("ff00") || r["table"] == "local" {
                continue;
            }
            out.push(json!({
                "dst": dst,
                "gateway": r["gateway"],
                "dev": veth_alias(r["dev"].as_str().unwrap_or_default()),
                "prefsrc": r["prefsrc"],
                "nexthops": r["nexthops"],
                "scope": r["scope"],
                "protocol": r["protocol"],
                "metric": r["metric"],
                "table": r["table"],
                "mtu": r["metrics"],
            }));
        }
    }
    sort_values(&mut out);
    out
}

/// The policy routing rules of both families, in the kernel's order.
pub fn rules(ns: &Netns) -> Vec<Value> {
    let mut out = Vec::new();
    for family in ["-4", "-6"] {
        for r in ns
            .ip_json(&[family, "rule", "show"])
            .as_array()
            .into_iter()
            .flatten()
        {
            out.push(json!({
                "priority": r["priority"],
                "src": r["src"],
                "srclen": r["srclen"],
                "table": r["table"],
            }));
        }
    }
    out
}

fn sort_values(v: &mut [Value]) {
    v.sort_by_key(|x| x.to_string());
}

/// A result with MACs, veth names, the sandbox path and an empty `dns` taken out.
pub fn normalize_result(mut v: Value) -> Value {
    if v["dns"] == json!({}) {
        if let Some(o) = v.as_object_mut() {
            o.remove("dns");
        }
    }
    if let Some(ifaces) = v["interfaces"].as_array_mut() {
        for i in ifaces {
            if let Some(o) = i.as_object_mut() {
                o.remove("mac");
                if o.contains_key("sandbox") {
                    o.insert("sandbox".into(), "<netns>".into());
                }
                let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
                let alias = veth_alias(name);
                o.insert("name".into(), alias.into());
            }
        }
    }
    v
}

/// Whether `ip` can run each of `steps` in a fresh namespace: a kernel feature probe. Under
/// `cargo xtask vm-test` (MULTUS_RS_VM=1) the kernel must have `feature`, so that the cases
/// that need it cannot be skipped there.
fn kernel_can(feature: &str, steps: &[&[&str]]) -> bool {
    let ns = Netns::new("probe");
    for step in steps {
        let out = ns.try_ip(step);
        if !out.status.success() {
            assert!(
                std::env::var_os("MULTUS_RS_VM").is_none(),
                "MULTUS_RS_VM is set but this kernel has no {feature}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return false;
        }
    }
    true
}

/// Whether this kernel can make VLAN-filtering bridges (CONFIG_BRIDGE_VLAN_FILTERING).
pub fn kernel_has_vlan_filtering() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        kernel_can(
            "VLAN-filtering bridge",
            &[&[
                "link",
                "add",
                "probe0",
                "type",
                "bridge",
                "vlan_filtering",
                "1",
            ]],
        )
    })
}

/// Whether this kernel can make ipvlan links (CONFIG_IPVLAN).
pub fn kernel_has_ipvlan() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        kernel_can(
            "ipvlan",
            &[
                &[
                    "link", "add", "probe0", "type", "veth", "peer", "name", "probe1",
                ],
                &["link", "add", "probe2", "link", "probe0", "type", "ipvlan"],
            ],
        )
    })
}

/// Whether this kernel can make 802.1Q vlan links (CONFIG_VLAN_8021Q).
pub fn kernel_has_vlan() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        kernel_can(
            "8021q",
            &[
                &[
                    "link", "add", "probe0", "type", "veth", "peer", "name", "probe1",
                ],
                &[
                    "link", "add", "probe2", "link", "probe0", "type", "vlan", "id", "5",
                ],
            ],
        )
    })
}

/// Whether this kernel has VRFs (CONFIG_NET_VRF).
pub fn kernel_has_vrf() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        kernel_can(
            "vrf",
            &[&["link", "add", "probe0", "type", "vrf", "table", "10"]],
        )
    })
}

/// Whether this kernel has dummy links (CONFIG_DUMMY).
pub fn kernel_has_dummy() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| kernel_can("dummy link", &[&["link", "add", "probe0", "type", "dummy"]]))
}

/// The pair a bridge or ptp leaves: `host` up in the node, `eth0` up in the pod.
pub fn veth_to_pod(sb: &Sandbox, host: &str) {
    sb.node.veth_to(host, &sb.pod, "eth0");
    sb.node.ip(&["link", "set", host, "up"]);
    sb.pod.ip(&["link", "set", "eth0", "up"]);
}

/// A peer namespace on the node's `up0` (the node 192.0.2.1, the peer 192.0.2.2), the node
/// forwarding; with `route_back`, the peer's default route goes through the node, without it
/// only masqueraded traffic gets an answer.
pub fn peer_on_up0(sb: &Sandbox, tag: &str, route_back: bool) -> Netns {
    let peer = Netns::new(tag);
    sb.node.veth_to("up0", &peer, "eth0");
    sb.node.ip(&["addr", "add", "192.0.2.1/24", "dev", "up0"]);
    sb.node.ip(&["link", "set", "up0", "up"]);
    sb.node.ip(&["link", "set", "lo", "up"]);
    peer.ip(&["addr", "add", "192.0.2.2/24", "dev", "eth0"]);
    peer.ip(&["link", "set", "eth0", "up"]);
    if route_back {
        peer.ip(&["route", "add", "default", "via", "192.0.2.1"]);
    }
    sb.node
        .command("sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"])
        .status()
        .expect("sysctl");
    peer
}

/// The pair bandwidth follows: `vethbw0` in the node, eth0 in the pod.
pub fn bw_pair(sb: &Sandbox) {
    veth_to_pod(sb, "vethbw0");
}

/// Gives the node namespace a master for macvlan/ipvlan: `up0`, a veth whose peer `up0p` is
/// up too (so the master has a carrier), with 192.0.2.1/24 and a default route via it.
pub fn veth_master(node: &Netns, mtu: u32) {
    node.ip(&[
        "link",
        "add",
        "up0",
        "mtu",
        &mtu.to_string(),
        "type",
        "veth",
        "peer",
        "name",
        "up0p",
    ]);
    node.ip(&["link", "set", "up0p", "up"]);
    uplink_addressing(node);
}

/// `up0` up, with 192.0.2.1/24 and the node's default route via it.
fn uplink_addressing(node: &Netns) {
    node.ip(&["link", "set", "up0", "up"]);
    node.ip(&["addr", "add", "192.0.2.1/24", "dev", "up0"]);
    node.ip(&[
        "route",
        "add",
        "default",
        "via",
        "192.0.2.254",
        "dev",
        "up0",
    ]);
}

/// Gives `pod` an eth0 as a cluster network leaves it: a veth (its peer `eth0p` stays in the
/// pod, up) with 10.88.0.5/16 and fd88::5/64 and the default routes of both families through it.
pub fn pod_eth0(pod: &Netns) {
    pod.veth_pair("eth0", "eth0p");
    pod.ip(&["addr", "add", "10.88.0.5/16", "dev", "eth0"]);
    pod.ip(&["-6", "addr", "add", "fd88::5/64", "dev", "eth0", "nodad"]);
    pod.ip(&["route", "add", "default", "via", "10.88.0.1", "dev", "eth0"]);
    pod.ip(&[
        "-6", "route", "add", "default", "via", "fd88::1", "dev", "eth0",
    ]);
}

/// Gives the node namespace a dummy master `up0` (the VM's kernel has dummy links), up, with
/// 192.0.2.1/24 and a default route via it.
pub fn dummy_master(node: &Netns) {
    assert!(kernel_has_dummy(), "this kernel has no dummy links");
    node.ip(&["link", "add", "up0", "type", "dummy"]);
    uplink_addressing(node);
}

/// macvlan's and ipvlan's sandbox: the node has the master `up0` with a default route, a veth
/// end with MTU 1500; with `dummy`, a dummy link where the kernel has them (the VM).
pub fn master_sandbox(plugins: &Plugins, dummy: bool) -> Sandbox {
    let sb = Sandbox::new(plugins, Side::Ours);
    if dummy && kernel_has_dummy() {
        dummy_master(&sb.node);
    } else {
        veth_master(&sb.node, 1500);
    }
    sb
}

/// `ip -d` details of `eth0` in `ns`.
pub fn eth0(ns: &Netns) -> Value {
    ns.ip_json(&["-d", "addr", "show", "dev", "eth0"])[0].clone()
}

/// `conf` with `result` as its prevResult, as a runtime passes it to CHECK.
pub fn with_prev(conf: &str, result: &Value) -> String {
    let mut v: Value = serde_json::from_str(conf).expect("config is JSON");
    v["prevResult"] = result.clone();
    v.to_string()
}

/// A second pod namespace, container `podb`, attached with `conf`; and its result.
pub fn second_pod(sb: &Sandbox, conf: &str) -> (Netns, Value) {
    let pod = Netns::new("podb");
    let mut call = sb.call("ADD", conf);
    call.netns = pod.path().display().to_string();
    call.container_id = "podb".into();
    let r = sb.run(&call).ok();
    (pod, r)
}

/// The pod has nothing but lo, and no reservation is left.
pub fn assert_pod_and_ipam_clean(sb: &Sandbox) {
    let pod = sb.pod_links();
    assert!(pod.is_empty(), "left in the pod: {pod:?}");
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
}

/// `conf` has no master and the node no default route: ADD has no interface to take, and
/// says so.
pub fn assert_no_master_needs_a_default_route(plugins: &Plugins, conf: &str) {
    let sb = Sandbox::new(plugins, Side::Ours);
    let out = sb.add(conf);
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(out.stdout.contains("no default route"), "{}", out.stdout);
}

/// Asserts a CNI error with `code` whose message contains `words`; `what` names the case.
pub fn assert_error(out: &CniOutput, code: u64, words: &str, what: &str) {
    assert_eq!(out.err_code(), code, "{what}: {out:?}");
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains(words), "{what}: want {words:?} in {msg}");
}

/// Pings `to` once from inside `from`; the ping output on failure.
pub fn ping(from: &Netns, to: &str) -> Result<(), String> {
    ping_with(from, &[], to)
}

/// The same, bound to the VRF device `vrf`.
pub fn ping_from_vrf(from: &Netns, vrf: &str, to: &str) -> Result<(), String> {
    ping_with(from, &["-I", vrf], to)
}

fn ping_with(from: &Netns, options: &[&str], to: &str) -> Result<(), String> {
    let out = from
        .command("ping")
        .args(["-c1", "-W2"])
        .args(options)
        .arg(to)
        .output()
        .expect("run ping");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ping {} {to}: {}{}",
            options.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A host-local IPAM block over `ranges` (JSON of the `ranges` array) and extra keys.
pub fn host_local(ranges: &str, extra: &str) -> String {
    format!(r#""ipam":{{"type":"host-local","dataDir":"DATADIR","ranges":{ranges}{extra}}}"#)
}

/// A bridge config: `body` is inserted after the common keys (start it with a comma).
pub fn bridge_conf(version: &str, body: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"sbs","type":"bridge","bridge":"sbs0"{body}}}"#)
}

/// A directory with nft and no iptables, to be a plugin's PATH: a node without iptables.
pub struct NftOnly(tempfile::TempDir);

impl NftOnly {
    pub fn new() -> NftOnly {
        let bin = tempfile::tempdir().expect("tempdir");
        let nft = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("nft is installed");
        std::os::unix::fs::symlink(nft, bin.path().join("nft")).expect("link nft");
        NftOnly(bin)
    }

    pub fn path(&self) -> String {
        self.0.path().display().to_string()
    }
}
