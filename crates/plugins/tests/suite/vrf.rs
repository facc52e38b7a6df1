//! Our vrf plugin chained after bridge, as a runtime runs a conflist: ADD of each plugin with
//! the previous one's result, CHECK of the whole chain with the last result (and of vrf once
//! the interface has left the VRF), DEL in reverse.
//! This machine's kernel has no VRFs: here the test checks the clear error; under `cargo xtask
//! vm-test` (MULTUS_RS_VM=1) the chain runs.

use crate::common;

use common::{assert_error, with_prev, Plugins, Sandbox, Side};

const BRIDGE: &str = r#"{"cniVersion":"1.0.0","name":"vrfnet","type":"bridge","bridge":"vrfbr0","isGateway":true,
 "ipam":{"type":"host-local","dataDir":"DATADIR","ranges":[[{"subnet":"10.62.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}"#;
const VRF: &str =
    r#"{"cniVersion":"1.0.0","name":"vrfnet","type":"vrf","vrfname":"red","table":77}"#;

#[test]
fn bridge_then_vrf_checks_pings_and_deletes() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let bridge = sb.add(BRIDGE).ok();
    let vrf_conf = with_prev(VRF, &bridge);
    let out = sb.add(&vrf_conf);
    if !common::kernel_has_vrf() {
        assert_error(&out, 999, "creating vrf \"red\" with table 77", "no vrf");
        assert!(out.stdout.contains("Unknown device type"), "{}", out.stdout);
        assert!(!sb.pod.links().contains(&"red".to_owned()));
        assert_eq!(sb.del(BRIDGE).code, 0);
        eprintln!(
            "this kernel has no vrf: checked the error; the chain runs in `cargo xtask vm-test`"
        );
        return;
    }
    let result = out.ok();
    // vrf passes the bridge's result on.
    assert_eq!(result["ips"], bridge["ips"]);
    let eth0 = &sb.pod.ip_json(&["-d", "link", "show", "dev", "eth0"])[0];
    assert_eq!(eth0["master"], "red", "{eth0}");
    let table = sb
        .pod
        .ip_json(&["-4", "route", "show", "table", "77"])
        .to_string();
    assert!(
        table.contains(r#""dst":"default""#),
        "the default route moved: {table}"
    );
    // The node's gateway answers through the VRF.
    common::ping_from_vrf(&sb.pod, "red", "10.62.0.1").expect("ping through the VRF");

    // CHECK of the chain, each plugin with the chain's last result.
    for conf in [BRIDGE, VRF] {
        let check = sb.run(&sb.call("CHECK", &with_prev(conf, &result)));
        assert_eq!(check.code, 0, "{conf}: {check:?}");
    }
    // CHECK finds the interface moved out of the VRF, and back in.
    sb.pod.ip(&["link", "set", "eth0", "nomaster"]);
    let check = sb.run(&sb.call("CHECK", &with_prev(VRF, &result)));
    assert_error(
        &check,
        999,
        r#"interface "eth0" is not in VRF "red""#,
        "out of the VRF",
    );
    sb.pod.ip(&["link", "set", "eth0", "master", "red"]);
    let check = sb.run(&sb.call("CHECK", &with_prev(VRF, &result)));
    assert_eq!(check.code, 0, "back in the VRF: {check:?}");
    // DEL in reverse, twice.
    for _ in 0..2 {
        for conf in [VRF, BRIDGE] {
            let del = sb.run(&sb.call("DEL", &with_prev(conf, &result)));
            assert_eq!(del.code, 0, "{conf}: {del:?}");
        }
    }
    let links: Vec<String> = sb.pod.links();
    assert_eq!(links, ["lo"], "{links:?}");
    assert!(sb.reservations().is_empty());
}
