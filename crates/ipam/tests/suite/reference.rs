//! Side by side with the Go reference binaries (v1.9.1, built by scripts/peers.sh): the same
//! calls on the same inputs, ours and theirs in separate data directories, must give the same
//! results and leave the same files, byte for byte; bad inputs must fail in both, ours with the
//! CNI code we intend (the reference reports most errors as 999).

use crate::common;

use std::path::Path;

use common::{tree, Env, Outcome};
use ipam::host_local::HostLocal;
use ipam::static_ipam::StaticIpam;
use serde_json::{json, Value};

/// Two data directories and a config template whose `dataDir` is filled in per side.
struct Pair {
    _tmp: tempfile::TempDir,
    ours: std::path::PathBuf,
    theirs: std::path::PathBuf,
}

impl Pair {
    fn new() -> Pair {
        let tmp = tempfile::tempdir().expect("temp dir");
        let ours = tmp.path().join("ours");
        let theirs = tmp.path().join("theirs");
        Pair {
            _tmp: tmp,
            ours,
            theirs,
        }
    }

    fn with_dir(conf: &Value, dir: &Path) -> String {
        let mut conf = conf.clone();
        conf["ipam"]["dataDir"] = json!(dir);
        conf.to_string()
    }

    /// Runs one call on both sides; both must succeed with the same output and leave the same
    /// store files.
    fn same(&self, env: Env, conf: &Value) -> Value {
        let (ours, theirs) = self.run(env, conf);
        assert_same_success(&ours, &theirs, conf);
        ours.json
    }

    /// Runs one call on both sides; both must fail, ours with `code`, and leave the same store
    /// files.
    fn fails(&self, env: Env, conf: &Value, code: u64) {
        let (ours, theirs) = self.run(env, conf);
        assert_both_fail(&ours, &theirs, code, conf);
    }

    fn run(&self, env: Env, conf: &Value) -> (Outcome, Outcome) {
        let ours = env.ours(&HostLocal, &Pair::with_dir(conf, &self.ours));
        let theirs = env.reference("host-local", &Pair::with_dir(conf, &self.theirs));
        assert_eq!(
            tree(&self.ours.join("net1")),
            tree(&self.theirs.join("net1")),
            "store files differ after {conf}\n ours: {}\n Go:   {}",
            ours.json,
            theirs.json
        );
        (ours, theirs)
    }
}

/// Both succeeded with the same output.
fn assert_same_success(ours: &Outcome, theirs: &Outcome, input: &Value) {
    assert!(
        ours.status == 0 && theirs.status == 0,
        "for {input}\n ours: {}\n Go:   {}",
        ours.json,
        theirs.json
    );
    assert_eq!(
        without_empty_dns(&ours.json),
        without_empty_dns(&theirs.json),
        "for {input}"
    );
}

/// Both failed, ours with `code` (the reference reports most errors as 999).
fn assert_both_fail(ours: &Outcome, theirs: &Outcome, code: u64, input: &Value) {
    assert_ne!(ours.status, 0, "ours accepted {input}: {}", ours.json);
    assert_eq!(ours.code(), code, "for {input}: {}", ours.json);
    assert_ne!(theirs.status, 0, "Go accepted {input}: {}", theirs.json);
}

/// Newer reference versions leave out an empty `dns` in 1.x results; Debian's prints `{}`.
fn without_empty_dns(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(obj) = v.as_object_mut() {
        if obj.get("dns") == Some(&json!({})) {
            obj.remove("dns");
        }
    }
    v
}

fn net(version: &str, ipam: Value) -> Value {
    let mut ipam_obj = json!({"type": "host-local"});
    ipam_obj
        .as_object_mut()
        .expect("a JSON object")
        .extend(ipam.as_object().expect("ipam is a JSON object").clone());
    json!({"cniVersion": version, "name": "net1", "type": "bridge", "ipam": ipam_obj})
}

