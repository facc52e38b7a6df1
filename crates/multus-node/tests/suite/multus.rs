//! The real `multus` binary, run as a runtime runs it, with bridge + host-local delegates from
//! `cni-plugins`, in namespaces; no Kubernetes API (the cluster network and defaultNetworks).

use crate::common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{Sandbox, CONTAINER_ID};
use serde_json::{json, Value};

const VERSIONS: [&str; 4] = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A sandbox whose multus config has the cluster network inline and two defaultNetworks in
/// confDir: `extra1` (a .conf) and `extra2` (a .conflist).
fn three_networks(sb: &Sandbox, version: &str, extra: Value) -> String {
    sb.write_conf(
        "10-extra1.conf",
        &sb.bridge("extra1", "br1", "10.20.0.0/24", version),
    );
    let mut list = json!({"cniVersion": version, "name": "extra2", "plugins": [
        sb.bridge("ignored", "br2", "10.30.0.0/24", version)
    ]});
    if let Some(p) = list["plugins"][0].as_object_mut() {
        p.remove("name");
        p.remove("cniVersion");
    }
    sb.write_conf("20-extra2.conflist", &list);
    let mut extra = extra;
    if let Value::Object(e) = &mut extra {
        e.insert("defaultNetworks".into(), json!(["extra1", "extra2"]));
    }
    sb.multus(
        version,
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", version)],
        extra,
    )
}

#[test]
fn add_attaches_cluster_and_default_networks_and_del_removes_everything() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    let result = sb.cmd("ADD", &conf).ok();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.10.0.2/24");
    assert_eq!(sb.pod_links(), ["eth0", "net1", "net2"]);
    assert_eq!(sb.pod_addrs("eth0"), ["10.10.0.2"]);
    assert_eq!(sb.pod_addrs("net1"), ["10.20.0.2"]);
    assert_eq!(sb.pod_addrs("net2"), ["10.30.0.2"]);
    assert_eq!(
        sb.cache_files(),
        [
            CONTAINER_ID.to_owned(),
            format!("locks/{CONTAINER_ID}"),
            format!("results/cluster-{CONTAINER_ID}-eth0"),
            format!("results/extra1-{CONTAINER_ID}-net1"),
            format!("results/extra2-{CONTAINER_ID}-net2"),
        ]
    );
    // The delegate cache holds upstream's fields, the config as base64 `Bytes`.
    let cache: Value =
        serde_json::from_slice(&fs::read(sb.cni_dir().join(CONTAINER_ID)).unwrap()).unwrap();
    let names: Vec<&str> = cache
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cluster", "extra1", "extra2"]);
    assert!(cache[2]["ConfList"]["plugins"].is_array());
    assert!(cache[0]["Bytes"].as_str().unwrap().len() > 20);

    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
    // DEL again: nothing to do, and still success.
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after the second DEL");
}

#[test]
fn every_version_from_0_3_1_to_1_1_0_adds_checks_and_deletes() {
    for version in VERSIONS {
        let sb = Sandbox::new();
        let conf = three_networks(&sb, version, json!({}));
        let result = sb.cmd("ADD", &conf).ok();
        assert_eq!(result["cniVersion"], version, "{version}");
        let ip = &result["ips"][0];
        assert_eq!(ip["address"], "10.10.0.2/24", "{version}");
        assert_eq!(ip.get("version").is_some(), version < "1.0.0", "{version}");
        if version >= "0.4.0" {
            sb.cmd("CHECK", &conf).ok();
        } else {
            assert_eq!(sb.cmd("CHECK", &conf).err_code(), 1, "{version}");
        }
        sb.cmd("DEL", &conf).ok();
        sb.assert_clean(version);
    }
}

