//! Our tap plugin through the real binary, in namespaces this test makes: what the side-by-side
//! suite cannot see (the device's flags, CHECK of drift, failures). The behaviour follows the
//! reference's plugin, except where docs/compatibility.md says otherwise.

use crate::common;

use common::{
    assert_error, assert_pod_and_ipam_clean, host_local, with_prev, Plugins, Sandbox, Side,
};
use serde_json::Value;

fn conf(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"tapnet","type":"tap"{body}}}"#)
}

const STATIC: &str = r#""ipam":{"type":"static","addresses":[{"address":"10.50.0.5/24","gateway":"10.50.0.1"},{"address":"fd50::5/64"}],"routes":[{"dst":"10.51.0.0/16"}],"dns":{"nameservers":["10.50.0.53"]}}"#;

fn sandbox(plugins: &Plugins) -> Sandbox {
    Sandbox::new(plugins, Side::Ours)
}

/// `ip -d` details of `name` in the pod.
fn pod_link(sb: &Sandbox, name: &str) -> Value {
    sb.pod.ip_json(&["-d", "addr", "show", "dev", name])[0].clone()
}

fn has_flag(link: &Value, flag: &str) -> bool {
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

#[test]
fn layer2_tap_add_check_del() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf("");
    let result = sb.add(&c).ok();
    let link = pod_link(&sb, "eth0");
    let info = &link["linkinfo"]["info_data"];
    assert_eq!(link["linkinfo"]["info_kind"], "tun", "{link}");
    assert_eq!(info["type"], "tap", "{link}");
    assert_eq!(info["persist"], true, "{link}");
    assert_eq!(info["vnet_hdr"], true, "{link}");
    assert_eq!(info["multi_queue"], false, "{link}");
    assert!(has_flag(&link, "UP"), "{link}");
    assert_eq!(result["interfaces"][0]["name"], "eth0");
    assert_eq!(result["interfaces"][0]["mac"], link["address"]);
    assert_eq!(result["interfaces"][0]["sandbox"], sb.call("ADD", &c).netns);
    assert!(result.get("ips").is_none(), "{result}");

    let check = sb.run(&sb.call("CHECK", &with_prev(&c, &result)));
    assert_eq!(check.code, 0, "{check:?}");
    for _ in 0..2 {
        let del = sb.del(&c);
        assert_eq!(del.code, 0, "{del:?}");
    }
    assert_pod_and_ipam_clean(&sb);
}

#[test]
fn every_option() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    sb.pod.ip(&["link", "add", "br0", "type", "bridge"]);
    let c = conf(
        r#","multiQueue":true,"mtu":1400,"mac":"02:00:00:00:00:01","owner":4242,"group":4343,"bridge":"br0""#,
    );
    let mut call = sb.call("ADD", &c);
    call.args = "IgnoreUnknown=1;MAC=02:00:00:00:00:02".into();
    let result = sb.run(&call).ok();
    let link = pod_link(&sb, "eth0");
    let info = &link["linkinfo"]["info_data"];
    assert_eq!(info["multi_queue"], true, "{link}");
    assert_eq!(info["user"], 4242, "{link}");
    assert_eq!(info["group"], 4343, "{link}");
    assert_eq!(link["mtu"], 1400, "{link}");
    // CNI_ARGS MAC wins over the config's.
    assert_eq!(link["address"], "02:00:00:00:00:02", "{link}");
    assert_eq!(result["interfaces"][0]["mac"], "02:00:00:00:00:02");
    assert_eq!(link["master"], "br0", "{link}");
    assert_eq!(sb.del(&c).code, 0);
    assert_eq!(sb.pod.links(), ["lo", "br0"]);
}

