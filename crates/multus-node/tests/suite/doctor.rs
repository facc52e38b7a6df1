//! `multus doctor` on a node tree of its own: the built binary, real plugins, real files. What
//! it says of the API (RBAC, the node's pods) is tested on the real node (the e2e suite).

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::common::{multus_bin, plugins_bin};

/// A node's CNI directories in a scratch directory.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let node = Node {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        for d in ["net.d", "bin", "cache"] {
            std::fs::create_dir(node.path(d)).expect("mkdir");
        }
        symlink(multus_bin(), node.path("bin/multus")).expect("link multus");
        symlink(multus_bin(), node.path("bin/multus-shim")).expect("link the shim");
        for plugin in ["bridge", "host-local", "portmap"] {
            symlink(plugins_bin(), node.path("bin").join(plugin)).expect("link a plugin");
        }
        node.write(
            "net.d/10-cluster.conflist",
            &json!({"cniVersion": "1.1.0", "name": "cluster", "plugins": [
                {"type": "bridge", "bridge": "cni0",
                 "ipam": {"type": "host-local", "subnet": "10.42.0.0/24"}},
                {"type": "portmap", "capabilities": {"portMappings": true}}]}),
        );
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, value: &Value) {
        std::fs::write(self.path(rel), value.to_string()).expect("write");
    }

    /// multus's config as `multus install` writes it, with `extra` keys.
    fn multus(&self, plugin: &str, extra: Value) {
        let mut conf = json!({
            "cniVersion": "1.1.0",
            "name": "multus-cni-network",
            "type": plugin,
            "clusterNetwork": self.path("net.d/10-cluster.conflist"),
            "binDir": self.path("bin"),
            "cniDir": self.path("cache"),
        });
        if let (Value::Object(c), Value::Object(e)) = (&mut conf, extra) {
            c.extend(e);
        }
        self.write("net.d/00-multus.conf", &conf);
    }

    /// The doctor's exit status and its JSON report.
    fn doctor(&self) -> (i32, Value) {
        let out = Command::new(multus_bin())
            .args(["doctor", "--output", "json", "--node", "edge-1"])
            .arg("--cni-conf-dir")
            .arg(self.path("net.d"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .expect("run multus doctor");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
        });
        (out.status.code().expect("an exit status"), report)
    }
}