#[test]
fn a_failing_delegate_rolls_back_every_network_already_added() {
    for (failing_index, defaults) in [
        (1, json!(["broken", "extra1"])),
        (2, json!(["extra1", "broken"])),
    ] {
        let sb = Sandbox::new();
        sb.write_conf(
            "10-extra1.conf",
            &sb.bridge("extra1", "br1", "10.20.0.0/24", "1.0.0"),
        );
        sb.write_conf(
            "30-broken.conf",
            &json!({"cniVersion": "1.0.0", "name": "broken", "type": "fail"}),
        );
        let conf = sb.multus(
            "1.0.0",
            vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
            json!({"defaultNetworks": defaults}),
        );
        let out = sb.cmd("ADD", &conf);
        assert_eq!(out.err_code(), 11, "the delegate's own code: {out:?}");
        let msg = out.json()["msg"].as_str().unwrap().to_owned();
        let ifname = format!("net{failing_index}");
        assert!(msg.contains("network broken"), "{msg}");
        assert!(msg.contains(&format!("interface {ifname}")), "{msg}");
        assert!(msg.contains("refuses on purpose"), "{msg}");
        // The failed delegate got its DEL too.
        assert_eq!(sb.fail_log(), format!("ADD {ifname}\nDEL {ifname}\n"));
        sb.assert_clean(&format!("failure at {ifname}"));
    }
}

#[test]
fn an_interface_name_already_in_the_pod_fails_the_add_cleanly() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    sb.pod.ip(&["link", "add", "net1", "type", "bridge"]);
    let out = sb.cmd("ADD", &conf);
    assert_eq!(out.err_code(), 7);
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(msg.contains("network extra1 on interface net1"), "{msg}");
    assert!(msg.contains("already has an interface"), "{msg}");
    sb.pod.ip(&["link", "del", "net1"]);
    sb.assert_clean("after the refused ADD");
}

#[test]
fn del_without_a_cache_and_without_an_api_deletes_what_the_config_names_and_says_so() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    sb.cmd("ADD", &conf).ok();
    fs::remove_file(sb.cni_dir().join(CONTAINER_ID)).unwrap();
    let out = sb.cmd("DEL", &conf);
    out.ok();
    assert!(out.stderr.contains("no delegate cache"), "{}", out.stderr);
    sb.assert_clean("after DEL without a cache");
}

#[test]
fn a_corrupt_cache_is_reported_and_moved_aside_and_the_next_del_succeeds() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    sb.cmd("ADD", &conf).ok();
    let cache = sb.cni_dir().join(CONTAINER_ID);
    fs::write(&cache, b"[{\"Name\": \"cluster\", \"Bytes\": 12").unwrap();
    let out = sb.cmd("DEL", &conf);
    assert_eq!(out.err_code(), 5);
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(msg.contains(&cache.display().to_string()), "{msg}");
    assert!(msg.contains("corrupt"), "{msg}");
    // What the config names was deleted anyway.
    assert_eq!(sb.pod_links(), Vec::<String>::new());
    assert_eq!(sb.reservations(), Vec::<String>::new());
    let aside = sb.cni_dir().join("corrupt").join(CONTAINER_ID);
    assert!(
        msg.contains(&format!("moved to {}", aside.display())),
        "{msg}"
    );
    assert!(aside.exists());
    fs::remove_file(aside).unwrap();
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after the second DEL");
}

#[test]
fn an_empty_cache_left_by_a_machine_crash_is_no_cache_and_del_says_so() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    sb.cmd("ADD", &conf).ok();
    let cache = sb.cni_dir().join(CONTAINER_ID);
    fs::write(&cache, b"").unwrap();
    let out = sb.cmd("DEL", &conf);
    out.ok();
    assert!(out.stderr.contains("is empty"), "{}", out.stderr);
    assert!(out.stderr.contains("no delegate cache"), "{}", out.stderr);
    assert!(!sb.cni_dir().join("corrupt").exists());
    sb.assert_clean("after DEL with an empty cache");
}

#[test]
fn del_works_from_a_cache_file_in_upstream_format() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    sb.cmd("ADD", &conf).ok();
    // Rewrite the cache as upstream multus (Go) writes it: its field set and order, the
    // config bytes in base64, conflists with ConfList.plugins.
    let ours: Value =
        serde_json::from_slice(&fs::read(sb.cni_dir().join(CONTAINER_ID)).unwrap()).unwrap();
    let upstream: Vec<Value> = ours
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            json!({
                "Conf": {"cniVersion": "", "name": "", "type": ""},
                "ConfList": {"cniVersion": "", "name": "", "plugins": d["ConfList"]["plugins"]},
                "Name": d["Name"],
                "IsFilterV4Gateway": false,
                "IsFilterV6Gateway": false,
                "Bytes": d["Bytes"],
            })
        })
        .collect();
    fs::write(
        sb.cni_dir().join(CONTAINER_ID),
        serde_json::to_vec(&upstream).unwrap(),
    )
    .unwrap();
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL from an upstream cache");
}

