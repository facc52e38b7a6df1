//! Bad multus configurations and bad delegate configs, through the real binary: each ADD
//! fails with a CNI error that says what is wrong and where, and leaves nothing behind.

#![allow(clippy::unwrap_used)]

mod common;

use common::Sandbox;
use serde_json::{json, Value};

/// A multus config: the valid base with `patch` merged in (a `null` removes a key).
fn patched(sb: &Sandbox, patch: Value) -> String {
    let mut conf: Value = serde_json::from_str(&sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({}),
    ))
    .expect("base config");
    if let (Value::Object(c), Value::Object(p)) = (&mut conf, patch) {
        for (k, v) in p {
            if v.is_null() {
                c.remove(&k);
            } else {
                c.insert(k, v);
            }
        }
    }
    conf.to_string()
}

#[test]
fn bad_multus_configs_name_the_key_and_leave_nothing() {
    let sb = Sandbox::new();
    let file = |name: &str| sb.conf_dir().join(name).display().to_string();
    sb.write_conf(
        "bad.conf",
        &json!({"cniVersion": "1.0.0", "name": "badjson"}),
    );
    let garbage = sb.dir.path().join("garbage.json");
    std::fs::write(&garbage, "{").expect("write");
    let empty_dir = sb.dir.path().join("empty");
    std::fs::create_dir_all(&empty_dir).expect("mkdir");
    let cluster = sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0");
    let with = |key: &str, v: Value| {
        let mut d = cluster.clone();
        d[key] = v;
        json!({"delegates": [d]})
    };
    let cases: Vec<(Value, u64, &str)> = vec![
        (json!({"logLevel": "loud"}), 7, "logLevel: unknown level"),
        (json!({"logLevel": 3}), 7, "logLevel: must be a string"),
        (
            json!({"logToStderr": "yes"}),
            7,
            "logToStderr: must be true or false",
        ),
        (json!({"logFile": 7}), 7, "logFile: must be a string"),
        (
            json!({"logOptions": "x"}),
            7,
            "logOptions: must be an object",
        ),
        (
            json!({"logOptions": {"maxAge": -1}}),
            7,
            "logOptions.maxAge",
        ),
        (
            json!({"logOptions": {"compress": "yes"}}),
            7,
            "logOptions.compress",
        ),
        (json!({"delegates": {}}), 7, "delegates: must be a list"),
        (json!({"delegates": [1]}), 7, "delegates[0]"),
        (
            json!({"delegates": []}),
            7,
            "clusterNetwork: set clusterNetwork or",
        ),
        (
            json!({"delegates": null}),
            7,
            "clusterNetwork: set clusterNetwork or",
        ),
        (
            json!({"clusterNetwork": 5}),
            7,
            "clusterNetwork: must be a string",
        ),
        (
            json!({"clusterNetwork": "/nonexistent/net.conf"}),
            7,
            "cannot read /nonexistent/net.conf",
        ),
        (
            json!({"clusterNetwork": "nosuchnet"}),
            7,
            "no network named \"nosuchnet\"",
        ),
        (
            json!({"clusterNetwork": empty_dir}),
            7,
            "no .conf or .conflist file",
        ),
        (
            json!({"clusterNetwork": file("bad.conf")}),
            7,
            "no plugin type",
        ),
        (
            json!({"clusterNetwork": garbage}),
            6,
            "error parsing network config",
        ),
        (
            json!({"defaultNetworks": "x"}),
            7,
            "defaultNetworks: must be a list",
        ),
        (
            json!({"defaultNetworks": [""]}),
            7,
            "defaultNetworks: entries must be non-empty",
        ),
        (
            json!({"defaultNetworks": ["missing"]}),
            7,
            "defaultNetworks \"missing\"",
        ),
        (
            json!({"namespaceIsolation": "true"}),
            7,
            "namespaceIsolation: must be true or false",
        ),
        (
            json!({"globalNamespaces": 5}),
            7,
            "globalNamespaces: must be a string",
        ),
        (
            json!({"globalNamespaces": "a,Bad_NS"}),
            7,
            "\"Bad_NS\" is not a valid namespace",
        ),
        (
            json!({"systemNamespaces": "kube-system"}),
            7,
            "systemNamespaces: must be a list",
        ),
        (
            json!({"systemNamespaces": ["BAD"]}),
            7,
            "\"BAD\" is not a valid namespace",
        ),
        (
            json!({"multusNamespace": "UPPER"}),
            7,
            "\"UPPER\" is not a valid namespace",
        ),
        (
            json!({"retryDeleteOnError": 1}),
            7,
            "retryDeleteOnError: must be true or false",
        ),
        (
            json!({"runtimeConfig": []}),
            7,
            "runtimeConfig: must be an object",
        ),
        (
            json!({"readinessindicatorfile": 3}),
            7,
            "readinessindicatorfile: must be a string",
        ),
        (
            json!({"readinessTimeoutSeconds": -5}),
            7,
            "readinessTimeoutSeconds",
        ),
        (json!({"apiRetries": "x"}), 7, "apiRetries"),
        (json!({"confDir": 1}), 7, "confDir: must be a string"),
        (json!({"cniDir": []}), 7, "cniDir: must be a string"),
        (json!({"binDir": {}}), 7, "binDir: must be a string"),
        (
            json!({"kubeconfig": false}),
            7,
            "kubeconfig: must be a string",
        ),
        (with("type", json!(null)), 7, "delegates[0]"),
        (with("type", json!("../bridge")), 7, "invalid plugin type"),
        (
            with("type", json!("nope")),
            7,
            "failed to find plugin \"nope\"",
        ),
        (with("name", json!("bad name")), 7, "invalid characters"),
        (
            with("cniVersion", json!("2.0.0")),
            7,
            "incompatible CNI versions",
        ),
        (
            with("ipam", json!({"type": "host-local"})),
            7,
            "network cluster on interface eth0",
        ),
        (
            with(
                "ipam",
                json!({"type": "host-local", "subnet": "10.1.0.0/33"}),
            ),
            6,
            "invalid CIDR address",
        ),
        (
            with("bridge", json!("this-bridge-name-is-too-long")),
            7,
            "network cluster on interface eth0",
        ),
        (
            json!({"delegates": [{"cniVersion": "1.0.0", "name": "l", "plugins": []}]}),
            7,
            "has no plugins",
        ),
        (
            json!({"delegates": [{"cniVersion": "1.0.0", "name": "l", "plugins": [{"bridge": "x"}]}]}),
            7,
            "has no type",
        ),
    ];
    assert!(cases.len() >= 45);
    for (patch, code, expected) in cases {
        let what = patch.to_string();
        let out = sb.cmd("ADD", &patched(&sb, patch));
        assert_eq!(out.err_code(), code, "{what}: {out:?}");
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains(expected), "{what}: {msg}");
        sb.assert_clean(&what);
    }
}

