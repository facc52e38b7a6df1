//! host-device's DEL of an attachment it has no record of (made by an earlier version or the
//! reference) gives back the link named `CNI_IFNAME` by its alias, as the reference does, but
//! only a link that came from the node: one the pod made itself, name and alias included, is
//! never moved into the node's namespace.

use std::path::Path;

use serde_json::json;
use testkit::{CniCall, PluginDir, Sandbox};

fn del(sb: &Sandbox, plugins: &PluginDir, ifname: &str) {
    let conf = json!({"cniVersion": "1.0.0", "name": "hd", "type": "host-device", "device": "hd0"});
    let mut call: CniCall = sb.call("DEL", &conf.to_string());
    call.container_id = "no-record-of-it".into();
    call.ifname = ifname.into();
    sb.run_in_node(&plugins.path().join("host-device"), &call)
        .ok();
}

#[test]
fn del_without_a_record_gives_back_only_a_link_that_came_from_the_node() {
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["host-device"],
    );
    let sb = Sandbox::new(plugins.path(), "c1");
    // A veth the pod made itself, named and aliased as host-device's would be.
    sb.pod.veth_pair("net1", "mine");
    sb.pod.ip(&["link", "set", "net1", "alias", "evil0"]);
    del(&sb, &plugins, "net1");
    assert!(
        !sb.node.links().contains(&"evil0".to_owned()),
        "{:?}",
        sb.node.links()
    );
    assert!(sb.pod.links().contains(&"net1".to_owned()));

    // A link the reference moved in: a veth of the node's, its node name in the alias.
    sb.node.veth_pair("hd0", "hd0p");
    sb.node.ip(&["link", "set", "hd0", "alias", "hd0"]);
    sb.node
        .ip(&["link", "set", "hd0", "netns", sb.pod.name(), "name", "net2"]);
    del(&sb, &plugins, "net2");
    assert!(
        sb.node.links().contains(&"hd0".to_owned()),
        "{:?}",
        sb.node.links()
    );
    assert!(!sb.pod.links().contains(&"net2".to_owned()));
}