#[test]
fn check_checks_every_delegate() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.0.0", json!({}));
    sb.cmd("ADD", &conf).ok();
    sb.cmd("CHECK", &conf).ok();
    sb.pod.ip(&["link", "del", "net2"]);
    let out = sb.cmd("CHECK", &conf);
    assert_ne!(out.code, 0);
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(msg.contains("network extra2 on interface net2"), "{msg}");
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

#[test]
fn status_reports_the_readiness_file_and_the_cluster_network() {
    let sb = Sandbox::new();
    let ready = sb.dir.path().join("ready");
    let conf = sb.multus(
        "1.1.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.1.0")],
        json!({"readinessindicatorfile": ready}),
    );
    let out = sb.cmd("STATUS", &conf);
    assert_eq!(out.err_code(), 50);
    assert!(out.stdout.contains("readiness indicator file"), "{out:?}");
    fs::write(&ready, b"").unwrap();
    sb.cmd("STATUS", &conf).ok();
    // The cluster network's own STATUS is what multus reports.
    let bad = sb.multus(
        "1.1.0",
        vec![json!({"cniVersion": "1.1.0", "name": "cluster", "type": "fail"})],
        json!({}),
    );
    sb.script(
        "fail",
        r#"echo '{"code":50,"msg":"fail: not available"}'; exit 1"#,
    );
    let out = sb.cmd("STATUS", &bad);
    assert_eq!(out.err_code(), 50);
    assert!(out.stdout.contains("not available"), "{out:?}");
    // The cluster network's config not there yet (its pod still starting): not ready, not a
    // broken config.
    let absent = sb.dir.path().join("10-cluster.conflist");
    let waiting = sb.multus(
        "1.1.0",
        vec![],
        json!({"readinessindicatorfile": ready, "clusterNetwork": absent}),
    );
    let out = sb.cmd("STATUS", &waiting);
    assert_eq!(out.err_code(), 50, "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("cannot read {}", absent.display())),
        "{out:?}"
    );
}

#[test]
fn add_waits_for_the_readiness_file_for_a_bounded_time() {
    let sb = Sandbox::new();
    let ready = sb.dir.path().join("ready");
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"readinessindicatorfile": ready, "readinessTimeoutSeconds": 1}),
    );
    let out = sb.cmd("ADD", &conf);
    assert_eq!(out.err_code(), 50);
    assert!(out.stdout.contains("did not appear within 1 s"), "{out:?}");
    sb.assert_clean("after the timeout");
}

/// An ADD waiting for the readiness file holds nothing: a DEL of the same container goes
/// through at once instead of waiting for the ADD's lock.
#[test]
fn an_add_waiting_for_readiness_does_not_hold_up_a_del() {
    let sb = Sandbox::new();
    let ready = sb.dir.path().join("ready");
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"readinessindicatorfile": ready, "readinessTimeoutSeconds": 10}),
    );
    std::thread::scope(|s| {
        let add = s.spawn(|| sb.cmd("ADD", &conf));
        std::thread::sleep(std::time::Duration::from_millis(500));
        sb.cmd("DEL", &conf).ok();
        assert!(!add.is_finished(), "DEL waited for the ADD");
        fs::write(&ready, b"").unwrap();
        add.join().unwrap().ok();
    });
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

