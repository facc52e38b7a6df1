//! Our vlan plugin beyond the side-by-side cases: traffic on the VLAN, one id per master, and
//! a master in the pod. This machine's kernel has no 8021q: here the tests check that a kernel
//! without it gets a clear error and no leftovers. Under `cargo xtask vm-test`
//! (MULTUS_RS_VM=1) every part runs.

use crate::common;

use common::{assert_error, assert_pod_and_ipam_clean, ping, Plugins, Sandbox, Side};
use testkit::Netns;

fn conf(master: &str, id: u16, address: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"vlnet","type":"vlan","master":"{master}","vlanId":{id},"ipam":{{"type":"static","addresses":[{{"address":"{address}"}}]}}}}"#
    )
}

/// A node whose `up0` and `up0p` are the two ends of a veth, both up: a wire between two
/// masters.
fn sandbox(plugins: &Plugins) -> Sandbox {
    let sb = Sandbox::new(plugins, Side::Ours);
    sb.node.veth_pair("up0", "up0p");
    sb
}

/// ADD of `conf` for the pod `netns` as container `id`.
fn add_to(sb: &Sandbox, pod: &Netns, id: &str, conf: &str) -> testkit::CniOutput {
    let mut call = sb.call("ADD", conf);
    call.netns = pod.path().display().to_string();
    call.container_id = id.into();
    sb.run(&call)
}

fn vlan_here(plugins: &Plugins) -> bool {
    if common::kernel_has_vlan() {
        return true;
    }
    let sb = sandbox(plugins);
    let out = sb.add(&conf("up0", 100, "10.60.0.1/24"));
    assert_error(&out, 999, "creating vlan", "no 8021q");
    assert!(out.stdout.contains("Unknown device type"), "{}", out.stdout);
    assert_pod_and_ipam_clean(&sb);
    eprintln!(
        "this kernel has no 8021q: checked the error; the rest runs in `cargo xtask vm-test`"
    );
    false
}

/// The pod has nothing but lo and `keep`.
fn assert_pod_has_only(sb: &Sandbox, keep: &[&str]) {
    let mut left = sb.pod.links();
    left.retain(|l| l != "lo" && !keep.contains(&l.as_str()));
    assert!(left.is_empty(), "left in the pod: {left:?}");
}

#[test]
fn pods_on_the_same_vlan_reach_each_other_and_no_other() {
    let plugins = Plugins::new();
    if !vlan_here(&plugins) {
        return;
    }
    let sb = sandbox(&plugins);
    // Pod A on VLAN 100 of up0; pod B on VLAN 100 of up0p, across the wire; pod C on VLAN
    // 200 of up0p, with an address in the same subnet: tagged apart, it must not answer.
    assert_eq!(sb.add(&conf("up0", 100, "10.60.0.1/24")).code, 0);
    let b = Netns::new("vlb");
    let out = add_to(&sb, &b, "podb", &conf("up0p", 100, "10.60.0.2/24"));
    assert_eq!(out.code, 0, "{out:?}");
    let c = Netns::new("vlc");
    let out = add_to(&sb, &c, "podc", &conf("up0p", 200, "10.60.0.3/24"));
    assert_eq!(out.code, 0, "{out:?}");
    ping(&sb.pod, "10.60.0.2").expect("same VLAN");
    assert!(
        ping(&sb.pod, "10.60.0.3").is_err(),
        "VLAN 200 answered VLAN 100"
    );

    // A second vlan with id 100 on up0: the kernel allows one, and the error says so.
    let d = Netns::new("vld");
    let out = add_to(&sb, &d, "podd", &conf("up0", 100, "10.60.0.4/24"));
    assert_error(
        &out,
        999,
        "a vlan with id 100 is already on that link",
        "same id twice",
    );
    assert!(d.links().iter().all(|l| l == "lo"), "{:?}", d.links());
}

#[test]
fn a_master_in_the_pod() {
    let plugins = Plugins::new();
    if !vlan_here(&plugins) {
        return;
    }
    let sb = Sandbox::new(&plugins, Side::Ours);
    sb.pod.ip(&[
        "link", "add", "trunk0", "type", "veth", "peer", "name", "trunk1",
    ]);
    let c = conf("trunk0", 7, "10.61.0.1/24")
        .replace(r#""vlanId":7"#, r#""vlanId":7,"linkInContainer":true"#);
    // A master that is down: the vlan cannot come up, and the error says why.
    assert_error(&sb.add(&c), 999, "bring the master up", "master down");
    assert_pod_has_only(&sb, &["trunk0", "trunk1"]);
    sb.pod.ip(&["link", "set", "trunk0", "up"]);
    let result = sb.add(&c).ok();
    assert_eq!(result["interfaces"][0]["name"], "eth0");
    let link = sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0].clone();
    assert_eq!(link["linkinfo"]["info_data"]["id"], 7);
    assert_eq!(link["link"], "trunk0");
    // Without linkInContainer the node has no trunk0.
    let other = sb.call("ADD", &conf("trunk0", 8, "10.61.0.2/24"));
    let mut other = other;
    other.ifname = "net2".into();
    assert_error(
        &sb.run(&other),
        7,
        r#"master: "trunk0" is not found in the node's netns"#,
        "no trunk0 on the node",
    );
    assert_eq!(sb.del(&c).code, 0);
    let mut left = sb.pod.links();
    left.sort();
    assert_eq!(left, ["lo", "trunk0", "trunk1"]);
}