#[test]
fn a_netns_that_does_not_exist_is_code_8_and_leaves_nothing() {
    let sb = Sandbox::new();
    let mut call = sb.call("ADD", &patched(&sb, json!({})));
    call.netns = "/run/netns/does-not-exist".into();
    let out = sb.run(&call);
    assert_eq!(out.err_code(), 8);
    assert!(out.stdout.contains("/run/netns/does-not-exist"), "{out:?}");
    sb.assert_clean("bad netns");
}

#[test]
fn a_cni_version_multus_does_not_know_is_refused() {
    let sb = Sandbox::new();
    let out = sb.cmd("ADD", &patched(&sb, json!({"cniVersion": "9.9.9"})));
    assert_eq!(out.err_code(), 1);
    sb.assert_clean("unknown version");
}

#[test]
fn gc_without_valid_attachments_is_refused_rather_than_deleting_everything() {
    let sb = Sandbox::new();
    let conf = patched(&sb, json!({"cniVersion": "1.1.0"}));
    let conf = conf.replace("\"1.0.0\"", "\"1.1.0\"");
    sb.cmd("ADD", &conf).ok();
    let mut gc = sb.call("GC", &conf);
    gc.container_id = String::new();
    gc.ifname = String::new();
    gc.netns = String::new();
    let out = sb.run(&gc);
    assert_eq!(out.err_code(), 7);
    assert!(out.stdout.contains("cni.dev/valid-attachments"), "{out:?}");
    assert_eq!(sb.pod_links(), ["eth0"]);
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

/// A config past the 2 MiB cap (a 50 MB one took multus to 1.77 GB) is refused before it is
/// parsed.
#[test]
fn a_config_past_the_cap_is_refused_before_it_is_parsed() {
    let sb = Sandbox::new();
    let huge = patched(&sb, json!({"junk": vec![0; 2 << 20]}));
    let out = sb.cmd("ADD", &huge);
    assert_eq!(out.err_code(), 6, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("larger than 2 MiB"), "{msg}");
    sb.assert_clean("refused");
}