#[test]
fn host_local_sequence_matches() {
    let pair = Pair::new();
    let resolv = pair._tmp.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "# x\nnameserver 10.0.0.53\nnameserver fd00::53\ndomain d.example\nsearch a.example b.example\noptions ndots:2 rotate\n",
    )
    .unwrap();
    let conf = net(
        "1.0.0",
        json!({
            "ranges": [
                [{"subnet": "10.1.2.0/29"}, {"subnet": "10.1.3.0/29", "rangeStart": "10.1.3.3", "gateway": "10.1.3.6"}],
                [{"subnet": "fd00:1::/125"}],
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.5/16", "gw": "10.1.2.1"}, {"dst": "::/0"}],
            "resolvConf": resolv,
        }),
    );
    let mut addresses = Vec::new();
    for i in 0..6 {
        let out = pair.same(Env::new("ADD", &format!("c{i}")), &conf);
        addresses.push(out["ips"][0]["address"].clone());
    }
    // The round-robin walked into the second range of the first set.
    assert_eq!(addresses[5], "10.1.3.3/29");
    pair.same(Env::new("DEL", "c1"), &conf);
    pair.same(Env::new("DEL", "c1"), &conf);
    pair.same(Env::new("ADD", "c6"), &conf);
    // The v6 set (6 addresses) is full now: both fail, and nothing is left behind.
    pair.fails(Env::new("ADD", "c7").args("IP=10.1.2.3"), &conf, 11);
    pair.fails(Env::new("ADD", "c7"), &conf, 11);
    pair.same(Env::new("CHECK", "c0"), &conf);
    pair.fails(Env::new("CHECK", "nobody"), &conf, 3);
    pair.fails(Env::new("ADD", "c0"), &conf, 4);
    for i in 0..8 {
        pair.same(Env::new("DEL", &format!("c{i}")), &conf);
    }
    // Requested addresses from args and runtimeConfig, one per set.
    let mut with_ips = conf.clone();
    with_ips["args"] = json!({"cni": {"ips": ["10.1.3.4/29"]}});
    with_ips["runtimeConfig"] = json!({"ips": ["fd00:1::4"]});
    pair.same(Env::new("ADD", "r1"), &with_ips);
}

#[test]
fn host_local_legacy_and_runtime_ranges_match() {
    let pair = Pair::new();
    let mut conf = net(
        "0.3.1",
        json!({"subnet": "10.2.0.0/24", "rangeStart": "10.2.0.10", "rangeEnd": "10.2.0.20", "gateway": "10.2.0.254",
               "ranges": [[{"subnet": "fd00:2::/64"}]]}),
    );
    conf["runtimeConfig"] = json!({"ipRanges": [[{"subnet": "10.3.0.0/16"}]]});
    for i in 0..3 {
        pair.same(Env::new("ADD", &format!("c{i}")), &conf);
    }
    let single = net("0.2.0", json!({"subnet": "10.4.0.0/24"}));
    pair.same(Env::new("ADD", "old"), &single);
    let v040 = net("0.4.0", json!({"ranges": [[{"subnet": "10.5.0.0/24"}]]}));
    pair.same(Env::new("ADD", "v4"), &v040);
    pair.same(Env::new("CHECK", "v4"), &v040);
}

#[test]
fn host_local_bad_inputs_fail_in_both() {
    let pair = Pair::new();
    let cases = [
        (
            net("1.0.0", json!({"ranges": [[{"subnet": "10.1.2.0/31"}]]})),
            7,
        ),
        (
            net("1.0.0", json!({"ranges": [[{"subnet": "10.1.2.0/32"}]]})),
            7,
        ),
        (
            net("1.0.0", json!({"ranges": [[{"subnet": "fd00::/127"}]]})),
            7,
        ),
        (
            net("1.0.0", json!({"ranges": [[{"subnet": "10.1.2.5/24"}]]})),
            7,
        ),
        (
            net(
                "1.0.0",
                json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.1.2.0/25"}]]}),
            ),
            7,
        ),
        (
            net(
                "1.0.0",
                json!({"ranges": [[{"subnet": "10.1.0.0/16"}], [{"subnet": "10.1.2.0/24"}]]}),
            ),
            7,
        ),
        (
            net(
                "1.0.0",
                json!({"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "fd00::/64"}]]}),
            ),
            7,
        ),
        (
            net(
                "1.0.0",
                json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.3.1"}]]}),
            ),
            7,
        ),
        (
            net(
                "1.0.0",
                json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "10.1.3.1"}]]}),
            ),
            7,
        ),
        (
            net(
                "1.0.0",
                json!({"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.8"}]]}),
            ),
            7,
        ),
        (net("1.0.0", json!({"ranges": [[{"subnet": "bogus"}]]})), 6),
        (net("1.0.0", json!({"ranges": [[]]})), 7),
        (net("1.0.0", json!({})), 7),
        (
            net(
                "0.2.0",
                json!({"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.3.0/24"}]]}),
            ),
            7,
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net1", "type": "bridge"}),
            7,
        ),
    ];
    for (conf, code) in &cases {
        pair.fails(Env::new("ADD", "c"), conf, *code);
    }
    let good = net("1.0.0", json!({"ranges": [[{"subnet": "10.1.2.0/24"}]]}));
    for args in [
        "IP=10.1.2.300",
        "IP=10.1.2.3,10.1.2.4",
        "FOO=bar",
        "IP=10.9.9.9",
        "IP=10.1.2.1",
    ] {
        pair.fails(Env::new("ADD", "c").args(args), &good, 7);
    }
    // Unknown args are fine with IgnoreUnknown, and the prefix of a requested IP is ignored.
    let out = pair.same(
        Env::new("ADD", "c").args("IgnoreUnknown=1;FOO=bar;IP=10.1.2.3/24"),
        &good,
    );
    assert_eq!(out["ips"][0]["address"], "10.1.2.3/24");
}

