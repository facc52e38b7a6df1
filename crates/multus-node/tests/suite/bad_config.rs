//! Bad multus configurations and bad delegate configs, through the real binary: each ADD
//! fails with a CNI error that says what is wrong and where, and leaves nothing behind.

use crate::common;

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
        (
            json!({"logLevel": "loud"}),
            7,
            r#"logLevel: "loud" is not a level"#,
        ),
        (json!({"logLevel": 3}), 7, "logLevel: 3 is not a string"),
        (
            json!({"logToStderr": "yes"}),
            7,
            r#"logToStderr: "yes" is not true or false"#,
        ),
        (json!({"logFile": 7}), 7, "logFile: 7 is not a string"),
        (
            json!({"logOptions": "x"}),
            7,
            r#"logOptions: "x" is not an object"#,
        ),
        (
            json!({"logOptions": {"maxAge": -1}}),
            7,
            "logOptions.maxAge: -1 is not a whole number",
        ),
        (
            json!({"logOptions": {"compress": "yes"}}),
            7,
            r#"logOptions.compress: "yes" is not true or false"#,
        ),
        (json!({"delegates": {}}), 7, "delegates: {} is not a list"),
        (
            json!({"delegates": [1]}),
            7,
            "delegates[0]: 1 is not a network config",
        ),
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
            "clusterNetwork: 5 is not a string",
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
            r#"defaultNetworks: "x" is not a list of strings"#,
        ),
        (
            json!({"defaultNetworks": [""]}),
            7,
            r#"defaultNetworks[0]: "" is not a non-empty string"#,
        ),
        (
            json!({"defaultNetworks": ["missing"]}),
            7,
            "defaultNetworks \"missing\"",
        ),
        (
            json!({"namespaceIsolation": "true"}),
            7,
            r#"namespaceIsolation: "true" is not true or false"#,
        ),
        (
            json!({"globalNamespaces": 5}),
            7,
            "globalNamespaces: 5 is not a string",
        ),
        (
            json!({"globalNamespaces": "a,Bad_NS"}),
            7,
            r#"globalNamespaces: "Bad_NS" is not a valid namespace"#,
        ),
        (
            json!({"systemNamespaces": "kube-system"}),
            7,
            r#"systemNamespaces: "kube-system" is not a list of strings"#,
        ),
        (
            json!({"systemNamespaces": ["BAD"]}),
            7,
            r#"systemNamespaces: "BAD" is not a valid namespace"#,
        ),
        (
            json!({"multusNamespace": "UPPER"}),
            7,
            r#"multusNamespace: "UPPER" is not a valid namespace"#,
        ),
        (
            json!({"retryDeleteOnError": 1}),
            7,
            "retryDeleteOnError: 1 is not true or false",
        ),
        (
            json!({"runtimeConfig": []}),
            7,
            "runtimeConfig: [] is not an object",
        ),
        (
            json!({"readinessindicatorfile": 3}),
            7,
            "readinessindicatorfile: 3 is not a string",
        ),
        (
            json!({"readinessTimeoutSeconds": -5}),
            7,
            "readinessTimeoutSeconds: -5 is not a whole number",
        ),
        (
            json!({"apiRetries": "x"}),
            7,
            r#"apiRetries: "x" is not a whole number"#,
        ),
        (
            json!({"apiRetries": 5_000_000_000u64}),
            7,
            "apiRetries: 5000000000 is too large",
        ),
        (json!({"confDir": 1}), 7, "confDir: 1 is not a string"),
        (json!({"cniDir": []}), 7, "cniDir: [] is not a string"),
        (json!({"binDir": {}}), 7, "binDir: {} is not a string"),
        (
            json!({"kubeconfig": false}),
            7,
            "kubeconfig: false is not a string",
        ),
        (with("type", json!(null)), 7, "delegates[0]"),
        (with("type", json!("../bridge")), 7, "invalid plugin type"),
        (
            with("type", json!("nope")),
            7,
            "failed to find plugin \"nope\"",
        ),
        (
            with("name", json!("bad name")),
            7,
            r#"name: "bad name" has invalid characters"#,
        ),
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
            r#"network cluster on interface eth0: ipam.subnet: "10.1.0.0/33" is not a CIDR"#,
        ),
        (
            with(
                "ipam",
                json!({"type": "host-local", "subnet": "10.10.0.0/24",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.42.0.100/24"}]}),
            ),
            6,
            r#"ipam.routes[0].gw: "10.42.0.100/24" is not an IP address (a gateway takes no prefix length)"#,
        ),
        (with("mtu", json!(-5)), 6, "mtu: -5 is not a whole number"),
        (
            json!({"logFile": ["x".repeat(1 << 20) + "\u{1b}[31m"]}),
            7,
            "logFile: [\"xxx",
        ),
        (
            json!({"logLevel": "x".repeat(1 << 20)}),
            7,
            "(1048576 bytes) is not a level",
        ),
        (
            json!({"auxiliaryCNIChainName": "../up"}),
            7,
            r#"auxiliaryCNIChainName: "../up" is not a network name"#,
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
        let what: String = patch.to_string().chars().take(200).collect();
        let out = sb.cmd("ADD", &patched(&sb, patch));
        assert_eq!(out.err_code(), code, "{what}: {out:?}");
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains(expected), "{what}: {msg}");
        // The key and the value, never a column; and small whatever the input.
        assert!(!msg.contains("column"), "{what}: {msg}");
        assert!(
            out.stdout.len() < 4096,
            "{what}: {} bytes",
            out.stdout.len()
        );
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