#[test]
fn gc_deletes_the_attachments_of_containers_no_longer_valid_on_every_network() {
    let sb = Sandbox::new();
    let conf = three_networks(&sb, "1.1.0", json!({}));
    sb.cmd("ADD", &conf).ok();
    let pod2 = testkit::Netns::new("pod2");
    let mut second = sb.call("ADD", &conf);
    second.container_id = "c0ffee02".into();
    second.netns = pod2.path().display().to_string();
    sb.run(&second).ok();
    assert_eq!(sb.reservations().len(), 6);

    let gc_conf: Value = serde_json::from_str(&conf).unwrap();
    let mut gc_conf = gc_conf;
    gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": "eth0"}]);
    let mut gc = sb.call("GC", &gc_conf.to_string());
    gc.container_id = String::new();
    gc.netns = String::new();
    gc.ifname = String::new();
    sb.run(&gc).ok();

    // The second container is gone from every network; the first is untouched.
    assert_eq!(sb.reservations().len(), 3);
    let mut left = pod2.links();
    left.retain(|l| l != "lo");
    assert_eq!(left, Vec::<String>::new());
    assert!(
        sb.cache_files().iter().all(|f| !f.contains("c0ffee02")),
        "{:?}",
        sb.cache_files()
    );
    assert_eq!(sb.pod_links(), ["eth0", "net1", "net2"]);
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

#[test]
fn gc_waits_for_an_add_under_way_and_never_collects_half_of_it() {
    let sb = Sandbox::new();
    // A second network that takes its time: the ADD is under way, its cluster network
    // attached and its address reserved, while the runtime runs GC.
    let started = sb.dir.path().join("slow-started");
    sb.script(
        "slow",
        &format!(
            r#"[ "$CNI_COMMAND" = ADD ] || exit 0
touch {}; sleep 1
echo '{{"cniVersion":"1.1.0"}}'"#,
            started.display()
        ),
    );
    let conf = sb.multus(
        "1.1.0",
        vec![
            sb.cluster("cluster", "br0", "10.10.0.0/24", "1.1.0"),
            json!({"cniVersion": "1.1.0", "name": "slow", "type": "slow"}),
        ],
        json!({}),
    );
    let mut gc_conf: Value = serde_json::from_str(&conf).unwrap();
    // A list the runtime made before this ADD began.
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    let mut gc = sb.call("GC", &gc_conf.to_string());
    gc.container_id = String::new();
    gc.netns = String::new();
    gc.ifname = String::new();
    std::thread::scope(|s| {
        let add = s.spawn(|| sb.cmd("ADD", &conf));
        while !started.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        sb.run(&gc).ok();
        // GC waited for the ADD, which succeeded whole.
        assert!(add.is_finished(), "GC ran while the ADD was under way");
        add.join().unwrap().ok();
    });
    // Then GC collected the container whole, as the runtime's list says: no interface left
    // with its address freed under it.
    sb.assert_clean("after GC");
    sb.cmd("DEL", &conf).ok();
}

#[test]
fn gc_leaves_a_container_another_call_holds_for_the_next_gc() {
    let sb = Sandbox::new();
    let conf = sb.multus(
        "1.1.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.1.0")],
        json!({}),
    );
    sb.cmd("ADD", &conf).ok();
    let mut gc_conf: Value = serde_json::from_str(&conf).unwrap();
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    let mut gc = sb.call("GC", &gc_conf.to_string());
    gc.container_id = String::new();
    gc.netns = String::new();
    gc.ifname = String::new();
    // A DEL of the container is under way: it holds the container's lock.
    let lock = fs::File::open(sb.cni_dir().join("locks").join(CONTAINER_ID)).unwrap();
    lock.lock().unwrap();
    sb.run(&gc).ok();
    assert_eq!(
        sb.pod_links(),
        ["eth0"],
        "GC collected a container another call holds"
    );
    assert_eq!(sb.reservations().len(), 1);
    drop(lock);
    sb.run(&gc).ok();
    sb.assert_clean("after the next GC");
}

#[test]
fn logs_go_to_the_log_file_with_the_pod_container_and_interface_and_stdout_stays_clean() {
    let sb = Sandbox::new();
    let log = sb.dir.path().join("multus.log");
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"logFile": log, "logLevel": "verbose", "logToStderr": false}),
    );
    let out = sb.cmd("ADD", &conf);
    let result = out.ok();
    assert!(result.is_object());
    assert_eq!(out.stderr, "", "logToStderr false");
    let text = fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("Add eth0 [10.10.0.2/24] from cluster"))
        .unwrap_or_else(|| panic!("no AddedInterface line in {text}"));
    // The node's line: the time, the level, the call, the message (docs/multus.md).
    let (stamp, rest) = line.split_at(27);
    assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{line}");
    assert_eq!(
        rest,
        format!(
            "  INFO multus{{command=\"ADD\" pod=default/web container={CONTAINER_ID} \
             ifname=eth0}}: Add eth0 [10.10.0.2/24] from cluster"
        )
    );
    assert!(
        !text.contains("DEBUG"),
        "verbose leaves out debug lines: {text}"
    );
    // CHECK and DEL say what they did, one line each.
    for (command, says) in [
        ("CHECK", "Check eth0 from cluster"),
        ("DEL", "Del eth0 from cluster"),
    ] {
        sb.cmd(command, &conf).ok();
        let text = fs::read_to_string(&log).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains(says))
            .unwrap_or_else(|| panic!("no {command} line in {text}"));
        assert!(
            line.contains("default/web") && line.contains(CONTAINER_ID),
            "{line}"
        );
    }
    sb.cmd("ADD", &conf).ok();

    let quiet = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"logLevel": "error"}),
    );
    let out = sb.cmd("DEL", &quiet);
    out.ok();
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr, "", "nothing at error level on success");
    sb.assert_clean("after DEL");
}

