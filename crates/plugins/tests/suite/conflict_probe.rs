//! `conflictProbe` on this machine's kernel: a host on the pod's LAN (a namespace at the far end
//! of the master's wire, or on the bridge) holds an address; the probe finds it by ARP or by
//! duplicate address detection, the ADD fails with code 11 naming the address and the host's
//! MAC, and nothing is left behind. Without the probe the same address is handed out. ipvlan
//! and vlan run where the kernel has them (`cargo xtask vm-test`); macvlan and bridge here.

use crate::common;

use common::{
    assert_pod_and_ipam_clean, bridge_conf, host_local, master_sandbox, Plugins, Sandbox,
};
use testkit::Netns;

const TAKEN_V4: &str = "10.60.0.5";
const TAKEN_V6: &str = "fd60::5";

/// A host on the master's wire: `up0p` moved into a namespace of its own, holding both taken
/// addresses (on VLAN 100 when `kind` is vlan). Returns it and its MAC.
fn lan_host(sb: &Sandbox, kind: &str) -> (Netns, String) {
    let lan = Netns::new("lan");
    sb.node.ip(&["link", "set", "up0p", "netns", lan.name()]);
    lan.ip(&["link", "set", "up0p", "up"]);
    let dev = if kind == "vlan" {
        lan.ip(&[
            "link", "add", "link", "up0p", "name", "up0p.100", "type", "vlan", "id", "100",
        ]);
        lan.ip(&["link", "set", "up0p.100", "up"]);
        "up0p.100"
    } else {
        "up0p"
    };
    lan.ip(&["addr", "add", &format!("{TAKEN_V4}/24"), "dev", dev]);
    lan.ip(&[
        "addr",
        "add",
        &format!("{TAKEN_V6}/64"),
        "dev",
        dev,
        "nodad",
    ]);
    let mac = lan.ip_json(&["link", "show", dev])[0]["address"]
        .as_str()
        .expect("a MAC")
        .to_owned();
    (lan, mac)
}

/// host-local handing out exactly `address`.
fn only(address: &str, subnet: &str) -> String {
    host_local(
        &format!(r#"[[{{"subnet":"{subnet}","rangeStart":"{address}","rangeEnd":"{address}"}}]]"#),
        "",
    )
}

fn sublink(kind: &str, probe: &str, ipam: &str) -> String {
    let vlan = if kind == "vlan" {
        r#","vlanId":100"#
    } else {
        ""
    };
    format!(
        r#"{{"cniVersion":"1.0.0","name":"lan","type":"{kind}","master":"up0"{vlan}{probe},{ipam}}}"#
    )
}

/// The link plugins this kernel can make.
fn kinds() -> Vec<&'static str> {
    let mut kinds = vec!["macvlan"];
    if common::kernel_has_ipvlan() {
        kinds.push("ipvlan");
    }
    if common::kernel_has_vlan() {
        kinds.push("vlan");
    }
    kinds
}

