//! host-local through the CNI entry point: results, errors with their codes, and the store.

use crate::common;

use std::path::Path;

use common::{reservations, Env};
use ipam::host_local::HostLocal;
use serde_json::{json, Value};

/// A network config for `net1` with `ipam` merged over a store in `dir`.
fn conf(dir: &Path, version: &str, ipam: Value) -> String {
    let mut ipam_obj = json!({"type": "host-local", "dataDir": dir});
    ipam_obj
        .as_object_mut()
        .expect("a JSON object")
        .extend(ipam.as_object().expect("ipam is a JSON object").clone());
    json!({"cniVersion": version, "name": "net1", "type": "bridge", "ipam": ipam_obj}).to_string()
}

fn small(dir: &Path) -> String {
    conf(
        dir,
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/29"}]]}),
    )
}

fn add(id: &str, stdin: &str) -> common::Outcome {
    Env::new("ADD", id).ours(&HostLocal, stdin)
}

#[test]
fn add_result_dual_stack_with_routes_and_dns() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 10.0.0.53\nsearch example.com\noptions ndots:3\n",
    )
    .unwrap();
    let stdin = conf(
        tmp.path(),
        "1.0.0",
        json!({
            "ranges": [[{"subnet": "10.1.2.0/24", "gateway": "10.1.2.254"}], [{"subnet": "fd00::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.2.254"}],
            "resolvConf": resolv,
        }),
    );
    let out = add("c1", &stdin);
    assert_eq!(
        out.ok(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [
                {"address": "10.1.2.1/24", "gateway": "10.1.2.254"},
                {"address": "fd00::2/64", "gateway": "fd00::1"},
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.2.254"}],
            "dns": {"nameservers": ["10.0.0.53"], "search": ["example.com"], "options": ["ndots:3"]},
        })
    );
    let files = reservations(&tmp.path().join("net1"));
    assert_eq!(files["10.1.2.1"], "c1\r\neth0");
    assert_eq!(files["fd00::2"], "c1\r\neth0");
}

#[test]
fn old_versions_get_converted_results() {
    let tmp = tempfile::tempdir().unwrap();
    let v = conf(tmp.path(), "0.4.0", json!({"subnet": "10.1.2.0/24"}));
    assert_eq!(add("c1", &v).ok()["ips"][0]["version"], "4");
    let v = conf(tmp.path(), "0.2.0", json!({"subnet": "10.1.3.0/24"}));
    assert_eq!(add("c1", &v).ok()["ip4"]["ip"], "10.1.3.2/24");
}

#[test]
fn requested_ips_from_every_source() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = conf(
        tmp.path(),
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "fd00::/64"}]]}),
    );
    let out = Env::new("ADD", "a")
        .args("IP=10.1.2.9/24")
        .ours(&HostLocal, &stdin);
    assert_eq!(out.addresses(), ["10.1.2.9/24", "fd00::2/64"]);

    let mut v: Value = serde_json::from_str(&stdin).unwrap();
    v["args"] = json!({"cni": {"ips": ["10.1.2.20", "fd00::20"]}});
    assert_eq!(
        add("b", &v.to_string()).addresses(),
        ["10.1.2.20/24", "fd00::20/64"]
    );

    let mut v: Value = serde_json::from_str(&stdin).unwrap();
    v["runtimeConfig"] = json!({"ips": ["fd00::30/64"]});
    assert_eq!(
        add("c", &v.to_string()).addresses(),
        ["10.1.2.21/24", "fd00::30/64"]
    );

    // Taken, outside every range, the gateway: each refused, nothing left behind.
    let before = reservations(&tmp.path().join("net1"));
    let taken = Env::new("ADD", "d")
        .args("IP=10.1.2.9")
        .ours(&HostLocal, &stdin);
    assert_eq!(taken.code(), 11, "{}", taken.msg());
    assert!(
        taken.msg().contains("10.1.2.9 is not available"),
        "{}",
        taken.msg()
    );
    let outside = Env::new("ADD", "d")
        .args("IP=10.9.9.9")
        .ours(&HostLocal, &stdin);
    assert_eq!(outside.code(), 7);
    assert!(outside
        .msg()
        .contains("failed to allocate all requested IPs: 10.9.9.9"));
    let gw = Env::new("ADD", "d")
        .args("IP=10.1.2.1")
        .ours(&HostLocal, &stdin);
    assert_eq!(gw.code(), 7);
    assert!(gw.msg().contains("subnet's gateway"), "{}", gw.msg());
    assert_eq!(reservations(&tmp.path().join("net1")), before);
}