/// A logFile in a directory that does not exist yet gets the directory, as upstream makes it;
/// a symlink planted at the log's name (or its rotation's temporary file) is not followed.
#[test]
fn the_log_directory_is_made_and_symlinks_at_the_log_are_not_followed() {
    let sb = Sandbox::new();
    let log = sb.dir.path().join("new/dir/multus.log");
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"logFile": log, "logLevel": "verbose", "logToStderr": false}),
    );
    sb.cmd("ADD", &conf).ok();
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains("Add eth0"), "{text}");
    let mode = fs::metadata(log.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
    sb.cmd("DEL", &conf).ok();

    let victim = sb.dir.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    let planted = sb.dir.path().join("planted.log");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"logFile": planted, "logLevel": "debug", "logToStderr": true}),
    );
    let out = sb.cmd("ADD", &conf);
    out.ok();
    assert!(out.stderr.contains("cannot open logFile"), "{}", out.stderr);
    sb.cmd("DEL", &conf).ok();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    sb.assert_clean("after DEL");
}

#[test]
fn the_runtime_config_goes_to_the_cluster_network_only() {
    let sb = Sandbox::new();
    // A plugin that records its stdin, then passes on to bridge.
    sb.script(
        "spy",
        r#"cat > "$(dirname "$0")/spy.$CNI_IFNAME.json"; echo '{"cniVersion":"1.0.0"}'"#,
    );
    let spy = |name: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "spy",
        "capabilities": {"portMappings": true, "mac": true}})
    };
    sb.write_conf("10-second.conf", &spy("second"));
    let conf = sb.multus(
        "1.0.0",
        vec![spy("cluster")],
        json!({"defaultNetworks": ["second"],
               "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}),
    );
    sb.cmd("ADD", &conf).ok();
    let read = |ifname: &str| -> Value {
        serde_json::from_slice(
            &fs::read(sb.plugins.path().join(format!("spy.{ifname}.json"))).unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        read("eth0")["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    assert!(
        read("net1").get("runtimeConfig").is_none(),
        "{}",
        read("net1")
    );
    sb.cmd("DEL", &conf).ok();
}

#[test]
fn a_log_file_past_max_size_is_rotated() {
    let sb = Sandbox::new();
    let log = sb.dir.path().join("multus.log");
    fs::write(&log, vec![b'x'; (1 << 20) + 1]).unwrap();
    fs::write(sb.dir.path().join("multus.log.1"), b"older").unwrap();
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"logFile": log, "logOptions": {"maxSize": 1, "maxBackups": 2, "compress": false}}),
    );
    sb.cmd("ADD", &conf).ok();
    assert_eq!(
        fs::metadata(sb.dir.path().join("multus.log.1"))
            .unwrap()
            .len(),
        (1 << 20) + 1
    );
    assert_eq!(
        fs::read(sb.dir.path().join("multus.log.2")).unwrap(),
        b"older"
    );
    assert!(fs::read_to_string(&log)
        .unwrap()
        .contains("ADD network=cluster"));
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(path).expect("opens the file"))
        .read_to_end(&mut out)
        .expect("a gzip file");
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("compresses");
    enc.finish().expect("compresses")
}

/// The files next to the log, by name.
fn log_files(sb: &Sandbox) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(sb.dir.path())
        .expect("lists the directory")
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("multus.log"))
        .collect();
    names.sort();
    names
}

