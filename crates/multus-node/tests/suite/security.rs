//! What a tenant's NAD or pod annotation must never make the node do, through the real
//! binaries: run multus on the tenant's config, write through a planted symlink, take the
//! node's ports, capture the cluster network's traffic (docs/security.md).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::cluster::{Cluster, NETWORKS};
use serde_json::{json, Value};

/// What a tenant plants to make multus run its own program as root: a log file on the node, a
/// plugin directory of its own holding `tool`, and an inline delegate of that type. `tool`
/// leaves a mark when anything runs it.
struct Bait {
    victim: PathBuf,
    tenant_bin: PathBuf,
    mark: PathBuf,
    elsewhere: PathBuf,
}

impl Bait {
    fn plant(dir: &Path) -> Bait {
        use std::os::unix::fs::PermissionsExt;
        let victim = dir.join("victim");
        fs::write(&victim, "root:x:0:0\n").expect("write the victim");
        let tenant_bin = dir.join("tenant-bin");
        fs::create_dir(&tenant_bin).expect("make the tenant's directory");
        let mark = dir.join("tool-ran");
        let tool = tenant_bin.join("tool");
        fs::write(&tool, format!("#!/bin/sh\ntouch {}\n", mark.display())).expect("write tool");
        fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).expect("chmod tool");
        Bait {
            victim,
            tenant_bin,
            mark,
            elsewhere: dir.join("elsewhere"),
        }
    }

    /// multus's keys, as a tenant would set them in a NAD (at the top and in `ipam`).
    fn keys(&self) -> serde_json::Map<String, Value> {
        let keys = json!({
            "logFile": self.victim, "logLevel": "debug", "logOptions": {"maxSize": 1},
            "binDir": self.tenant_bin, "cniDir": self.elsewhere,
            "kubeconfig": "/etc/kubernetes/admin.conf",
            "delegates": [{"cniVersion": "1.0.0", "name": "x", "type": "tool"}],
        });
        match keys {
            Value::Object(keys) => keys,
            _ => unreachable!("a JSON object"),
        }
    }

    /// `config` with the bait's keys merged in, at the top and in its `ipam` section.
    fn baited(&self, mut config: Value) -> Value {
        if let Value::Object(o) = &mut config {
            o.extend(self.keys());
            if let Some(Value::Object(ipam)) = o.get_mut("ipam") {
                ipam.extend(self.keys());
            }
        }
        config
    }

    fn assert_untouched(&self, what: &str) {
        assert_eq!(
            fs::read_to_string(&self.victim).expect("read the victim"),
            "root:x:0:0\n",
            "{what}: victim"
        );
        assert!(!self.mark.exists(), "{what}: the tenant's program ran");
        assert!(!self.elsewhere.exists(), "{what}: cniDir was used");
        let backup = self.victim.with_file_name("victim.1.gz");
        assert!(!backup.exists(), "{what}: the log was rotated");
    }
}

/// The interface plugins a NAD may name, with the keys each needs besides its IPAM.
fn interface_plugins() -> Vec<(&'static str, Value)> {
    vec![
        ("bridge", json!({"bridge": "brt"})),
        ("macvlan", json!({"master": "m0"})),
        ("ipvlan", json!({"master": "m0"})),
        ("ptp", json!({})),
        ("vlan", json!({"master": "m0", "vlanId": 5})),
        ("host-device", json!({"device": "hd0"})),
        ("tap", json!({})),
    ]
}

/// A config of `plugin` with `keys`, whose IPAM is `ipam`.
fn with_ipam(plugin: &str, keys: &Value, ipam: &str) -> Value {
    let mut config =
        json!({"cniVersion": "1.0.0", "name": "evil", "type": plugin, "ipam": {"type": ipam}});
    if let (Value::Object(c), Value::Object(k)) = (&mut config, keys) {
        c.extend(k.clone());
    }
    config
}

