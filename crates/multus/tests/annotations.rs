//! Network selection end to end: multus's commands driven in-process with a Kubernetes API
//! that serves pods and NADs from memory and records what multus writes; the delegates are
//! the real `cni-plugins` binaries, exec'd into real namespaces.

#![allow(clippy::unwrap_used)]

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use cni::{CmdArgs, Command};
use common::{Sandbox, CONTAINER_ID, POD_NAME, POD_UID};
use multus::api::{Api, EventKind, Pod};
use multus::cmd::{Invocation, K8sArgs};
use multus::config::MultusConf;
use multus::{Error, Result};
use serde_json::{json, Value};

#[derive(Default)]
struct FakeApi {
    pods: RefCell<BTreeMap<(String, String), Pod>>,
    nads: BTreeMap<(String, String), String>,
    events: RefCell<Vec<(EventKind, String, String)>>,
    patch_fails: bool,
    down: bool,
}

impl Api for FakeApi {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>> {
        if self.down {
            return Err(Error::Api("GET pod: connection refused".into()));
        }
        Ok(self
            .pods
            .borrow()
            .get(&(namespace.into(), name.into()))
            .cloned())
    }

    fn nad_config(&self, namespace: &str, name: &str) -> Result<Option<String>> {
        if self.down {
            return Err(Error::Api("GET nad: connection refused".into()));
        }
        Ok(self.nads.get(&(namespace.into(), name.into())).cloned())
    }

    fn set_pod_annotations(&self, pod: &Pod, annotations: &BTreeMap<String, String>) -> Result<()> {
        if self.patch_fails {
            return Err(Error::Api(
                "PATCH pod status: 409 Conflict after 5 tries".into(),
            ));
        }
        let mut pods = self.pods.borrow_mut();
        let stored = pods
            .get_mut(&(pod.namespace.clone(), pod.name.clone()))
            .ok_or_else(|| Error::Api("PATCH: pod not found".into()))?;
        stored.annotations.extend(annotations.clone());
        Ok(())
    }

    fn event(&self, _pod: &Pod, kind: EventKind, reason: &str, message: &str) -> Result<()> {
        self.events
            .borrow_mut()
            .push((kind, reason.to_owned(), message.to_owned()));
        Ok(())
    }
}

static NEXT_BRIDGE: AtomicUsize = AtomicUsize::new(0);

/// A bridge name unique in this test process (the tests share its network namespace).
fn bridge_name() -> String {
    format!("mbr{}", NEXT_BRIDGE.fetch_add(1, Ordering::Relaxed))
}

struct Case {
    sb: Sandbox,
    api: FakeApi,
    namespace: String,
    conf: String,
}

impl Case {
    /// A pod `web` in `namespace` with `annotations`; the cluster network is inline.
    fn new(namespace: &str, annotations: &[(&str, &str)], extra: Value) -> Case {
        let sb = Sandbox::new();
        let conf = sb.multus(
            "1.0.0",
            vec![sb.cluster("cluster", &bridge_name(), "10.88.0.0/24", "1.0.0")],
            extra,
        );
        let api = FakeApi::default();
        api.pods.borrow_mut().insert(
            (namespace.into(), POD_NAME.into()),
            Pod {
                namespace: namespace.into(),
                name: POD_NAME.into(),
                uid: POD_UID.into(),
                annotations: annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        );
        Case {
            sb,
            api,
            namespace: namespace.into(),
            conf,
        }
    }

    fn nad(&mut self, namespace: &str, name: &str, config: Value) {
        let text = if config.is_null() {
            String::new()
        } else {
            config.to_string()
        };
        self.api.nads.insert((namespace.into(), name.into()), text);
    }

    /// A bridge NAD on its own bridge.
    fn bridge_nad(&mut self, namespace: &str, name: &str, subnet: &str) {
        let conf = self.sb.bridge(name, &bridge_name(), subnet, "1.0.0");
        self.nad(namespace, name, conf);
    }

    fn args(&self, command: Command, uid: &str) -> CmdArgs {
        CmdArgs {
            command,
            container_id: CONTAINER_ID.into(),
            netns: self.sb.pod.path().display().to_string(),
            ifname: "eth0".into(),
            args: format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={POD_NAME};K8S_POD_INFRA_CONTAINER_ID={CONTAINER_ID};K8S_POD_UID={uid}",
                self.namespace
            ),
            path: vec![self.sb.plugins.path().to_owned()],
            stdin: self.conf.clone().into_bytes(),
        }
    }