#[test]
fn cni_args_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = small(tmp.path());
    for (args, want) in [
        (
            "IP=10.1.2.300",
            r#"CNI_ARGS IP: "10.1.2.300" is not an IP address"#,
        ),
        ("IP=10.1.2.3,10.1.2.4", "is not an IP address"),
        ("IP", "invalid pair"),
        ("K8S_POD_NAME=p", "unknown args"),
    ] {
        let out = Env::new("ADD", "c").args(args).ours(&HostLocal, &stdin);
        assert_eq!(out.code(), 7, "{args}");
        assert!(out.msg().contains(want), "{args}: {}", out.msg());
    }
    let out = Env::new("ADD", "c")
        .args("IgnoreUnknown=1;K8S_POD_NAME=p")
        .ours(&HostLocal, &stdin);
    assert_eq!(out.addresses(), ["10.1.2.2/29"]);
}

#[test]
fn validation_errors_are_code_7() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cases = [
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/31"}]]}),
            "too small",
        ),
        (json!({"ranges": [[{"subnet": "fd00::/127"}]]}), "too small"),
        (
            json!({"ranges": [[{"subnet": "10.1.2.3/24"}]]}),
            "host bits set",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.1.2.128/25"}]]}),
            "overlap",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.0.0/16"}], [{"subnet": "10.1.2.0/24"}]]}),
            "ipam.ranges[1]: overlaps ipam.ranges[0]",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "fd00::/64"}]]}),
            "mixed address families",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.3.2"}]]}),
            "ipam.ranges[0][0].rangeStart: 10.1.3.2 is not in the subnet",
        ),
        (
            json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "10.1.1.2"}]]}),
            "ipam.ranges[0][0].rangeEnd: 10.1.1.2 is not in the subnet",
        ),
        (json!({"ranges": []}), "no IP ranges specified"),
        (json!({"ranges": [[]]}), "ipam.ranges[0]: empty range set"),
    ];
    for (ipam, want) in cases {
        let out = add("c", &conf(dir, "1.0.0", ipam.clone()));
        assert_eq!(out.code(), 7, "{ipam}");
        assert!(out.msg().contains(want), "{ipam}: {}", out.msg());
    }
    let no_ipam = json!({"cniVersion": "1.0.0", "name": "net1", "type": "x"}).to_string();
    assert_eq!(add("c", &no_ipam).code(), 7);
    let bad_cidr = conf(dir, "1.0.0", json!({"ranges": [[{"subnet": "10.1.2.0"}]]}));
    let out = add("c", &bad_cidr);
    assert_eq!(out.code(), 6);
    assert_eq!(
        out.msg(),
        r#"ipam.ranges[0][0].subnet: "10.1.2.0" is not a CIDR like 10.1.2.0/24 (a subnet needs a prefix length)"#
    );
    assert!(
        std::fs::read_dir(dir).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn range_full_names_the_range_set() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = small(tmp.path());
    let got: Vec<String> = (0..5)
        .flat_map(|i| add(&format!("c{i}"), &stdin).addresses())
        .collect();
    assert_eq!(
        got,
        [
            "10.1.2.2/29",
            "10.1.2.3/29",
            "10.1.2.4/29",
            "10.1.2.5/29",
            "10.1.2.6/29"
        ]
    );
    let full = add("c9", &stdin);
    assert_eq!(full.code(), 11);
    assert_eq!(
        full.msg(),
        "failed to allocate for range 0: no IP addresses available in range set: 10.1.2.1-10.1.2.6"
    );
}