#[test]
fn a_nad_cannot_run_multus_itself() {
    let c = Cluster::new(json!({}), json!({}));
    let bait = Bait::plant(c.sb.dir.path());
    // As on a node, multus sits in the plugin directory, under its names and another.
    for name in [
        "multus",
        "multus-shim",
        "multus-daemon",
        "renamed",
        "whereabouts",
    ] {
        std::os::unix::fs::symlink(common::multus_bin(), c.sb.plugins.path().join(name)).unwrap();
    }
    let mut cases: Vec<(String, Value, String)> = Vec::new();
    for plugin in ["multus", "multus-shim", "multus-daemon", "renamed"] {
        let config = json!({"cniVersion": "1.0.0", "name": "evil", "type": plugin,
            "clusterNetwork": "evil"});
        cases.push((
            format!("as-{plugin}"),
            config,
            format!("plugin 0 is \"{plugin}\""),
        ));
    }
    for (plugin, keys) in interface_plugins() {
        for ipam in ["multus", "multus-shim", "renamed"] {
            let config = with_ipam(plugin, &keys, ipam);
            let expect = format!("plugin 0's ipam is \"{ipam}\"");
            cases.push((format!("{plugin}-ipam-{ipam}"), config, expect));
        }
    }
    cases.push((
        "list-chained".into(),
        json!({"cniVersion": "1.0.0", "name": "evil", "plugins": [
            {"type": "static", "addresses": []}, {"type": "multus-shim"}]}),
        "plugin 1 is \"multus-shim\"".into(),
    ));
    cases.push((
        "list-ipam".into(),
        json!({"cniVersion": "1.0.0", "name": "evil", "plugins": [
            {"type": "bridge", "bridge": "brt", "ipam": {"type": "static", "addresses": []}},
            {"type": "tuning", "ipam": {"type": "multus"}}]}),
        "plugin 1's ipam is \"multus\"".into(),
    ));
    for (nad, config, expect) in &cases {
        c.nad("default", nad, bait.baited(config.clone()));
        c.set_pod(json!({NETWORKS: nad}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{nad}: {msg}");
        assert!(msg.contains(&format!("default/{nad}")), "{nad}: {msg}");
        assert!(msg.contains(expect), "{nad}: {msg}");
        assert!(msg.contains("cannot delegate to multus"), "{nad}: {msg}");
        c.assert_add_left_nothing(nad);
        c.cmd("DEL").ok();
        c.assert_add_left_nothing(&format!("{nad}, after DEL"));
    }
    bait.assert_untouched("every NAD");
}

/// The node's links the plugins below need: a master and a device to move (veths: this
/// kernel has no dummy links).
fn node_links(sb: &common::Sandbox) {
    for link in ["m0", "hd0"] {
        let peer = format!("{link}p");
        sb.node.veth_pair(link, &peer);
    }
}

#[test]
fn multus_run_as_a_plugins_ipam_or_chained_refuses_before_reading_its_config() {
    let sb = common::Sandbox::new();
    node_links(&sb);
    let bait = Bait::plant(sb.dir.path());
    for name in ["ptp", "tap", "ipvlan", "vlan"] {
        std::os::unix::fs::symlink(common::plugins_bin(), sb.plugins.path().join(name)).unwrap();
    }
    for name in ["multus", "multus-shim"] {
        std::os::unix::fs::symlink(common::multus_bin(), sb.plugins.path().join(name)).unwrap();
    }
    // The plugins this kernel runs as far as their IPAM call (ipvlan and vlan fail before it
    // here; through multus they are refused before they run, above).
    let runnable = ["bridge", "macvlan", "ptp", "host-device", "tap"];
    for (plugin, keys) in interface_plugins()
        .into_iter()
        .filter(|(p, _)| runnable.contains(p))
    {
        for ipam in ["multus", "multus-shim"] {
            let what = format!("{plugin} with ipam {ipam}");
            let config = bait.baited(with_ipam(plugin, &keys, ipam)).to_string();
            let out = sb.run_in_node(&sb.plugins.path().join(plugin), &sb.call("ADD", &config));
            let (_, msg) = common::cluster::cni_error(&out);
            assert!(
                msg.contains(&format!("{ipam} runs only on its own config")),
                "{what}: {msg}"
            );
            assert!(
                msg.contains(&format!("type is \"{plugin}\"")),
                "{what}: {msg}"
            );
            sb.assert_no_pod_links(&what);
            sb.run_in_node(&sb.plugins.path().join(plugin), &sb.call("DEL", &config))
                .ok();
            sb.assert_no_pod_links(&format!("{what}, after DEL"));
        }
    }
    assert!(
        sb.node_links().contains(&"hd0".to_owned()),
        "host-device gave its device back"
    );
    // Chained: multus as a list's later plugin gets the earlier ones' result.
    for multus in ["multus", "multus-shim"] {
        let mut config =
            bait.baited(json!({"cniVersion": "1.0.0", "name": "evil", "type": multus}));
        config["prevResult"] = json!({"cniVersion": "1.0.0", "ips": []});
        let config = config.to_string();
        let out = sb.run_in_node(&sb.plugins.path().join(multus), &sb.call("ADD", &config));
        let (code, msg) = common::cluster::cni_error(&out);
        assert_eq!(code, 7, "{multus}: {msg}");
        assert!(
            msg.contains("was run as a chained plugin"),
            "{multus}: {msg}"
        );
    }
    // Its daemon is never a plugin.
    let config =
        bait.baited(json!({"cniVersion": "1.0.0", "name": "evil", "type": "multus-daemon"}));
    std::os::unix::fs::symlink(
        common::multus_bin(),
        sb.plugins.path().join("multus-daemon"),
    )
    .unwrap();
    let out = sb.run_in_node(
        &sb.plugins.path().join("multus-daemon"),
        &sb.call("ADD", &config.to_string()),
    );
    let (code, msg) = common::cluster::cni_error(&out);
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("not a CNI plugin"), "{msg}");
    bait.assert_untouched("multus run by a plugin");
}

/// A bridge network with portmap chained, which declares the `portMappings` capability.
fn portmap_nad(c: &Cluster, name: &str, subnet: &str, portmap: Value) -> Value {
    let mut bridge = c.sb.bridge("", &c.bridge_name(), subnet, "1.0.0");
    if let Value::Object(b) = &mut bridge {
        b.remove("cniVersion");
        b.remove("name");
    }
    let mut portmap_conf = json!({"type": "portmap", "capabilities": {"portMappings": true}});
    if let (Value::Object(conf), Value::Object(extra)) = (&mut portmap_conf, portmap) {
        conf.extend(extra);
    }
    json!({"cniVersion": "1.0.0", "name": name, "plugins": [bridge, portmap_conf]})
}

#[test]
fn host_ports_are_the_node_admins() {
    let c = Cluster::new(json!({}), json!({}));
    std::os::unix::fs::symlink(common::plugins_bin(), c.sb.plugins.path().join("portmap")).unwrap();
    let firewall_before = c.sb.node.firewall();
    // A NAD that maps the kubelet's port for itself: runtimeConfig is the runtime's.
    let kubelet = json!({"runtimeConfig": {"portMappings": [
        {"hostPort": 10250, "containerPort": 80, "protocol": "tcp"}]}});
    c.nad(
        "default",
        "grab",
        portmap_nad(&c, "grab", "10.20.0.0/24", kubelet),
    );
    // Nor a previous result of its own choosing.
    let prev = json!({"prevResult": {"cniVersion": "1.0.0",
        "ips": [{"address": "169.254.169.254/32"}]}});
    c.nad(
        "default",
        "forged",
        portmap_nad(&c, "forged", "10.21.0.0/24", prev),
    );
    for (nad, key) in [("grab", "runtimeConfig"), ("forged", "prevResult")] {
        c.set_pod(json!({NETWORKS: nad}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{nad}: {msg}");
        assert!(
            msg.contains(&format!("plugin 1 sets \"{key}\"")),
            "{nad}: {msg}"
        );
        c.assert_add_left_nothing(nad);
        c.cmd("DEL").ok();
    }
    // A pod's annotation: the privileged ports and the ports the node listens on (its API
    // server's, here) are not the pod's to map.
    c.nad(
        "default",
        "web",
        portmap_nad(&c, "web", "10.22.0.0/24", json!({})),
    );
    let listening = c.server.addr().port();
    for (port, why) in [
        (
            22,
            "is not one a pod may map on this node (hostPortRanges: 1024-65535)",
        ),
        (listening, "is one the node listens on"),
    ] {
        c.set_pod(json!({NETWORKS: format!(
            r#"[{{"name": "web", "portMappings": [{{"hostPort": {port}, "containerPort": 80, "protocol": "tcp"}}]}}]"#
        )}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{port}: {msg}");
        assert!(
            msg.contains(&format!("host port {port}/tcp {why}")),
            "{port}: {msg}"
        );
        c.assert_add_left_nothing(&format!("host port {port}"));
        c.cmd("DEL").ok();
    }
    assert_eq!(
        c.sb.node.firewall(),
        firewall_before,
        "the node's firewall changed"
    );
    // A port in the admin's ranges that nothing on the node uses is mapped.
    c.set_pod(json!({NETWORKS:
        r#"[{"name": "web", "portMappings": [{"hostPort": 30080, "containerPort": 80, "protocol": "tcp"}]}]"#}));
    c.cmd("ADD").ok();
    let rules = c.sb.node.firewall();
    assert!(rules.contains("--dport 30080"), "{rules}");
    c.cmd("DEL").ok();
    assert!(!c.sb.node.firewall().contains("--dport 30080"));
}

#[test]
fn the_admin_sets_which_host_ports_a_pod_may_map() {
    let c = Cluster::new(json!({}), json!({"hostPortRanges": ["80", "8000-8099"]}));
    std::os::unix::fs::symlink(common::plugins_bin(), c.sb.plugins.path().join("portmap")).unwrap();
    c.nad(
        "default",
        "web",
        portmap_nad(&c, "web", "10.22.0.0/24", json!({})),
    );
    let annotation = |port: u16| {
        json!({NETWORKS: format!(
            r#"[{{"name": "web", "portMappings": [{{"hostPort": {port}, "containerPort": 80, "protocol": "tcp"}}]}}]"#
        )})
    };
    c.set_pod(annotation(30080));
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("(hostPortRanges: 80-80, 8000-8099)"), "{msg}");
    c.cmd("DEL").ok();
    for port in [80, 8080] {
        c.set_pod(annotation(port));
        c.cmd("ADD").ok();
        assert!(c.sb.node.firewall().contains(&format!("--dport {port}")));
        c.cmd("DEL").ok();
    }
}

/// The pod's routes through `dev`, as `dst [via gw]`.
fn pod_routes(sb: &common::Sandbox, dev: &str) -> Vec<String> {
    let v = sb.pod.ip_json(&["-4", "route", "show", "dev", dev]);
    v.as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let dst = r["dst"].as_str().unwrap_or_default();
            match r["gateway"].as_str() {
                Some(gw) => format!("{dst} via {gw}"),
                None => dst.to_owned(),
            }
        })
        .collect()
}

#[test]
fn a_dhcp_servers_routes_into_the_cluster_are_dropped() {
    // The cluster network is 10.88.0.0/24 (eth0's subnet); the admin adds the service CIDR.
    let c = Cluster::new(json!({}), json!({"clusterCIDRs": ["10.96.0.0/12"]}));
    std::os::unix::fs::symlink(common::plugins_bin(), c.sb.plugins.path().join("dhcp")).unwrap();
    let node = &c.sb.node;
    node.ip(&["link", "add", "lan0", "type", "bridge"]);
    node.ip(&["addr", "add", "192.168.97.1/24", "dev", "lan0"]);
    node.ip(&["link", "set", "lan0", "up"]);
    let dir = c.sb.dir.path().join("dhcp");
    fs::create_dir(&dir).unwrap();
    // A stranger's server on the LAN: the cluster's pod and service networks via its gateway.
    let server = testkit::dhcp::dnsmasq(
        node,
        "lan0",
        &dir,
        &[
            "--dhcp-range=192.168.97.100,192.168.97.199,255.255.255.0,1h",
            "--dhcp-option=option:classless-static-route,10.88.0.0/16,192.168.97.254,10.96.0.0/12,192.168.97.254,192.0.2.0/24,192.168.97.254",
        ],
    );
    let socket = dir.join("dhcp.sock");
    let daemon = testkit::dhcp::DhcpDaemon::start(
        node,
        &common::plugins_bin(),
        &[
            "dhcp".into(),
            "daemon".into(),
            "-socketpath".into(),
            socket.display().to_string(),
            "-statedir".into(),
            dir.join("leases.d").display().to_string(),
        ],
        &socket,
        &dir.join("daemon.log"),
    );
    c.nad(
        "default",
        "lan",
        json!({"cniVersion": "1.0.0", "name": "lan", "type": "bridge", "bridge": "lan0",
               "ipam": {"type": "dhcp", "daemonSocketPath": socket}}),
    );
    c.set_pod(json!({NETWORKS: "lan"}));
    c.cmd("ADD").ok();
    let routes = pod_routes(&c.sb, "net1");
    assert!(
        routes.contains(&"192.0.2.0/24 via 192.168.97.254".to_owned()),
        "{routes:?}"
    );
    for cluster in ["10.88.0.0/16", "10.96.0.0/12"] {
        assert!(
            !routes.iter().any(|r| r.starts_with(cluster)),
            "{cluster}: {routes:?}"
        );
    }
    // The pod's cluster traffic still leaves through eth0.
    let eth0 = pod_routes(&c.sb, "eth0");
    assert!(
        eth0.iter().any(|r| r.starts_with("10.88.0.0/24")),
        "{eth0:?}"
    );
    let dropped = c.events("SecondaryRouteDropped");
    assert_eq!(dropped.len(), 2, "{dropped:?}");
    assert!(dropped[0].contains("net1 from default/lan: its route to 10.88.0.0/16 via 192.168.97.254 was removed: it overlaps the cluster's network 10.88.0.0/24"), "{dropped:?}");
    assert!(
        dropped[1].contains("10.96.0.0/12 via 192.168.97.254"),
        "{dropped:?}"
    );
    let status = c.network_status().unwrap();
    assert!(!status.to_string().contains("10.96.0.0"), "{status}");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
    drop(daemon);
    server.terminate();
}

#[test]
fn a_secondary_network_cannot_join_the_cluster_network_or_take_its_addresses() {
    let c = Cluster::new(json!({}), json!({}));
    // The node's uplink, holding the node's address on its LAN.
    c.sb.node.ip(&["link", "add", "up0", "type", "bridge"]);
    c.sb.node
        .ip(&["addr", "add", "192.168.50.10/24", "dev", "up0"]);
    c.sb.node.ip(&["link", "set", "up0", "up"]);
    let static_ips = |name: &str, keys: Value| {
        let mut conf = json!({"cniVersion": "1.0.0", "name": name,
            "capabilities": {"ips": true}, "ipam": {"type": "static"}});
        conf.as_object_mut()
            .unwrap()
            .extend(keys.as_object().unwrap().clone());
        conf
    };
    // On the cluster network's own bridge, with another pod's cluster address.
    c.nad(
        "default",
        "onbridge",
        static_ips("onbridge", json!({"type": "bridge", "bridge": "cni0"})),
    );
    // On a bridge of its own, with an address inside the cluster's network.
    c.nad(
        "default",
        "inside",
        static_ips("inside", json!({"type": "bridge", "bridge": "brs"})),
    );
    // A macvlan on the node's uplink, with the node's own address.
    c.nad(
        "default",
        "uplink",
        static_ips("uplink", json!({"type": "macvlan", "master": "up0"})),
    );
    for (nad, ip, why) in [
        (
            "onbridge",
            "10.88.0.2/24",
            "it attaches to cni0, an interface of the cluster network",
        ),
        (
            "inside",
            "10.88.0.77/24",
            "address 10.88.0.77 is in the cluster's network 10.88.0.0/24",
        ),
        (
            "uplink",
            "192.168.50.10/24",
            "address 192.168.50.10 is an address of the node",
        ),
    ] {
        c.set_pod(json!({NETWORKS: format!(r#"[{{"name": "{nad}", "ips": ["{ip}"]}}]"#)}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{nad}: {msg}");
        assert!(msg.contains(why), "{nad}: {msg}");
        c.assert_add_left_nothing(nad);
        c.cmd("DEL").ok();
        c.assert_add_left_nothing(&format!("{nad}, after DEL"));
    }
    // The node's address stays the node's alone.
    let addrs = c.sb.node.ip_json(&["-4", "addr", "show", "dev", "up0"]);
    assert_eq!(addrs[0]["addr_info"][0]["local"], "192.168.50.10");
}

#[test]
fn the_admin_may_allow_what_a_tenant_may_not_ask() {
    let c = Cluster::new(
        json!({}),
        json!({"allowClusterAddresses": true, "allowClusterInterfaces": true}),
    );
    c.nad(
        "default",
        "onbridge",
        json!({"cniVersion": "1.0.0", "name": "onbridge", "type": "bridge", "bridge": "cni0",
               "capabilities": {"ips": true}, "ipam": {"type": "static"}}),
    );
    c.set_pod(json!({NETWORKS: r#"[{"name": "onbridge", "ips": ["10.88.0.77/24"]}]"#}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_addrs("net1"), ["10.88.0.77"]);
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn a_pod_selects_at_most_32_networks_and_more_are_refused_before_any_read() {
    let c = Cluster::new(json!({}), json!({}));
    let names: Vec<String> = (0..33).map(|i| format!("n{i}")).collect();
    c.set_pod(json!({NETWORKS: names.join(",")}));
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("selects 33 networks: a pod may have at most 32"),
        "{msg}"
    );
    let nad_reads = c
        .server
        .requests()
        .iter()
        .filter(|r| r.path.contains("network-attachment-definitions"))
        .count();
    assert_eq!(nad_reads, 0, "NADs were read for a refused annotation");
    c.cmd("DEL").ok();
}

#[test]
fn a_pods_mac_is_neither_multicast_nor_the_nodes() {
    let c = Cluster::new(json!({}), json!({}));
    c.sb.node.ip(&["link", "add", "up0", "type", "bridge"]);
    let node_mac = c.sb.node.ip_json(&["link", "show", "up0"])[0]["address"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut conf =
        c.sb.bridge("macnet", &c.bridge_name(), "10.24.0.0/24", "1.0.0");
    conf["capabilities"] = json!({"mac": true});
    c.nad("default", "macnet", conf);
    for (mac, why) in [
        ("01:00:5e:00:00:01", "is a multicast address"),
        (
            node_mac.as_str(),
            "is the MAC of one of the node's interfaces",
        ),
    ] {
        c.set_pod(json!({NETWORKS: format!(r#"[{{"name": "macnet", "mac": "{mac}"}}]"#)}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{mac}: {msg}");
        assert!(msg.contains(why), "{mac}: {msg}");
        c.assert_add_left_nothing(mac);
        c.cmd("DEL").ok();
    }
    c.set_pod(json!({NETWORKS: r#"[{"name": "macnet", "mac": "02:42:00:00:00:07"}]"#}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.mac("net1"), "02:42:00:00:00:07");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

/// `admissionPolicy`: the admission webhook's policy, applied at ADD to what the pod's
/// annotations bring, the default-network annotation's NAD included; refused with code 7, a
/// NetworkRefused event, and nothing left. An unreadable policy refuses too.
#[test]
fn the_admission_policy_is_applied_at_add() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "deniedSubnets: [10.77.0.0/16]\ncrossNamespaceFrom: []\n",
    )
    .unwrap();
    let c = Cluster::new(json!({}), json!({"admissionPolicy": policy}));
    c.bridge_nad("default", "denied", "10.77.1.0/24");
    c.bridge_nad("default", "fine", "10.78.1.0/24");
    c.bridge_nad("other", "elsewhere", "10.79.1.0/24");
    for (annotations, network, ifname, why) in [
        (
            json!({NETWORKS: "denied"}),
            "default/denied",
            "net1",
            "[reserved-overlap]",
        ),
        (
            json!({NETWORKS: "other/elsewhere"}),
            "other/elsewhere",
            "net1",
            "[policy-cross-namespace]",
        ),
        (
            json!({"v1.multus-cni.io/default-network": "default/denied"}),
            "default/denied",
            "eth0",
            "[reserved-overlap]",
        ),
    ] {
        c.set_pod(annotations);
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{msg}");
        let said = format!(
            "network {network} on interface {ifname}: refused by the admission policy {}",
            policy.display()
        );
        assert!(msg.contains(&said) && msg.contains(why), "{msg}");
        assert!(c.events("NetworkRefused").iter().any(|e| e.contains(&said)));
        c.assert_add_left_nothing(network);
        c.cmd("DEL").ok();
    }
    c.set_pod(json!({NETWORKS: "fine"}));
    c.cmd("ADD").ok();
    c.cmd("DEL").ok();
    std::fs::write(&policy, "allowedType: []\n").unwrap();
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("allowedType"), "{msg}");
    c.cmd("DEL").ok();
}