/// A `multus.log` of just over 1 MB whose lines can be recognised, and a multus config that
/// logs there with `log_options` (`maxSize` 1). Returns the log, its content and the config.
fn past_max_size(sb: &Sandbox, log_options: Value) -> (PathBuf, Vec<u8>, String) {
    let log = sb.dir.path().join("multus.log");
    let mut old = Vec::new();
    let mut i = 0;
    while old.len() <= 1 << 20 {
        old.extend_from_slice(format!("old line {i}\n").as_bytes());
        i += 1;
    }
    fs::write(&log, &old).expect("writes a test file");
    let mut options = json!({"maxSize": 1});
    if let (Value::Object(o), Value::Object(extra)) = (&mut options, log_options) {
        o.extend(extra);
    }
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0")],
        json!({"logFile": log, "logOptions": options}),
    );
    (log, old, conf)
}

#[test]
fn with_compress_the_rotated_log_is_gzip_and_older_backups_of_either_form_count() {
    let sb = Sandbox::new();
    let dir = sb.dir.path();
    // `compress` is on by default, as upstream's.
    let (log, old, conf) = past_max_size(&sb, json!({"maxBackups": 3, "maxAge": 5}));
    // Backups from earlier rotations: one compressed, one from a time without compression,
    // one past maxAge.
    fs::write(dir.join("multus.log.1.gz"), gzip(b"first")).unwrap();
    fs::write(dir.join("multus.log.2"), b"second").unwrap();
    let stale = fs::File::create(dir.join("multus.log.3.gz")).unwrap();
    stale
        .set_modified(SystemTime::now() - Duration::from_secs(7 * 86_400))
        .unwrap();
    sb.cmd("ADD", &conf).ok();
    assert_eq!(
        log_files(&sb),
        [
            "multus.log",
            "multus.log.1.gz",
            "multus.log.2.gz",
            "multus.log.3.gz"
        ]
    );
    assert_eq!(gunzip(&dir.join("multus.log.1.gz")), old);
    assert_eq!(gunzip(&dir.join("multus.log.2.gz")), b"first");
    // Left uncompressed by an earlier rotation, compressed by this one.
    assert_eq!(gunzip(&dir.join("multus.log.3.gz")), b"second");
    assert!(fs::read_to_string(&log)
        .unwrap()
        .contains("ADD network=cluster"));
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

#[test]
fn a_backup_that_cannot_be_compressed_is_kept_whole_and_the_call_succeeds() {
    let sb = Sandbox::new();
    let dir = sb.dir.path();
    let (log, old, conf) = past_max_size(&sb, json!({"compress": true}));
    // The compressed file's temporary name is taken by a directory.
    fs::create_dir(dir.join("multus.log.1.gz.tmp")).unwrap();
    sb.cmd("ADD", &conf).ok();
    assert_eq!(log_files(&sb), ["multus.log", "multus.log.1"]);
    assert_eq!(fs::read(dir.join("multus.log.1")).unwrap(), old);
    let text = fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("cannot compress") && text.contains("kept uncompressed"),
        "{text}"
    );
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

#[test]
fn many_multus_processes_rotate_the_log_once_and_lose_no_line() {
    let sb = Sandbox::new();
    let dir = sb.dir.path();
    let (log, old, conf) = past_max_size(&sb, json!({}));
    // DELs of containers that were never added: each logs its delegate's DEL. They all find
    // the log due for rotation and wait for the lock on its directory, held here until they
    // have had time to get there.
    let ids: Vec<String> = (0..8).map(|i| format!("rotate{i:02}")).collect();
    let dir_lock = fs::File::open(dir).unwrap();
    dir_lock.lock().unwrap();
    std::thread::scope(|s| {
        for id in &ids {
            let mut call = sb.call("DEL", &conf);
            call.container_id.clone_from(id);
            let sb = &sb;
            s.spawn(move || sb.run(&call).ok());
        }
        std::thread::sleep(Duration::from_millis(500));
        dir_lock.unlock().unwrap();
    });
    assert_eq!(log_files(&sb), ["multus.log", "multus.log.1.gz"]);
    assert_eq!(gunzip(&dir.join("multus.log.1.gz")), old);
    let text = fs::read_to_string(&log).unwrap();
    for id in &ids {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("container={id}")) && l.contains("DEL")),
            "no DEL line of {id} in {text}"
        );
    }
}

