//! Network selection end to end: the real `multus` binary exec'd as a runtime does, reading
//! pods and NADs from the testkit Kubernetes API server over HTTPS and writing network-status
//! and events there; the delegates are the real `cni-plugins` binaries (bridge + host-local,
//! static), in the sandbox's node and pod namespaces.

use crate::common;

use common::cluster::{Cluster, DEFAULT_NETWORK, NETWORKS};
use common::CONTAINER_ID;
use serde_json::{json, Value};

#[test]
fn the_microshift_bridge_example_gets_exactly_this_network_status() {
    let c = Cluster::new(json!({NETWORKS: "bridge-conf"}), json!({}));
    c.bridge_nad("default", "bridge-conf", "10.10.0.0/24");
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0", "net1"]);
    assert_eq!(
        c.network_status().expect("network-status written"),
        json!([
            {"name": "cluster", "interface": "eth0", "ips": ["10.88.0.2"], "mac": c.sb.mac("eth0"),
             "default": true, "dns": {}},
            {"name": "default/bridge-conf", "interface": "net1", "ips": ["10.10.0.2"],
             "mac": c.sb.mac("net1"), "dns": {}}
        ])
    );
    assert_eq!(
        c.events("AddedInterface"),
        [
            "Add eth0 [10.88.0.2/24] from cluster",
            "Add net1 [10.10.0.2/24] from default/bridge-conf"
        ]
    );
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn both_annotation_forms_namespaces_and_interface_requests() {
    let c = Cluster::new(json!({}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("other", "b", "10.30.0.0/24");
    // Each form: the pod's interfaces, then (network, interface, address) in network-status
    // order. Indexes count every delegate (`a` second is net2); host-local hands out the
    // address after the last one it gave, so the second round gets .3.
    let forms = [
        (
            r#"[{"name":"a"},{"name":"b","namespace":"other","interface":"data0"}]"#,
            ["data0", "eth0", "net1"],
            [
                ("default/a", "net1", "10.20.0.2"),
                ("other/b", "data0", "10.30.0.2"),
            ],
        ),
        (
            "other/b@data1, a",
            ["data1", "eth0", "net2"],
            [
                ("other/b", "data1", "10.30.0.3"),
                ("default/a", "net2", "10.20.0.3"),
            ],
        ),
    ];
    for (annotation, links, networks) in forms {
        c.set_pod(json!({ NETWORKS: annotation }));
        c.cmd("ADD").ok();
        assert_eq!(c.sb.pod_links(), links, "{annotation}");
        let status = c.network_status().unwrap();
        for (i, (name, ifname, addr)) in networks.into_iter().enumerate() {
            let entry = &status[i + 1];
            assert_eq!(entry["name"], name, "{annotation}: {entry}");
            assert_eq!(entry["interface"], ifname, "{annotation}: {entry}");
            assert_eq!(entry["ips"], json!([addr]), "{annotation}: {entry}");
            assert_eq!(c.sb.pod_addrs(ifname), [addr], "{annotation}");
        }
        c.cmd("DEL").ok();
        c.sb.assert_clean(annotation);
    }
}

#[test]
fn an_empty_networks_annotation_selects_nothing() {
    let c = Cluster::new(json!({NETWORKS: ""}), json!({}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0"]);
    let status = c.network_status().unwrap();
    assert_eq!(status.as_array().unwrap().len(), 1, "{status}");
    assert_eq!(status[0]["name"], "cluster");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

/// A bridge NAD `fixed` with static IPAM that declares `caps`.
fn static_nad(c: &Cluster, caps: Value) {
    let conf = json!({"cniVersion": "1.0.0", "name": "fixed", "type": "bridge",
        "bridge": c.bridge_name(), "capabilities": caps,
        "ipam": {"type": "static"}});
    c.nad("default", "fixed", conf);
}

#[test]
fn ips_and_mac_requests_reach_a_delegate_that_declares_the_capabilities() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"fixed","ips":["192.168.50.7/24"],"mac":"02:11:22:33:44:55"}]"#}),
        json!({}),
    );
    static_nad(&c, json!({"ips": true, "mac": true}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_addrs("net1"), ["192.168.50.7"]);
    assert_eq!(c.sb.mac("net1"), "02:11:22:33:44:55");
    let status = c.network_status().unwrap();
    assert_eq!(status[1]["name"], "default/fixed");
    assert_eq!(status[1]["ips"], json!(["192.168.50.7"]));
    assert_eq!(status[1]["mac"], "02:11:22:33:44:55");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn ips_or_mac_that_nothing_receives_fail_before_anything_runs() {
    let c = Cluster::new(json!({}), json!({}));
    // mac without the capability; ips to a network with no IPAM, which no CNI_ARGS reaches.
    for (sel, capability, ipam) in [
        (
            r#"[{"name":"fixed","ips":["192.168.50.7/24"]}]"#,
            "ips",
            false,
        ),
        (
            r#"[{"name":"fixed","mac":"02:11:22:33:44:55"}]"#,
            "mac",
            true,
        ),
    ] {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "fixed", "type": "bridge",
            "bridge": c.bridge_name(), "capabilities": {"portMappings": true}});
        if ipam {
            conf["ipam"] = json!({"type": "static"});
        }
        c.nad("default", "fixed", conf);
        c.set_pod(json!({NETWORKS: sel}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{msg}");
        assert!(
            msg.starts_with("network default/fixed on interface net1:"),
            "{msg}"
        );
        assert!(msg.contains(&format!("\"{capability}\": true")), "{msg}");
        c.assert_add_left_nothing(capability);
    }
}

/// As upstream's own default-route case: `ips` with no `ips` capability reaches static IPAM
/// through CNI_ARGS `IP`.
#[test]
fn ips_without_the_capability_reach_static_ipam_through_cni_args() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"fixed","ips":["192.168.50.7/24"]}]"#}),
        json!({}),
    );
    static_nad(&c, json!({"portMappings": true}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_addrs("net1"), ["192.168.50.7"]);
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn a_missing_nad_fails_the_add_and_its_event_reaches_the_api() {
    let c = Cluster::new(json!({NETWORKS: "nope"}), json!({}));
    let (code, msg) = c.add_err();
    assert_eq!(code, 7);
    assert!(
        msg.contains("cannot find a network-attachment-definition (nope) in namespace (default)"),
        "{msg}"
    );
    let events = c.events("NoNetworkFound");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("nope"), "{events:?}");
    c.assert_add_left_nothing("missing NAD");
}

/// A DEL with no cache plans from the pod's annotation: a NAD that is gone is told once, as at
/// ADD, and the DEL still succeeds with what it can know.
#[test]
fn a_del_without_a_cache_tells_of_a_missing_nad_and_succeeds() {
    let c = Cluster::new(json!({NETWORKS: "nope"}), json!({}));
    c.cmd("DEL").ok();
    let events = c.events("NoNetworkFound");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("nope"), "{events:?}");
    c.sb.assert_clean("after DEL");
}