#[test]
fn duplicate_add_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = small(tmp.path());
    add("c1", &stdin).ok();
    let again = add("c1", &stdin);
    assert_eq!(again.code(), 4);
    assert!(
        again.msg().contains("10.1.2.2 has been allocated to c1"),
        "{}",
        again.msg()
    );
    assert_eq!(reservations(&tmp.path().join("net1")).len(), 1);
}

#[test]
fn network_name_cannot_escape_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for name in ["..", "../evil", "a/b", ""] {
        let mut v: Value = serde_json::from_str(&small(&data)).unwrap();
        v["name"] = json!(name);
        // Both through the entry point and called in-process, as the bridge plugin does.
        assert_eq!(add("c", &v.to_string()).code(), 7, "{name}");
        let mut args = cni::CmdArgs::from_env(|k| match k {
            "CNI_COMMAND" => Some("ADD".into()),
            "CNI_CONTAINERID" => Some("c".into()),
            "CNI_NETNS" => Some("/x".into()),
            "CNI_IFNAME" => Some("eth0".into()),
            "CNI_PATH" => Some("/x".into()),
            _ => None,
        })
        .unwrap();
        args.stdin = v.to_string().into_bytes();
        let e = cni::Plugin::add(&HostLocal, &args).unwrap_err();
        assert_eq!(e.code, 7, "{name}");
        let e = cni::Plugin::del(&HostLocal, &args).unwrap_err();
        assert_eq!(e.code, 7, "{name}");
    }
    assert!(!tmp.path().join("evil").exists());
    assert!(!data.exists());
}

#[test]
fn del_releases_only_the_attachment_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = conf(
        tmp.path(),
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "fd00::/64"}]]}),
    );
    add("c1", &stdin).ok();
    Env::new("ADD", "c1")
        .ifname("net1")
        .ours(&HostLocal, &stdin)
        .ok();
    add("c2", &stdin).ok();
    let dir = tmp.path().join("net1");
    assert_eq!(reservations(&dir).len(), 6);

    assert_eq!(Env::new("DEL", "c1").ours(&HostLocal, &stdin).status, 0);
    let left = reservations(&dir);
    assert_eq!(left.len(), 4);
    assert!(!left.values().any(|v| v == "c1\r\neth0"));
    assert_eq!(Env::new("DEL", "c1").ours(&HostLocal, &stdin).status, 0);
    assert_eq!(reservations(&dir).len(), 4);

    // DEL still works when the config no longer validates, and for a network never used.
    let broken = conf(
        tmp.path(),
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.1/31"}]]}),
    );
    assert_eq!(Env::new("DEL", "c2").ours(&HostLocal, &broken).status, 0);
    assert_eq!(reservations(&dir).len(), 2);
    let mut other: Value = serde_json::from_str(&stdin).unwrap();
    other["name"] = json!("never-used");
    assert_eq!(
        Env::new("DEL", "c2")
            .ours(&HostLocal, &other.to_string())
            .status,
        0
    );
    assert!(!tmp.path().join("never-used").exists());
}

#[test]
fn del_handles_the_old_id_only_format() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = small(tmp.path());
    add("c1", &stdin).ok();
    let dir = tmp.path().join("net1");
    std::fs::write(dir.join("10.1.2.5"), "old").unwrap();
    std::fs::write(dir.join("10.1.2.6"), "c1").unwrap();
    // c1 has a current-format file: the ID-only one is left alone.
    Env::new("DEL", "c1").ours(&HostLocal, &stdin).ok();
    assert_eq!(
        reservations(&dir).keys().collect::<Vec<_>>(),
        ["10.1.2.5", "10.1.2.6"]
    );
    // "old" has only an ID-only file: it goes.
    Env::new("DEL", "old").ours(&HostLocal, &stdin).ok();
    assert_eq!(reservations(&dir).keys().collect::<Vec<_>>(), ["10.1.2.6"]);
}

