//! Network configs and lists, built as libcni builds them (libcni/api.go buildOneConfig,
//! libcni/conf.go NetworkConfFromBytes).

use cni::config::{inject_runtime_config, is_config_list, parse_plugin_config};
use cni::{Code, NetConf, NetConfList, Version};
use serde_json::{json, Map, Value};

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

const LIST: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "podnet",
  "zExtra": true,
  "plugins": [
    {"type": "bridge", "zeta": 1, "alpha": {"b": 1, "a": 2},
     "capabilities": {"portMappings": true, "bandwidth": false, "ips": true}},
    {"type": "tuning", "runtimeConfig": {"keep": 1}, "capabilities": {"mac": true}},
    {"type": "firewall"}
  ],
  "aExtra": "kept"
}"#;

#[test]
fn plugin_config_injects_name_version_capabilities_and_prev_result() {
    let list = NetConfList::parse(LIST.as_bytes()).unwrap();
    let runtime = object(json!({
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1},
        "mac": "c2:00:00:00:00:01"
    }));
    let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]});

    let first = list.plugin_config(0, &runtime, Some(&prev)).unwrap();
    let keys: Vec<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "type",
            "zeta",
            "alpha",
            "capabilities",
            "name",
            "cniVersion",
            "runtimeConfig",
            "prevResult"
        ]
    );
    let alpha_keys: Vec<&str> = first["alpha"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(alpha_keys, ["b", "a"], "nested keys keep their order");
    assert_eq!(first["name"], "podnet");
    assert_eq!(first["cniVersion"], "1.0.0");
    // Only capabilities that are on and that the runtime supplied.
    assert_eq!(
        first["runtimeConfig"],
        json!({"portMappings": runtime["portMappings"]})
    );
    assert_eq!(first["prevResult"], prev);

    // A runtimeConfig already in the plugin's config is kept and added to (libcni replaces it).
    let second = list.plugin_config(1, &runtime, None).unwrap();
    assert_eq!(
        second["runtimeConfig"],
        json!({"keep": 1, "mac": "c2:00:00:00:00:01"})
    );
    assert!(second.get("prevResult").is_none());

    // No capabilities: no runtimeConfig at all.
    let third = list.plugin_config(2, &runtime, None).unwrap();
    assert!(third.get("runtimeConfig").is_none());

    let err = list.plugin_config(3, &runtime, None).unwrap_err();
    assert_eq!(err.code, Code::Internal as u32);
}

#[test]
fn the_list_keeps_unknown_keys_in_order() {
    let list = NetConfList::parse(LIST.as_bytes()).unwrap();
    let extra: Vec<&str> = list.extra.keys().map(String::as_str).collect();
    assert_eq!(extra, ["zExtra", "aExtra"]);
    let back = serde_json::to_value(&list).unwrap();
    assert_eq!(back["aExtra"], "kept");
    assert_eq!(back["plugins"][0]["zeta"], 1);
    assert!(is_config_list(&back));
    assert!(!is_config_list(&back["plugins"][0]));
}

#[test]
fn cni_versions_picks_the_highest_supported_including_cni_version() {
    let cases: &[(Value, Version)] = &[
        (json!({"cniVersion": "1.1.0"}), Version::V1_1_0),
        (json!({}), Version::V0_1_0),
        (
            json!({"cniVersion": "0.4.0", "cniVersions": ["0.3.1", "1.0.0", "9.9.9"]}),
            Version::V1_0_0,
        ),
        (
            json!({"cniVersion": "1.0.0", "cniVersions": ["0.4.0"]}),
            Version::V1_0_0,
        ),
        (
            json!({"cniVersions": ["1.1.0", "0.3.1", "1.0.0"]}),
            Version::V1_1_0,
        ),
        (
            json!({"cniVersion": "0.4.0", "cniVersions": ["2.0.0"]}),
            Version::V0_4_0,
        ),
        (
            json!({"cniVersion": "2.0.0", "cniVersions": ["1.0.0"]}),
            Version::V1_0_0,
        ),
    ];
    for (fields, want) in cases {
        let mut list = object(json!({"name": "n", "plugins": [{"type": "bridge"}]}));
        list.extend(object(fields.clone()));
        let list = NetConfList::parse(&serde_json::to_vec(&list).unwrap()).unwrap();
        assert_eq!(list.effective_version().unwrap(), *want, "{fields}");
        let conf = list.plugin_config(0, &Map::new(), None).unwrap();
        assert_eq!(conf["cniVersion"], want.as_str(), "{fields}");
    }
    let list = NetConfList {
        cni_version: "2.0.0".into(),
        ..NetConfList::default()
    };
    assert_eq!(
        list.effective_version().unwrap_err().code,
        Code::IncompatibleVersion as u32
    );
}

