//! The real `multus` binary without a `kubeconfig`: run as in a pod (the API server in the
//! environment, the service account under /var/run/secrets, through testkit's in-cluster
//! wrapper) it uses those credentials; outside a pod it runs without an API. Delegates are
//! bridge + host-local from `cni-plugins`; multus and the API server run in the node namespace.

use crate::common;

use common::{Sandbox, POD_NAME, POD_NS, POD_UID};
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, InCluster, KubeApiServer, KubeconfigAuth, Scheme};

const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

/// A pod that selects the NAD `extra`, the NAD, and a multus config (without `kubeconfig`)
/// whose cluster network is a bridge `<prefix>0`; the NAD's bridge is `<prefix>1`.
struct Setup {
    sb: Sandbox,
    server: KubeApiServer,
    conf: String,
}

impl Setup {
    fn new(prefix: &str) -> Setup {
        let sb = Sandbox::new();
        let server =
            KubeApiServer::start_in(Scheme::Https, &sb.node).expect("starts the test server");
        let mut pod = pod_manifest(POD_NS, POD_NAME);
        pod["metadata"]["uid"] = json!(POD_UID);
        pod["metadata"]["annotations"] = json!({ NETWORKS: "extra" });
        server.add_pod(pod);
        let nad = sb.bridge("extra", &format!("{prefix}1"), "10.21.0.0/24", "1.0.0");
        server.add_nad(POD_NS, "extra", json!({"config": nad.to_string()}));
        let conf = sb.multus(
            "1.0.0",
            vec![sb.cluster("cluster", &format!("{prefix}0"), "10.89.0.0/24", "1.0.0")],
            json!({"apiTimeoutSeconds": 2, "apiRetries": 1}),
        );
        Setup { sb, server, conf }
    }

    fn network_status(&self) -> Option<Value> {
        let pod = self.server.pod(POD_NS, POD_NAME)?;
        let text = pod["metadata"]["annotations"][STATUS].as_str()?.to_owned();
        Some(serde_json::from_str(&text).expect("valid JSON"))
    }

    fn status_names(&self) -> Vec<String> {
        self.network_status()
            .expect("network-status written")
            .as_array()
            .expect("an array")
            .iter()
            .map(|e| e["name"].as_str().expect("a string").to_owned())
            .collect()
    }
}

#[test]
fn without_a_kubeconfig_multus_in_a_pod_uses_the_service_account() {
    let s = Setup::new("icb");
    let in_cluster = InCluster::new(&s.server, "kube-system").unwrap();
    let multus = in_cluster.wrap(&common::multus_bin()).unwrap();

    s.sb.call("ADD", &s.conf)
        .run(&multus, Some(&s.sb.node))
        .ok();
    assert_eq!(s.sb.pod_links(), ["eth0", "net1"]);
    assert_eq!(s.sb.pod_addrs("net1"), ["10.21.0.2"]);
    assert_eq!(s.status_names(), ["cluster", "default/extra"]);
    // Every request carried the service account's token (the server refuses any other).
    let requests = s.server.requests();
    assert!(requests.iter().any(|r| r.method == "PATCH"), "{requests:?}");
    assert!(requests.iter().all(|r| r.status < 400), "{requests:?}");

    s.sb.call("DEL", &s.conf)
        .run(&multus, Some(&s.sb.node))
        .ok();
    s.sb.assert_clean("after DEL");
}

#[test]
fn without_a_kubeconfig_outside_a_pod_multus_uses_no_api() {
    let s = Setup::new("icn");
    s.sb.cmd("ADD", &s.conf).ok();
    // Only the cluster network: the pod's annotation cannot be read.
    assert_eq!(s.sb.pod_links(), ["eth0"]);
    assert!(s.server.requests().is_empty());
    assert!(s.network_status().is_none());
    s.sb.cmd("DEL", &s.conf).ok();
    s.sb.assert_clean("after DEL");
}

#[test]
fn a_kubeconfig_wins_over_the_in_cluster_environment() {
    let s = Setup::new("ick");
    let kubeconfig = s.sb.dir.path().join("multus.kubeconfig");
    s.server
        .write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)
        .unwrap();
    let mut conf: Value = serde_json::from_str(&s.conf).unwrap();
    conf["kubeconfig"] = json!(kubeconfig);
    let conf = conf.to_string();
    // Nothing listens on port 1, and this machine has no service account: the in-cluster
    // credentials would fail.
    let with_env = |command: &str| {
        let mut call = s.sb.call(command, &conf);
        call.env = vec![
            ("KUBERNETES_SERVICE_HOST".into(), Some("127.0.0.1".into())),
            ("KUBERNETES_SERVICE_PORT".into(), Some("1".into())),
        ];
        s.sb.run(&call)
    };
    with_env("ADD").ok();
    assert_eq!(s.status_names(), ["cluster", "default/extra"]);
    with_env("DEL").ok();
    s.sb.assert_clean("after DEL");
}