#[test]
fn check_finds_the_reservation() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = small(tmp.path());
    let missing = Env::new("CHECK", "c1").ours(&HostLocal, &stdin);
    assert_eq!(missing.code(), 3);
    add("c1", &stdin).ok();
    assert_eq!(Env::new("CHECK", "c1").ours(&HostLocal, &stdin).status, 0);
    let other_if = Env::new("CHECK", "c1")
        .ifname("net9")
        .ours(&HostLocal, &stdin);
    assert_eq!(other_if.code(), 3);
    assert!(
        other_if.msg().contains("c1 interface net9"),
        "{}",
        other_if.msg()
    );
}

fn with_version(stdin: &str, version: &str) -> Value {
    let mut v: Value = serde_json::from_str(stdin).expect("the config is JSON");
    v["cniVersion"] = json!(version);
    v
}

#[test]
fn gc_releases_what_is_not_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = conf(
        tmp.path(),
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}),
    );
    for id in ["keep", "drop"] {
        add(id, &stdin).ok();
    }
    Env::new("ADD", "keep")
        .ifname("net1")
        .ours(&HostLocal, &stdin)
        .ok();
    let dir = tmp.path().join("net1");
    std::fs::write(dir.join("10.1.2.100"), "keep").unwrap(); // old format, container alive
    std::fs::write(dir.join("10.1.2.101"), "gone").unwrap(); // old format, container gone

    let mut gc = with_version(&stdin, "1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "eth0"}]);
    assert_eq!(
        Env::new("GC", "").ours(&HostLocal, &gc.to_string()).status,
        0
    );
    let left = reservations(&dir);
    assert_eq!(
        left,
        [
            ("10.1.2.100".to_owned(), "keep".to_owned()),
            ("10.1.2.2".to_owned(), "keep\r\neth0".to_owned()),
        ]
        .into_iter()
        .collect()
    );

    // Without the list GC refuses instead of releasing everything.
    let bare = with_version(&stdin, "1.1.0");
    assert_eq!(
        Env::new("GC", "")
            .ours(&HostLocal, &bare.to_string())
            .code(),
        7
    );
    assert_eq!(reservations(&dir).len(), 2);
    gc["cni.dev/valid-attachments"] = json!([]);
    assert_eq!(
        Env::new("GC", "").ours(&HostLocal, &gc.to_string()).status,
        0
    );
    assert!(reservations(&dir).is_empty());
}

#[test]
fn status_reports_exhaustion_and_unusable_store() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = conf(
        tmp.path(),
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/30"}], [{"subnet": "fd00::/64"}]]}),
    );
    assert_eq!(Env::new("STATUS", "").ours(&HostLocal, &stdin).status, 0);
    add("c1", &stdin).ok();
    // 10.1.2.0/30 has one allocatable address: ADD cannot succeed any more.
    let full = Env::new("STATUS", "").ours(&HostLocal, &stdin);
    assert_eq!(full.code(), 50);
    assert!(full.msg().contains("range set 0"), "{}", full.msg());
    Env::new("DEL", "c1").ours(&HostLocal, &stdin).ok();
    assert_eq!(Env::new("STATUS", "").ours(&HostLocal, &stdin).status, 0);

    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let unusable = conf(&file, "1.1.0", json!({"subnet": "10.1.2.0/24"}));
    let out = Env::new("STATUS", "").ours(&HostLocal, &unusable);
    assert_eq!(out.code(), 50);
    assert!(out.msg().contains("store unusable"), "{}", out.msg());
}

#[test]
fn explicit_range_never_hands_out_network_or_broadcast() {
    let tmp = tempfile::tempdir().unwrap();
    let stdin = conf(
        tmp.path(),
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/30", "rangeStart": "10.1.2.0", "rangeEnd": "10.1.2.3"}]]}),
    );
    assert_eq!(add("a", &stdin).addresses(), ["10.1.2.2/30"]);
    assert_eq!(add("b", &stdin).code(), 11);
    let bcast = Env::new("ADD", "c")
        .args("IP=10.1.2.3")
        .ours(&HostLocal, &stdin);
    assert_eq!(bcast.code(), 7);
    assert!(bcast.msg().contains("broadcast"), "{}", bcast.msg());
}