#[test]
fn list_errors() {
    let cases: &[(&str, Code)] = &[
        ("{", Code::Decoding),
        (r#"{"plugins":[{"type":"bridge"}]}"#, Code::InvalidConfig),
        (
            r#"{"name":"a b","plugins":[{"type":"bridge"}]}"#,
            Code::InvalidConfig,
        ),
        (r#"{"name":"n"}"#, Code::InvalidConfig),
        (r#"{"name":"n","plugins":[]}"#, Code::InvalidConfig),
        (
            r#"{"name":"n","plugins":[{"type":"bridge"},{"mtu":1}]}"#,
            Code::InvalidConfig,
        ),
        (
            r#"{"name":"n","plugins":[{"type":""}]}"#,
            Code::InvalidConfig,
        ),
        (
            r#"{"name":"n","plugins":[{"type":"b"}],"disableCheck":"yes"}"#,
            Code::Decoding,
        ),
    ];
    for (json, code) in cases {
        let err = NetConfList::parse(json.as_bytes()).unwrap_err();
        assert_eq!(err.code, *code as u32, "{json}: {err}");
    }
    let err = NetConfList::parse(br#"{"name":"n","plugins":[{"type":"b"},{}]}"#).unwrap_err();
    assert!(err.msg.contains("plugin 1"), "{err}");
}

#[test]
fn disable_flags_read_bools_or_strings_like_libcni() {
    for (value, want) in [
        (json!(true), true),
        (json!(false), false),
        (json!("true"), true),
        (json!("False"), false),
        (json!("TRUE"), true),
    ] {
        let raw = json!({"name": "n", "plugins": [{"type": "b"}],
            "disableCheck": value, "disableGC": value});
        let list = NetConfList::parse(&serde_json::to_vec(&raw).unwrap()).unwrap();
        assert_eq!(
            (list.disable_check, list.disable_gc),
            (want, want),
            "{value}"
        );
        assert!(list.extra.is_empty(), "{:?}", list.extra);
        let back = serde_json::to_value(&list).unwrap();
        assert_eq!(back.get("disableGC").is_some(), want);
    }
}

#[test]
fn inject_runtime_config_ignores_non_boolean_capabilities() {
    let mut conf = object(json!({"type": "x", "capabilities": {"a": "yes", "b": true, "c": 1}}));
    let runtime = object(json!({"a": 1, "b": 2, "c": 3}));
    inject_runtime_config(&mut conf, &runtime);
    assert_eq!(conf["runtimeConfig"], json!({"b": 2}));
    let mut bare = object(json!({"type": "x"}));
    inject_runtime_config(&mut bare, &runtime);
    assert!(bare.get("runtimeConfig").is_none());
}

#[test]
fn net_conf_accessors() {
    let conf: NetConf = parse_plugin_config(
        br#"{"cniVersion":"0.4.0","name":"n","type":"bridge",
             "ipam":{"type":"host-local","subnet":"10.0.0.0/24"},
             "runtimeConfig":{"mac":"c2:00:00:00:00:01"},
             "args":{"cni":{"ips":["10.0.0.9/24"]}},
             "dns":{"nameservers":["10.0.0.1"]},
             "bridge":"cni0"}"#,
    )
    .unwrap();
    assert_eq!(conf.version().unwrap(), Version::V0_4_0);
    assert_eq!(conf.ipam_type(), Some("host-local"));
    assert_eq!(
        conf.runtime_config("mac"),
        Some(&json!("c2:00:00:00:00:01"))
    );
    assert_eq!(conf.args_cni("ips"), Some(&json!(["10.0.0.9/24"])));
    assert_eq!(conf.dns.unwrap().nameservers, ["10.0.0.1"]);

    let bare: NetConf = parse_plugin_config(br#"{"name":"n","ipam":{"type":""}}"#).unwrap();
    assert_eq!(bare.version().unwrap(), Version::V0_1_0);
    assert_eq!(bare.ipam_type(), None);
    let err = parse_plugin_config::<NetConf>(b"[").unwrap_err();
    assert_eq!(err.code, Code::Decoding as u32);
    // An ipam that is not an object is an error, not "no IPAM".
    for bad in [r#""static""#, r#"["static"]"#, "5"] {
        let text = format!(r#"{{"name":"n","ipam":{bad}}}"#);
        let err = parse_plugin_config::<NetConf>(text.as_bytes()).unwrap_err();
        assert_eq!(err.code, Code::Decoding as u32, "{bad}");
        assert!(err.msg.starts_with("ipam: "), "{bad}: {}", err.msg);
    }
}

/// A conf dir holding the chain `podnet`'s plugin subdirectory.
fn plugin_subdir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let sub = dir.path().join("podnet");
    std::fs::create_dir(&sub).expect("create the subdirectory");
    for (name, text) in files {
        std::fs::write(sub.join(name), text).expect("write a config file");
    }
    dir
}

fn types(plugins: &[Map<String, Value>]) -> Vec<&str> {
    plugins
        .iter()
        .map(|p| p["type"].as_str().expect("a plugin has a type"))
        .collect()
}

#[test]
fn a_list_in_a_conf_dir_gets_its_subdirectory_plugins_in_file_name_order() {
    let dir = plugin_subdir(&[
        ("20-second.conf", r#"{"type": "second", "keep": 1}"#),
        ("10-first.conf", r#"{"type": "first"}"#),
        // Only `.conf` files, and no directories, are plugin configs.
        ("30-other.json", r#"{"type": "json"}"#),
        ("40-other.conflist", r#"{"type": "conflist"}"#),
    ]);
    std::fs::create_dir(dir.path().join("podnet/50-dir.conf")).unwrap();
    let list = NetConfList::parse_in_dir(LIST.as_bytes(), dir.path()).unwrap();
    assert_eq!(
        types(&list.plugins),
        ["bridge", "tuning", "firewall", "first", "second"]
    );
    assert_eq!(list.plugins[4]["keep"], 1);
    // The plain parse takes the inline plugins only.
    let inline = NetConfList::parse(LIST.as_bytes()).unwrap();
    assert_eq!(types(&inline.plugins), ["bridge", "tuning", "firewall"]);

    // The network records the whole list, so the cache holds every plugin.
    let network = cni::network::Network::parse_list_in_dir(LIST.as_bytes(), dir.path()).unwrap();
    let again = cni::network::Network::parse(network.bytes()).unwrap();
    assert_eq!(
        types(again.plugins()),
        ["bridge", "tuning", "firewall", "first", "second"]
    );
    assert_eq!(again.name, "podnet");
    assert_eq!(again.version, Version::V1_0_0);

    // A list may consist of its subdirectory alone.
    let bare = r#"{"cniVersion": "1.1.0", "name": "podnet"}"#;
    let list = NetConfList::parse_in_dir(bare.as_bytes(), dir.path()).unwrap();
    assert_eq!(types(&list.plugins), ["first", "second"]);
}

#[test]
fn load_only_inlined_plugins_skips_the_subdirectory() {
    let dir = plugin_subdir(&[("10-first.conf", r#"{"type": "first"}"#)]);
    for flag in [json!(true), json!("True")] {
        let mut list = object(serde_json::from_str(LIST).unwrap());
        list.insert("loadOnlyInlinedPlugins".into(), flag.clone());
        let bytes = serde_json::to_vec(&list).unwrap();
        let list = NetConfList::parse_in_dir(&bytes, dir.path()).unwrap();
        assert_eq!(
            types(&list.plugins),
            ["bridge", "tuning", "firewall"],
            "{flag}"
        );
        assert!(list.load_only_inlined_plugins);
    }
    let bare = r#"{"cniVersion": "1.1.0", "name": "podnet", "loadOnlyInlinedPlugins": true}"#;
    let err = NetConfList::parse_in_dir(bare.as_bytes(), dir.path()).unwrap_err();
    assert_eq!(err.code, Code::InvalidConfig as u32, "{err}");
}

#[test]
fn subdirectory_plugin_errors_name_the_file() {
    // No subdirectory: nothing added, and a list without plugins is still an error.
    let empty = tempfile::tempdir().unwrap();
    let list = NetConfList::parse_in_dir(LIST.as_bytes(), empty.path()).unwrap();
    assert_eq!(list.plugins.len(), 3);
    let bare = r#"{"cniVersion": "1.1.0", "name": "podnet"}"#;
    let err = NetConfList::parse_in_dir(bare.as_bytes(), empty.path()).unwrap_err();
    assert_eq!(err.code, Code::InvalidConfig as u32);

    let cases: &[(&str, Code, &str)] = &[
        (
            "{",
            Code::Decoding,
            "not valid JSON: EOF while parsing an object",
        ),
        ("[1]", Code::Decoding, "the config: [1] is not an object"),
        (r#"{"name": "x"}"#, Code::InvalidConfig, "has no type"),
        (r#"{"type": ""}"#, Code::InvalidConfig, "has no type"),
    ];
    for (text, code, msg) in cases {
        let dir = plugin_subdir(&[
            ("10-good.conf", r#"{"type": "first"}"#),
            ("20-bad.conf", text),
        ]);
        let err = NetConfList::parse_in_dir(LIST.as_bytes(), dir.path()).unwrap_err();
        assert_eq!(err.code, *code as u32, "{text}: {err}");
        let file = dir.path().join("podnet/20-bad.conf");
        assert!(
            err.msg.contains(&file.display().to_string()) && err.msg.contains(msg),
            "{text}: {err}"
        );
    }
}
