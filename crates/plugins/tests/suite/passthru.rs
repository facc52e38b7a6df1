//! passthru run as a runtime (multus) runs it: an empty result in the config's version for
//! ADD, success for everything else, and the usual refusals of a bad config.

use std::path::Path;

use serde_json::{json, Value};
use testkit::{CniCall, CniOutput, Netns};

fn run(command: &str, stdin: &str, netns: &Netns) -> CniOutput {
    let bin = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    let dir = testkit::PluginDir::new(bin, &["passthru"]);
    let mut call = CniCall::new(command, stdin);
    call.netns = netns.path().display().to_string();
    call.path = dir.path().display().to_string();
    call.run(&dir.path().join("passthru"), None)
}

fn conf(version: &str) -> String {
    json!({"cniVersion": version, "name": "aux-chain", "type": "passthru", "unknownOption": true})
        .to_string()
}

#[test]
fn add_returns_an_empty_result_in_the_requested_version() {
    let pod = Netns::new("pod");
    // 0.3.x and 0.4.0 results always carry `dns`; 1.x leaves an empty one out.
    for version in ["0.3.0", "0.3.1", "0.4.0"] {
        let result = run("ADD", &conf(version), &pod).ok();
        assert_eq!(
            result,
            json!({"cniVersion": version, "dns": {}}),
            "{version}"
        );
    }
    for version in ["1.0.0", "1.1.0"] {
        let result = run("ADD", &conf(version), &pod).ok();
        assert_eq!(result, json!({"cniVersion": version}), "{version}");
    }
    // Whatever came before in the chain is not passed on: the result stays empty.
    let mut with_prev: Value = serde_json::from_str(&conf("1.1.0")).unwrap();
    with_prev["prevResult"] = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.1.0.2/24"}]});
    let result = run("ADD", &with_prev.to_string(), &pod).ok();
    assert_eq!(result, json!({"cniVersion": "1.1.0"}));
    assert_eq!(pod.links(), ["lo"], "passthru creates nothing");
}

#[test]
fn del_check_status_and_gc_succeed_and_do_nothing() {
    let pod = Netns::new("pod");
    for command in ["DEL", "CHECK", "STATUS", "GC"] {
        let out = run(command, &conf("1.1.0"), &pod);
        assert_eq!(out.ok(), Value::Null, "{command}");
    }
    assert_eq!(pod.links(), ["lo"]);
}

#[test]
fn a_bad_config_is_refused() {
    let pod = Netns::new("pod");
    assert_eq!(run("ADD", "{", &pod).err_code(), 6);
    assert_eq!(run("ADD", "[]", &pod).err_code(), 6);
    let no_name = json!({"cniVersion": "1.0.0", "type": "passthru"}).to_string();
    assert_eq!(run("ADD", &no_name, &pod).err_code(), 7);
    let bad_version = json!({"cniVersion": "9.9.9", "name": "n", "type": "passthru"}).to_string();
    assert_eq!(run("ADD", &bad_version, &pod).err_code(), 1);
    // CHECK needs 0.4.0, STATUS 1.1.0.
    assert_eq!(run("CHECK", &conf("0.3.1"), &pod).err_code(), 1);
    assert_eq!(run("STATUS", &conf("1.0.0"), &pod).err_code(), 1);
}