    fn run<T>(
        &self,
        command: Command,
        api: Option<&dyn Api>,
        f: fn(&Invocation) -> Result<T>,
    ) -> Result<T> {
        self.run_uid(command, api, POD_UID, f)
    }

    fn run_uid<T>(
        &self,
        command: Command,
        api: Option<&dyn Api>,
        uid: &str,
        f: fn(&Invocation) -> Result<T>,
    ) -> Result<T> {
        let args = self.args(command, uid);
        let conf = MultusConf::parse(&args.stdin)?;
        let inv = Invocation {
            path: conf.plugin_path(&args.path),
            conf,
            k8s: K8sArgs::parse(&args.args)?,
            args: &args,
            api,
        };
        f(&inv)
    }

    fn add(&self) -> Result<cni::CniResult> {
        self.run(Command::Add, Some(&self.api), multus::cmd::add)
    }

    fn del(&self) -> Result<()> {
        self.run(Command::Del, Some(&self.api), multus::cmd::del)
    }

    fn network_status(&self) -> Option<Value> {
        let pods = self.api.pods.borrow();
        let pod = pods.get(&(self.namespace.clone(), POD_NAME.into()))?;
        let text = pod.annotations.get("k8s.v1.cni.cncf.io/network-status")?;
        Some(serde_json::from_str(text).expect("network-status is JSON"))
    }

    fn events(&self, reason: &str) -> Vec<String> {
        self.api
            .events
            .borrow()
            .iter()
            .filter(|(_, r, _)| r == reason)
            .map(|(_, _, m)| m.clone())
            .collect()
    }
}

const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";