#[test]
fn an_empty_spec_nad_is_read_from_conf_dir() {
    let c = Cluster::new(json!({NETWORKS: "from-file"}), json!({}));
    let conf =
        c.sb.bridge("from-file", &c.bridge_name(), "10.40.0.0/24", "1.0.0");
    c.sb.write_conf("50-from-file.conf", &conf);
    c.nad("default", "from-file", Value::Null);
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_addrs("net1"), ["10.40.0.2"]);
    assert_eq!(c.network_status().unwrap()[1]["name"], "default/from-file");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn namespace_isolation_allows_own_and_global_namespaces_and_denies_others() {
    let c = Cluster::in_namespace(
        "tenant",
        json!({NETWORKS: "a,shared/b"}),
        json!({"namespaceIsolation": true, "globalNamespaces": "shared"}),
    );
    c.bridge_nad("tenant", "a", "10.20.0.0/24");
    c.bridge_nad("shared", "b", "10.30.0.0/24");
    c.bridge_nad("other", "b", "10.30.0.0/24");
    c.bridge_nad("tenant", "mine", "10.50.0.0/24");
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0", "net1", "net2"]);
    c.cmd("DEL").ok();
    c.sb.assert_clean("allowed");

    // Denied: another namespace, in the networks annotation and in the default-network one.
    for annotation in [NETWORKS, DEFAULT_NETWORK] {
        c.server.delete_pod("tenant", "web");
        c.set_pod(json!({annotation: "other/b"}));
        let (code, msg) = c.add_err();
        assert_eq!(code, 7, "{msg}");
        assert!(
            msg.starts_with("namespace isolation:")
                && msg.contains("\"tenant\"")
                && msg.contains("\"other\""),
            "{annotation}: {msg}"
        );
        c.assert_add_left_nothing(annotation);
    }

    // The pod's own namespace is fine for its default network.
    c.set_pod(json!({DEFAULT_NETWORK: "tenant/mine"}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0"]);
    assert_eq!(c.sb.pod_addrs("eth0"), ["10.50.0.2"]);
    let status = c.network_status().unwrap();
    assert_eq!(status[0]["name"], "tenant/mine");
    assert_eq!(status[0]["default"], true);
    c.cmd("DEL").ok();
    c.sb.assert_clean("own default network");
}

#[test]
fn default_networks_apply_outside_system_namespaces_only() {
    let mut c = Cluster::new(json!({}), json!({"defaultNetworks": ["always"]}));
    c.bridge_nad("kube-system", "always", "10.60.0.0/24");
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0", "net1"]);
    assert_eq!(c.sb.pod_addrs("net1"), ["10.60.0.2"]);
    // Named as upstream names a NAD: <namespace>/<name>.
    assert_eq!(c.network_status().unwrap()[1]["name"], "kube-system/always");
    assert_eq!(
        c.events("AddedInterface")[1],
        "Add net1 [10.60.0.2/24] from kube-system/always"
    );
    c.cmd("DEL").ok();
    c.sb.assert_clean("default");

    // In a system namespace: the cluster network alone, and no network-status.
    c.namespace = "kube-system".into();
    c.set_pod(json!({}));
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0"]);
    assert_eq!(c.network_status(), None);
    c.cmd("DEL").ok();
    c.sb.assert_clean("kube-system");
}

#[test]
fn default_route_moves_the_default_route_to_the_requested_network() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"gw","default-route":["10.20.0.1"]}]"#}),
        json!({}),
    );
    c.bridge_nad("default", "gw", "10.20.0.0/24");
    c.cmd("ADD").ok();
    assert_eq!(
        c.sb.pod_default_routes("-4"),
        [("net1".to_owned(), "10.20.0.1".to_owned())]
    );
    let status = c.network_status().unwrap();
    assert!(status[0].get("gateway").is_none(), "{status}");
    assert_eq!(status[1]["default-route"], json!(["10.20.0.1"]));
    assert_eq!(status[1]["gateway"], json!(["10.20.0.1"]));
    // The cluster network's cached result no longer has the default route.
    let cached: Value = serde_json::from_slice(
        &std::fs::read(
            c.sb.cni_dir()
                .join(format!("results/cluster-{CONTAINER_ID}-eth0")),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(cached["result"].get("routes").is_none(), "{cached}");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

/// The field report's static macvlan NAD: host-local with a default route and `"gateway": ""`,
/// dual-stack here, on a master in the node.
fn lan_nad(c: &Cluster) {
    c.sb.node.veth_pair("up0", "up0p");
    let conf = json!({"cniVersion": "1.1.0", "name": "lan", "type": "macvlan", "master": "up0",
        "ipam": {"type": "host-local", "dataDir": c.sb.ipam_dir(),
            "ranges": [[{"subnet": "10.10.20.0/24", "gateway": ""}], [{"subnet": "fd10:20::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}});
    c.nad("default", "lan", conf);
}

/// The cluster network's IPv6 default route, as a dual-stack cluster network leaves it.
fn cluster_ipv6_default(c: &Cluster) -> Value {
    let mut conf = c.sb.cluster("cluster", "cni0", "10.88.0.0/24", "1.0.0");
    conf["ipam"]["ranges"] = json!([[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd88::/64"}]]);
    conf["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]);
    conf["ipam"]
        .as_object_mut()
        .expect("an object")
        .remove("subnet");
    conf
}

#[test]
fn a_secondary_networks_default_route_stays_behind_the_cluster_networks() {
    let mut c = Cluster::new(json!({NETWORKS: "lan"}), json!({}));
    let mut conf: Value = serde_json::from_str(&c.conf).unwrap();
    conf["delegates"] = json!([cluster_ipv6_default(&c)]);
    c.conf = conf.to_string();
    lan_nad(&c);
    c.cmd("ADD").ok();
    // net1 attached with its default routes, one metric behind eth0's.
    assert_eq!(
        c.sb.pod_default_route_metrics("-4"),
        [
            "eth0 via 10.88.0.1 metric 0",
            "net1 via 10.10.20.1 metric 1"
        ]
    );
    assert_eq!(
        c.sb.pod_default_route_metrics("-6"),
        [
            "eth0 via fd88::1 metric 1024",
            "net1 via fd10:20::1 metric 1025"
        ]
    );
    let warnings = c.events("SecondaryDefaultRoute");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("net1 from default/lan: its default route via 10.10.20.1 got metric 1, behind the pod's default route on eth0;"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("\"default-route\""), "{warnings:?}");
    assert!(
        warnings[1].contains("via fd10:20::1 got metric 1025"),
        "{warnings:?}"
    );
    // What is cached, and so what CHECK and DEL see, matches the kernel.
    let cached: Value = serde_json::from_slice(
        &std::fs::read(
            c.sb.cni_dir()
                .join(format!("results/lan-{CONTAINER_ID}-net1")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        cached["result"]["routes"],
        json!([{"dst": "0.0.0.0/0", "priority": 1}, {"dst": "::/0", "priority": 1025}]),
        "{cached}"
    );
    c.cmd("CHECK").ok();
    c.cmd("DEL").ok();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn default_route_on_a_secondary_network_hands_it_the_pods_traffic() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"lan","default-route":["10.10.20.1"]}]"#}),
        json!({}),
    );
    lan_nad(&c);
    c.cmd("ADD").ok();
    assert_eq!(
        c.sb.pod_default_route_metrics("-4"),
        ["net1 via 10.10.20.1 metric 0"]
    );
    // No other IPv6 default: net1's stays as the plugin made it.
    assert_eq!(
        c.sb.pod_default_route_metrics("-6"),
        ["net1 via fd10:20::1 metric 1024"]
    );
    assert_eq!(c.events("SecondaryDefaultRoute"), Vec::<String>::new());
    c.cmd("DEL").ok();
    c.sb.assert_pod_clean("after DEL");
}

/// As upstream: when one network asks for `default-route`, the others lose their default
/// routes of that family; their other family stays.
#[test]
fn a_network_beside_the_one_asking_for_the_default_route_loses_its_own() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"lan"},{"name":"gw","default-route":["10.20.0.1"]}]"#}),
        json!({}),
    );
    lan_nad(&c);
    c.bridge_nad("default", "gw", "10.20.0.0/24");
    c.cmd("ADD").ok();
    assert_eq!(
        c.sb.pod_default_route_metrics("-4"),
        ["net2 via 10.20.0.1 metric 0"]
    );
    assert_eq!(
        c.sb.pod_default_route_metrics("-6"),
        ["net1 via fd10:20::1 metric 1024"]
    );
    assert_eq!(c.events("SecondaryDefaultRoute"), Vec::<String>::new());
    c.cmd("DEL").ok();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn an_ipv6_default_route_leaves_the_ipv4_one_alone() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"v6","default-route":["fd00:20::1"]}]"#}),
        json!({}),
    );
    let conf = json!({"cniVersion": "1.0.0", "name": "v6", "type": "bridge",
        "bridge": c.bridge_name(), "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "fd00:20::/64", "dataDir": c.sb.ipam_dir()}});
    c.nad("default", "v6", conf);
    c.cmd("ADD").ok();
    assert_eq!(
        c.sb.pod_default_routes("-4"),
        [("eth0".to_owned(), "10.88.0.1".to_owned())]
    );
    assert_eq!(
        c.sb.pod_default_routes("-6"),
        [("net1".to_owned(), "fd00:20::1".to_owned())]
    );
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn two_gateways_of_one_family_are_refused() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"a","default-route":["10.20.0.1"]},{"name":"b","default-route":["10.30.0.1"]}]"#}),
        json!({}),
    );
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.30.0.0/24");
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("more than one gateway"), "{msg}");
    c.assert_add_left_nothing("refused");
}

#[test]
fn a_failing_second_delegate_rolls_back_and_is_reported_as_an_event() {
    let c = Cluster::new(json!({NETWORKS: "good,bad"}), json!({}));
    c.bridge_nad("default", "good", "10.20.0.0/24");
    c.nad(
        "default",
        "bad",
        json!({"cniVersion": "1.0.0", "name": "bad", "type": "fail"}),
    );
    let (code, msg) = c.add_err();
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.starts_with("network default/bad on interface net2:"),
        "{msg}"
    );
    assert!(msg.contains("refuses on purpose"), "{msg}");
    // The failed delegate got its DEL too, after its ADD.
    assert_eq!(c.sb.fail_log(), "ADD net2\nDEL net2\n");
    let warnings: Vec<Value> = c
        .server
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "AddInterfaceFailed")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["type"], "Warning");
    assert_eq!(warnings[0]["message"], msg.as_str());
    assert_eq!(c.events("AddedInterface"), Vec::<String>::new());
    c.assert_add_left_nothing("rolled back");
}

