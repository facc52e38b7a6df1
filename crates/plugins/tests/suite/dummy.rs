//! Our dummy plugin through the real binary (the side-by-side suite compares it with the
//! reference's). This machine's kernel has no dummy links: here the tests check that config errors
//! come first and that a kernel without dummy links gets a clear error and no leftovers. Under
//! `cargo xtask vm-test` (MULTUS_RS_VM=1) every part runs.

use crate::common;

use common::{assert_error, assert_pod_and_ipam_clean, host_local, with_prev, Plugins, Sandbox};
use serde_json::Value;

const STATIC: &str = r#""ipam":{"type":"static","addresses":[{"address":"10.40.0.5/24","gateway":"10.40.0.1"},{"address":"fd40::5/64"}],"routes":[{"dst":"10.41.0.0/16"},{"dst":"fd41::/64","gw":"fd40::1"}],"dns":{"nameservers":["10.40.0.53"]}}"#;

fn conf(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"dmynet","type":"dummy"{body}}}"#)
}

fn sandbox(plugins: &Plugins) -> Sandbox {
    Sandbox::new(plugins, common::Side::Ours)
}

/// Whether dummy links can be made. When not (this machine), an ADD must say so and leave
/// nothing behind, not even a reservation.
fn dummy_here(plugins: &Plugins) -> bool {
    if common::kernel_has_dummy() {
        return true;
    }
    let sb = sandbox(plugins);
    let out = sb.add(&conf(&format!(
        ",{}",
        host_local(r#"[[{"subnet":"10.40.0.0/24"}]]"#, "")
    )));
    assert_error(&out, 999, "creating dummy", "no dummy links");
    assert_pod_and_ipam_clean(&sb);
    eprintln!(
        "this kernel has no dummy links: checked the error; the rest runs in `cargo xtask vm-test`"
    );
    false
}

#[test]
fn config_errors_come_before_anything_is_created() {
    let plugins = Plugins::new();
    let cases = [
        ("no ipam", conf(""), 7, "dummy needs addresses"),
        (
            "enabledad not a bool",
            conf(&format!(r#","enabledad":"yes",{STATIC}"#)),
            6,
            "enabledad",
        ),
        (
            "unknown CNI version",
            conf(&format!(",{STATIC}")).replace("1.0.0", "9.9.9"),
            1,
            "incompatible CNI versions",
        ),
    ];
    for (what, c, code, words) in cases {
        let sb = sandbox(&plugins);
        assert_error(&sb.add(&c), code, words, what);
        assert_pod_and_ipam_clean(&sb);
    }
}

#[test]
fn add_check_del() {
    let plugins = Plugins::new();
    if !dummy_here(&plugins) {
        return;
    }
    let sb = sandbox(&plugins);
    let c = conf(&format!(",{STATIC}"));
    let result = sb.add(&c).ok();
    assert_eq!(result["interfaces"][0]["name"], "eth0");
    assert_eq!(result["interfaces"][0]["sandbox"], sb.call("ADD", &c).netns);
    assert_eq!(result["ips"][0]["address"], "10.40.0.5/24");
    assert_eq!(result["ips"][1]["interface"], 0);
    assert_eq!(result["dns"]["nameservers"][0], "10.40.0.53");
    let link = sb.pod.ip_json(&["-d", "addr", "show", "dev", "eth0"])[0].clone();
    assert_eq!(link["linkinfo"]["info_kind"], "dummy");
    assert_eq!(link["address"], result["interfaces"][0]["mac"]);
    let flags = link["flags"].to_string();
    assert!(flags.contains("\"UP\""), "{flags}");
    let routes = common::routes(&sb.pod);
    let dsts: Vec<&str> = routes.iter().filter_map(|r| r["dst"].as_str()).collect();
    assert!(
        dsts.contains(&"10.41.0.0/16") && dsts.contains(&"fd41::/64"),
        "{dsts:?}"
    );

    let check = sb.run(&sb.call("CHECK", &with_prev(&c, &result)));
    assert_eq!(check.code, 0, "{check:?}");
    // CHECK sees a link that was taken down, or an address that went away.
    sb.pod.ip(&["link", "set", "eth0", "down"]);
    assert_error(
        &sb.run(&sb.call("CHECK", &with_prev(&c, &result))),
        999,
        "is down",
        "CHECK of a down link",
    );
    sb.pod.ip(&["link", "set", "eth0", "up"]);
    sb.pod.ip(&["addr", "del", "10.40.0.5/24", "dev", "eth0"]);
    assert_error(
        &sb.run(&sb.call("CHECK", &with_prev(&c, &result))),
        999,
        "10.40.0.5/24 is missing",
        "CHECK without the address",
    );

    for _ in 0..2 {
        let del = sb.del(&c);
        assert_eq!(del.code, 0, "{del:?}");
    }
    assert_pod_and_ipam_clean(&sb);
}

#[test]
fn a_failed_add_leaves_nothing() {
    let plugins = Plugins::new();
    if !dummy_here(&plugins) {
        return;
    }
    // host-local refuses an address outside its range: no link, no reservation.
    let sb = sandbox(&plugins);
    let hl = host_local(r#"[[{"subnet":"10.40.0.0/24"}]]"#, "");
    let mut call = sb.call("ADD", &conf(&format!(",{hl}")));
    call.args = "IgnoreUnknown=1;IP=10.9.9.9".into();
    assert_error(&sb.run(&call), 7, "10.9.9.9", "IPAM refuses");
    assert_pod_and_ipam_clean(&sb);

    // An IPAM plugin that is not there.
    let sb = sandbox(&plugins);
    let out = sb.add(&conf(r#","ipam":{"type":"nosuch"}"#));
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("nosuch"), "{}", out.stdout);
    assert_pod_and_ipam_clean(&sb);

    // An address the kernel refuses after IPAM reserved it: released again, link gone.
    let sb = sandbox(&plugins);
    let c = conf(
        r#","ipam":{"type":"static","addresses":[{"address":"10.40.0.5/24"}],"routes":[{"dst":"10.50.0.0/16","gw":"10.99.0.1"}]}"#,
    );
    let out = sb.add(&c);
    assert_ne!(out.code, 0, "{out:?}");
    assert_pod_and_ipam_clean(&sb);
}

#[test]
fn del_leaves_an_interface_it_did_not_make() {
    let plugins = Plugins::new();
    if !dummy_here(&plugins) {
        return;
    }
    let sb = sandbox(&plugins);
    sb.pod.veth_pair("eth0", "eth0p");
    let c = conf(&format!(",{STATIC}"));
    assert_error(&sb.add(&c), 999, "already exists", "the pod has eth0");
    assert_eq!(sb.del(&c).code, 0);
    let kind: Value =
        sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0]["linkinfo"]["info_kind"].clone();
    assert_eq!(kind, "veth", "DEL must not delete the pod's own eth0");
}
