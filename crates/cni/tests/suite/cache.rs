//! The libcni result cache: our files and files in libcni's exact format.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cni::cache::{self, CachedAttachment};
use cni::Code;
use serde_json::{json, Value};

fn attachment() -> CachedAttachment {
    CachedAttachment {
        container_id: "c0ffee".into(),
        config: br#"{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge"}]}"#.to_vec(),
        ifname: "eth0".into(),
        network_name: "podnet".into(),
        netns: "/var/run/netns/p1".into(),
        cni_args: vec![("K8S_POD_NAME".into(), "web".into())],
        capability_args: json!({"portMappings": [{"hostPort": 80}]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        result: Some(json!({"cniVersion": "1.0.0", "ips": [{"address": "10.88.0.2/16"}]})),
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .expect("stat the cache file")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn write_then_read_round_trips_with_libcni_names_and_modes() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cni");
    let a = attachment();
    cache::write(&cache_dir, &a).unwrap();

    let file = cache_dir.join("results/podnet-c0ffee-eth0");
    assert_eq!(
        cache::file_path(&cache_dir, "podnet", "c0ffee", "eth0").unwrap(),
        file
    );
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&cache_dir.join("results")), 0o700);
    assert_eq!(mode(&cache_dir), 0o700);
    // Only the file itself: the temp file was renamed away.
    assert_eq!(fs::read_dir(cache_dir.join("results")).unwrap().count(), 1);

    let on_disk: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    let keys: Vec<&str> = on_disk
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "kind",
            "containerId",
            "config",
            "ifName",
            "networkName",
            "netns",
            "cniArgs",
            "capabilityArgs",
            "result"
        ]
    );
    assert_eq!(on_disk["kind"], "cniCacheV1");
    assert_eq!(on_disk["cniArgs"], json!([["K8S_POD_NAME", "web"]]));

    let back = cache::read(&cache_dir, "podnet", "c0ffee", "eth0").unwrap();
    assert_eq!(back, Some(a.clone()));

    // A second write replaces the first.
    let mut b = a;
    b.netns = "/var/run/netns/p2".into();
    cache::write(&cache_dir, &b).unwrap();
    assert_eq!(
        cache::read(&cache_dir, "podnet", "c0ffee", "eth0").unwrap(),
        Some(b)
    );
}

#[test]
fn reads_a_file_in_the_exact_libcni_format() {
    // As Go's json.Marshal writes cachedInfo: compact, []byte as padded base64, maps sorted,
    // `<` escaped, no netns (omitempty) and a 0.4.0 result.
    let config =
        r#"{"cniVersion":"0.4.0","name":"mynet","type":"bridge","ipam":{"type":"host-local"}}"#;
    let config_b64 = "eyJjbmlWZXJzaW9uIjoiMC40LjAiLCJuYW1lIjoibXluZXQiLCJ0eXBlIjoiYnJpZGdlIiwiaXBhbSI6eyJ0eXBlIjoiaG9zdC1sb2NhbCJ9fQ==";
    let go = format!(
        r#"{{"kind":"cniCacheV1","containerId":"abc-123","config":"{config_b64}","ifName":"net1","networkName":"mynet","cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE","default"]],"capabilityArgs":{{"mac":"c2:11:22:33:44:55","note":"\u003cx\u003e"}},"result":{{"cniVersion":"0.4.0","dns":{{}},"interfaces":[{{"mac":"c2:11:22:33:44:55","name":"net1","sandbox":"/var/run/netns/x"}}],"ips":[{{"address":"10.1.1.5/24","gateway":"10.1.1.1","interface":0,"version":"4"}}]}}}}"#
    );
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("results")).unwrap();
    fs::write(dir.path().join("results/mynet-abc-123-net1"), go).unwrap();

    let a = cache::read(dir.path(), "mynet", "abc-123", "net1")
        .unwrap()
        .expect("cached");
    assert_eq!(a.config, config.as_bytes());
    assert_eq!(a.netns, "");
    assert_eq!(
        a.cni_args,
        [
            ("IgnoreUnknown".to_owned(), "1".to_owned()),
            ("K8S_POD_NAMESPACE".to_owned(), "default".to_owned())
        ]
    );
    assert_eq!(a.capability_args["note"], "<x>");
    let result = cni::CniResult::from_value(a.result.as_ref().unwrap()).unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.1.1.5/24");
    assert_eq!(result.interfaces[0].sandbox, "/var/run/netns/x");

    // What we write for it decodes to the same thing, and the config bytes are Go's base64.
    let copy = tempfile::tempdir().unwrap();
    cache::write(copy.path(), &a).unwrap();
    let ours: Value =
        serde_json::from_slice(&fs::read(copy.path().join("results/mynet-abc-123-net1")).unwrap())
            .unwrap();
    assert_eq!(ours["config"], config_b64);
    assert!(ours.get("netns").is_none());
}

