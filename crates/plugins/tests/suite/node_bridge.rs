//! A network naming the node's own uplink bridge may put pods on it, but never take the
//! node's address from it: `forceAddress` there is refused (code 7), the bridge untouched.

use std::path::Path;

use serde_json::json;
use testkit::{PluginDir, Sandbox};

#[test]
fn force_address_never_takes_the_address_of_the_nodes_uplink_bridge() {
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["bridge", "host-local"],
    );
    let sb = Sandbox::new(plugins.path(), "c1");
    sb.node.ip(&["link", "add", "br0", "type", "bridge"]);
    sb.node
        .ip(&["addr", "add", "192.168.70.10/24", "dev", "br0"]);
    sb.node.ip(&["link", "set", "br0", "up"]);
    sb.node
        .ip(&["route", "add", "default", "via", "192.168.70.1"]);
    let data = sb.dir.path().join("ipam");
    let conf = json!({"cniVersion": "1.0.0", "name": "lan", "type": "bridge", "bridge": "br0",
        "isGateway": true, "forceAddress": true,
        "ipam": {"type": "host-local", "dataDir": data,
                 "ranges": [[{"subnet": "192.168.70.0/24", "gateway": "192.168.70.254",
                              "rangeStart": "192.168.70.100", "rangeEnd": "192.168.70.120"}]]}})
    .to_string();
    let out = sb.run_in_node(&plugins.path().join("bridge"), &sb.call("ADD", &conf));
    assert_eq!(out.err_code(), 7, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("carries the node's default route"), "{msg}");
    let addrs = sb.node.ip_json(&["-4", "addr", "show", "dev", "br0"]);
    assert_eq!(addrs[0]["addr_info"][0]["local"], "192.168.70.10");
    assert_eq!(addrs[0]["addr_info"].as_array().map(Vec::len), Some(1));
    sb.run_in_node(&plugins.path().join("bridge"), &sb.call("DEL", &conf))
        .ok();
    sb.assert_no_pod_links("after DEL");
    assert!(testkit::reservation_files(&data).is_empty());
}

#[test]
fn macvlan_passthru_never_takes_a_master_the_node_uses() {
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["macvlan", "static"],
    );
    let sb = Sandbox::new(plugins.path(), "c1");
    // The node's uplink holds its address; a spare link holds nothing.
    for (link, peer) in [("up0", "up0p"), ("spare0", "spare0p")] {
        sb.node.veth_pair(link, peer);
    }
    sb.node
        .ip(&["addr", "add", "192.168.71.10/24", "dev", "up0"]);
    let conf = |master: &str| {
        json!({"cniVersion": "1.0.0", "name": "pt", "type": "macvlan", "master": master,
               "mode": "passthru",
               "ipam": {"type": "static", "addresses": [{"address": "192.168.72.5/24"}]}})
        .to_string()
    };
    let macvlan = plugins.path().join("macvlan");
    let out = sb.run_in_node(&macvlan, &sb.call("ADD", &conf("up0")));
    assert_eq!(out.err_code(), 7, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(
        msg.contains("passthru on \"up0\", which the node itself uses"),
        "{msg}"
    );
    sb.assert_no_pod_links("refused");
    sb.run_in_node(&macvlan, &sb.call("DEL", &conf("up0"))).ok();
    // A master the node does not use may be handed over whole, as passthru means.
    sb.run_in_node(&macvlan, &sb.call("ADD", &conf("spare0")))
        .ok();
    assert!(sb.pod.links().contains(&"eth0".to_owned()));
    sb.run_in_node(&macvlan, &sb.call("DEL", &conf("spare0")))
        .ok();
}