/// The findings of one check, as (severity, problem).
fn findings(report: &Value, check: &str) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["check"] == check)
        .map(|f| {
            (
                f["severity"].as_str().unwrap_or_default().to_owned(),
                f["problem"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The one finding of `check` with `severity`, whose problem says `words`.
#[track_caller]
fn assert_finding(report: &Value, check: &str, severity: &str, words: &str) {
    let found = findings(report, check);
    assert!(
        found
            .iter()
            .any(|(s, p)| s == severity && p.contains(words)),
        "no {severity} [{check}] saying {words:?} in {found:?}\n{report:#}"
    );
}

#[test]
fn the_doctor_says_which_config_the_runtime_picks_and_why() {
    let node = Node::new();
    // The cluster network's config alone: the runtime would give pods only that network.
    let (status, report) = node.doctor();
    assert_eq!(status, 2, "{report:#}");
    assert_finding(
        &report,
        "runtime-config",
        "error",
        "the runtime picks 10-cluster.conflist (type \"bridge\"), not multus: multus's config (00-multus.conf) is not there",
    );

    node.multus("multus", json!({}));
    let (status, report) = node.doctor();
    assert_finding(
        &report,
        "runtime-config",
        "ok",
        "the runtime picks 00-multus.conf: multus (thin mode), CNI 1.1.0, first by name of 2 config(s)",
    );
    assert_finding(
        &report,
        "cluster-network",
        "ok",
        "cluster (CNI 1.1.0): bridge, host-local, portmap",
    );
    for plugin in ["multus", "bridge", "host-local", "portmap"] {
        assert_finding(
            &report,
            "binary",
            "ok",
            &format!("{plugin}: speaks CNI 1.1.0"),
        );
    }
    assert_finding(&report, "status", "ok", "multus answers STATUS: ready");
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(report["summary"]["exitStatus"], 0);

    // The same config as a list, as `multus install` writes it around a conflist: multus is
    // its first plugin, handed the list's name and version.
    let conf: Value =
        serde_json::from_slice(&std::fs::read(node.path("net.d/00-multus.conf")).expect("read"))
            .expect("json");
    std::fs::remove_file(node.path("net.d/00-multus.conf")).expect("rm");
    node.write(
        "net.d/00-multus.conflist",
        &json!({"cniVersion": "1.1.0", "name": "multus-cni-network", "plugins": [conf]}),
    );
    let (status, report) = node.doctor();
    assert_finding(
        &report,
        "runtime-config",
        "ok",
        "the runtime picks 00-multus.conflist: multus (thin mode), CNI 1.1.0",
    );
    assert_finding(&report, "status", "ok", "multus answers STATUS: ready");
    assert_eq!(status, 0, "{report:#}");
    std::fs::remove_file(node.path("net.d/00-multus.conflist")).expect("rm");
    node.multus("multus", json!({}));

    // A config that sorts before multus's wins.
    node.write(
        "net.d/0-primary.conf",
        &json!({"cniVersion": "1.1.0", "name": "primary", "type": "bridge"}),
    );
    let (status, report) = node.doctor();
    assert_eq!(status, 2);
    assert_finding(
        &report,
        "runtime-config",
        "error",
        "0-primary.conf sorts before multus's 00-multus.conf",
    );
    std::fs::remove_file(node.path("net.d/0-primary.conf")).expect("rm");

    // A primary that claims the directory moved multus's config aside.
    std::fs::write(node.path("net.d/05-x.conf.cilium_bak"), "{}").expect("write");
    let (status, report) = node.doctor();
    assert_eq!(status, 2);
    assert_finding(
        &report,
        "exclusive-primary",
        "error",
        "moved other configs aside: 05-x.conf.cilium_bak",
    );
}

/// deploy/own-conf-dir's layout, under --host-root: looking in /etc/cni/net.d, the doctor says
/// where multus's config is and how to go on; looking where it is, it finds it.
#[test]
fn the_doctor_points_to_a_config_directory_of_multus_own() {
    let root = tempfile::tempdir().expect("tempdir");
    let (etc, own) = (
        root.path().join("etc/cni/net.d"),
        root.path().join("run/multus/cni/net.d"),
    );
    for dir in [&etc, &own] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let cluster = json!({"cniVersion": "1.1.0", "name": "cluster", "type": "bridge"});
    std::fs::write(etc.join("10-cluster.conf"), cluster.to_string()).expect("write");
    let multus = json!({"cniVersion": "1.1.0", "name": "multus-cni-network", "type": "multus",
                        "clusterNetwork": "/etc/cni/net.d/10-cluster.conf"});
    std::fs::write(own.join("00-multus.conf"), multus.to_string()).expect("write");
    let doctor = |args: &[&str]| -> (i32, Value) {
        let out = Command::new(multus_bin())
            .args([
                "doctor",
                "--output",
                "json",
                "--node",
                "edge-1",
                "--host-root",
            ])
            .arg(root.path())
            .args(args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .expect("run multus doctor");
        let report = serde_json::from_slice(&out.stdout).expect("a JSON report");
        (out.status.code().expect("an exit status"), report)
    };

    let (status, report) = doctor(&[]);
    assert_eq!(status, 2, "{report:#}");
    assert_finding(
        &report,
        "runtime-config",
        "error",
        "the runtime picks 10-cluster.conf (type \"bridge\"), not multus: multus's config is in /run/multus/cni/net.d (deploy/own-conf-dir), not here",
    );
    let fixes: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["check"] == "runtime-config")
        .filter_map(|f| f["fix"].as_str())
        .collect();
    assert!(
        fixes
            .iter()
            .any(|f| f.ends_with("run the doctor with --cni-conf-dir /run/multus/cni/net.d")),
        "{fixes:?}"
    );

    let (_, report) = doctor(&["--cni-conf-dir", "/run/multus/cni/net.d"]);
    assert_finding(
        &report,
        "runtime-config",
        "ok",
        "the runtime picks 00-multus.conf: multus (thin mode), CNI 1.1.0",
    );
    // Without multus's config anywhere: the plain reason.
    std::fs::remove_file(own.join("00-multus.conf")).expect("rm");
    let (_, report) = doctor(&[]);
    assert_finding(
        &report,
        "runtime-config",
        "error",
        "multus's config (00-multus.conf) is not there",
    );
}

#[test]
fn the_doctor_finds_a_plugin_missing_and_one_that_does_not_speak_the_version() {
    let node = Node::new();
    node.multus("multus", json!({}));
    std::fs::remove_file(node.path("bin/host-local")).expect("rm");
    let old = node.path("bin/portmap");
    std::fs::remove_file(&old).expect("rm");
    std::fs::write(
        &old,
        "#!/bin/sh\necho '{\"cniVersion\": \"0.3.1\", \"supportedVersions\": [\"0.3.0\", \"0.3.1\"]}'\n",
    )
    .expect("write");
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (status, report) = node.doctor();
    assert_eq!(status, 2);
    assert_finding(
        &report,
        "binary",
        "error",
        "host-local is not in the plugin directory as a runnable file",
    );
    assert_finding(
        &report,
        "binary",
        "error",
        "portmap does not speak CNI 1.1.0, which its config asks for (it speaks 0.3.0, 0.3.1)",
    );
}

#[test]
fn the_doctor_asks_status_and_names_what_is_not_ready() {
    let node = Node::new();
    let ready = node.path("ready");
    node.multus("multus", json!({"readinessindicatorfile": ready}));
    let (status, report) = node.doctor();
    assert_eq!(status, 2);
    assert_finding(
        &report,
        "readiness",
        "error",
        &format!(
            "the readiness indicator file {} is not there",
            ready.display()
        ),
    );
    assert_finding(
        &report,
        "status",
        "error",
        &format!(
            "multus answers STATUS: not ready (code 50): the cluster network is not ready: readiness indicator file {} does not exist",
            ready.display()
        ),
    );

    std::fs::write(&ready, "").expect("write");
    std::fs::rename(
        node.path("net.d/10-cluster.conflist"),
        node.path("cluster.conflist.away"),
    )
    .expect("mv");
    let (_, report) = node.doctor();
    assert_finding(
        &report,
        "cluster-network",
        "error",
        "the cluster network cannot be read",
    );
    assert_finding(
        &report,
        "status",
        "error",
        "the cluster network is not ready: its config cannot be read",
    );

    // A CNI 1.0.0 config has no STATUS: said, not asked.
    std::fs::rename(
        node.path("cluster.conflist.away"),
        node.path("net.d/10-cluster.conflist"),
    )
    .expect("mv");
    node.multus("multus", json!({"cniVersion": "1.0.0"}));
    let (status, report) = node.doctor();
    assert_eq!(status, 1, "{report:#}");
    // Older than its cluster network, multus does not ask the newer version of it.
    assert_finding(
        &report,
        "cluster-network",
        "warning",
        "cluster is CNI 1.1.0, newer than multus's config (1.0.0)",
    );
    assert_finding(&report, "status", "note", "CNI 1.0.0, which has no STATUS");
}

#[test]
fn the_doctor_says_when_thick_modes_daemon_does_not_answer() {
    let node = Node::new();
    let sockets = node.path("sockets");
    std::fs::create_dir(&sockets).expect("mkdir");
    node.multus("multus-shim", json!({"daemonSocketDir": sockets}));
    let (status, report) = node.doctor();
    assert_eq!(status, 2);
    assert_finding(&report, "runtime-config", "ok", "multus-shim (thick mode)");
    assert_finding(
        &report,
        "daemon",
        "error",
        "the multus daemon does not answer",
    );
    assert_finding(
        &report,
        "status",
        "error",
        "multus-shim answers STATUS: not ready (code 50)",
    );
}

#[test]
fn the_doctor_finds_caches_whose_network_namespace_is_gone() {
    let node = Node::new();
    node.multus("multus", json!({}));
    let results = node.path("cache/results");
    std::fs::create_dir(&results).expect("mkdir");
    let cached = |id: &str, netns: &Path| {
        json!({"kind": "cniCacheV1", "containerId": id, "config": "e30=", "ifName": "eth0",
               "networkName": "cluster", "netns": netns, "result": {}})
    };
    let alive = node.path("netns-alive");
    std::fs::write(&alive, "").expect("write");
    node.write("cache/results/cluster-alive-eth0", &cached("alive", &alive));
    let (_, report) = node.doctor();
    assert_finding(
        &report,
        "stale-cache",
        "ok",
        "1 container(s) cached, each with its network namespace",
    );

    node.write(
        "cache/results/cluster-gone-eth0",
        &cached("gone", &node.path("netns-gone")),
    );
    let (status, report) = node.doctor();
    assert_eq!(status, 1, "{report:#}");
    assert_finding(
        &report,
        "stale-cache",
        "warning",
        "1 of 2 cached container(s) have no network namespace any more: gone",
    );
}

#[test]
fn the_doctor_reads_the_credentials_kind_and_expiry() {
    let node = Node::new();
    let jwt = |claims: Value| {
        let part =
            |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.sig", part(json!({"alg": "RS256"})), part(claims))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs();
    let token = node.path("token");
    std::fs::write(
        &token,
        jwt(
            json!({"sub": "system:serviceaccount:kube-system:multus", "exp": now - 7_200,
                   "kubernetes.io": {"node": {"name": "edge-1"}}}),
        ),
    )
    .expect("write");
    let kubeconfig = node.path("multus.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
             users:\n- name: u\n  user:\n    tokenFile: {}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
             current-context: x\n",
            token.display()
        ),
    )
    .expect("write");
    node.multus("multus", json!({"kubeconfig": kubeconfig}));
    let (status, report) = node.doctor();
    assert_eq!(status, 2);
    assert_finding(
        &report,
        "credential",
        "error",
        "a token of system:serviceaccount:kube-system:multus, bound to node edge-1, expired 2 h ago: every pod start fails with Unauthorized",
    );
    // The API cannot be reached at that address: said, not hung on.
    assert_finding(
        &report,
        "api",
        "error",
        "the API server cannot be reached with the credential",
    );
}