#[test]
fn go_null_config_and_missing_optional_fields_read_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("results")).unwrap();
    fs::write(
        dir.path().join("results/n-c-eth0"),
        r#"{"kind":"cniCacheV1","containerId":"c","config":null,"ifName":"eth0","networkName":"n"}"#,
    )
    .unwrap();
    let a = cache::read(dir.path(), "n", "c", "eth0").unwrap().unwrap();
    assert!(a.config.is_empty() && a.cni_args.is_empty() && a.result.is_none());
}

/// The config's base64 reads as Go's `StdEncoding` reads it: padding required, CR and LF
/// skipped, the unused bits of the last character ignored; and our encoding round-trips.
#[test]
fn config_base64_reads_as_go_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("results")).unwrap();
    let read = |config: &str| {
        let file = format!(
            r#"{{"kind":"cniCacheV1","containerId":"c","config":"{config}","ifName":"eth0","networkName":"n"}}"#
        );
        fs::write(dir.path().join("results/n-c-eth0"), file).unwrap();
        cache::read(dir.path(), "n", "c", "eth0").map(|a| a.unwrap().config)
    };
    let good: [(&str, &[u8]); 9] = [
        ("", b""),
        ("Zg==", b"f"),
        ("Zm8=", b"fo"),
        ("Zm9v", b"foo"),
        ("Zm9vYg==", b"foob"),
        ("Zm9vYmE=", b"fooba"),
        ("//4Ae30=", b"\xff\xfe\x00{}"),
        (r"Zm9v\r\nYg==", b"foob"),
        ("Zh==", b"f"),
    ];
    for (text, raw) in good {
        assert_eq!(read(text).unwrap(), raw, "{text}");
    }
    for bad in ["Zm9", "Zg", "Zm=v", "Zg==Zg==", "Z===", "Zm9*", "Zm9v===="] {
        let err = read(bad).unwrap_err();
        assert_eq!(err.code, Code::Decoding as u32, "{bad}");
        assert!(err.msg.contains("base64"), "{bad}: {err}");
    }

    let data: Vec<u8> = (0..=255).collect();
    for len in 0..data.len() {
        let a = CachedAttachment {
            config: data[..len].to_vec(),
            ..attachment()
        };
        cache::write(dir.path(), &a).unwrap();
        let back = cache::read(dir.path(), "podnet", "c0ffee", "eth0").unwrap();
        assert_eq!(back.unwrap().config, &data[..len]);
    }
}

#[test]
fn a_missing_file_is_none_and_remove_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        cache::read(dir.path(), "podnet", "c0ffee", "eth0").unwrap(),
        None
    );
    cache::write(dir.path(), &attachment()).unwrap();
    cache::remove(dir.path(), "podnet", "c0ffee", "eth0").unwrap();
    cache::remove(dir.path(), "podnet", "c0ffee", "eth0").unwrap();
    assert_eq!(
        cache::read(dir.path(), "podnet", "c0ffee", "eth0").unwrap(),
        None
    );
    // Also when the cache directory was never made.
    cache::remove(&dir.path().join("nowhere"), "podnet", "c0ffee", "eth0").unwrap();
}

#[test]
fn an_empty_file_left_by_a_machine_crash_reads_as_none_and_list_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    fs::create_dir(&results).unwrap();
    let file = results.join("podnet-c0ffee-eth0");
    fs::write(&file, b"").unwrap();
    assert_eq!(
        cache::read(dir.path(), "podnet", "c0ffee", "eth0").unwrap(),
        None
    );
    let listed = cache::list(dir.path()).unwrap();
    assert_eq!(listed.len(), 1);
    let err = listed[0].as_ref().unwrap_err();
    assert!(err.msg.contains(&file.display().to_string()), "{err}");
    assert!(err.msg.contains("empty"), "{err}");
}

