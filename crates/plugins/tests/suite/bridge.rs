//! Our bridge on its own: cleanup after DEL and after a failed ADD, connectivity, IPv6 without
//! waiting for DAD, MAC spoof checking, and an IPAM plugin that is not our binary.

use crate::common;

use common::{bridge_conf, host_local, Plugins, Sandbox, Side};
use testkit::{CniCall, Netns};

const V4: &str = r#"[[{"subnet":"10.50.0.0/24"}]]"#;

fn conf(body: &str) -> String {
    bridge_conf("1.0.0", body)
}

#[test]
fn add_then_del_leaves_nothing() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let c = conf(&format!(
        r#","isGateway":true,"ipMasq":true,"macspoofchk":true,{}"#,
        host_local(
            r#"[[{"subnet":"10.50.0.0/24"}],[{"subnet":"fd50::/64"}]]"#,
            ""
        )
    ));
    sb.add(&c).ok();
    assert_eq!(sb.reservations().len(), 2);
    let fw = sb.firewall();
    assert!(fw.contains("CNI-"), "masquerade chain expected: {fw}");
    assert!(
        fw.contains("macspoofchk-c0ffee-eth0"),
        "spoof check rules expected: {fw}"
    );

    sb.del(&c).ok();
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
    assert_eq!(sb.node_links(), ["sbs0"], "only the shared bridge stays");
    assert!(sb.pod.links().iter().all(|l| l == "lo"));
    let fw = sb.firewall();
    assert!(!fw.contains("CNI-"), "masquerade rules left: {fw}");
    assert!(!fw.contains("macspoofchk"), "spoof check rules left: {fw}");
}