#[test]
fn the_microshift_bridge_example_gets_exactly_this_network_status() {
    let mut c = Case::new("default", &[(NETWORKS, "bridge-conf")], json!({}));
    c.bridge_nad("default", "bridge-conf", "10.10.0.0/24");
    c.add().unwrap();
    assert_eq!(c.sb.pod_links(), ["eth0", "net1"]);
    let status = c.network_status().expect("network-status written");
    assert_eq!(
        status,
        json!([
            {"name": "cluster", "interface": "eth0", "ips": ["10.88.0.2"], "mac": c.sb.mac("eth0"),
             "default": true, "dns": {}},
            {"name": "default/bridge-conf", "interface": "net1", "ips": ["10.10.0.2"],
             "mac": c.sb.mac("net1"), "dns": {}}
        ])
    );
    assert_eq!(
        c.events("AddedInterface"),
        [
            "Add eth0 [10.88.0.2/24] from cluster",
            "Add net1 [10.10.0.2/24] from default/bridge-conf"
        ]
    );
    c.del().unwrap();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn both_annotation_forms_namespaces_and_interface_requests() {
    let mut c = Case::new(
        "default",
        &[(
            NETWORKS,
            r#"[{"name":"a"},{"name":"b","namespace":"other","interface":"data0"}]"#,
        )],
        json!({}),
    );
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("other", "b", "10.30.0.0/24");
    c.add().unwrap();
    assert_eq!(c.sb.pod_links(), ["data0", "eth0", "net1"]);
    assert_eq!(c.sb.pod_addrs("data0"), ["10.30.0.2"]);
    let status = c.network_status().unwrap();
    assert_eq!(status[2]["name"], "other/b");
    assert_eq!(status[2]["interface"], "data0");
    c.del().unwrap();
    c.sb.assert_pod_clean("after DEL");

    let mut t = Case::new("default", &[(NETWORKS, "other/b@data1, a")], json!({}));
    t.bridge_nad("default", "a", "10.20.0.0/24");
    t.bridge_nad("other", "b", "10.30.0.0/24");
    t.add().unwrap();
    // `a` is the second selection, so it is net2: indexes count every delegate.
    assert_eq!(t.sb.pod_links(), ["data1", "eth0", "net2"]);
    t.del().unwrap();
    t.sb.assert_pod_clean("text form after DEL");
}

fn static_nad(c: &mut Case, caps: Value) {
    let conf = json!({"cniVersion": "1.0.0", "name": "fixed", "type": "bridge",
        "bridge": bridge_name(), "capabilities": caps,
        "ipam": {"type": "static"}});
    c.nad("default", "fixed", conf);
}

#[test]
fn ips_and_mac_requests_reach_a_delegate_that_declares_the_capabilities() {
    let mut c = Case::new(
        "default",
        &[(
            NETWORKS,
            r#"[{"name":"fixed","ips":["192.168.50.7/24"],"mac":"02:11:22:33:44:55"}]"#,
        )],
        json!({}),
    );
    static_nad(&mut c, json!({"ips": true, "mac": true}));
    c.add().unwrap();
    assert_eq!(c.sb.pod_addrs("net1"), ["192.168.50.7"]);
    assert_eq!(c.sb.mac("net1"), "02:11:22:33:44:55");
    c.del().unwrap();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn ips_or_mac_without_the_capability_fail_before_anything_runs() {
    for (sel, capability) in [
        (r#"[{"name":"fixed","ips":["192.168.50.7/24"]}]"#, "ips"),
        (r#"[{"name":"fixed","mac":"02:11:22:33:44:55"}]"#, "mac"),
    ] {
        let mut c = Case::new("default", &[(NETWORKS, sel)], json!({}));
        static_nad(&mut c, json!({"portMappings": true}));
        let e = c.add().unwrap_err();
        assert_eq!(e.code(), 7);
        let msg = e.to_string();
        assert!(
            msg.contains("default/fixed") && msg.contains("net1"),
            "{msg}"
        );
        assert!(msg.contains(&format!("\"{capability}\": true")), "{msg}");
        c.sb.assert_pod_clean(capability);
    }
}

#[test]
fn a_missing_nad_fails_the_add_with_an_event() {
    let c = Case::new("default", &[(NETWORKS, "nope")], json!({}));
    let e = c.add().unwrap_err();
    assert!(
        e.to_string()
            .contains("cannot find a network-attachment-definition (nope) in namespace (default)"),
        "{e}"
    );
    assert_eq!(c.events("NoNetworkFound").len(), 1);
    c.sb.assert_pod_clean("missing NAD");
}

#[test]
fn an_empty_spec_nad_is_read_from_conf_dir() {
    let mut c = Case::new("default", &[(NETWORKS, "from-file")], json!({}));
    c.sb.write_conf(
        "50-from-file.conf",
        &c.sb
            .bridge("from-file", &bridge_name(), "10.40.0.0/24", "1.0.0"),
    );
    c.nad("default", "from-file", Value::Null);
    c.add().unwrap();
    assert_eq!(c.sb.pod_addrs("net1"), ["10.40.0.2"]);
    c.del().unwrap();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn namespace_isolation_allows_own_and_global_namespaces_and_denies_others() {
    let iso = json!({"namespaceIsolation": true, "globalNamespaces": "shared"});
    let mut ok = Case::new("tenant", &[(NETWORKS, "a,shared/b")], iso.clone());
    ok.bridge_nad("tenant", "a", "10.20.0.0/24");
    ok.bridge_nad("shared", "b", "10.30.0.0/24");
    ok.add().unwrap();
    ok.del().unwrap();
    ok.sb.assert_pod_clean("allowed");

    let mut deny = Case::new("tenant", &[(NETWORKS, "other/b")], iso.clone());
    deny.bridge_nad("other", "b", "10.30.0.0/24");
    let e = deny.add().unwrap_err();
    assert!(matches!(e, Error::Isolation { .. }), "{e}");
    assert!(
        e.to_string().contains("\"tenant\"") && e.to_string().contains("\"other\""),
        "{e}"
    );
    deny.sb.assert_pod_clean("denied");

    // The default-network annotation is checked too.
    let mut deny_default = Case::new("tenant", &[(DEFAULT_NETWORK, "other/b")], iso.clone());
    deny_default.bridge_nad("other", "b", "10.30.0.0/24");
    let e = deny_default.add().unwrap_err();
    assert!(matches!(e, Error::Isolation { .. }), "{e}");
    deny_default.sb.assert_pod_clean("default network denied");

    let mut own_default = Case::new("tenant", &[(DEFAULT_NETWORK, "tenant/mine")], iso);
    own_default.bridge_nad("tenant", "mine", "10.50.0.0/24");
    own_default.add().unwrap();
    assert_eq!(own_default.sb.pod_addrs("eth0"), ["10.50.0.2"]);
    assert_eq!(
        own_default.network_status().unwrap()[0]["name"],
        "tenant/mine"
    );
    own_default.del().unwrap();
    own_default.sb.assert_pod_clean("own default network");
}

#[test]
fn default_networks_apply_outside_system_namespaces_only() {
    for (namespace, expected) in [
        ("default", vec!["eth0", "net1"]),
        ("kube-system", vec!["eth0"]),
    ] {
        let mut c = Case::new(namespace, &[], json!({"defaultNetworks": ["always"]}));
        c.bridge_nad("kube-system", "always", "10.60.0.0/24");
        c.add().unwrap();
        assert_eq!(c.sb.pod_links(), expected, "{namespace}");
        // No network-status for pods in system namespaces.
        assert_eq!(
            c.network_status().is_some(),
            namespace == "default",
            "{namespace}"
        );
        c.del().unwrap();
        c.sb.assert_pod_clean(namespace);
    }
}

#[test]
fn default_route_moves_the_default_route_to_the_requested_network() {
    let mut c = Case::new(
        "default",
        &[(NETWORKS, r#"[{"name":"gw","default-route":["10.20.0.1"]}]"#)],
        json!({}),
    );
    c.bridge_nad("default", "gw", "10.20.0.0/24");
    c.add().unwrap();
    assert_eq!(
        c.sb.pod_default_routes("-4"),
        [("net1".to_owned(), "10.20.0.1".to_owned())]
    );
    let status = c.network_status().unwrap();
    assert!(status[0].get("gateway").is_none(), "{status}");
    assert_eq!(status[1]["default-route"], json!(["10.20.0.1"]));
    assert_eq!(status[1]["gateway"], json!(["10.20.0.1"]));
    // The cluster network's cached result no longer has the default route.
    let cached: Value = serde_json::from_slice(
        &std::fs::read(
            c.sb.cni_dir()
                .join(format!("results/cluster-{CONTAINER_ID}-eth0")),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(cached["result"].get("routes").is_none(), "{cached}");
    c.del().unwrap();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn an_ipv6_default_route_leaves_the_ipv4_one_alone() {
    let mut c = Case::new(
        "default",
        &[(
            NETWORKS,
            r#"[{"name":"v6","default-route":["fd00:20::1"]}]"#,
        )],
        json!({}),
    );
    let conf = json!({"cniVersion": "1.0.0", "name": "v6", "type": "bridge",
        "bridge": bridge_name(), "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "fd00:20::/64", "dataDir": c.sb.ipam_dir()}});
    c.nad("default", "v6", conf);
    c.add().unwrap();
    assert_eq!(
        c.sb.pod_default_routes("-4"),
        [("eth0".to_owned(), "10.88.0.1".to_owned())]
    );
    assert_eq!(
        c.sb.pod_default_routes("-6"),
        [("net1".to_owned(), "fd00:20::1".to_owned())]
    );
    c.del().unwrap();
    c.sb.assert_pod_clean("after DEL");
}

#[test]
fn two_gateways_of_one_family_are_refused() {
    let mut c = Case::new(
        "default",
        &[(
            NETWORKS,
            r#"[{"name":"a","default-route":["10.20.0.1"]},{"name":"b","default-route":["10.30.0.1"]}]"#,
        )],
        json!({}),
    );
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.30.0.0/24");
    let e = c.add().unwrap_err();
    assert!(e.to_string().contains("more than one gateway"), "{e}");
    c.sb.assert_pod_clean("refused");
}

#[test]
fn a_failing_second_delegate_rolls_back_and_is_reported_as_an_event() {
    let mut c = Case::new("default", &[(NETWORKS, "good,bad")], json!({}));
    c.bridge_nad("default", "good", "10.20.0.0/24");
    c.nad(
        "default",
        "bad",
        json!({"cniVersion": "1.0.0", "type": "fail"}),
    );
    let e = c.add().unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("network default/bad on interface net2"),
        "{msg}"
    );
    assert!(msg.contains("refuses on purpose"), "{msg}");
    assert_eq!(c.events("AddInterfaceFailed"), [msg]);
    assert!(c.network_status().is_none());
    c.sb.assert_pod_clean("rolled back");
}

#[test]
fn a_uid_mismatch_fails_before_anything_runs() {
    let c = Case::new("default", &[], json!({}));
    let e = c
        .run_uid(Command::Add, Some(&c.api), "another-uid", multus::cmd::add)
        .unwrap_err();
    assert_eq!(e.code(), 3);
    assert!(e.to_string().contains("another-uid"), "{e}");
    c.sb.assert_pod_clean("uid mismatch");
}

#[test]
fn a_failed_network_status_write_rolls_back_the_add() {
    let mut c = Case::new("default", &[(NETWORKS, "a")], json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.api.patch_fails = true;
    let e = c.add().unwrap_err();
    assert!(e.to_string().contains("409"), "{e}");
    assert_eq!(e.code(), 11);
    c.sb.assert_pod_clean("status write failed");
}

#[test]
fn del_works_from_the_cache_with_the_api_down_and_the_pod_gone() {
    let mut c = Case::new("default", &[(NETWORKS, "a")], json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.add().unwrap();
    c.api.pods.borrow_mut().clear();
    let down = FakeApi {
        down: true,
        ..FakeApi::default()
    };
    c.run(Command::Del, Some(&down), multus::cmd::del).unwrap();
    c.sb.assert_pod_clean("DEL with the API down");
}

#[test]
fn del_without_a_cache_rebuilds_the_networks_from_the_api() {
    let mut c = Case::new("default", &[(NETWORKS, "a")], json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.add().unwrap();
    std::fs::remove_file(c.sb.cni_dir().join(CONTAINER_ID)).unwrap();
    c.del().unwrap();
    c.sb.assert_pod_clean("DEL rebuilt from the API");
}

#[test]
fn check_status_and_gc_cover_the_networks_from_annotations() {
    let mut c = Case::new("default", &[(NETWORKS, "a")], json!({}));
    c.conf = c.conf.replace("\"1.0.0\"", "\"1.1.0\"");
    let conf = c.sb.bridge("a", &bridge_name(), "10.20.0.0/24", "1.1.0");
    c.nad("default", "a", conf);
    c.add().unwrap();
    c.run(Command::Check, Some(&c.api), multus::cmd::check)
        .unwrap();
    c.sb.pod.ip(&["addr", "flush", "dev", "net1"]);
    let e = c
        .run(Command::Check, Some(&c.api), multus::cmd::check)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("network default/a on interface net1"),
        "{e}"
    );
    c.run(Command::Status, Some(&c.api), multus::cmd::status)
        .unwrap();
    // GC with no valid attachment: every network, the annotation's too, lets go of the pod.
    let mut gc_conf: Value = serde_json::from_str(&c.conf).unwrap();
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    c.conf = gc_conf.to_string();
    c.run(Command::Gc, Some(&c.api), multus::cmd::gc).unwrap();
    assert_eq!(c.sb.reservations(), Vec::<String>::new());
    assert_eq!(c.sb.cache_files(), Vec::<String>::new());
}

#[test]
fn bad_annotations_fail_with_a_clear_error_and_leave_nothing() {
    let cases: &[(&str, &str, &str)] = &[
        (NETWORKS, "a,,b", "stray comma"),
        (NETWORKS, "UPPER", "DNS-1123"),
        (NETWORKS, "a/b/c", "more than one '/'"),
        (NETWORKS, "a@b@c", "more than one '@'"),
        (NETWORKS, "a@", "empty interface name"),
        (NETWORKS, "/a", "empty namespace"),
        (NETWORKS, "-a", "DNS-1123"),
        (NETWORKS, "a_b", "DNS-1123"),
        (NETWORKS, "a@this-name-is-too-long", "too long"),
        (NETWORKS, "a@x/y", "namespace \"a@x\""),
        (NETWORKS, "NS/a", "namespace \"NS\""),
        (NETWORKS, "[", "invalid JSON"),
        (NETWORKS, r#"{"name":"a"}"#, "must be a list"),
        (NETWORKS, r#"[{"nam":"a"}]"#, "missing field `name`"),
        (NETWORKS, r#"[{"name":""}]"#, "DNS-1123"),
        (
            NETWORKS,
            r#"[{"name":"a","mac":"nope"}]"#,
            "not a MAC address",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","mac":"02:00:00:00:00"}]"#,
            "not a MAC address",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","ips":["10.0.0.300"]}]"#,
            "not an IP address",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","ips":["10.0.0.1/33"]}]"#,
            "not an IP address",
        ),
        (NETWORKS, r#"[{"name":"a","ips":"10.0.0.1"}]"#, "element 0"),
        (
            NETWORKS,
            r#"[{"name":"a","interface":"has space"}]"#,
            "interface name",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","interface":"a/b"}]"#,
            "interface name",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","interface":"x"},{"name":"a","interface":"x"}]"#,
            "more than once",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","default-route":["x"]}]"#,
            "element 0",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","default-route":["1.1.1.1","2.2.2.2"]}]"#,
            "two gateways",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","infiniband-guid":"zz"}]"#,
            "infiniband-guid",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","portMappings":[{"hostPort":"x"}]}]"#,
            "element 0",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","portMappings":[{"hostPort":70000,"containerPort":1}]}]"#,
            "element 0",
        ),
        (
            NETWORKS,
            r#"[{"name":"a","bandwidth":{"ingressRate":-1}}]"#,
            "element 0",
        ),
        (NETWORKS, r#"[{"name":"a","cni-args":[1]}]"#, "element 0"),
        (NETWORKS, "   ", "is empty"),
        (DEFAULT_NETWORK, "a,b", "exactly one"),
        (DEFAULT_NETWORK, "Bad", "DNS-1123"),
        (
            NETWORKS,
            "missing-nad",
            "cannot find a network-attachment-definition",
        ),
        (NETWORKS, "badjson", "spec.config is not valid JSON"),
        (NETWORKS, "notype", "no plugin type"),
        (NETWORKS, "badversion", "incompatible CNI versions"),
        (NETWORKS, "badtype", "invalid plugin type"),
        (NETWORKS, "noplugin", "failed to find plugin"),
        (NETWORKS, "emptylist", "has no plugins"),
    ];
    for (annotation, text, expected) in cases {
        let mut c = Case::new("default", &[(annotation, text)], json!({}));
        c.bridge_nad("default", "a", "10.20.0.0/24");
        c.bridge_nad("default", "b", "10.30.0.0/24");
        c.nad("default", "badjson", json!("{"));
        c.api
            .nads
            .insert(("default".into(), "badjson".into()), "{".into());
        c.nad("default", "notype", json!({"cniVersion": "1.0.0"}));
        c.nad(
            "default",
            "badversion",
            json!({"cniVersion": "7.0.0", "type": "bridge"}),
        );
        c.nad(
            "default",
            "badtype",
            json!({"cniVersion": "1.0.0", "type": "../bridge"}),
        );
        c.nad(
            "default",
            "noplugin",
            json!({"cniVersion": "1.0.0", "type": "nope"}),
        );
        c.nad(
            "default",
            "emptylist",
            json!({"cniVersion": "1.0.0", "plugins": []}),
        );
        let e = match c.add() {
            Ok(_) => panic!("{annotation}={text}: ADD succeeded"),
            Err(e) => e,
        };
        let msg = e.to_string();
        assert!(msg.contains(expected), "{annotation}={text}: {msg}");
        assert!(e.code() != 0);
        c.sb.assert_pod_clean(&format!("{annotation}={text}"));
    }
}