#[test]
fn with_ipam() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(&format!(",{STATIC}"));
    let result = sb.add(&c).ok();
    assert_eq!(result["ips"][0]["address"], "10.50.0.5/24");
    assert_eq!(result["ips"][0]["interface"], 0);
    assert_eq!(result["dns"]["nameservers"][0], "10.50.0.53");
    let link = pod_link(&sb, "eth0");
    let addrs = link["addr_info"].to_string();
    assert!(
        addrs.contains("10.50.0.5") && addrs.contains("fd50::5"),
        "{addrs}"
    );
    let routes = common::routes(&sb.pod);
    assert!(
        routes
            .iter()
            .any(|r| r["dst"] == "10.51.0.0/16" && r["gateway"] == "10.50.0.1"),
        "{routes:?}"
    );
    let check = sb.run(&sb.call("CHECK", &with_prev(&c, &result)));
    assert_eq!(check.code, 0, "{check:?}");
    assert_eq!(sb.del(&c).code, 0);
    assert_pod_and_ipam_clean(&sb);

    // host-local's reservation is released by DEL, and by a failed ADD.
    let sb = sandbox(&plugins);
    let hl = conf(&format!(
        ",{}",
        host_local(r#"[[{"subnet":"10.52.0.0/24"}]]"#, "")
    ));
    assert_eq!(sb.add(&hl).code, 0);
    assert_eq!(sb.reservations().len(), 1);
    assert_eq!(sb.del(&hl).code, 0);
    assert_pod_and_ipam_clean(&sb);
    let mut call = sb.call("ADD", &hl);
    call.args = "IgnoreUnknown=1;IP=10.9.9.9".into();
    assert_error(&sb.run(&call), 7, "10.9.9.9", "IPAM refuses");
    assert_pod_and_ipam_clean(&sb);
}

#[test]
fn bad_values_are_refused_before_the_tap_exists() {
    let plugins = Plugins::new();
    let cases = [
        (
            conf(r#","mac":"02:00:00:00:00""#),
            7,
            "mac: \"02:00:00:00:00\" is not a MAC address",
        ),
        (conf(r#","owner":-1"#), 6, "owner"),
        (conf(r#","mtu":"big""#), 6, "mtu"),
        (
            conf(r#","bridge":"no/such""#),
            7,
            "bridge: \"no/such\" is not an interface name",
        ),
        (
            conf(r#","selinuxContext":"container_t""#),
            7,
            "selinuxContext: \"container_t\" is not an SELinux context",
        ),
        (
            conf(r#","runtimeConfig":{"mac":5}"#),
            7,
            "runtimeConfig.mac: 5 is not a string",
        ),
    ];
    for (c, code, words) in cases {
        let sb = sandbox(&plugins);
        assert_error(&sb.add(&c), code, words, &c);
        assert_pod_and_ipam_clean(&sb);
    }
    // A CNI_ARGS MAC that is not one.
    let sb = sandbox(&plugins);
    let mut call = sb.call("ADD", &conf(""));
    call.args = "IgnoreUnknown=1;MAC=nope".into();
    assert_error(
        &sb.run(&call),
        7,
        "CNI_ARGS MAC: \"nope\" is not a MAC address",
        "CNI_ARGS MAC",
    );
    assert_pod_and_ipam_clean(&sb);
}

#[test]
fn a_failure_after_the_tap_exists_removes_it() {
    let plugins = Plugins::new();
    // No such bridge in the pod.
    let sb = sandbox(&plugins);
    assert_error(
        &sb.add(&conf(r#","bridge":"br9""#)),
        7,
        "bridge: \"br9\" is not a bridge in netns",
        "missing bridge",
    );
    assert_pod_and_ipam_clean(&sb);
    // A bridge name that is some other link.
    let sb = sandbox(&plugins);
    sb.pod.veth_pair("br9", "br9p");
    assert_error(
        &sb.add(&conf(r#","bridge":"br9""#)),
        7,
        "is not a bridge",
        "veth as bridge",
    );
    let mut left = sb.pod.links();
    left.sort();
    assert_eq!(left, ["br9", "br9p", "lo"]);
    // An MTU the tap refuses.
    let sb = sandbox(&plugins);
    assert_error(
        &sb.add(&conf(r#","mtu":70000"#)),
        999,
        "tap ",
        "MTU too big",
    );
    assert_pod_and_ipam_clean(&sb);
}

#[test]
fn del_leaves_an_interface_it_did_not_make() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    sb.pod.veth_pair("eth0", "eth0p");
    assert_error(
        &sb.add(&conf("")),
        999,
        "already exists",
        "the pod has eth0",
    );
    assert_eq!(sb.del(&conf("")).code, 0);
    assert_eq!(pod_link(&sb, "eth0")["linkinfo"]["info_kind"], "veth");
}

/// selinuxContext needs SELinux: on a node without it, ADD says so and leaves nothing.
#[test]
fn selinux_context() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(r#","selinuxContext":"system_u:system_r:container_t:s0""#);
    let out = sb.add(&c);
    if std::path::Path::new("/sys/fs/selinux/enforce").exists() {
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(
            pod_link(&sb, "eth0")["linkinfo"]["info_data"]["type"],
            "tap"
        );
        assert_eq!(sb.del(&c).code, 0);
    } else {
        assert_error(&out, 999, "is SELinux enabled?", "no SELinux");
    }
    assert_pod_and_ipam_clean(&sb);
}