/// A network whose conflist moves a node link into the pod (host-device) and tunes it
/// (tuning): the link arrives renamed, with the MTU and MAC tuning gives it, and DEL (tuning's
/// first, then host-device's) gives it back under its own name, MAC and MTU; a second DEL
/// succeeds.
/// sbr moves bridge's routes into a table of their own: the chain's CHECK still passes (bridge
/// looks for its routes in every table), and DEL, twice, leaves no rule.
#[test]
fn bridge_then_sbr_checks_and_deletes() {
    let sb = Sandbox::new();
    let chain = json!({
        "cniVersion": "1.0.0",
        "name": "sbrnet",
        "plugins": [
            {"type": "bridge", "bridge": "sbr0", "isGateway": true,
             "ipam": {"type": "host-local", "subnet": "10.6.0.0/24", "dataDir": sb.ipam_dir(),
                      "routes": [{"dst": "10.60.0.0/16"}]}},
            {"type": "sbr"}
        ]
    });
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0"), chain],
        json!({}),
    );
    sb.cmd("ADD", &conf).ok();
    let rules = sb.pod.ip_json(&["-4", "rule", "show"]);
    let sbr_rule = rules
        .as_array()
        .and_then(|r| r.iter().find(|r| r["table"] == "100"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(sbr_rule["src"], "10.6.0.2", "{rules}");
    let table = sb.pod.ip_json(&["-4", "route", "show", "table", "100"]);
    let text = table.to_string();
    assert!(
        text.contains("10.60.0.0/16") && text.contains("10.6.0.0/24"),
        "{text}"
    );
    let main = sb.pod.ip_json(&["-4", "route", "show", "dev", "net1"]);
    assert_eq!(main, json!([]), "net1's routes left the main table");
    sb.cmd("CHECK", &conf).ok();
    sb.cmd("DEL", &conf).ok();
    sb.cmd("DEL", &conf).ok();
    let rules = sb.pod.ip_json(&["-4", "rule", "show"]).to_string();
    assert!(!rules.contains("10.6.0.2"), "{rules}");
    sb.assert_clean("after DEL");
}

#[test]
fn host_device_and_tuning_give_the_link_back_as_it_was() {
    let sb = Sandbox::new();
    sb.node.ip(&[
        "link", "add", "hd0", "mtu", "1500", "type", "veth", "peer", "name", "hd0p",
    ]);
    sb.node
        .ip(&["link", "set", "hd0", "address", "02:11:22:33:44:55"]);
    let tuning_dir = sb.dir.path().join("tuning");
    let chain = json!({
        "cniVersion": "1.0.0",
        "name": "hdnet",
        "plugins": [
            {"type": "host-device", "device": "hd0",
             "ipam": {"type": "static", "addresses": [{"address": "10.5.0.2/24"}]}},
            {"type": "tuning", "mtu": 1400, "mac": "02:00:00:00:00:42", "dataDir": tuning_dir,
             "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}}
        ]
    });
    let conf = sb.multus(
        "1.0.0",
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0"), chain],
        json!({}),
    );
    sb.cmd("ADD", &conf).ok();
    let net1 = &sb.pod.ip_json(&["-d", "link", "show", "dev", "net1"])[0];
    assert_eq!(net1["mtu"], 1400, "{net1}");
    assert_eq!(net1["address"], "02:00:00:00:00:42", "{net1}");
    assert!(!sb.node.links().contains(&"hd0".to_owned()));
    sb.cmd("CHECK", &conf).ok();
    sb.cmd("DEL", &conf).ok();
    let hd0 = &sb.node.ip_json(&["-d", "link", "show", "dev", "hd0"])[0];
    assert_eq!(hd0["mtu"], 1500, "{hd0}");
    assert_eq!(hd0["address"], "02:11:22:33:44:55", "{hd0}");
    assert!(hd0.get("ifalias").is_none(), "{hd0}");
    assert_eq!(
        fs::read_dir(&tuning_dir).unwrap().count(),
        0,
        "tuning's saved state"
    );
    sb.cmd("DEL", &conf).ok();
    sb.node.ip(&["link", "del", "hd0"]);
    sb.assert_clean("after DEL");
}