/// A gateway outside its subnet is accepted by both; one of the other family only by the
/// reference (the kernel refuses the route later). If the reference starts refusing it too,
/// drop that entry from docs/compatibility.md.
#[test]
fn host_local_gateway_checks() {
    let pair = Pair::new();
    let outside = net(
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24", "gateway": "10.9.9.1"}]]}),
    );
    let out = pair.same(Env::new("ADD", "c"), &outside);
    assert_eq!(out["ips"][0]["gateway"], "10.9.9.1");

    let tmp = tempfile::tempdir().unwrap();
    let wrong = net(
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.1.2.0/24", "gateway": "fd00::1"}]], "dataDir": tmp.path()}),
    );
    let ours = Env::new("ADD", "c").ours(&HostLocal, &wrong.to_string());
    assert_eq!(ours.code(), 7);
    assert!(
        ours.msg().contains("different address families"),
        "{}",
        ours.msg()
    );
    let theirs = Env::new("ADD", "c").reference("host-local", &wrong.to_string());
    assert_eq!(theirs.ok()["ips"][0]["gateway"], "fd00::1");
}

#[test]
fn stores_are_interchangeable() {
    let pair = Pair::new();
    let conf = net(
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.6.0.0/24"}], [{"subnet": "fd00:6::/64"}]]}),
    );
    let dir = pair.ours.clone();
    let stdin = Pair::with_dir(&conf, &dir);
    // Go allocates, we continue the round-robin, refuse its duplicate, and release its address.
    Env::new("ADD", "go1").reference("host-local", &stdin).ok();
    let ours = Env::new("ADD", "rs1").ours(&HostLocal, &stdin);
    assert_eq!(ours.addresses(), ["10.6.0.3/24", "fd00:6::3/64"]);
    assert_eq!(Env::new("ADD", "go1").ours(&HostLocal, &stdin).code(), 4);
    Env::new("DEL", "go1").ours(&HostLocal, &stdin).ok();
    let files = common::reservations(&dir.join("net1"));
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["10.6.0.3", "fd00:6::3"],
        "only rs1's addresses are left"
    );
    // And the other way round.
    assert_ne!(
        Env::new("ADD", "rs1")
            .reference("host-local", &stdin)
            .status,
        0
    );
    Env::new("DEL", "rs1").reference("host-local", &stdin).ok();
    let files = common::reservations(&dir.join("net1"));
    assert!(files.is_empty(), "{files:?}");
    let next = Env::new("ADD", "go2").reference("host-local", &stdin);
    assert_eq!(next.addresses(), ["10.6.0.4/24", "fd00:6::4/64"]);
}

fn static_net(version: &str, ipam: Value) -> Value {
    let mut conf = net(version, ipam);
    conf["ipam"]["type"] = json!("static");
    conf
}

/// Both succeed with the same output.
fn same_static(env: Env, conf: &Value) -> Value {
    let ours = env.ours(&StaticIpam, &conf.to_string());
    let theirs = env.reference("static", &conf.to_string());
    assert_same_success(&ours, &theirs, conf);
    ours.json
}