/// The ADD failed with code 11, naming `address` and `mac`, and left nothing in the pod or
/// in IPAM.
fn assert_refused(sb: &Sandbox, out: &testkit::CniOutput, address: &str, mac: &str) {
    assert_eq!(out.err_code(), 11, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(
        msg.contains(&format!("address {address} is already in use")) && msg.contains(mac),
        "{msg}"
    );
    assert_pod_and_ipam_clean(sb);
}

#[test]
fn sublinks_find_a_host_holding_the_address_by_arp_and_by_dad() {
    let plugins = Plugins::new();
    for kind in kinds() {
        for (address, subnet) in [(TAKEN_V4, "10.60.0.0/24"), (TAKEN_V6, "fd60::/64")] {
            let sb = master_sandbox(&plugins, false);
            let (_lan, mac) = lan_host(&sb, kind);
            let probed = sublink(kind, r#","conflictProbe":true"#, &only(address, subnet));
            let out = sb.add(&probed);
            assert_refused(&sb, &out, address, &mac);
            // Without the probe the same address goes to the pod: the probe is what saw it.
            let plain = sublink(kind, "", &only(address, subnet));
            let r = sb.add(&plain).ok();
            assert!(r["ips"][0]["address"]
                .as_str()
                .is_some_and(|a| a.starts_with(address)));
            sb.del(&plain).ok();
            assert_pod_and_ipam_clean(&sb);
        }
    }
}

#[test]
fn a_free_address_passes_the_probe() {
    let plugins = Plugins::new();
    for kind in kinds() {
        let sb = master_sandbox(&plugins, false);
        let (lan, _) = lan_host(&sb, kind);
        let ipam = host_local(
            r#"[[{"subnet":"10.60.0.0/24","rangeStart":"10.60.0.6","rangeEnd":"10.60.0.6"}],[{"subnet":"fd60::/64","rangeStart":"fd60::6","rangeEnd":"fd60::6"}]]"#,
            "",
        );
        let conf = sublink(kind, r#","conflictProbe":{"timeoutMs":50}"#, &ipam);
        let r = sb.add(&conf).ok();
        assert_eq!(r["ips"].as_array().map(Vec::len), Some(2), "{r}");
        // The pod is on the LAN with its address.
        let ping = lan
            .command("ping")
            .args(["-c1", "-W2", "10.60.0.6"])
            .output()
            .expect("run ping");
        assert!(ping.status.success(), "{kind}: {ping:?}");
        sb.del(&conf).ok();
        assert_pod_and_ipam_clean(&sb);
    }
}

#[test]
fn a_bridge_finds_a_host_on_it_holding_the_address() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, common::Side::Ours);
    // The bridge exists already with a host on it, as a LAN the node bridges onto.
    sb.node.ip(&["link", "add", "sbs0", "type", "bridge"]);
    sb.node.ip(&["link", "set", "sbs0", "up"]);
    sb.node
        .ip(&["link", "add", "up0", "type", "veth", "peer", "name", "up0p"]);
    sb.node.ip(&["link", "set", "up0", "master", "sbs0", "up"]);
    let (_lan, mac) = lan_host(&sb, "bridge");
    for (address, subnet) in [(TAKEN_V4, "10.60.0.0/24"), (TAKEN_V6, "fd60::/64")] {
        // A second for the answer: the emulated arm64 guest once took longer than the
        // default 100 ms to answer across the bridge, and the address passed as free.
        let conf = bridge_conf(
            "1.0.0",
            &format!(
                r#","conflictProbe":{{"timeoutMs":1000}},{}"#,
                only(address, subnet)
            ),
        );
        let out = sb.add(&conf);
        assert_refused(&sb, &out, address, &mac);
        let mut links = sb.node_links();
        links.sort();
        assert_eq!(links, ["sbs0", "up0"], "the pod's veth is gone");
    }
}

#[test]
fn settings_that_cannot_probe_are_refused_before_anything_is_made() {
    let plugins = Plugins::new();
    let sb = master_sandbox(&plugins, false);
    let ipam = only(TAKEN_V4, "10.60.0.0/24");
    for (conf, says) in [
        (
            sublink("macvlan", r#","conflictProbe":{"timeoutMs":5000}"#, &ipam),
            "conflictProbe: ",
        ),
        (
            sublink("ipvlan", r#","mode":"l3","conflictProbe":true"#, &ipam),
            "conflictProbe needs mode l2",
        ),
        (
            bridge_conf(
                "1.0.0",
                &format!(r#","conflictProbe":true,"disableContainerInterface":true,{ipam}"#),
            ),
            "disableContainerInterface",
        ),
    ] {
        let out = sb.add(&conf);
        assert_eq!(out.err_code(), 7, "{out:?}");
        assert!(out.stdout.contains(says), "{out:?}");
        assert_pod_and_ipam_clean(&sb);
    }
}