#[test]
fn a_corrupt_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    fs::create_dir(&results).unwrap();
    let cases = [
        ("torn", r#"{"kind":"cniCacheV1","contai"#),
        (
            "kind",
            r#"{"kind":"other","containerId":"c","ifName":"eth0","networkName":"n"}"#,
        ),
        ("legacy", r#"{"cniVersion":"0.3.1","ips":[]}"#),
        (
            "b64",
            r#"{"kind":"cniCacheV1","containerId":"c","config":"%%%","ifName":"eth0","networkName":"n"}"#,
        ),
        (
            "args",
            r#"{"kind":"cniCacheV1","containerId":"c","ifName":"eth0","networkName":"n","cniArgs":[["a"]]}"#,
        ),
        ("names", r#"{"kind":"cniCacheV1","config":""}"#),
    ];
    for (net, content) in cases {
        let file = results.join(format!("{net}-c-eth0"));
        fs::write(&file, content).unwrap();
        let err = cache::read(dir.path(), net, "c", "eth0").unwrap_err();
        assert_eq!(err.code, Code::Decoding as u32, "{net}");
        assert!(
            err.msg.contains(&file.display().to_string()),
            "{net}: {err}"
        );
    }
}

#[test]
fn names_that_could_escape_the_results_dir_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (net, id, ifname) in [
        ("", "c", "eth0"),
        ("../x", "c", "eth0"),
        ("n", "", "eth0"),
        ("n", "a/b", "eth0"),
        ("n", "c", ""),
        ("n", "c", "../../x"),
    ] {
        assert!(cache::read(dir.path(), net, id, ifname).is_err());
        assert!(cache::remove(dir.path(), net, id, ifname).is_err());
        let a = CachedAttachment {
            network_name: net.into(),
            container_id: id.into(),
            ifname: ifname.into(),
            ..CachedAttachment::default()
        };
        assert!(cache::write(dir.path(), &a).is_err());
    }
    let mut a = attachment();
    a.result = Some(json!([1]));
    assert!(cache::write(dir.path(), &a).is_err());
    assert!(!dir.path().join("results").exists());
}

#[test]
fn list_reports_every_file_in_name_order_and_each_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    assert!(cache::list(dir.path()).unwrap().is_empty());
    for (net, id) in [("b", "c2"), ("a", "c1")] {
        let mut a = attachment();
        a.network_name = net.into();
        a.container_id = id.into();
        cache::write(dir.path(), &a).unwrap();
    }
    let results = dir.path().join("results");
    fs::write(results.join("zz-c-eth0"), "garbage").unwrap();
    fs::write(results.join(".a-c1-eth0.tmp-1-0"), "left by a crash").unwrap();
    fs::create_dir(results.join("subdir")).unwrap();

    let listed = cache::list(dir.path()).unwrap();
    assert_eq!(listed.len(), 3);
    let names: Vec<_> = listed[..2]
        .iter()
        .map(|r| r.as_ref().map(|a| a.network_name.as_str()).unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let err = listed[2].as_ref().unwrap_err();
    assert!(err.msg.contains("zz-c-eth0"), "{err}");
}

#[test]
fn temp_files_left_by_a_killed_writer_are_removed_for_their_container_only() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    // Network and interface names may hold dashes: each file is matched as a whole.
    let files = [
        (".net-c1-eth0.tmp-4242-0", true),
        (".my-net-c1-net-1.tmp-1-7", true),
        (".net-c1-eth0.tmp-4242-1", true),
        (".net-c12-eth0.tmp-4242-2", false),
        (".net-xc1-eth0.tmp-4242-3", false),
        (".net-c1-.tmp-4242-4", false),
        ("net-c1-eth0", false),
        (".net-c1-eth0", false),
    ];
    for (name, _) in files {
        std::fs::write(results.join(name), b"{").unwrap();
    }
    let mut removed = cache::remove_temp_files(dir.path(), "c1").unwrap();
    removed.sort();
    let mut expected: Vec<_> = files
        .iter()
        .filter(|(_, gone)| *gone)
        .map(|(name, _)| results.join(name))
        .collect();
    expected.sort();
    assert_eq!(removed, expected);
    for (name, gone) in files {
        assert_eq!(!results.join(name).exists(), gone, "{name}");
    }
    // No results directory: nothing to remove.
    let empty = tempfile::tempdir().unwrap();
    assert!(cache::remove_temp_files(empty.path(), "c1")
        .unwrap()
        .is_empty());
}