/// Both fail, ours with `code`.
fn static_fails(env: Env, conf: &Value, code: u64) {
    let ours = env.ours(&StaticIpam, &conf.to_string());
    let theirs = env.reference("static", &conf.to_string());
    assert_both_fail(&ours, &theirs, code, conf);
}

#[test]
fn static_matches() {
    let conf = static_net(
        "1.0.0",
        json!({
            "addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}, {"address": "fd00::5/64"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.1"}],
            "dns": {"nameservers": ["10.10.0.53"], "domain": "x.example", "search": ["x.example"]},
        }),
    );
    let out = same_static(Env::new("ADD", "c"), &conf);
    assert_eq!(out["ips"][0]["address"], "10.10.0.5/24");
    same_static(
        Env::new("ADD", "c").args("IP=10.20.0.5/24,10.30.0.5/16;GATEWAY=10.30.0.1"),
        &conf,
    );
    let mut args = conf.clone();
    args["args"] = json!({"cni": {"ips": ["10.40.0.5/24"]}});
    same_static(Env::new("ADD", "c"), &args);
    args["runtimeConfig"] = json!({"ips": ["10.50.0.5/24", "fd00::50/64"]});
    same_static(Env::new("ADD", "c"), &args);
    same_static(
        Env::new("ADD", "c"),
        &static_net("0.3.1", json!({"addresses": [{"address": "10.1.1.1/24"}]})),
    );
    same_static(
        Env::new("ADD", "c"),
        &static_net("0.2.0", json!({"addresses": [{"address": "10.1.1.1/24"}]})),
    );
    same_static(Env::new("DEL", "c"), &conf);

    // CHECK against a previous result.
    let mut check = conf.clone();
    check["prevResult"] = out.clone();
    same_static(Env::new("CHECK", "c"), &check);
    let mut wrong_gw = check.clone();
    wrong_gw["prevResult"]["ips"][0]["gateway"] = json!("10.10.0.254");
    static_fails(Env::new("CHECK", "c"), &wrong_gw, 999);
    // Without prevResult.
    static_fails(Env::new("CHECK", "c"), &conf, 7);
}

#[test]
fn static_bad_inputs_fail_in_both() {
    let good = static_net("1.0.0", json!({"addresses": [{"address": "10.1.1.1/24"}]}));
    for args in ["IP=10.1.1.1", "IP=10.2.2.2/24;GATEWAY=bogus", "FOO=1"] {
        static_fails(Env::new("ADD", "c").args(args), &good, 7);
    }
    let cases = [
        (
            static_net("1.0.0", json!({"addresses": [{"address": "10.1.1.1"}]})),
            7,
        ),
        (
            static_net(
                "1.0.0",
                json!({"addresses": [{"address": "10.1.1.1/24", "gateway": "nope"}]}),
            ),
            6,
        ),
        (
            static_net(
                "0.2.0",
                json!({"addresses": [{"address": "10.1.1.1/24"}, {"address": "10.1.2.1/24"}]}),
            ),
            7,
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net1", "type": "bridge"}),
            7,
        ),
    ];
    for (conf, code) in &cases {
        static_fails(Env::new("ADD", "c"), conf, *code);
    }
    let mut bad_ips = good.clone();
    bad_ips["runtimeConfig"] = json!({"ips": ["10.1.1.1"]});
    static_fails(Env::new("ADD", "c"), &bad_ips, 7);
}

/// As for host-local: a gateway outside the address's subnet is accepted by both, one of the
/// other family only by the reference.
#[test]
fn static_gateway_checks() {
    let outside = static_net(
        "1.0.0",
        json!({"addresses": [{"address": "10.1.1.5/24", "gateway": "10.9.9.1"}]}),
    );
    let out = same_static(Env::new("ADD", "c"), &outside);
    assert_eq!(out["ips"][0]["gateway"], "10.9.9.1");

    let wrong = static_net(
        "1.0.0",
        json!({"addresses": [{"address": "10.1.1.5/24", "gateway": "fd00::1"}]}),
    );
    let ours = Env::new("ADD", "c").ours(&StaticIpam, &wrong.to_string());
    assert_eq!(ours.code(), 7);
    assert!(
        ours.msg().contains("different address families"),
        "{}",
        ours.msg()
    );
    let theirs = Env::new("ADD", "c").reference("static", &wrong.to_string());
    assert_eq!(theirs.ok()["ips"][0]["gateway"], "fd00::1");
}
