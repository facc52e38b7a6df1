//! The real `multus` binary against the testkit Kubernetes API server (HTTPS, bearer token),
//! with bridge + host-local delegates from `cni-plugins`. multus runs in this test's own
//! network namespace, where the server listens on loopback; bridges have names unique to each
//! test.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Sandbox, CONTAINER_ID};
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, Fault, KubeApiServer, KubeconfigAuth};
use testkit::{CniCall, CniOutput};

const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

static NEXT_BRIDGE: AtomicUsize = AtomicUsize::new(0);

fn bridge_name() -> String {
    format!("kbr{}", NEXT_BRIDGE.fetch_add(1, Ordering::Relaxed))
}

struct Cluster {
    sb: Sandbox,
    server: KubeApiServer,
    uid: String,
    conf: String,
}

impl Cluster {
    fn new(annotations: Value, extra: Value) -> Cluster {
        let sb = Sandbox::new();
        let server = KubeApiServer::https().unwrap();
        let kubeconfig = sb.dir.path().join("multus.kubeconfig");
        server
            .write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)
            .unwrap();
        let mut pod = pod_manifest("default", "web");
        pod["metadata"]["annotations"] = annotations;
        let stored = server.add_pod(pod);
        let uid = stored["metadata"]["uid"].as_str().unwrap().to_owned();
        let mut extra = extra;
        extra["kubeconfig"] = json!(kubeconfig);
        extra["apiTimeoutSeconds"] = json!(2);
        extra["apiRetries"] = json!(1);
        let conf = sb.multus(
            "1.0.0",
            vec![sb.cluster("cluster", &bridge_name(), "10.88.0.0/24", "1.0.0")],
            extra,
        );
        Cluster {
            sb,
            server,
            uid,
            conf,
        }
    }

    fn bridge_nad(&self, namespace: &str, name: &str, subnet: &str) {
        let conf = self.sb.bridge(name, &bridge_name(), subnet, "1.0.0");
        self.server
            .add_nad(namespace, name, json!({"config": conf.to_string()}));
    }

    fn call(&self, command: &str) -> CniCall {
        let mut call = self.sb.call(command, &self.conf);
        call.args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID={CONTAINER_ID};K8S_POD_UID={}",
            self.uid
        );
        call
    }

    fn run(&self, call: &CniCall) -> CniOutput {
        call.run(&common::multus_bin(), None)
    }

    fn cmd(&self, command: &str) -> CniOutput {
        self.run(&self.call(command))
    }

    fn network_status(&self) -> Option<Value> {
        let pod = self.server.pod("default", "web")?;
        let text = pod["metadata"]["annotations"][STATUS].as_str()?.to_owned();
        Some(serde_json::from_str(&text).unwrap())
    }

    fn events(&self, reason: &str) -> Vec<String> {
        self.server
            .events()
            .iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

#[test]
fn the_microshift_bridge_example_through_the_api() {
    let c = Cluster::new(
        json!({NETWORKS: "bridge-conf", "other.io/keep": "me"}),
        json!({}),
    );
    c.bridge_nad("default", "bridge-conf", "10.10.0.0/24");
    let result = c.cmd("ADD").ok();
    assert_eq!(result["ips"][0]["address"], "10.88.0.2/24");
    assert_eq!(
        c.network_status().expect("network-status written"),
        json!([
            {"name": "cluster", "interface": "eth0", "ips": ["10.88.0.2"], "mac": c.sb.mac("eth0"),
             "default": true, "dns": {}},
            {"name": "default/bridge-conf", "interface": "net1", "ips": ["10.10.0.2"],
             "mac": c.sb.mac("net1"), "dns": {}}
        ])
    );
    // A merge patch of the annotations on pods/status: other annotations stay.
    let pod = c.server.pod("default", "web").unwrap();
    assert_eq!(pod["metadata"]["annotations"]["other.io/keep"], "me");
    let patch = c
        .server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a PATCH");
    assert_eq!(patch.path, "/api/v1/namespaces/default/pods/web/status");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    let body: Value = serde_json::from_str(&patch.body).unwrap();
    assert_eq!(
        body.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["metadata"]
    );
    assert_eq!(
        c.events("AddedInterface"),
        [
            "Add eth0 [10.88.0.2/24] from cluster",
            "Add net1 [10.10.0.2/24] from default/bridge-conf"
        ]
    );
    c.cmd("DEL").ok();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn a_missing_nad_fails_the_add_and_its_event_reaches_the_api() {
    let c = Cluster::new(json!({NETWORKS: "nope"}), json!({}));
    let out = c.cmd("ADD");
    assert_eq!(out.err_code(), 7);
    assert!(
        out.stdout
            .contains("cannot find a network-attachment-definition (nope) in namespace (default)"),
        "{out:?}"
    );
    assert_eq!(c.events("NoNetworkFound").len(), 1);
    c.sb.assert_pod_clean("missing NAD");
}

#[test]
fn a_pod_the_api_does_not_have_fails_the_add_instead_of_faking_success() {
    let c = Cluster::new(json!({}), json!({}));
    c.server.delete_pod("default", "web");
    let out = c.cmd("ADD");
    assert_eq!(out.err_code(), 11);
    assert!(out.stdout.contains("pod default/web not found"), "{out:?}");
    c.sb.assert_pod_clean("no pod");
}

#[test]
fn a_uid_mismatch_fails_before_anything_runs() {
    let c = Cluster::new(json!({}), json!({}));
    let mut call = c.call("ADD");
    call.args = call.args.replace(&c.uid, "another-uid");
    let out = c.run(&call);
    assert_eq!(out.err_code(), 3);
    assert!(out.stdout.contains("another-uid"), "{out:?}");
    c.sb.assert_pod_clean("uid mismatch");
}

#[test]
fn a_conflict_on_the_status_patch_is_retried() {
    let c = Cluster::new(json!({}), json!({}));
    // The cluster network takes a second, so the conflict can be queued for the PATCH alone.
    c.sb.script("slow", r#"sleep 1; exec "$(dirname "$0")/bridge""#);
    let conf: Value = serde_json::from_str(&c.conf).unwrap();
    let mut conf = conf;
    conf["delegates"][0]["type"] = json!("slow");
    let mut call = c.call("ADD");
    call.stdin = conf.to_string();
    let runner = call.clone();
    let handle = std::thread::spawn(move || runner.run(&common::multus_bin(), None));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.server.requests().iter().any(|r| r.method == "GET") {
        assert!(Instant::now() < deadline, "multus never fetched the pod");
        std::thread::sleep(Duration::from_millis(5));
    }
    c.server.inject(Fault::Status(409), 1);
    let multus = handle.join().unwrap();
    multus.ok();
    let patches: Vec<u16> = c
        .server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(patches, [409, 200]);
    assert!(c.network_status().is_some());
    let mut del = c.call("DEL");
    del.stdin = conf.to_string();
    c.run(&del).ok();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn del_works_from_the_cache_with_the_api_down_and_the_pod_deleted() {
    let c = Cluster::new(json!({NETWORKS: "a"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.cmd("ADD").ok();
    c.server.delete_pod("default", "web");
    c.server.go_down();
    let start = Instant::now();
    c.cmd("DEL").ok();
    assert!(start.elapsed() < Duration::from_secs(20));
    c.sb.assert_pod_clean("DEL with the API down");
}

#[test]
fn an_api_that_is_down_fails_the_add_within_its_bounds() {
    let c = Cluster::new(json!({}), json!({}));
    c.server.go_down();
    let start = Instant::now();
    let out = c.cmd("ADD");
    assert_eq!(out.err_code(), 11);
    assert!(out.stdout.contains("kubernetes"), "{out:?}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    c.sb.assert_pod_clean("API down");
}

#[test]
fn pods_in_system_namespaces_get_no_network_status() {
    let sb_conf = json!({"systemNamespaces": ["default"]});
    let c = Cluster::new(json!({}), sb_conf);
    c.cmd("ADD").ok();
    assert!(c.network_status().is_none());
    assert!(c.server.requests().iter().all(|r| r.method != "PATCH"));
    c.cmd("DEL").ok();
    c.sb.assert_pod_clean("after DEL");
}
