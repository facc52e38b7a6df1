//! A real runtime: podman with its CNI backend runs a container on a network whose plugin is
//! multus; the container gets the cluster network and a second network from
//! `defaultNetworks`, reaches both gateways, and `--rm` leaves nothing behind.

use crate::common;

use testkit::podman::{self, Podman};
use testkit::{Netns, PluginDir};

#[test]
fn podman_runs_a_container_on_multus_with_two_networks() {
    let plugins = PluginDir::new(&common::plugins_bin(), &["bridge", "host-local"]);
    std::os::unix::fs::symlink(common::multus_bin(), plugins.path().join("multus"))
        .expect("link multus");
    let scratch = testkit::podman::scratch();
    let s = scratch.path();
    let podman = Podman::new(s, plugins.path());
    std::fs::create_dir_all(s.join("multus.d")).expect("mkdir");
    let ipam = s.join("ipam").display().to_string();
    std::fs::write(
        s.join("multus.d/storage.conf"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"storage","type":"bridge","bridge":"ms1","isGateway":true,
               "ipam":{{"type":"host-local","subnet":"10.78.0.0/24","dataDir":"{ipam}"}}}}"#
        ),
    )
    .unwrap();
    podman.add_network(
        "multus-net",
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"multus-net","plugins":[{{"type":"multus",
               "confDir":"{conf}","cniDir":"{cni}","defaultNetworks":["storage"],
               "delegates":[{{"cniVersion":"1.0.0","name":"cluster","type":"bridge","bridge":"ms0",
                 "isGateway":true,"ipam":{{"type":"host-local","subnet":"10.77.0.0/24","dataDir":"{ipam}",
                 "routes":[{{"dst":"0.0.0.0/0"}}]}}}}]}}]}}"#,
            conf = s.join("multus.d").display(),
            cni = s.join("cni").display(),
        ),
    );

    let node = Netns::new("podman-multus");
    let stdout = podman.run_busybox(
        &node,
        "multus-net",
        "ip -4 addr show; ping -c1 -W2 10.77.0.1 && ping -c1 -W2 10.78.0.1",
    );
    assert!(stdout.contains("inet 10.77.0.2/24"), "eth0: {stdout}");
    assert!(stdout.contains("inet 10.78.0.2/24"), "net1: {stdout}");
    assert_eq!(
        stdout.matches("1 packets received").count(),
        2,
        "both gateways: {stdout}"
    );

    // `--rm` tore every attachment down: no veth, no reservation, no cache.
    podman::assert_no_veth(&node);
    assert_eq!(
        testkit::reservation_files(&s.join("ipam")),
        Vec::<String>::new()
    );
    let cached: Vec<_> = std::fs::read_dir(s.join("cni"))
        .map(|d| d.flatten().filter(|e| e.path().is_file()).collect())
        .unwrap_or_default();
    assert!(cached.is_empty(), "delegate cache left behind: {cached:?}");
    let results: Vec<_> = std::fs::read_dir(s.join("cni/results"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(results.is_empty(), "result cache left behind: {results:?}");
}
