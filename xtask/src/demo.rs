//! The main job: a pod namespace gets a bridged interface with an address from host-local,
//! shown and checked, then torn down, with proof that nothing is left.

use std::process::Command;

use anyhow::{ensure, Result};
use testkit::{CniCall, Netns, PluginDir};

const NETWORK: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "demo-net",
  "type": "bridge",
  "bridge": "demo0",
  "isGateway": true,
  "ipMasq": true,
  "ipam": {
    "type": "host-local",
    "ranges": [[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd00:88::/64"}]],
    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
    "dataDir": "DATADIR"
  }
}"#;

fn section(title: &str) {
    println!("\n=== {title}");
}

pub fn run() -> Result<()> {
    let bin = crate::build_release()?;
    let plugins = PluginDir::new(&bin, &["bridge", "host-local", "static"]);
    let data = tempfile::tempdir()?;
    let config = NETWORK.replace("DATADIR", &data.path().display().to_string());

    section("a throwaway node namespace and a pod namespace");
    let node = Netns::new("demo-node");
    let pod = Netns::new("demo-pod");
    println!(
        "node: {}\npod:  {}",
        node.path().display(),
        pod.path().display()
    );

    section("ADD: the runtime calls bridge (which calls host-local) with this config");
    println!("{config}");
    let mut call = CniCall::new("ADD", &config);
    call.container_id = "demo-pod-1".into();
    call.netns = pod.path().display().to_string();
    call.path = plugins.path().display().to_string();
    let added = call.run(&plugins.path().join("bridge"), Some(&node));
    section("the CNI result");
    println!("{}", added.stdout.trim_end());
    ensure!(added.code == 0, "ADD failed: {}", added.stderr);

    section("the pod's interfaces and routes");
    print!("{}", pod.ip(&["addr", "show"]));
    print!("{}", pod.ip(&["route", "show"]));
    print!("{}", pod.ip(&["-6", "route", "show"]));

    section("the node side: the bridge and the pod's veth");
    print!("{}", node.ip(&["-br", "addr", "show"]));

    section("the masquerade rules for the pod, in the node namespace");
    let masq_rules = pod_rules(&node)?;
    println!("{}", masq_rules.join("\n"));
    ensure!(
        !masq_rules.is_empty(),
        "ipMasq is on but no rule names the pod"
    );

    section("connectivity: the pod pings its gateway");
    for gw in ["10.88.0.1", "fd00:88::1"] {
        let ping = pod
            .command("ping")
            .args(["-c", "1", "-W", "2", gw])
            .output()?;
        print!("{}", String::from_utf8_lossy(&ping.stdout));
        ensure!(ping.status.success(), "ping {gw} from the pod failed");
    }

    section("DEL: the runtime tears the attachment down");
    let mut del = call.clone();
    del.command = "DEL".into();
    let deleted = del.run(&plugins.path().join("bridge"), Some(&node));
    ensure!(deleted.code == 0, "DEL failed: {}", deleted.stdout);
    println!("DEL exit status 0");

    section("nothing is left");
    let pod_links = pod.links();
    println!("pod links: {pod_links:?}");
    ensure!(pod_links == ["lo"], "the pod still has links");
    let veths: Vec<String> = node
        .links()
        .into_iter()
        .filter(|l| l.starts_with("veth"))
        .collect();
    println!("veths on the node: {veths:?}");
    ensure!(veths.is_empty(), "a veth is left on the node");
    let reservations = testkit::reservation_files(data.path());
    println!("address reservations: {reservations:?}");
    ensure!(reservations.is_empty(), "a reservation is left");
    let left = pod_rules(&node)?;
    println!("masquerade rules for the pod: {left:?}");
    ensure!(left.is_empty(), "masquerade rules are left");

    let names = [node.name().to_owned(), pod.name().to_owned()];
    drop(pod);
    drop(node);
    let listed = Command::new("ip").args(["netns", "list"]).output()?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    ensure!(
        names.iter().all(|n| !listed.contains(n.as_str())),
        "a namespace is left"
    );
    println!("namespaces deleted: {names:?}");
    section("done");
    Ok(())
}

/// The node's masquerade rules (iptables or nftables, whichever the plugin chose) that name the
/// demo pod's container ID.
fn pod_rules(node: &Netns) -> Result<Vec<String>> {
    Ok(node
        .firewall()
        .lines()
        .filter(|l| l.contains("demo-pod-1"))
        .map(|l| l.trim().to_owned())
        .collect())
}
