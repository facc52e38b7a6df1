//! Our ipvlan, and macvlan on a dummy master. This machine's kernel has neither ipvlan nor
//! dummy links: here the tests check that config errors come before anything is created and
//! that a kernel without ipvlan gets a clear error and no leftovers. Under `cargo xtask
//! vm-test` (MULTUS_RS_VM=1, Debian's kernel) every part runs: l2, l3 and l3s on a dummy
//! master, two pods reaching each other, chained mode, DEL without a default route.

use crate::common;

use common::{
    assert_no_master_needs_a_default_route, assert_pod_and_ipam_clean, eth0, host_local,
    master_sandbox, ping, second_pod, with_prev, Plugins, Sandbox,
};
use serde_json::{json, Value};

const HL: &str = r#"[[{"subnet":"10.70.0.0/24"}]]"#;

fn conf(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"ipvnet","type":"ipvlan","master":"up0"{body}}}"#)
}

fn static_ipam(addrs: &[&str]) -> String {
    let list: Vec<String> = addrs
        .iter()
        .map(|a| format!(r#"{{"address":"{a}"}}"#))
        .collect();
    format!(
        r#""ipam":{{"type":"static","addresses":[{}]}}"#,
        list.join(",")
    )
}

/// A sandbox whose node has the master `up0`: a dummy link where the kernel has them (the VM),
/// else a veth end.
fn sandbox(plugins: &Plugins) -> Sandbox {
    master_sandbox(plugins, true)
}

/// The pod has nothing but lo, no reservation is left, and the node kept its master.
fn assert_clean(sb: &Sandbox) {
    assert_pod_and_ipam_clean(sb);
    assert!(sb.node_links().contains(&"up0".to_owned()));
}

/// Whether ipvlan links can be made. When not (this machine), an ADD must say so and leave
/// nothing behind, which is what the calling test then has checked.
fn ipvlan_here(plugins: &Plugins) -> bool {
    if common::kernel_has_ipvlan() {
        return true;
    }
    let sb = sandbox(plugins);
    let out = sb.add(&conf(&format!(",{}", host_local(HL, ""))));
    assert_eq!(out.code, 1, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("creating ipvlan"), "{msg}");
    assert!(msg.contains("Unknown device type"), "{msg}");
    assert_clean(&sb);
    eprintln!(
        "this kernel has no ipvlan: checked the error; the rest runs in `cargo xtask vm-test`"
    );
    false
}

#[test]
fn config_errors_come_before_anything_is_created() {
    let plugins = Plugins::new();
    let hl = host_local(HL, "");
    let cases: Vec<(&str, String, u64, &str)> = vec![
        (
            "no ipam, not chained",
            conf(""),
            7,
            "ipvlan needs addresses",
        ),
        (
            "unknown mode",
            conf(&format!(r#","mode":"bridge",{hl}"#)),
            7,
            r#"mode: "bridge" is not a mode of ipvlan"#,
        ),
        (
            "master missing",
            conf(&format!(",{hl}")).replace("up0", "nosuch0"),
            7,
            r#"master: "nosuch0" is not found"#,
        ),
        (
            "mtu above the master's",
            conf(&format!(r#","mtu":9000,{hl}"#)),
            7,
            "larger than the MTU 1500",
        ),
        (
            "negative mtu",
            conf(&format!(r#","mtu":-3,{hl}"#)),
            7,
            "out of range",
        ),
        (
            "mode not a string",
            conf(&format!(r#","mode":3,{hl}"#)),
            6,
            "mode: 3 is not a string",
        ),
        (
            "chained without master, prevResult with two interfaces",
            r#"{"cniVersion":"1.0.0","name":"ipvnet","type":"ipvlan","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}],"ips":[{"address":"10.70.0.9/24"}]}}"#.to_owned(),
            7,
            "exactly one interface",
        ),
        (
            "chained, prevResult without addresses",
            r#"{"cniVersion":"1.0.0","name":"ipvnet","type":"ipvlan","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"up0"}]}}"#.to_owned(),
            7,
            "ipvlan needs addresses",
        ),
    ];
    for (what, c, code, words) in cases {
        let sb = sandbox(&plugins);
        common::assert_error(&sb.add(&c), code, words, what);
        assert_clean(&sb);
    }
    assert_no_master_needs_a_default_route(
        &plugins,
        &format!(r#"{{"cniVersion":"1.0.0","name":"ipvnet","type":"ipvlan",{hl}}}"#),
    );
}

#[test]
fn every_mode_on_a_dummy_master() {
    let plugins = Plugins::new();
    if !ipvlan_here(&plugins) {
        return;
    }
    for mode in ["l2", "l3", "l3s"] {
        let sb = sandbox(&plugins);
        let c = conf(&format!(
            r#","mode":"{mode}","mtu":1400,{}"#,
            host_local(HL, r#","routes":[{"dst":"10.80.0.0/16"}]"#)
        ));
        let r = sb.add(&c).ok();
        let link = eth0(&sb.pod);
        assert_eq!(link["linkinfo"]["info_kind"], "ipvlan", "{link}");
        assert_eq!(link["linkinfo"]["info_data"]["mode"], mode, "{link}");
        assert_eq!(link["mtu"], 1400);
        // An ipvlan shares its master's MAC.
        let master_mac = sb.node.ip_json(&["link", "show", "dev", "up0"])[0]["address"].clone();
        assert_eq!(link["address"], master_mac);
        assert_eq!(
            r["interfaces"],
            json!([{"name":"eth0","mac":master_mac,"sandbox":sb.pod.path().display().to_string()}])
        );
        assert_eq!(r["ips"][0]["address"], "10.70.0.2/24");
        assert_eq!(r["ips"][0]["interface"], 0);
        let routes = sb.pod.ip_json(&["route", "show", "10.80.0.0/16"]);
        assert_eq!(routes[0]["dev"], "eth0", "{routes}");
        sb.run(&sb.call("CHECK", &with_prev(&c, &r))).ok();
        // CHECK with another mode in the config fails.
        let other = if mode == "l2" { "l3" } else { "l2" };
        let wrong = with_prev(&c, &r).replace(
            &format!(r#""mode":"{mode}""#),
            &format!(r#""mode":"{other}""#),
        );
        let out = sb.run(&sb.call("CHECK", &wrong));
        assert!(
            out.stdout
                .contains(&format!("mode {mode}, the config says {other}")),
            "{}",
            out.stdout
        );
        sb.del(&c).ok();
        sb.del(&c).ok();
        assert_clean(&sb);
    }
}

#[test]
fn two_pods_on_one_master_reach_each_other() {
    let plugins = Plugins::new();
    if !ipvlan_here(&plugins) {
        return;
    }
    for mode in ["l2", "l3", "l3s"] {
        let sb = sandbox(&plugins);
        let a = conf(&format!(
            r#","mode":"{mode}",{}"#,
            static_ipam(&["10.70.0.5/24", "fd70::5/64"])
        ));
        let b = conf(&format!(
            r#","mode":"{mode}",{}"#,
            static_ipam(&["10.70.0.6/24", "fd70::6/64"])
        ));
        sb.add(&a).ok();
        let (pod_b, _) = second_pod(&sb, &b);
        ping(&sb.pod, "10.70.0.6").unwrap_or_else(|e| panic!("{mode}: {e}"));
        ping(&pod_b, "10.70.0.5").unwrap_or_else(|e| panic!("{mode}: {e}"));
        ping(&sb.pod, "fd70::6").unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
}

#[test]
fn chained_after_another_plugin_takes_master_and_addresses_from_prev_result() {
    let plugins = Plugins::new();
    if !ipvlan_here(&plugins) {
        return;
    }
    let sb = sandbox(&plugins);
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "up0"}],
        "ips": [{"address": "10.70.0.9/24", "gateway": "10.70.0.1"}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.70.0.53"]}
    });
    let c = json!({
        "cniVersion": "1.0.0", "name": "ipvnet", "type": "ipvlan", "mode": "l3",
        "dns": {"search": ["cluster.local"]},
        "prevResult": prev,
    })
    .to_string();
    let r = sb.add(&c).ok();
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(
        r["ips"],
        json!([{"address":"10.70.0.9/24","gateway":"10.70.0.1","interface":0}])
    );
    assert_eq!(r["routes"], json!([{"dst":"0.0.0.0/0"}]));
    assert_eq!(
        r["dns"],
        json!({"nameservers":["10.70.0.53"],"search":["cluster.local"]})
    );
    let link = eth0(&sb.pod);
    assert_eq!(link["linkinfo"]["info_data"]["mode"], "l3");
    assert_eq!(link["addr_info"][0]["local"], "10.70.0.9", "{link}");
    let def = sb.pod.ip_json(&["route", "show", "default"]);
    assert_eq!(def[0]["gateway"], "10.70.0.1", "{def}");
    // CHECK gets the final result as prevResult.
    let mut check: Value = serde_json::from_str(&c).unwrap();
    check["prevResult"] = r.clone();
    sb.run(&sb.call("CHECK", &check.to_string())).ok();
    sb.del(&c).ok();
    assert_clean(&sb);
}

#[test]
fn failed_ipam_removes_the_link_and_del_needs_no_default_route() {
    let plugins = Plugins::new();
    if !ipvlan_here(&plugins) {
        return;
    }
    let sb = sandbox(&plugins);
    let c = conf(&format!(",{}", host_local(HL, "")));
    // host-local refuses an address outside its range after the link exists.
    let mut call = sb.call("ADD", &c);
    call.args = "IgnoreUnknown=1;IP=10.9.9.9".into();
    assert_eq!(sb.run(&call).err_code(), 7);
    assert_clean(&sb);

    sb.add(&c).ok();
    assert_eq!(sb.reservations().len(), 1);
    // No default route, and a config without master: the reference's DEL fails here.
    sb.node.ip(&["route", "del", "default"]);
    let no_master = c.replace(r#","master":"up0""#, "");
    sb.del(&no_master).ok();
    assert_clean(&sb);
    sb.del(&no_master).ok();
}

#[test]
fn macvlan_on_a_dummy_master() {
    let plugins = Plugins::new();
    if !common::kernel_has_dummy() {
        eprintln!("this kernel has no dummy links: runs in `cargo xtask vm-test`");
        return;
    }
    let sb = sandbox(&plugins);
    let mv = |ip: &str| {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","master":"up0",{}}}"#,
            static_ipam(&[ip])
        )
    };
    let r = sb.add(&mv("10.71.0.5/24")).ok();
    let link = eth0(&sb.pod);
    assert_eq!(link["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(r["interfaces"][0]["mac"], link["address"]);
    let (pod_b, _) = second_pod(&sb, &mv("10.71.0.6/24"));
    ping(&sb.pod, "10.71.0.6").unwrap();
    ping(&pod_b, "10.71.0.5").unwrap();
    sb.del(&mv("10.71.0.5/24")).ok();
    assert!(sb.pod.links().iter().all(|l| l == "lo"));
}