#[test]
fn spoof_check_drops_other_source_macs() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let c = conf(&format!(r#","macspoofchk":true,{}"#, host_local(V4, "")));
    let result = sb.add(&c).ok();
    let mac = result["interfaces"][2]["mac"].as_str().unwrap().to_owned();
    let veth = result["interfaces"][1]["name"].as_str().unwrap().to_owned();
    let rules = sb
        .node
        .command("nft")
        .args(["list", "table", "bridge", "nat"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(
        rules.contains(&format!("iifname \"{veth}\" jump cni-br-iface-c0ffee-eth0")),
        "{rules}"
    );
    assert!(
        rules.contains(&format!("ether saddr {mac} return")),
        "{rules}"
    );
    assert!(rules.contains("drop"), "{rules}");
    // DEL twice: the second finds nothing and still succeeds.
    sb.del(&c).ok();
    sb.del(&c).ok();
    assert!(!sb.firewall().contains("macspoofchk"));
}

#[test]
fn failed_add_after_ipam_releases_the_address_and_removes_the_veth() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    // The first network puts its gateway on the bridge.
    let first = conf(&format!(r#","isGateway":true,{}"#, host_local(V4, "")));
    sb.add(&first).ok();
    // A second network on the same bridge with another subnet: its gateway conflicts.
    let second = format!(
        r#"{{"cniVersion":"1.0.0","name":"other","type":"bridge","bridge":"sbs0","isGateway":true,{}}}"#,
        host_local(r#"[[{"subnet":"10.51.0.0/24"}]]"#, "")
    );
    let pod2 = Netns::new("pod2");
    let mut call = sb.call("ADD", &second);
    call.netns = pod2.path().display().to_string();
    call.container_id = "second".into();
    let out = sb.run(&call);
    assert_eq!(out.err_code(), 7, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(msg.contains("forceAddress"), "{msg}");
    // Only the first attachment's reservation and veth remain.
    assert_eq!(sb.reservations().len(), 1, "{:?}", sb.reservations());
    assert!(
        sb.reservations()[0].contains("/sbs/"),
        "{:?}",
        sb.reservations()
    );
    let veths = sb
        .node_links()
        .into_iter()
        .filter(|l| l.starts_with("veth"))
        .count();
    assert_eq!(veths, 1);
    assert!(pod2.links().iter().all(|l| l == "lo"));
}

#[test]
fn failed_add_leaves_no_bridge_it_created() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    // host-local refuses an address outside its range, after the veth exists.
    let c = conf(&format!(",{}", host_local(V4, "")));
    let mut call = sb.call("ADD", &c);
    call.args = "IgnoreUnknown=1;IP=10.9.9.9".into();
    let out = sb.run(&call);
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(sb.node_links().is_empty(), "{:?}", sb.node_links());
    assert!(sb.pod.links().iter().all(|l| l == "lo"));
    assert!(sb.reservations().is_empty());
}

#[test]
fn two_pods_reach_each_other_and_the_gateway() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let c = conf(&format!(
        r#","isDefaultGateway":true,{}"#,
        host_local(V4, "")
    ));
    let a = sb.add(&c).ok();
    let pod_b = Netns::new("podb");
    let mut call = sb.call("ADD", &c);
    call.netns = pod_b.path().display().to_string();
    call.container_id = "podb".into();
    let b = sb.run(&call).ok();
    let ip_of = |r: &serde_json::Value| {
        let addr = r["ips"][0]["address"].as_str().unwrap();
        addr.split('/').next().unwrap().to_owned()
    };
    let (ip_a, ip_b) = (ip_of(&a), ip_of(&b));
    for (from, to) in [
        (&sb.pod, &ip_b),
        (&pod_b, &ip_a),
        (&sb.pod, &"10.50.0.1".to_owned()),
    ] {
        let out = from
            .command("ping")
            .args(["-c1", "-W1", to])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ping {to}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn ipv6_address_is_usable_right_after_add() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let c = conf(&format!(
        r#","isGateway":true,{}"#,
        host_local(r#"[[{"subnet":"fd51::/64"}]]"#, "")
    ));
    sb.add(&c).ok();
    let addrs = sb
        .pod
        .ip_json(&["-6", "addr", "show", "dev", "eth0", "scope", "global"]);
    let info = &addrs[0]["addr_info"];
    assert_eq!(info[0]["local"], "fd51::2", "{addrs}");
    assert!(
        info[0].get("tentative").is_none(),
        "tentative right after ADD: {addrs}"
    );
    // And it receives: the kernel has made it local, which it does from a work queue after
    // the link comes up.
    let local = sb
        .pod
        .ip(&["-6", "route", "show", "table", "local", "fd51::2"]);
    assert!(
        local.starts_with("local fd51::2 "),
        "no local route for fd51::2 right after ADD: {local:?}"
    );
}

#[test]
fn ipam_that_is_not_our_binary_is_executed() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(bin, dir.path().join("bridge")).unwrap();
    std::os::unix::fs::symlink(
        testkit::reference_dir().join("host-local"),
        dir.path().join("host-local"),
    )
    .unwrap();
    let node = Netns::new("node");
    let pod = Netns::new("pod");
    let data = tempfile::tempdir().unwrap();
    let c = conf(&format!(",{}", host_local(V4, "")))
        .replace("DATADIR", &data.path().display().to_string());
    let call = |command: &str| {
        let mut call = CniCall::new(command, &c);
        call.netns = pod.path().display().to_string();
        call.path = dir.path().display().to_string();
        call.run(&dir.path().join("bridge"), Some(&node))
    };
    let r = call("ADD").ok();
    assert_eq!(r["ips"][0]["address"], "10.50.0.2/24");
    assert!(data.path().join("sbs/10.50.0.2").exists());
    call("DEL").ok();
    assert!(!data.path().join("sbs/10.50.0.2").exists());
}

#[test]
fn unusable_netns_is_named_in_the_error() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let mut call = sb.call("ADD", &conf(&format!(",{}", host_local(V4, ""))));
    call.netns = "/run/netns/does-not-exist".into();
    let out = sb.run(&call);
    assert_eq!(out.err_code(), 8, "{out:?}");
    assert!(
        out.stdout.contains("/run/netns/does-not-exist"),
        "{}",
        out.stdout
    );
    assert!(sb.node_links().is_empty());
}

#[test]
fn status_and_gc_go_to_ipam() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let c = bridge_conf("1.1.0", &format!(",{}", host_local(V4, "")));
    sb.add(&c).ok();
    sb.run(&sb.call("STATUS", &c)).ok();
    // GC with no valid attachment releases the reservation.
    let mut gc: serde_json::Value =
        serde_json::from_str(&c.replace("DATADIR", &sb.dir.path().display().to_string())).unwrap();
    gc["cni.dev/valid-attachments"] = serde_json::json!([]);
    sb.run(&sb.call("GC", &gc.to_string())).ok();
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
    sb.run(&sb.call("STATUS", &bridge_conf("1.1.0", ""))).ok();
}

#[test]
fn del_with_a_netns_path_that_is_no_longer_a_namespace_releases_everything() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let c = conf(&format!(
        r#","ipMasq":true,"macspoofchk":true,{}"#,
        host_local(V4, "")
    ));
    sb.add(&c).ok();
    assert_eq!(sb.reservations().len(), 1);
    // What an unmounted namespace leaves at its path: a plain file.
    let leftover = tempfile::NamedTempFile::new().unwrap();
    let mut call = sb.call("DEL", &c);
    call.netns = leftover.path().display().to_string();
    sb.run(&call).ok();
    sb.run(&call).ok();
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
    let fw = sb.firewall();
    assert!(!fw.contains("CNI-"), "masquerade rules left: {fw}");
    assert!(!fw.contains("macspoofchk"), "spoof check rules left: {fw}");
}

#[test]
fn failed_add_releases_a_reservation_whose_result_was_unusable() {
    use std::os::unix::fs::PermissionsExt;
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    // An IPAM plugin that reserves (our host-local) but then prints no usable result.
    let dir = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    std::os::unix::fs::symlink(bin, dir.path().join("bridge")).unwrap();
    let wrapper = dir.path().join("host-local");
    let real = plugins.dir(Side::Ours).join("host-local");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nout=$('{}')\nrc=$?\n\
             if [ \"$CNI_COMMAND\" = ADD ] && [ $rc = 0 ]; then echo '{{\"ips\":'; \
             else printf '%s' \"$out\"; fi\nexit $rc\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut call = sb.call("ADD", &conf(&format!(",{}", host_local(V4, ""))));
    call.path = dir.path().display().to_string();
    let out = call.run(&dir.path().join("bridge"), Some(&sb.node));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
    assert!(sb.pod.links().iter().all(|l| l == "lo"));
}