/// Every bad annotation and bad NAD is refused with its CNI code and a message that names the
/// wrong element; nothing is left behind and network-status is not written.
#[test]
fn bad_annotations_fail_with_a_clear_error_and_leave_nothing() {
    let c = Cluster::new(json!({}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.30.0.0/24");
    c.nad("default", "badjson", json!("{"));
    c.nad("default", "notobject", json!("[1]"));
    c.nad("default", "notype", json!({"cniVersion": "1.0.0"}));
    c.nad(
        "default",
        "badversion",
        json!({"cniVersion": "7.0.0", "type": "bridge"}),
    );
    c.nad(
        "default",
        "badtype",
        json!({"cniVersion": "1.0.0", "type": "../bridge"}),
    );
    c.nad(
        "default",
        "noplugin",
        json!({"cniVersion": "1.0.0", "type": "nope"}),
    );
    c.nad(
        "default",
        "emptylist",
        json!({"cniVersion": "1.0.0", "name": "emptylist", "plugins": []}),
    );
    c.nad(
        "default",
        "listnotype",
        json!({"cniVersion": "1.0.0", "name": "listnotype", "plugins": [{"type": "bridge"}, {}]}),
    );
    let bad_ipam = json!({"cniVersion": "1.0.0", "name": "badipam", "type": "bridge",
        "bridge": c.bridge_name(), "ipam": {"type": "host-local", "subnet": "10.70.0.0/33",
        "dataDir": c.sb.ipam_dir()}});
    c.nad("default", "badipam", bad_ipam);
    c.nad(
        "default",
        "badbridge",
        json!({"cniVersion": "1.0.0", "name": "badbridge", "type": "bridge", "vlan": 5000}),
    );
    c.nad(
        "default",
        "badmtu",
        json!({"cniVersion": "1.0.0", "name": "badmtu", "type": "macvlan", "master": "lo", "mtu": "x"}),
    );
    // The field report's troublemaker: a gateway written with its prefix length.
    let trouble = json!({"cniVersion": "1.0.0", "name": "trouble", "type": "bridge",
        "bridge": c.bridge_name(), "ipam": {"type": "host-local", "subnet": "10.42.0.0/24",
        "dataDir": c.sb.ipam_dir(), "routes": [{"dst": "0.0.0.0/0", "gw": "10.42.0.100/24"}]}});
    c.nad("default", "trouble", trouble);
    static_nad(&c, json!({}));
    let dns = "is not a DNS-1123 label";
    #[rustfmt::skip]
    let cases: &[(&str, &str, u64, &[&str])] = &[
        (NETWORKS, "a,,b", 7, &["element 1", "stray comma"]),
        (NETWORKS, "a,", 7, &["element 1", "stray comma"]),
        (NETWORKS, "UPPER", 7, &["\"UPPER\"", dns]),
        (NETWORKS, "a/b/c", 7, &["\"a/b/c\"", "more than one '/'"]),
        (NETWORKS, "a@b@c", 7, &["\"a@b@c\"", "more than one '@'"]),
        (NETWORKS, "a@", 7, &["\"a@\"", "empty interface name"]),
        (NETWORKS, "/a", 7, &["\"/a\"", "empty namespace"]),
        (NETWORKS, "-a", 7, &["\"-a\"", dns]),
        (NETWORKS, "a-", 7, &["\"a-\"", dns]),
        (NETWORKS, "a_b", 7, &["\"a_b\"", dns]),
        (NETWORKS, "a.b", 7, &["\"a.b\"", dns]),
        (NETWORKS, &"x".repeat(64), 7, &["xxxxxxxx", dns]),
        (NETWORKS, "a@this-name-is-too-long", 7, &["this-name-is-too-long", "too long"]),
        (NETWORKS, "a@x/y", 7, &["namespace \"a@x\"", dns]),
        (NETWORKS, "NS/a", 7, &["namespace \"NS\"", dns]),
        (NETWORKS, "a@has space", 7, &["has space"]),
        (NETWORKS, "a@.", 7, &["\".\""]),
        (NETWORKS, "   ", 7, &[NETWORKS, "is empty"]),
        (NETWORKS, "[", 7, &[NETWORKS, "invalid JSON"]),
        (NETWORKS, r#"{"name":"a"}"#, 7, &[NETWORKS, "must be a list"]),
        (NETWORKS, "[1]", 7, &["element 0: 1 is not a selection object"]),
        (NETWORKS, r#"[{"name":5}]"#, 7, &["element 0: name: 5 is not a string"]),
        (NETWORKS, r#"[{"nam":"a"}]"#, 7, &["element 0: name: required, but missing"]),
        (NETWORKS, r#"[{"name":""}]"#, 7, &["element 0", dns]),
        (NETWORKS, r#"[{"name":"a","namespace":"Other"}]"#, 7, &["namespace \"Other\"", dns]),
        (NETWORKS, r#"[{"name":"a","mac":"nope"}]"#, 7, &["element 0 (a)", "mac \"nope\" is not a MAC address"]),
        (NETWORKS, r#"[{"name":"a","mac":"02:00:00:00:00"}]"#, 7, &["\"02:00:00:00:00\"", "not a MAC address"]),
        (NETWORKS, r#"[{"name":"a","mac":5}]"#, 7, &["element 0: mac: 5 is not a string"]),
        (NETWORKS, r#"[{"name":"a","ips":["10.0.0.300"]}]"#, 7, &["ips[0]: \"10.0.0.300\"", "not an IP address"]),
        (NETWORKS, r#"[{"name":"a","ips":["10.0.0.1/33"]}]"#, 7, &["\"10.0.0.1/33\"", "not an IP address"]),
        (NETWORKS, r#"[{"name":"a","ips":"10.0.0.1"}]"#, 7, &["element 0: ips: \"10.0.0.1\" is not a list"]),
        (NETWORKS, r#"[{"name":"a","interface":"has space"}]"#, 7, &["has space"]),
        (NETWORKS, r#"[{"name":"a","interface":"a/b"}]"#, 7, &["\"a/b\""]),
        (NETWORKS, r#"[{"name":"a","interface":"this-name-is-too-long"}]"#, 7, &["this-name-is-too-long", "too long"]),
        (NETWORKS, r#"[{"name":"a","interface":"x"},{"name":"b","interface":"x"}]"#, 7, &["interface \"x\"", "more than once"]),
        (NETWORKS, r#"[{"name":"a","interface":"net2"},{"name":"b"}]"#, 7, &["default/b", "net2", "default/a"]),
        (NETWORKS, r#"[{"name":"a","interface":"eth0"}]"#, 7, &["default/a", "eth0", "cluster"]),
        (NETWORKS, "a@lo", 7, &["default/a", "interface lo", "already has an interface"]),
        (NETWORKS, r#"[{"name":"a","default-route":["x"]}]"#, 7, &["element 0: default-route[0]: \"x\" is not an IP address"]),
        (NETWORKS, r#"[{"name":"a","default-route":["10.0.0.1/24"]}]"#, 7, &["element 0: default-route[0]", "no prefix length"]),
        (NETWORKS, r#"[{"name":"a","default-route":"10.0.0.1"}]"#, 7, &["element 0: default-route: \"10.0.0.1\" is not a list"]),
        (NETWORKS, r#"[{"name":"a","default-route":["1.1.1.1","2.2.2.2"]}]"#, 7, &["element 0 (a)", "two gateways"]),
        (NETWORKS, r#"[{"name":"a","default-route":["fd00::1","fd00::2"]}]"#, 7, &["element 0 (a)", "two gateways"]),
        (NETWORKS, r#"[{"name":"a","infiniband-guid":"zz"}]"#, 7, &["element 0 (a)", "infiniband-guid \"zz\""]),
        (NETWORKS, r#"[{"name":"a","portMappings":[{"hostPort":"x"}]}]"#, 7, &["element 0: portMappings[0].hostPort: \"x\" is not a whole number"]),
        (NETWORKS, r#"[{"name":"a","portMappings":[{"hostPort":70000,"containerPort":1}]}]"#, 7, &["element 0: portMappings[0].hostPort: 70000 is not a whole number from 0 to 65535"]),
        (NETWORKS, r#"[{"name":"a","bandwidth":{"ingressRate":-1}}]"#, 7, &["element 0: bandwidth.ingressRate: -1"]),
        (NETWORKS, r#"[{"name":"a","cni-args":[1]}]"#, 7, &["element 0: cni-args: [1] is not an object"]),
        (NETWORKS, r#"[{"name":"fixed","mac":"02:11:22:33:44:55"}]"#, 7, &["default/fixed", "net1", "\"mac\": true"]),
        (DEFAULT_NETWORK, "a,b", 7, &[DEFAULT_NETWORK, "exactly one"]),
        (DEFAULT_NETWORK, "Bad", 7, &[DEFAULT_NETWORK, "\"Bad\"", dns]),
        (DEFAULT_NETWORK, "", 7, &[DEFAULT_NETWORK, "is empty"]),
        (DEFAULT_NETWORK, "missing-nad", 7, &["network-attachment-definition (missing-nad)"]),
        (NETWORKS, "missing-nad", 7, &["network-attachment-definition (missing-nad) in namespace (default)"]),
        (NETWORKS, "other/a", 7, &["network-attachment-definition (a) in namespace (other)"]),
        (NETWORKS, "badjson", 6, &["default/badjson", "spec.config is not valid JSON"]),
        (NETWORKS, "notobject", 6, &["default/notobject"]),
        (NETWORKS, "notype", 7, &["default/notype", "no plugin type"]),
        (NETWORKS, "badversion", 1, &["default/badversion", "7.0.0"]),
        (NETWORKS, "badtype", 7, &["default/badtype", "\"../bridge\""]),
        (NETWORKS, "noplugin", 7, &["default/noplugin", "failed to find plugin \"nope\""]),
        (NETWORKS, "emptylist", 7, &["default/emptylist", "has no plugins"]),
        (NETWORKS, "listnotype", 7, &["default/listnotype", "plugin 1 ", "has no type"]),
        (NETWORKS, "badbridge", 7, &["default/badbridge", "net1", "5000"]),
        (NETWORKS, "badmtu", 6, &["default/badmtu", "net1", "mtu"]),
        (NETWORKS, "a,badipam", 6, &["default/badipam", "net2", "ipam.subnet: \"10.70.0.0/33\""]),
        (NETWORKS, "trouble", 6, &["default/trouble", "net1", "ipam.routes[0].gw", "\"10.42.0.100/24\"", "no prefix length"]),
    ];
    assert!(cases.len() >= 50, "{}", cases.len());
    let mut failures = Vec::new();
    for (annotation, text, code, expected) in cases {
        c.set_pod(json!({ *annotation: text }));
        let out = c.cmd("ADD");
        if out.code == 0 {
            c.cmd("DEL").ok();
            failures.push(format!("{annotation}={text}: ADD succeeded"));
            continue;
        }
        let (got, msg) = common::cluster::cni_error(&out);
        let missing: Vec<&&str> = expected.iter().filter(|e| !msg.contains(**e)).collect();
        // A config error names its key (or the text before a syntax error), never a column.
        let column = msg.contains("column");
        if got != *code || !missing.is_empty() || column {
            failures.push(format!("{annotation}={text}: code {got}: {msg}"));
        }
        c.assert_add_left_nothing(&format!("{annotation}={text}"));
        // The runtime always DELs a sandbox whose ADD failed; there is nothing to delete.
        let del = c.cmd("DEL");
        if del.code != 0 {
            failures.push(format!(
                "{annotation}={text}: DEL after the failed ADD: {}",
                del.stdout.trim()
            ));
        }
        c.assert_add_left_nothing(&format!("{annotation}={text}, after DEL"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A NAD of type multus (or a plugin that is the multus binary under another name) is refused
/// before anything runs: its own multus settings never apply, and it cannot recurse.
#[test]
fn a_nad_selected_twice_and_older_versions_and_lists_each_attach() {
    let c = Cluster::new(json!({NETWORKS: "a,a,old,list"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.nad(
        "default",
        "old",
        c.sb.bridge("old", &c.bridge_name(), "10.21.0.0/24", "0.3.1"),
    );
    let mut plugin = c.sb.bridge("", &c.bridge_name(), "10.22.0.0/24", "1.0.0");
    let plugin = plugin.as_object_mut().unwrap();
    plugin.remove("cniVersion");
    plugin.remove("name");
    c.nad(
        "default",
        "list",
        json!({"cniVersion": "1.0.0", "name": "list", "plugins": [plugin]}),
    );
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_links(), ["eth0", "net1", "net2", "net3", "net4"]);
    assert_eq!(c.sb.pod_addrs("net1"), ["10.20.0.2"]);
    assert_eq!(c.sb.pod_addrs("net2"), ["10.20.0.3"]);
    assert_eq!(c.sb.pod_addrs("net3"), ["10.21.0.2"]);
    assert_eq!(c.sb.pod_addrs("net4"), ["10.22.0.2"]);
    let names: Vec<Value> = c
        .network_status()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!([e["name"], e["interface"]]))
        .collect();
    assert_eq!(
        names,
        [
            json!(["cluster", "eth0"]),
            json!(["default/a", "net1"]),
            json!(["default/a", "net2"]),
            json!(["default/old", "net3"]),
            json!(["default/list", "net4"]),
        ]
    );
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn cni_args_port_mappings_and_bandwidth_reach_the_delegate_as_upstream_passes_them() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"rec","cni-args":{"foo":"bar"},"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],"bandwidth":{"ingressRate":1000,"ingressBurst":2000}}]"#}),
        json!({}),
    );
    // Records what it is given, then is the bridge plugin.
    c.sb.script(
        "record",
        r#"tee "$(dirname "$0")/record-$CNI_COMMAND.json" | "$(dirname "$0")/bridge""#,
    );
    let mut conf =
        c.sb.bridge("rec", &c.bridge_name(), "10.20.0.0/24", "1.0.0");
    conf["type"] = json!("record");
    conf["capabilities"] = json!({"portMappings": true, "bandwidth": true});
    c.nad("default", "rec", conf);
    c.cmd("ADD").ok();
    assert_eq!(c.sb.pod_addrs("net1"), ["10.20.0.2"]);
    let given: Value = serde_json::from_slice(
        &std::fs::read(c.sb.plugins.path().join("record-ADD.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(given["name"], "rec", "{given}");
    assert_eq!(given["args"], json!({"cni": {"foo": "bar"}}), "{given}");
    assert_eq!(
        given["runtimeConfig"],
        json!({
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
            // Every rate, the unset ones 0, as upstream's struct is written out.
            "bandwidth": {"ingressRate": 1000, "ingressBurst": 2000, "egressRate": 0, "egressBurst": 0}
        }),
        "{given}"
    );
    c.cmd("DEL").ok();
    // DEL gets the same runtime config (kept in the delegate cache).
    let given: Value = serde_json::from_slice(
        &std::fs::read(c.sb.plugins.path().join("record-DEL.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(given["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
    c.sb.assert_clean("after DEL");
}

/// A megabyte annotation: the error quotes its element once and short, so the CNI error object
/// and the event stay small.
#[test]
fn a_megabyte_annotation_is_quoted_once_and_short() {
    let c = Cluster::new(json!({}), json!({}));
    let big = "x".repeat(1 << 20);
    for annotation in [
        big.clone(),
        format!(r#"[{{"name":"{big}"}}]"#),
        format!(r#"[{{"name":"a","mac":"{big}"}}]"#),
        format!(r#"[{{"name":"a","default-route":["{big}"]}}]"#),
        format!(r#"["{big}"#),
    ] {
        c.set_pod(json!({ NETWORKS: annotation }));
        let out = c.cmd("ADD");
        assert!(out.stdout.len() < 4096, "{} bytes", out.stdout.len());
        let (code, msg) = common::cluster::cni_error(&out);
        assert_eq!(code, 7, "{msg}");
        assert!(msg.contains(NETWORKS), "{msg}");
        let quotes = msg.split(|ch| ch != 'x').filter(|run| run.len() >= 10);
        assert_eq!(quotes.count(), 1, "{msg}");
        for event in c.server.events() {
            let text = event["message"].as_str().unwrap_or_default();
            assert!(text.len() < 4096, "an event of {} bytes", text.len());
        }
        c.assert_add_left_nothing("a megabyte annotation");
    }
}

/// `ipam-claim-reference` reaches the network's IPAM plugin in CNI_ARGS: static, which keeps
/// no address beyond its pod, refuses the claim by name. A reference that names another
/// namespace is refused before anything runs.
#[test]
fn an_ipam_claim_reference_reaches_ipam_and_static_refuses_it() {
    let c = Cluster::new(
        json!({NETWORKS: r#"[{"name":"fixed","ips":["192.168.50.7/24"],"ipam-claim-reference":"vm1"}]"#}),
        json!({}),
    );
    static_nad(&c, json!({}));
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("static cannot keep IPAMClaim \"vm1\"'s address"),
        "{msg}"
    );
    c.assert_add_left_nothing("a claim static cannot keep");
    c.set_pod(json!({NETWORKS: r#"[{"name":"fixed","ipam-claim-reference":"other/vm1"}]"#}));
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("ipam-claim-reference: \"other/vm1\" is not a name"),
        "{msg}"
    );
    c.assert_add_left_nothing("a claim in another namespace");
}
