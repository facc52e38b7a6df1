//! A real runtime: podman with its CNI backend runs a container attached through our bridge and
//! host-local, inside a node namespace the test owns, and the container reaches its gateway.

use std::path::Path;

use testkit::podman::{self, Podman};
use testkit::{Netns, PluginDir};

#[test]
fn podman_container_gets_bridge_network_and_reaches_gateway() {
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["bridge", "host-local", "static"],
    );
    let scratch = testkit::podman::scratch();
    let s = scratch.path();
    let podman = Podman::new(s, plugins.path());
    podman.add_network(
        "rsnet",
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"rsnet","plugins":[{{"type":"bridge","bridge":"rs0","isGateway":true,
               "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.77.0.0/24"}}]],"dataDir":"{}"}}}}]}}"#,
            s.join("ipam").display()
        ),
    );

    let node = Netns::new("podman");
    let stdout = podman.run_busybox(
        &node,
        "rsnet",
        "ip -4 addr show eth0; ping -c1 -W2 10.77.0.1",
    );
    assert!(
        stdout.contains("inet 10.77.0.2/24"),
        "container address: {stdout}"
    );
    assert!(
        stdout.contains("1 packets received"),
        "ping to the gateway: {stdout}"
    );

    // The bridge landed in the node namespace, and `--rm` tore the attachment down.
    let links = node.links();
    assert!(
        links.contains(&"rs0".to_owned()),
        "bridge in the node namespace: {links:?}"
    );
    podman::assert_no_veth(&node);
    let ipam_dir = s.join("ipam/rsnet");
    assert!(ipam_dir.is_dir(), "no ipam dir {}", ipam_dir.display());
    let reserved = testkit::reservation_files(&ipam_dir);
    assert!(
        reserved.is_empty(),
        "address reservation left behind: {reserved:?}"
    );
}

/// A network whose conflist chains our loopback after bridge, with nothing but our plugins in
/// `CNI_PATH`: podman runs the chain's ADD and DEL, the container has its address and an lo
/// that is up, and the teardown leaves nothing.
#[test]
fn podman_runs_a_chain_ending_in_our_loopback_with_no_reference_plugins() {
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["bridge", "host-local", "loopback"],
    );
    let scratch = testkit::podman::scratch();
    let s = scratch.path();
    let podman = Podman::new(s, plugins.path());
    podman.add_network(
        "lonet",
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"lonet","plugins":[{{"type":"bridge","bridge":"rs1","isGateway":true,
               "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.78.0.0/24"}}]],"dataDir":"{}"}}}},{{"type":"loopback"}}]}}"#,
            s.join("ipam").display()
        ),
    );
    let node = Netns::new("podman-lo");
    let stdout = podman.run_busybox(
        &node,
        "lonet",
        "ip -4 addr show eth0; ip addr show lo; ping -c1 -W2 10.78.0.1",
    );
    assert!(
        stdout.contains("inet 10.78.0.2/24"),
        "container address: {stdout}"
    );
    assert!(stdout.contains("inet 127.0.0.1/8"), "lo: {stdout}");
    assert!(stdout.contains("LOOPBACK,UP"), "lo is up: {stdout}");
    assert!(
        stdout.contains("1 packets received"),
        "ping to the gateway: {stdout}"
    );
    podman::assert_no_veth(&node);
    let reserved = testkit::reservation_files(&s.join("ipam/lonet"));
    assert!(
        reserved.is_empty(),
        "address reservation left behind: {reserved:?}"
    );
}
