//! A pod in a Kubernetes API server (testkit's, over HTTPS with a bearer token) listening in
//! the sandbox's node namespace, and the real `multus` binary exec'd there as a runtime does.
//! One server per test: cases change the pod and NADs between calls. multus runs as its
//! ServiceAccount, with the RBAC of deploy/base enforced.

use std::cell::Cell;

use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, KubeApiServer, KubeconfigAuth, Scheme};
use testkit::{CniCall, CniOutput};

use super::{Sandbox, CONTAINER_ID, POD_NAME, POD_UID};

pub const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
pub const DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";
pub const STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

pub struct Cluster {
    pub sb: Sandbox,
    pub server: KubeApiServer,
    /// The pod's namespace.
    pub namespace: String,
    pub uid: String,
    /// The multus config the runtime passes.
    pub conf: String,
    next_bridge: Cell<usize>,
}

impl Cluster {
    /// A pod `web` in `default` with `annotations`; `extra` keys go into the multus config,
    /// whose cluster network is an inline bridge + host-local on 10.88.0.0/24.
    pub fn new(annotations: Value, extra: Value) -> Cluster {
        Cluster::in_namespace("default", annotations, extra)
    }

    pub fn in_namespace(namespace: &str, annotations: Value, extra: Value) -> Cluster {
        Cluster::serving(Scheme::Https, namespace, annotations, extra)
    }

    /// The same, with the API server reached by `scheme`.
    pub fn serving(scheme: Scheme, namespace: &str, annotations: Value, extra: Value) -> Cluster {
        let sb = Sandbox::new();
        let server = KubeApiServer::start_in(scheme, &sb.node).expect("start the API server");
        enforce_rbac(&server, "base");
        let kubeconfig = sb.dir.path().join("multus.kubeconfig");
        server
            .write_kubeconfig(&kubeconfig, multus_account())
            .expect("write the kubeconfig");
        let mut extra = extra;
        extra["kubeconfig"] = json!(kubeconfig);
        extra["apiTimeoutSeconds"] = json!(2);
        extra["apiRetries"] = json!(1);
        let conf = sb.multus(
            "1.0.0",
            vec![sb.cluster("cluster", "cni0", "10.88.0.0/24", "1.0.0")],
            extra,
        );
        let c = Cluster {
            sb,
            server,
            namespace: namespace.into(),
            uid: POD_UID.into(),
            conf,
            next_bridge: Cell::new(0),
        };
        c.set_pod(annotations);
        c
    }

    /// A pod in `default` added to the cluster network and the bridge NAD `default/a`.
    pub fn attached() -> Cluster {
        let c = Cluster::new(json!({ NETWORKS: "a" }), json!({}));
        c.bridge_nad("default", "a", "10.20.0.0/24");
        c.cmd("ADD").ok();
        c
    }

    /// Replaces the pod (same namespace, name and UID) with one carrying `annotations`.
    pub fn set_pod(&self, annotations: Value) {
        let mut pod = pod_manifest(&self.namespace, POD_NAME);
        pod["metadata"]["uid"] = json!(self.uid);
        pod["metadata"]["annotations"] = annotations;
        self.server.add_pod(pod);
    }

    /// A bridge name not used yet in this sandbox's node namespace.
    pub fn bridge_name(&self) -> String {
        let n = self.next_bridge.get();
        self.next_bridge.set(n + 1);
        format!("br{n}")
    }

    /// A NAD whose spec.config is `config` (a string as it is, anything else as JSON text);
    /// `null` makes a NAD with an empty spec.
    pub fn nad(&self, namespace: &str, name: &str, config: Value) {
        let spec = match config {
            Value::Null => json!({}),
            Value::String(text) => json!({ "config": text }),
            other => json!({ "config": other.to_string() }),
        };
        self.server.add_nad(namespace, name, spec);
    }

    /// A bridge + host-local NAD on its own bridge, without a default route.
    pub fn bridge_nad(&self, namespace: &str, name: &str, subnet: &str) {
        let conf = self.sb.bridge(name, &self.bridge_name(), subnet, "1.0.0");
        self.nad(namespace, name, conf);
    }

    /// The runtime's call for this pod.
    pub fn call(&self, command: &str) -> CniCall {
        let mut call = self.sb.call(command, &self.conf);
        call.args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={POD_NAME};K8S_POD_INFRA_CONTAINER_ID={CONTAINER_ID};K8S_POD_UID={}",
            self.namespace, self.uid
        );
        call
    }

    /// Runs multus in the node namespace, where the server listens.
    pub fn run(&self, call: &CniCall) -> CniOutput {
        self.sb.run(call)
    }

    pub fn cmd(&self, command: &str) -> CniOutput {
        self.run(&self.call(command))
    }

    /// ADD that must fail: the CNI error's code and message.
    pub fn add_err(&self) -> (u64, String) {
        cni_error(&self.cmd("ADD"))
    }

    /// The pod's network-status annotation as the server stores it.
    pub fn network_status(&self) -> Option<Value> {
        let pod = self.server.pod(&self.namespace, POD_NAME)?;
        let text = pod["metadata"]["annotations"][STATUS].as_str()?.to_owned();
        Some(serde_json::from_str(&text).expect("network-status is JSON"))
    }

    /// The messages of the events with this reason, sorted: a command sends its events side
    /// by side, so the order they arrive in is the server's.
    pub fn events(&self, reason: &str) -> Vec<String> {
        let mut messages: Vec<String> = self
            .server
            .events()
            .iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect();
        messages.sort();
        messages
    }

    /// A failed ADD left nothing: no pod interface, no reservation, no cache file, no node
    /// veth, and no network-status.
    pub fn assert_add_left_nothing(&self, what: &str) {
        self.sb.assert_clean(what);
        assert_eq!(self.network_status(), None, "{what}: network-status");
    }
}

/// multus's ServiceAccount, as deploy/ makes it.
pub fn multus_account() -> KubeconfigAuth {
    KubeconfigAuth::ServiceAccount {
        namespace: "multus".into(),
        name: "multus".into(),
    }
}

/// Authorizes the server's ServiceAccounts by the RBAC of deploy/`tree`, as rendered.
pub fn enforce_rbac(server: &KubeApiServer, tree: &str) {
    let objects =
        testkit::manifests::deploy_objects(tree).unwrap_or_else(|e| panic!("deploy/{tree}: {e:#}"));
    server.enforce_rbac(&objects).expect("the RBAC objects");
}

/// The code and message of a CNI error output; panics when the call succeeded.
pub fn cni_error(out: &CniOutput) -> (u64, String) {
    let code = out.err_code();
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    (code, msg)
}
