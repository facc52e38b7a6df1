//! whereabouts through the real binary (the `multus` executable run through a `whereabouts`
//! link, as a runtime or an interface plugin runs it) against testkit's API server over HTTPS,
//! with the RBAC of deploy/whereabouts enforced: the plugin runs as multus's ServiceAccount,
//! the reconciler as its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::kube_api::{Fault, Gate, KubeApiServer, KubeconfigAuth, Resource};
use testkit::manifests::deploy_objects;
use testkit::{CniCall, CniOutput, Netns, PluginDir};

const NS: &str = "kube-system";
/// The reconciler's kubeconfig, in the node's CNI config directory.
const RECONCILER_KUBECONFIG: &str = "reconciler.kubeconfig";

/// What a plugin call needs: the link, and the node's CNI config directory, name and state
/// directory. Threads that stand for other nodes call through [`Caller::on_node`].
#[derive(Clone)]
struct Caller {
    bin: PathBuf,
    conf_dir: PathBuf,
    /// A pod's namespace: the plugin checks CNI_NETNS is one, and touches nothing in it.
    netns: PathBuf,
    /// NODENAME, as a runtime's environment may set it.
    node: String,
    state_dir: PathBuf,
}

impl Caller {
    /// The same plugin on another node: its own name and record of attachments.
    fn on_node(&self, node: &str) -> Caller {
        Caller {
            node: node.to_owned(),
            state_dir: self.conf_dir.join(format!("state-{node}")),
            ..self.clone()
        }
    }

    fn call(
        &self,
        command: &str,
        ipam: &Value,
        container: &str,
        ifname: &str,
        pod: &str,
    ) -> CniOutput {
        self.call_with(command, &net(ipam), container, ifname, pod)
    }

    fn call_with(
        &self,
        command: &str,
        conf: &Value,
        container: &str,
        ifname: &str,
        pod: &str,
    ) -> CniOutput {
        self.cni_call(command, conf, container, ifname, pod)
            .run(&self.bin, None)
    }

    /// The call a runtime makes, with the plugin's directory as `CNI_PATH`.
    fn cni_call(
        &self,
        command: &str,
        conf: &Value,
        container: &str,
        ifname: &str,
        pod: &str,
    ) -> CniCall {
        let mut call = CniCall::new(command, &conf.to_string());
        call.container_id = container.into();
        call.ifname = ifname.into();
        call.netns = self.netns.display().to_string();
        call.path = self
            .bin
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        call.args = if pod.is_empty() {
            String::new()
        } else {
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}")
        };
        call.env.push((
            "WHEREABOUTS_CONFIG_DIR".into(),
            Some(self.conf_dir.display().to_string()),
        ));
        call.env.push((
            "WHEREABOUTS_STATE_DIR".into(),
            Some(self.state_dir.display().to_string()),
        ));
        call.env.push(("NODENAME".into(), Some(self.node.clone())));
        call
    }
}

/// An API server, a node's CNI config directory with the flat file and kubeconfig, and the
/// plugin link.
struct Cluster {
    api: KubeApiServer,
    caller: Caller,
    _conf_dir: tempfile::TempDir,
    _plugins: PluginDir,
    pod: Netns,
}

impl std::ops::Deref for Cluster {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.caller
    }
}

impl Cluster {
    fn new() -> Cluster {
        Cluster::serving(KubeApiServer::https().expect("API server"))
    }

    fn serving(api: KubeApiServer) -> Cluster {
        let conf_dir = tempfile::tempdir().expect("tempdir");
        let dir = conf_dir.path().join("whereabouts.d");
        std::fs::create_dir_all(&dir).expect("mkdir");
        api.enforce_rbac(&deploy_objects("whereabouts").expect("deploy/whereabouts"))
            .expect("RBAC");
        let account = |name: &str| KubeconfigAuth::ServiceAccount {
            namespace: "multus".into(),
            name: name.into(),
        };
        let kubeconfig = dir.join("whereabouts.kubeconfig");
        api.write_kubeconfig(&kubeconfig, account("multus"))
            .expect("kubeconfig");
        api.write_kubeconfig(
            &conf_dir.path().join(RECONCILER_KUBECONFIG),
            account("whereabouts-reconciler"),
        )
        .expect("the reconciler's kubeconfig");
        std::fs::write(
            dir.join("whereabouts.conf"),
            json!({"datastore": "kubernetes", "kubernetes": {"kubeconfig": kubeconfig}})
                .to_string(),
        )
        .expect("flat file");
        let plugins = PluginDir::new(Path::new(env!("CARGO_BIN_EXE_multus")), &["whereabouts"]);
        let pod = Netns::new("wh-pod");
        Cluster {
            api,
            caller: Caller {
                bin: plugins.path().join("whereabouts"),
                conf_dir: conf_dir.path().to_owned(),
                netns: pod.path(),
                node: "node-0".into(),
                state_dir: conf_dir.path().join("state-node-0"),
            },
            _conf_dir: conf_dir,
            _plugins: plugins,
            pod,
        }
    }

    /// Holds the next `method` request to `path` until the returned gate is released.
    fn hold(&self, method: &str, path: &str) -> Gate {
        let gate = Gate::new();
        self.api
            .inject_on(method, path, Fault::Hold(gate.clone()), 1);
        gate
    }

    fn add(&self, ipam: &Value, container: &str, pod: &str) -> Value {
        self.call("ADD", ipam, container, "net1", pod).ok()
    }

    fn pool(&self, name: &str) -> Value {
        self.api
            .object(Resource::IP_POOLS, NS, name)
            .unwrap_or_else(|| panic!("no pool {name}"))
    }

    fn allocations(&self, name: &str) -> serde_json::Map<String, Value> {
        self.pool(name)["spec"]["allocations"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    fn reservations(&self) -> Vec<(String, Value)> {
        self.api
            .objects(Resource::OVERLAPPING_RANGE_IP_RESERVATIONS)
            .into_iter()
            .map(|r| {
                (
                    r["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                    r["spec"].clone(),
                )
            })
            .collect()
    }
}

fn net(ipam: &Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "blue", "type": "macvlan", "ipam": ipam})
}

fn ips(result: &Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["address"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn v4() -> Value {
    json!({"type": "whereabouts", "range": "10.77.0.0/24", "gateway": "10.77.0.254"})
}

#[test]
fn add_reuse_check_and_del_in_the_reference_shapes() {
    let c = Cluster::new();
    let a = c.add(&v4(), "ca", "a");
    assert_eq!(ips(&a), ["10.77.0.1/24"]);
    assert_eq!(a["ips"][0]["gateway"], "10.77.0.254");
    assert_eq!(c.add(&v4(), "cb", "b")["ips"][0]["address"], "10.77.0.2/24");
    let pool = c.pool("10.77.0.0-24");
    assert_eq!(pool["spec"]["range"], "10.77.0.0/24");
    assert_eq!(
        pool["spec"]["allocations"],
        json!({"1": {"id": "ca", "podref": "default/a", "ifname": "net1"},
               "2": {"id": "cb", "podref": "default/b", "ifname": "net1"}})
    );
    assert_eq!(
        c.reservations(),
        [
            (
                "10.77.0.1".to_owned(),
                json!({"podref": "default/a", "ifname": "net1", "containerid": "ca"})
            ),
            (
                "10.77.0.2".to_owned(),
                json!({"podref": "default/b", "ifname": "net1", "containerid": "cb"})
            ),
        ]
    );
    // The same pod and interface under a new sandbox keeps its address; the pool gets the new
    // container ID.
    assert_eq!(ips(&c.add(&v4(), "ca2", "a")), ["10.77.0.1/24"]);
    assert_eq!(c.allocations("10.77.0.0-24")["1"]["id"], "ca2");

    let mut conf = net(&v4());
    conf["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.77.0.1/24"}]});
    let check = c.call_with("CHECK", &conf, "ca2", "net1", "a");
    assert_eq!(check.code, 0, "{}", check.stdout);
    let stale = c.call_with("CHECK", &conf, "ca", "net1", "a");
    assert_eq!(stale.err_code(), 3, "{}", stale.stdout);
    conf["prevResult"]["ips"][0]["address"] = json!("10.77.0.9/24");
    let wrong = c.call_with("CHECK", &conf, "ca2", "net1", "a");
    assert_eq!(wrong.err_code(), 999, "{}", wrong.stdout);
    assert!(wrong.stdout.contains("holds 10.77.0.1"), "{}", wrong.stdout);

    // DEL goes by container ID and interface, twice, and needs no pod name.
    for _ in 0..2 {
        let del = c.call("DEL", &v4(), "cb", "net1", "");
        assert_eq!(del.code, 0, "{}", del.stdout);
    }
    let left: Vec<String> = c.allocations("10.77.0.0-24").keys().cloned().collect();
    assert_eq!(left, ["1"]);
    assert_eq!(c.reservations().len(), 1);
    assert_eq!(c.call("DEL", &v4(), "ca2", "net1", "a").code, 0);
    assert!(c.allocations("10.77.0.0-24").is_empty());
    assert!(c.reservations().is_empty());
}

#[test]
fn upstreams_objects_are_honoured_and_kept() {
    let c = Cluster::new();
    c.api.add_object(
        Resource::IP_POOLS,
        json!({"metadata": {"name": "blue-10.77.0.0-24", "namespace": NS},
               "spec": {"range": "10.77.0.0/24", "allocations": {
                   "1": {"id": "upstream-c1", "podref": "default/old", "ifname": "net1"},
                   "2": {"id": "upstream-c2", "podref": "default/older"},
                   "not-an-offset": {"id": "x", "podref": "y/z"}}}}),
    );
    // 10.77.0.3 is held through another pool whose range overlaps.
    c.api.add_object(
        Resource::OVERLAPPING_RANGE_IP_RESERVATIONS,
        json!({"metadata": {"name": "blue-10.77.0.3", "namespace": NS},
               "spec": {"podref": "default/elsewhere", "ifname": "net1"}}),
    );
    let mut ipam = v4();
    ipam["network_name"] = json!("blue");
    assert_eq!(ips(&c.add(&ipam, "c4", "new")), ["10.77.0.4/24"]);
    let alloc = c.allocations("blue-10.77.0.0-24");
    assert_eq!(
        alloc["4"],
        json!({"id": "c4", "podref": "default/new", "ifname": "net1"})
    );
    // What we cannot read is left as it was.
    assert_eq!(alloc["not-an-offset"], json!({"id": "x", "podref": "y/z"}));
    // Upstream's allocation is freed by its container ID and interface.
    assert_eq!(c.call("DEL", &ipam, "upstream-c1", "net1", "old").code, 0);
    let alloc = c.allocations("blue-10.77.0.0-24");
    assert!(!alloc.contains_key("1"));
    assert!(alloc.contains_key("2"));
    assert!(c.reservations().iter().any(|(n, _)| n == "blue-10.77.0.3"));
}

#[test]
fn overlapping_ranges_never_share_an_address_unless_turned_off() {
    let c = Cluster::new();
    let wide = json!({"type": "whereabouts", "range": "10.77.0.0/24"});
    let narrow = json!({"type": "whereabouts", "range": "10.77.0.0/25"});
    assert_eq!(ips(&c.add(&wide, "c1", "a")), ["10.77.0.1/24"]);
    assert_eq!(ips(&c.add(&narrow, "c2", "b")), ["10.77.0.2/25"]);
    assert_eq!(
        c.allocations("10.77.0.0-25").keys().collect::<Vec<_>>(),
        ["2"]
    );
    let mut off = narrow.clone();
    off["enable_overlapping_ranges"] = json!(false);
    // Off, the pools alone decide, as in the reference.
    assert_eq!(ips(&c.add(&off, "c3", "c")), ["10.77.0.1/25"]);
}

/// The reference's Lease as its leader election writes it, held by `holder` ("" when free).
fn reference_lease(c: &Cluster, holder: &str) -> Value {
    c.api.add_object(
        Resource::LEASES,
        json!({"metadata": {"name": "whereabouts", "namespace": NS},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1,
                        "acquireTime": "2026-12-03T06:00:00.000000Z",
                        "renewTime": "2026-12-03T06:00:00.000000Z", "leaseTransitions": 4}}),
    )
}

fn lease_requests(c: &Cluster) -> Vec<String> {
    c.api
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/leases"))
        .map(|r| format!("{} {}", r.method, r.status))
        .collect()
}

/// A node of the reference checks a reservation under its Lease and creates it later: an ADD
/// of ours that reserves waits for that Lease while it is held and renewed, takes it once it
/// is free, and gives it back; where no node of the reference ever ran there is no Lease, and
/// none is made.
#[test]
fn adds_that_reserve_hold_the_references_lease_while_it_exists() {
    let c = Cluster::new();
    let wide = json!({"type": "whereabouts", "range": "10.77.0.0/24"});
    let narrow = json!({"type": "whereabouts", "range": "10.77.0.0/25"});
    assert_eq!(ips(&c.add(&wide, "c0", "alone")), ["10.77.0.1/24"]);
    assert_eq!(lease_requests(&c), ["GET 404"]);
    assert!(c.api.objects(Resource::LEASES).is_empty());
    assert_eq!(c.call("DEL", &wide, "c0", "net1", "alone").code, 0);

    // The reference's ADD holds the Lease, renewing it, between its reservation check and
    // its writes.
    reference_lease(&c, "default/theirs");
    let (done, finished) = std::sync::mpsc::channel();
    let ours = {
        let (caller, narrow) = (c.caller.clone(), narrow.clone());
        std::thread::spawn(move || {
            let out = caller.call("ADD", &narrow, "c1", "net1", "ours");
            let _ = done.send(());
            out
        })
    };
    // Renewed, the Lease stays the reference's far past its duration.
    for _ in 0..10 {
        let mut lease = c
            .api
            .object(Resource::LEASES, NS, "whereabouts")
            .expect("the Lease");
        lease["spec"]["renewTime"] = json!("2026-12-03T06:00:01.000000Z");
        c.api.add_object(Resource::LEASES, lease);
        assert!(
            finished.recv_timeout(Duration::from_millis(300)).is_err(),
            "our ADD ran while the reference held the Lease"
        );
    }
    // The reference's writes land, then it releases the Lease as client-go does.
    c.api.add_object(
        Resource::IP_POOLS,
        json!({"metadata": {"name": "10.77.0.0-24", "namespace": NS},
               "spec": {"range": "10.77.0.0/24", "allocations": {
                   "1": {"id": "theirs", "podref": "default/theirs", "ifname": "net1"}}}}),
    );
    c.api.add_object(
        Resource::OVERLAPPING_RANGE_IP_RESERVATIONS,
        json!({"metadata": {"name": "10.77.0.1", "namespace": NS},
               "spec": {"podref": "default/theirs", "ifname": "net1"}}),
    );
    let mut lease = c
        .api
        .object(Resource::LEASES, NS, "whereabouts")
        .expect("the Lease");
    lease["spec"]["holderIdentity"] = json!("");
    c.api.add_object(Resource::LEASES, lease);
    let out = ours.join().expect("our ADD");
    assert_eq!(ips(&out.ok()), ["10.77.0.2/25"]);
    let lease = c
        .api
        .object(Resource::LEASES, NS, "whereabouts")
        .expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "", "released: {lease}");
    assert_eq!(lease["spec"]["leaseTransitions"], 5, "{lease}");

    // A holder that stopped renewing loses the Lease once it has not changed for its
    // duration (1.5 s at least, the reference's default).
    reference_lease(&c, "default/crashed");
    let started = Instant::now();
    assert_eq!(ips(&c.add(&narrow, "c2", "late")), ["10.77.0.3/25"]);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    // A node of ours that does not reserve needs no Lease.
    c.api.clear_requests();
    reference_lease(&c, "default/theirs");
    let mut off = narrow.clone();
    off["enable_overlapping_ranges"] = json!(false);
    assert_eq!(ips(&c.add(&off, "c3", "free")), ["10.77.0.1/25"]);
    assert!(lease_requests(&c).is_empty(), "{:?}", lease_requests(&c));
}

/// The Lease taken over by another writer while our ADD holds it (its renewal answers 409):
/// the ADD creates no reservation, gives its address back and fails with code 11; in
/// node-slice mode, where the reference's Leases are per node, none is looked at.
#[test]
fn an_add_that_loses_the_references_lease_gives_its_address_back() {
    let c = Cluster::new();
    reference_lease(&c, "");
    let narrow = json!({"type": "whereabouts", "range": "10.77.0.0/25"});
    let gate = c.hold("PATCH", &Resource::IP_POOLS.object_path(NS, "10.77.0.0-25"));
    let (caller, conf) = (c.caller.clone(), narrow.clone());
    let out = std::thread::scope(|s| {
        let add = s.spawn(move || caller.call("ADD", &conf, "c1", "net1", "ours"));
        assert!(
            gate.arrived(Duration::from_secs(30)),
            "the ADD never wrote the pool"
        );
        let lease = c
            .api
            .object(Resource::LEASES, NS, "whereabouts")
            .expect("the Lease");
        assert_eq!(
            lease["spec"]["holderIdentity"], "default/ours/c1",
            "held under an identity of our own: {lease}"
        );
        reference_lease(&c, "default/theirs");
        // Past the next renewal, which finds the Lease changed.
        std::thread::sleep(Duration::from_millis(1200));
        gate.release();
        add.join().expect("the ADD")
    });
    assert_eq!(out.err_code(), 11, "{}", out.stdout);
    assert!(out.stdout.contains("Lease was taken"), "{}", out.stdout);
    assert!(c.allocations("10.77.0.0-25").is_empty());
    assert!(c.reservations().is_empty());
    let lease = c
        .api
        .object(Resource::LEASES, NS, "whereabouts")
        .expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "default/theirs", "{lease}");

    c.api.clear_requests();
    let mut sliced = narrow.clone();
    sliced["node_slice_size"] = json!("/28");
    assert_eq!(ips(&c.add(&sliced, "c2", "sliced")), ["10.77.0.1/25"]);
    assert!(lease_requests(&c).is_empty(), "{:?}", lease_requests(&c));
}

#[test]
fn a_full_range_is_code_11_naming_it_and_writes_nothing() {
    let c = Cluster::new();
    let small = json!({"type": "whereabouts", "range": "10.77.0.0/30"});
    c.add(&small, "c1", "a");
    c.add(&small, "c2", "b");
    let full = c.call("ADD", &small, "c3", "net1", "c");
    assert_eq!(full.err_code(), 11, "{}", full.stdout);
    assert!(
        full.stdout
            .contains("no free address in 10.77.0.0/30 (10.77.0.1 to 10.77.0.2)"),
        "{}",
        full.stdout
    );
    assert_eq!(c.allocations("10.77.0.0-30").len(), 2);
    assert_eq!(c.reservations().len(), 2);
}

#[test]
fn dual_stack_takes_one_address_per_range_and_a_failure_gives_back_the_first() {
    let c = Cluster::new();
    let dual = json!({"type": "whereabouts", "range": "10.77.0.0/24", "gateway": "10.77.0.254",
                      "ipRanges": [{"range": "fd77:3::/64"}]});
    let r = c.add(&dual, "c1", "a");
    assert_eq!(ips(&r), ["10.77.0.1/24", "fd77:3::1/64"]);
    // The IPv4 gateway stays off the IPv6 address.
    assert!(r["ips"][1].get("gateway").is_none(), "{r}");
    assert_eq!(c.allocations("fd77-3---64")["1"]["podref"], "default/a");
    assert!(c.reservations().iter().any(|(n, _)| n == "fd77-3--1"));

    // The second range is full: the address the first range gave is taken back.
    let tight = json!({"type": "whereabouts", "range": "10.78.0.0/24",
                       "ipRanges": [{"range": "10.79.0.0/30"}]});
    c.add(&tight, "c2", "b");
    c.add(
        &json!({"type": "whereabouts", "range": "10.79.0.0/30"}),
        "c3",
        "c",
    );
    let out = c.call("ADD", &tight, "c4", "net1", "d");
    assert_eq!(out.err_code(), 11, "{}", out.stdout);
    let left: Vec<String> = c.allocations("10.78.0.0-24").keys().cloned().collect();
    assert_eq!(left, ["1"]);
}

#[test]
fn conflicts_and_failed_tests_are_retried_until_the_write_lands() {
    let c = Cluster::new();
    c.add(&v4(), "c0", "first");
    let pools = Resource::IP_POOLS.path(NS);
    c.api.inject_under("PATCH", &pools, Fault::Status(409), 5);
    c.api.inject_under("PATCH", &pools, Fault::Status(422), 5);
    // After lost writes a writer takes one of the lowest free addresses at random, so that
    // writers who collided do not collide again.
    let got = ips(&c.add(&v4(), "c1", "a"));
    let last: u8 = got[0]
        .strip_prefix("10.77.0.")
        .and_then(|rest| rest.strip_suffix("/24"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!((2..=33).contains(&last), "{got:?}");
    assert_eq!(c.allocations("10.77.0.0-24")[&last.to_string()]["id"], "c1");
    let patches = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.starts_with(&pools))
        .count();
    assert!(patches >= 11, "{patches} patches");
    assert_eq!(c.allocations("10.77.0.0-24").len(), 2);
}

/// A pool write that lands while its reply is lost: the client sends it again, and that
/// second try fails the write's test. Under load, a reply slower than the client's timeout
/// does the same.
#[test]
fn a_pool_write_whose_reply_is_lost_still_settles_the_reservation() {
    let c = Cluster::new();
    let pools = Resource::IP_POOLS.path(NS);
    // ADD: the address is the pod's, with its reservation.
    c.api.inject_under("PATCH", &pools, Fault::LoseReply, 1);
    assert_eq!(ips(&c.add(&v4(), "ca", "a")), ["10.77.0.1/24"]);
    assert_eq!(c.allocations("10.77.0.0-24").len(), 1);
    assert_eq!(c.reservations().len(), 1);
    // DEL: the address is free again, and so is its reservation.
    c.api.inject_under("PATCH", &pools, Fault::LoseReply, 1);
    let del = c.call("DEL", &v4(), "ca", "net1", "a");
    assert_eq!(del.code, 0, "{}", del.stdout);
    let lost = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.starts_with(&pools) && !r.replied)
        .count();
    assert_eq!(lost, 2, "both lost replies were served");
    assert!(c.allocations("10.77.0.0-24").is_empty());
    assert!(c.reservations().is_empty(), "{:?}", c.reservations());
}

#[test]
fn parallel_adds_get_distinct_addresses_and_dels_empty_the_pool() {
    let c = Cluster::new();
    let ipam = v4();
    // 100 ADDs at once, spread over 3 nodes.
    let callers: Vec<Caller> = (0..3).map(|n| c.on_node(&format!("node-{n}"))).collect();
    let results: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..100)
            .map(|i| {
                let (caller, ipam) = (&callers[i % 3], &ipam);
                s.spawn(move || {
                    let out = caller.call("ADD", ipam, &format!("c{i}"), "net1", &format!("p{i}"));
                    ips(&out.ok()).remove(0)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an ADD"))
            .collect()
    });
    let mut unique = results.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 100, "{results:?}");
    let mut held: Vec<String> = c
        .allocations("10.77.0.0-24")
        .keys()
        .map(|k| format!("10.77.0.{k}/24"))
        .collect();
    held.sort();
    assert_eq!(held, unique);
    std::thread::scope(|s| {
        for i in 0..100 {
            let (caller, ipam) = (&callers[i % 3], &ipam);
            s.spawn(move || {
                let out = caller.call("DEL", ipam, &format!("c{i}"), "net1", "");
                assert_eq!(out.code, 0, "{}", out.stdout);
            });
        }
    });
    assert!(c.allocations("10.77.0.0-24").is_empty());
    assert!(c.reservations().is_empty());
}

#[test]
fn del_with_the_api_down_fails_so_the_runtime_retries() {
    let c = Cluster::new();
    c.add(&v4(), "c1", "a");
    c.api.go_down();
    let del = c.call("DEL", &v4(), "c1", "net1", "a");
    assert_eq!(del.err_code(), 11, "{}", del.stdout);
    assert!(
        del.stdout.contains("get ippools kube-system/10.77.0.0-24"),
        "{}",
        del.stdout
    );
    let mut conf = net(&v4());
    conf["cniVersion"] = json!("1.1.0");
    let status = c.call_with("STATUS", &conf, "", "", "");
    assert_eq!(status.err_code(), 50, "{}", status.stdout);
    assert!(
        status.stdout.contains("whereabouts cannot reach its pools"),
        "{}",
        status.stdout
    );
    c.api.come_back().expect("API back");
    let status = c.call_with("STATUS", &conf, "", "", "");
    assert_eq!(status.code, 0, "{}", status.stdout);
    assert_eq!(c.call("DEL", &v4(), "c1", "net1", "a").code, 0);
    assert!(c.allocations("10.77.0.0-24").is_empty());
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let c = Cluster::new();
    let cases = [
        (
            json!({"type": "whereabouts", "range": "10.77.0.0/24", "network_name": "../../api/v1/secrets"}),
            "",
            "ipam.network_name",
        ),
        (
            json!({"type": "whereabouts", "range": "10.77.0.0/24", "kubernetes": {"kubeconfig": "/var/lib/kubelet/pods/x/kubeconfig"}}),
            "",
            "ipam.kubernetes.kubeconfig",
        ),
        (
            json!({"type": "whereabouts", "range": "10.77.0.0/24", "configuration_path": "/tmp/evil.conf"}),
            "",
            "ipam.configuration_path",
        ),
        (
            json!({"type": "whereabouts", "range": "10.77.0.300/24"}),
            "",
            "ipam.range",
        ),
        (json!({"type": "whereabouts"}), "", "ipam.range: required"),
        (v4(), "nopod", "CNI_ARGS K8S_POD_NAME: required"),
    ];
    for (ipam, mode, want) in cases {
        let pod = if mode == "nopod" { "" } else { "a" };
        let out = c.call("ADD", &ipam, "c1", "net1", pod);
        assert_eq!(out.err_code(), 7, "{ipam}: {}", out.stdout);
        assert!(out.stdout.contains(want), "{ipam}: {}", out.stdout);
    }
    assert!(c.api.objects(Resource::IP_POOLS).is_empty());
    assert!(
        c.api.requests().is_empty(),
        "a refused config reaches the API"
    );
    // No flat file at all.
    let bare = tempfile::tempdir().expect("tempdir");
    let mut call = CniCall::new("ADD", &net(&v4()).to_string());
    call.netns = c.netns.display().to_string();
    call.path = "/nonexistent".into();
    call.args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=a".into();
    call.env.push((
        "WHEREABOUTS_CONFIG_DIR".into(),
        Some(bare.path().display().to_string()),
    ));
    let out = call.run(&c.bin, None);
    assert_eq!(out.err_code(), 7, "{}", out.stdout);
    assert!(
        out.stdout.contains("config file not found"),
        "{}",
        out.stdout
    );
}

#[test]
fn lint_checks_whereabouts_sections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nad = dir.path().join("nad.yaml");
    let config = net(&json!({"type": "whereabouts", "range": "10.77.0.0/33"}));
    std::fs::write(
        &nad,
        format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: blue\nspec:\n  config: '{config}'\n"
        ),
    )
    .expect("nad");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_multus"))
        .arg("lint")
        .arg(&nad)
        .output()
        .expect("lint");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("whereabouts refuses this ipam section"),
        "{text}"
    );
    assert!(text.contains("ipam.range"), "{text}");
}

fn pod(name: &str, phase: &str, status: Value, conditions: Value) -> Value {
    json!({"metadata": {"namespace": "default", "name": name,
                        "annotations": {"k8s.v1.cni.cncf.io/network-status": status.to_string()}},
           "status": {"phase": phase, "conditions": conditions}})
}

fn secondary(ip: &str) -> Value {
    json!([{"name": "cbr0", "ips": ["10.42.0.9"], "default": true},
           {"name": "default/blue", "interface": "net1", "ips": [ip]}])
}

impl Caller {
    /// One pass of the reconciler, which must succeed: its log. Nothing goes to stdout.
    fn reconcile(&self) -> String {
        let kubeconfig = self.conf_dir.join(RECONCILER_KUBECONFIG);
        let out = std::process::Command::new(&self.bin)
            .arg("reconcile")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .output()
            .expect("run the reconciler");
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{log}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        log
    }
}

impl Cluster {
    /// An ADD SIGKILLed after its pool write: the reservation's create hangs, and the kill
    /// comes meanwhile. Returns whether the kill came before the ADD ended.
    fn add_killed_after_its_pool_write(&self) -> bool {
        self.api.inject_under(
            "POST",
            &Resource::OVERLAPPING_RANGE_IP_RESERVATIONS.path(NS),
            Fault::Delay(Duration::from_secs(3)),
            1,
        );
        let mut call = CniCall::new("ADD", &net(&v4()).to_string());
        call.container_id = "killed".into();
        call.ifname = "net1".into();
        call.netns = self.netns.display().to_string();
        call.path = "/nonexistent".into();
        call.args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=killed".into();
        for (k, v) in [
            ("WHEREABOUTS_CONFIG_DIR", &self.conf_dir),
            ("WHEREABOUTS_STATE_DIR", &self.state_dir),
        ] {
            call.env.push((k.into(), Some(v.display().to_string())));
        }
        call.run_killed_after(&self.bin, None, Duration::from_secs(1))
            .1
    }

    /// NodeSlicePool `slim` as the reference's controller makes it: 10.88.0.0/24 in /26
    /// slices, with these `status.allocations`.
    fn add_slice_pool(&self, allocations: Value) {
        self.api.add_object(
            Resource::NODE_SLICE_POOLS,
            json!({"metadata": {"name": "slim", "namespace": NS},
                   "spec": {"range": "10.88.0.0/24", "sliceSize": "/26"},
                   "status": {"allocations": allocations}}),
        );
    }
}

#[test]
fn the_reconciler_frees_what_the_reference_frees() {
    let c = Cluster::new();
    let none = json!([]);
    c.api
        .add_pod(pod("live", "Running", secondary("10.77.0.1"), none.clone()));
    c.api.add_pod(pod(
        "hidden",
        "Running",
        secondary("10.77.0.99"),
        none.clone(),
    ));
    c.api
        .add_pod(pod("pending", "Pending", json!([]), none.clone()));
    c.api.add_pod(pod(
        "tainted",
        "Running",
        secondary("10.77.0.4"),
        json!([{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]),
    ));
    c.api.add_pod(pod(
        "default-only",
        "Running",
        json!([{"name": "cbr0", "ips": ["10.77.0.6"], "default": true}]),
        none.clone(),
    ));
    c.api
        .add_pod(pod("named", "Running", secondary("10.77.0.7"), none));
    let alloc = |id: &str, podref: &str| json!({"id": id, "podref": podref, "ifname": "net1"});
    c.api.add_object(
        Resource::IP_POOLS,
        json!({"metadata": {"name": "10.77.0.0-24", "namespace": NS},
               "spec": {"range": "10.77.0.0/24", "allocations": {
                   "1": alloc("c1", "default/live"), "2": alloc("c2", "default/hidden"),
                   "3": alloc("c3", "default/pending"), "4": alloc("c4", "default/tainted"),
                   "5": alloc("c5", "default/gone"), "6": alloc("c6", "default/default-only"),
                   "8": {"id": "c8", "podref": ""}}}}),
    );
    for (name, podref) in [
        ("10.77.0.1", "default/live"),
        ("10.77.0.5", "default/gone"),
        ("blue-10.77.0.7", "default/named"),
    ] {
        c.api.add_object(
            Resource::OVERLAPPING_RANGE_IP_RESERVATIONS,
            json!({"metadata": {"name": name, "namespace": NS}, "spec": {"podref": podref}}),
        );
    }
    let text = c.reconcile();
    let mut left: Vec<String> = c.allocations("10.77.0.0-24").keys().cloned().collect();
    left.sort();
    // Kept: the live pod's, and the allocation without a podref (the reference skips those).
    assert_eq!(left, ["1", "8"], "{text}");
    for line in [
        "freed 10.77.0.2 in IPPool kube-system/10.77.0.0-24: pod default/hidden does not show it in its network-status",
        "freed 10.77.0.3 in IPPool kube-system/10.77.0.0-24: pod default/pending does not show it in its network-status",
        "freed 10.77.0.4 in IPPool kube-system/10.77.0.0-24: pod default/tainted is gone or being deleted",
        "freed 10.77.0.5 in IPPool kube-system/10.77.0.0-24: pod default/gone is gone or being deleted",
        "deleted OverlappingRangeIPReservation kube-system/10.77.0.5: pod default/gone is gone or being deleted",
        "reconciled: freed 5 addresses, deleted 1 reservations, freed 0 node slices",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // A reservation with a network name is matched to its pod (the reference deletes it).
    let names: Vec<String> = c.reservations().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["10.77.0.1", "blue-10.77.0.7"]);
    // The Pending pod was read again before its address counted as orphaned.
    let rereads = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/namespaces/default/pods/pending")
        .count();
    assert_eq!(rereads, 3);
    // A second pass has nothing left to do.
    assert!(c
        .reconcile()
        .contains("reconciled: freed 0 addresses, deleted 0 reservations, freed 0 node slices"));
}

/// A pod made while a pass runs is not in the pass's list of pods. Its ADD lands between the
/// pass's reads and its write, so the write loses: the pass reads the pool again, and frees
/// only the orphan it had found, not the new pod's address; the new reservation stays too.
#[test]
fn an_add_during_a_pass_keeps_its_address_when_the_passs_write_loses() {
    let c = Cluster::new();
    c.api
        .add_pod(pod("live", "Running", secondary("10.77.0.1"), json!([])));
    c.add(&v4(), "c1", "live");
    c.add(&v4(), "c2", "gone");
    let gate = c.hold("PATCH", &Resource::IP_POOLS.object_path(NS, "10.77.0.0-24"));
    let caller = c.caller.clone();
    let text = std::thread::scope(|s| {
        let pass = s.spawn(move || caller.reconcile());
        assert!(
            gate.arrived(Duration::from_secs(30)),
            "the pass never wrote the pool"
        );
        c.api.add_pod(pod("new", "Pending", json!([]), json!([])));
        assert_eq!(ips(&c.add(&v4(), "c3", "new")), ["10.77.0.3/24"]);
        gate.release();
        pass.join().expect("the pass")
    });
    assert!(
        text.contains("freed 10.77.0.2 in IPPool kube-system/10.77.0.0-24: pod default/gone"),
        "{text}"
    );
    assert!(text.contains("reconciled: freed 1 addresses"), "{text}");
    let mut held: Vec<String> = c
        .allocations("10.77.0.0-24")
        .into_iter()
        .map(|(k, v)| format!("{k}: {}", v["id"]))
        .collect();
    held.sort();
    assert_eq!(held, ["1: \"c1\"", "3: \"c3\""], "{text}");
    let names: Vec<String> = c.reservations().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["10.77.0.1", "10.77.0.3"], "{text}");
    // The next pod gets the freed orphan's address, not the new pod's.
    assert_eq!(ips(&c.add(&v4(), "c4", "next")), ["10.77.0.2/24"]);
}

/// A cluster whose pods do not fit one list reply: the pass reads them in pages and frees
/// exactly the gone pods' addresses.
#[test]
fn the_reconciler_reads_a_large_cluster_in_pages() {
    let c = Cluster::new();
    let mut allocations = serde_json::Map::new();
    for i in 1..=420u32 {
        let ip = format!("10.78.{}.{}", i / 256, i % 256);
        let name = format!("p-{i:03}");
        // Pods 401 to 420 are gone.
        if i <= 400 {
            c.api
                .add_pod(pod(&name, "Running", secondary(&ip), json!([])));
        }
        allocations.insert(
            i.to_string(),
            json!({"id": format!("c{i}"), "podref": format!("default/{name}"), "ifname": "net1"}),
        );
    }
    c.api.add_object(
        Resource::IP_POOLS,
        json!({"metadata": {"name": "10.78.0.0-16", "namespace": NS},
               "spec": {"range": "10.78.0.0/16", "allocations": allocations}}),
    );
    let text = c.reconcile();
    assert!(text.contains("reconciled: freed 20 addresses"), "{text}");
    let left = c.allocations("10.78.0.0-16");
    assert_eq!(left.len(), 400);
    assert!(left.contains_key("400") && !left.contains_key("401"));
    let pages = c
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/pods")
        .count();
    assert!(pages >= 2, "the pods came in {pages} page(s)");
}

/// `whereabouts control`, running as its own ServiceAccount, its output in a file; killed when
/// dropped.
struct Controller {
    child: std::process::Child,
    log: PathBuf,
}

impl Controller {
    fn start(c: &Cluster) -> Controller {
        let log = c.conf_dir.join("control.log");
        let file = std::fs::File::create(&log).expect("the controller's log");
        let child = std::process::Command::new(&c.bin)
            .arg("control")
            .arg("--kubeconfig")
            .arg(c.conf_dir.join(RECONCILER_KUBECONFIG))
            .stderr(file.try_clone().expect("the controller's log"))
            .stdout(file)
            .spawn()
            .expect("start the controller");
        Controller { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (10 s at most) until the log has `line`.
    fn wait_for(&self, line: &str) -> String {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log();
            if text.contains(line) {
                return text;
            }
            assert!(Instant::now() < until, "no line {line:?} in 10 s:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The controller frees a deleted pod's address and reservation as soon as the watch sees the
/// deletion, and what was orphaned before it started in its first whole pass. A pod deleted
/// and made again under its name (a StatefulSet's) keeps its address: the controller leaves it
/// to the whole pass, which judges it by its network-status.
#[test]
fn the_controller_frees_a_deleted_pods_addresses_at_once() {
    let c = Cluster::new();
    for (name, ip) in [
        ("live", "10.77.0.1"),
        ("doomed", "10.77.0.2"),
        ("sts-0", "10.77.0.4"),
    ] {
        c.api
            .add_pod(pod(name, "Running", secondary(ip), json!([])));
    }
    for (container, name) in [
        ("c1", "live"),
        ("c2", "doomed"),
        ("c3", "gone"),
        ("c4", "sts-0"),
    ] {
        c.add(&v4(), container, name);
    }
    let controller = Controller::start(&c);
    let text = controller.wait_for("a whole pass: freed 1 addresses, deleted 1 reservations");
    assert!(
        text.contains(
            "freed 10.77.0.3 in IPPool kube-system/10.77.0.0-24: pod default/gone is gone"
        ),
        "{text}"
    );
    c.api.delete_pod("default", "doomed");
    let text = controller.wait_for("deleted pods: freed 1 addresses, deleted 1 reservations");
    assert!(
        text.contains(
            "freed 10.77.0.2 in IPPool kube-system/10.77.0.0-24: pod default/doomed was deleted"
        ),
        "{text}"
    );
    // The StatefulSet's pod is back under its name by the time the controller reads it.
    let gate = c.hold("GET", "/api/v1/namespaces/default/pods/sts-0");
    c.api.delete_pod("default", "sts-0");
    assert!(
        gate.arrived(Duration::from_secs(10)),
        "the controller never read the deleted pod again"
    );
    c.api.add_pod(pod("sts-0", "Pending", json!([]), json!([])));
    gate.release();
    // Then one more deletion, whose batch comes after the StatefulSet pod's.
    c.api.delete_pod("default", "live");
    // Its reservation goes last, after its address.
    let text = controller.wait_for(
        "deleted OverlappingRangeIPReservation kube-system/10.77.0.1: pod default/live was deleted",
    );
    let mut held: Vec<String> = c.allocations("10.77.0.0-24").keys().cloned().collect();
    held.sort();
    assert_eq!(held, ["4"], "{text}");
    let names: Vec<String> = c.reservations().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["10.77.0.4"], "{text}");
    assert!(!text.contains("sts-0"), "{text}");
}

/// The controller watches IPAMClaims too: a claim's address stays while the claim exists,
/// with or without its pods, and goes as soon as the claim is deleted.
#[test]
fn the_controller_frees_a_deleted_claims_address_at_once() {
    let c = Cluster::new();
    for i in 1..=2 {
        c.add_claim(&format!("vm{i}"));
        c.add_claimed(
            &format!("c{i}"),
            &format!("virt-launcher-{i}"),
            &format!("vm{i}"),
        )
        .ok();
    }
    let controller = Controller::start(&c);
    controller.wait_for("a whole pass: freed 0 addresses, deleted 0 reservations");
    c.api
        .delete_object(Resource::IPAM_CLAIMS, "default", "vm1")
        .expect("the claim");
    let text = controller.wait_for("deleted claims: freed 1 addresses, deleted 1 reservations");
    assert!(
        text.contains(
            "freed 10.77.0.1 in IPPool kube-system/10.77.0.0-24: IPAMClaim default/vm1 is gone"
        ),
        "{text}"
    );
    let held: Vec<String> = c.allocations("10.77.0.0-24").keys().cloned().collect();
    assert_eq!(held, ["2"], "{text}");
}

/// A pod deleted and at once made again under its name (a StatefulSet's, or a tenant's on
/// purpose): its new container's ADD adopts the old reservation, which changes it, so the
/// controller, which judged the pod gone just before, cannot delete it from under the new pod.
#[test]
fn a_pod_back_under_its_name_keeps_the_reservation_the_controller_judged_orphaned() {
    let c = Cluster::new();
    c.api
        .add_pod(pod("web-0", "Running", secondary("10.77.0.1"), json!([])));
    c.add(&v4(), "old", "web-0");
    let controller = Controller::start(&c);
    controller.wait_for("a whole pass: freed 0 addresses");
    let gate = c.hold(
        "DELETE",
        &Resource::OVERLAPPING_RANGE_IP_RESERVATIONS.object_path(NS, "10.77.0.1"),
    );
    c.api.delete_pod("default", "web-0");
    assert!(
        gate.arrived(Duration::from_secs(10)),
        "the controller never deleted the reservation"
    );
    // Between the controller's look and its delete: the pod is back, and its ADD gets the
    // address and its reservation again.
    c.api.add_pod(pod("web-0", "Pending", json!([]), json!([])));
    assert_eq!(ips(&c.add(&v4(), "new", "web-0")), ["10.77.0.1/24"]);
    gate.release();
    let text = controller.wait_for("deleted pods: freed 1 addresses, deleted 0 reservations");
    let reserved = c.reservations();
    assert_eq!(
        reserved,
        [(
            "10.77.0.1".to_owned(),
            json!({"podref": "default/web-0", "ifname": "net1", "containerid": "new"})
        )],
        "{text}"
    );
    assert_eq!(c.allocations("10.77.0.0-24")["1"]["id"], "new", "{text}");
}

#[test]
fn an_add_killed_midway_leaves_only_what_the_reconciler_frees() {
    let c = Cluster::new();
    let killed = c.add_killed_after_its_pool_write();
    assert!(killed);
    assert_eq!(c.allocations("10.77.0.0-24").len(), 1);
    // The pod never came up, and the reservation's create went down with the killed ADD's
    // connection (orphaned reservations are the_reconciler_frees_what_the_reference_frees's):
    // the reconciler frees the address.
    assert!(c.reservations().is_empty(), "{:?}", c.reservations());
    c.reconcile();
    assert!(c.allocations("10.77.0.0-24").is_empty());
    assert!(c.reservations().is_empty(), "{:?}", c.reservations());
    // And the next pod gets the address.
    assert_eq!(ips(&c.add(&v4(), "next", "next")), ["10.77.0.1/24"]);
}

impl Caller {
    /// GC as a runtime sends it: the network config with the attachments still valid.
    fn gc(&self, ipam: &Value, valid: Option<&[(&str, &str)]>) -> CniOutput {
        let mut conf = net(ipam);
        conf["cniVersion"] = json!("1.1.0");
        if let Some(valid) = valid {
            conf["cni.dev/valid-attachments"] = valid
                .iter()
                .map(|(id, ifname)| json!({"containerID": id, "ifname": ifname}))
                .collect();
        }
        self.call_with("GC", &conf, "", "", "")
    }

    /// Makes this node's records of network `blue` an hour old: past GC's grace.
    fn age_records(&self) {
        let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for name in self.recorded() {
            std::fs::File::options()
                .write(true)
                .open(self.state_dir.join("blue").join(name))
                .and_then(|f| f.set_modified(an_hour_ago))
                .expect("backdate a record");
        }
    }

    /// The attachments this node recorded for network `blue`.
    fn recorded(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.state_dir.join("blue"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// GC frees what this node's stale attachments hold, and nothing of another node's: the
/// pools are shared, and the node's record says which attachments are its own.
#[test]
fn gc_frees_this_nodes_stale_attachments_and_no_other_nodes() {
    let c = Cluster::new();
    let (a, b) = (c.on_node("node-a"), c.on_node("node-b"));
    for (node, container, pod) in [(&a, "ca1", "p1"), (&a, "ca2", "p2"), (&b, "cb1", "p3")] {
        node.call("ADD", &v4(), container, "net1", pod).ok();
    }
    assert_eq!(a.recorded(), ["ca1:net1", "ca2:net1"]);
    assert_eq!(b.recorded(), ["cb1:net1"]);
    // Without the runtime's list, GC cannot tell what is stale: refused, nothing freed.
    let refused = a.gc(&v4(), None);
    assert_eq!(refused.err_code(), 7, "{}", refused.stdout);
    assert!(refused.stdout.contains("cni.dev/valid-attachments"));
    assert_eq!(c.allocations("10.77.0.0-24").len(), 3);
    // An ADD begun within the grace may still be running, unknown to the runtime's list.
    a.gc(&v4(), Some(&[])).ok();
    assert_eq!(c.allocations("10.77.0.0-24").len(), 3);
    assert_eq!(a.recorded(), ["ca1:net1", "ca2:net1"]);
    // node-a's runtime knows ca1 only: ca2 is freed, cb1 (node-b's) is not.
    a.age_records();
    b.age_records();
    a.gc(&v4(), Some(&[("ca1", "net1")])).ok();
    let mut held: Vec<Value> = c
        .allocations("10.77.0.0-24")
        .values()
        .map(|v| v["id"].clone())
        .collect();
    held.sort_by_key(|v| v.to_string());
    assert_eq!(held, [json!("ca1"), json!("cb1")]);
    assert_eq!(a.recorded(), ["ca1:net1"]);
    let names: Vec<String> = c.reservations().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["10.77.0.1", "10.77.0.3"]);
    // With the API down, GC fails so that it is tried again, and keeps its record.
    c.api.go_down();
    let down = a.gc(&v4(), Some(&[]));
    assert_eq!(down.err_code(), 11, "{}", down.stdout);
    assert_eq!(a.recorded(), ["ca1:net1"]);
    c.api.come_back().expect("the API server comes back");
    a.gc(&v4(), Some(&[])).ok();
    assert!(a.recorded().is_empty());
    let left: Vec<Value> = c
        .allocations("10.77.0.0-24")
        .values()
        .map(|v| v["id"].clone())
        .collect();
    assert_eq!(left, [json!("cb1")]);
    // A DEL removes its record too.
    b.call("DEL", &v4(), "cb1", "net1", "p3").ok();
    assert!(b.recorded().is_empty());
}

/// An ADD killed after its pool write is freed by the node's next GC: the record is made
/// before the pool is written.
#[test]
fn gc_frees_what_a_killed_add_left() {
    let c = Cluster::new();
    let killed = c.add_killed_after_its_pool_write();
    assert!(killed);
    assert_eq!(c.allocations("10.77.0.0-24").len(), 1);
    assert_eq!(c.recorded(), ["killed:net1"]);
    c.age_records();
    c.gc(&v4(), Some(&[])).ok();
    assert!(c.allocations("10.77.0.0-24").is_empty());
    assert!(c.recorded().is_empty());
}

fn sliced(size: &str) -> Value {
    json!({"type": "whereabouts", "range": "10.88.0.0/24", "network_name": "slim",
           "node_slice_size": size})
}

fn slice_pool(c: &Cluster) -> Value {
    c.api
        .object(Resource::NODE_SLICE_POOLS, NS, "slim")
        .expect("the NodeSlicePool")
}

/// Node slices: each node takes the lowest free slice of the NodeSlicePool (made on first use
/// in the reference's shape) and allocates from a pool of its own, named as the reference names
/// it; the addresses keep the whole range's prefix.
#[test]
fn node_slices_give_each_node_a_pool_of_its_own() {
    let c = Cluster::new();
    let (a, b) = (c.on_node("node-a"), c.on_node("node-b"));
    assert_eq!(
        ips(&a.call("ADD", &sliced("/28"), "ca1", "net1", "p1").ok()),
        ["10.88.0.1/24"]
    );
    assert_eq!(
        ips(&b.call("ADD", &sliced("28"), "cb1", "net1", "p2").ok()),
        ["10.88.0.17/24"]
    );
    assert_eq!(
        ips(&a.call("ADD", &sliced("/28"), "ca2", "net1", "p3").ok()),
        ["10.88.0.2/24"]
    );
    let slices = slice_pool(&c);
    assert_eq!(
        slices["spec"],
        json!({"range": "10.88.0.0/24", "sliceSize": "/28"})
    );
    let allocations = slices["status"]["allocations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(allocations.len(), 16);
    assert_eq!(
        allocations[0],
        json!({"nodeName": "node-a", "sliceRange": "10.88.0.0/28"})
    );
    assert_eq!(
        allocations[1],
        json!({"nodeName": "node-b", "sliceRange": "10.88.0.16/28"})
    );
    assert_eq!(
        allocations[2],
        json!({"nodeName": "", "sliceRange": "10.88.0.32/28"})
    );
    let pool = c.pool("slim-node-a-10.88.0.0-28");
    assert_eq!(pool["spec"]["range"], "10.88.0.0/28");
    assert_eq!(
        pool["spec"]["allocations"],
        json!({"1": {"id": "ca1", "podref": "default/p1", "ifname": "net1"},
               "2": {"id": "ca2", "podref": "default/p3", "ifname": "net1"}})
    );
    assert_eq!(c.allocations("slim-node-b-10.88.0.16-28")["1"]["id"], "cb1");
    // Reservations still guard the addresses across pools, as in the reference.
    let names: Vec<String> = c.reservations().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["slim-10.88.0.1", "slim-10.88.0.17", "slim-10.88.0.2"]
    );
    // CHECK and DEL find the node's pool through its slice.
    let mut conf = net(&sliced("/28"));
    conf["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.88.0.1/24"}]});
    assert_eq!(a.call_with("CHECK", &conf, "ca1", "net1", "p1").code, 0);
    let elsewhere = c
        .on_node("node-z")
        .call_with("CHECK", &conf, "ca1", "net1", "p1");
    assert_eq!(elsewhere.err_code(), 3, "{}", elsewhere.stdout);
    assert!(
        elsewhere.stdout.contains("node node-z holds no slice"),
        "{}",
        elsewhere.stdout
    );
    a.call("DEL", &sliced("/28"), "ca1", "net1", "p1").ok();
    assert!(!c.allocations("slim-node-a-10.88.0.0-28").contains_key("1"));
    // DEL on a node without a slice has nothing to free, and claims none.
    c.on_node("node-z")
        .call("DEL", &sliced("/28"), "cz", "net1", "pz")
        .ok();
    assert_eq!(slice_pool(&c)["status"]["allocations"][2]["nodeName"], "");
}

/// A slice holds 14 addresses of a /28; a NodeSlicePool whose slices are all held says so with
/// code 11, and one that cuts another range or size with code 7; a NodeSlicePool the
/// reference's controller made is honoured.
#[test]
fn node_slices_full_taken_mismatched_and_made_upstream() {
    let c = Cluster::new();
    let a = c.on_node("node-a");
    for i in 1..=14 {
        a.call(
            "ADD",
            &sliced("/28"),
            &format!("c{i}"),
            "net1",
            &format!("p{i}"),
        )
        .ok();
    }
    let full = a.call("ADD", &sliced("/28"), "c15", "net1", "p15");
    assert_eq!(full.err_code(), 11, "{}", full.stdout);
    assert!(
        full.stdout
            .contains("10.88.0.0/28 (10.88.0.1 to 10.88.0.14)"),
        "{}",
        full.stdout
    );
    assert!(
        full.stdout.contains("pool slim-node-a-10.88.0.0-28"),
        "{}",
        full.stdout
    );
    // Another size for the same network: refused, nothing claimed.
    let other = c
        .on_node("node-b")
        .call("ADD", &sliced("/27"), "cb", "net1", "pb");
    assert_eq!(other.err_code(), 7, "{}", other.stdout);
    assert!(
        other.stdout.contains("NodeSlicePool kube-system/slim cuts \\\"10.88.0.0/24\\\" into \\\"/28\\\" slices, but this network asks for 10.88.0.0/24 in /27 slices"),
        "{}",
        other.stdout
    );

    // The reference's controller: four /26 slices, node-c holding the third, with an
    // allocation there in the reference's shape.
    let c = Cluster::new();
    c.add_slice_pool(json!([
        {"nodeName": "node-x", "sliceRange": "10.88.0.0/26"},
        {"nodeName": "", "sliceRange": "10.88.0.64/26"},
        {"nodeName": "node-c", "sliceRange": "10.88.0.128/26"},
        {"nodeName": "node-y", "sliceRange": "10.88.0.192/26"}
    ]));
    c.api.add_object(
        Resource::IP_POOLS,
        json!({"metadata": {"name": "slim-node-c-10.88.0.128-26", "namespace": NS},
               "spec": {"range": "10.88.0.128/26", "allocations": {
                   "1": {"id": "upstream", "podref": "default/old", "ifname": "net1"}}}}),
    );
    let node_c = c.on_node("node-c");
    assert_eq!(
        ips(&node_c.call("ADD", &sliced("/26"), "cc", "net1", "new").ok()),
        ["10.88.0.130/24"]
    );
    node_c
        .call("DEL", &sliced("/26"), "upstream", "net1", "old")
        .ok();
    assert!(!c
        .allocations("slim-node-c-10.88.0.128-26")
        .contains_key("1"));
    // node-d takes the one free slice; node-e finds none.
    let d = c
        .on_node("node-d")
        .call("ADD", &sliced("/26"), "cd", "net1", "pd");
    assert_eq!(ips(&d.ok()), ["10.88.0.65/24"]);
    let none = c
        .on_node("node-e")
        .call("ADD", &sliced("/26"), "ce", "net1", "pe");
    assert_eq!(none.err_code(), 11, "{}", none.stdout);
    assert!(
        none.stdout.contains("no free slice for node node-e in NodeSlicePool kube-system/slim: its 4 slices are all held"),
        "{}",
        none.stdout
    );
    // The reconciler frees the slices of nodes that left, once their pods' addresses are
    // freed: node-x's pod still runs (its node came back under the name, say).
    for node in ["node-c", "node-d", "node-y"] {
        c.api.add_node(node);
    }
    c.api.add_object(
        Resource::IP_POOLS,
        json!({"metadata": {"name": "slim-node-x-10.88.0.0-26", "namespace": NS},
               "spec": {"range": "10.88.0.0/26", "allocations": {
                   "1": {"id": "cx", "podref": "default/xpod", "ifname": "net1"}}}}),
    );
    c.api.add_pod(pod(
        "xpod",
        "Running",
        json!([{"name": "default/blue", "interface": "net1", "ips": ["10.88.0.1"]}]),
        json!([]),
    ));
    let text = c.reconcile();
    assert!(
        text.contains(
            "kept slice 10.88.0.0/26 in NodeSlicePool kube-system/slim: node node-x is gone, \
             but IPPool kube-system/slim-node-x-10.88.0.0-26 still holds 1 addresses"
        ),
        "{text}"
    );
    assert_eq!(
        slice_pool(&c)["status"]["allocations"][0]["nodeName"],
        "node-x"
    );
    // The pod goes: its address, then the slice, then the empty IPPool, in one pass.
    c.api.delete_pod("default", "xpod");
    let text = c.reconcile();
    for line in [
        "freed 10.88.0.1 in IPPool kube-system/slim-node-x-10.88.0.0-26",
        "freed slice 10.88.0.0/26 in NodeSlicePool kube-system/slim: node node-x is gone",
        "deleted IPPool kube-system/slim-node-x-10.88.0.0-26: empty",
        "freed 1 node slices",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(c
        .api
        .object(Resource::IP_POOLS, NS, "slim-node-x-10.88.0.0-26")
        .is_none());
    let e = c
        .on_node("node-e")
        .call("ADD", &sliced("/26"), "ce", "net1", "pe");
    assert_eq!(ips(&e.ok()), ["10.88.0.1/24"]);
    // An entry under a key that is not an offset still holds the slice: node-e and its pod
    // are gone, but its pool keeps what the reconciler cannot read.
    let mut held = c
        .api
        .object(Resource::IP_POOLS, NS, "slim-node-e-10.88.0.0-26")
        .expect("node-e's pool");
    held["spec"]["allocations"]["x1"] =
        json!({"id": "old", "podref": "default/old", "ifname": "net1"});
    c.api.add_object(Resource::IP_POOLS, held);
    let text = c.reconcile();
    assert!(
        text.contains(
            "kept slice 10.88.0.0/26 in NodeSlicePool kube-system/slim: node node-e is gone, \
             but IPPool kube-system/slim-node-e-10.88.0.0-26 still holds 1 addresses"
        ),
        "{text}"
    );
}

/// Nodes claiming slices at once each get a slice of their own, and their pods distinct
/// addresses from it.
#[test]
fn nodes_claiming_slices_at_once_never_share_one() {
    let c = Cluster::new();
    let results: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|n| {
                let node = c.on_node(&format!("node-{n}"));
                s.spawn(move || {
                    (0..5)
                        .map(|i| {
                            let out = node.call(
                                "ADD",
                                &sliced("/27"),
                                &format!("n{n}c{i}"),
                                "net1",
                                &format!("n{n}p{i}"),
                            );
                            (node.node.clone(), ips(&out.ok()).remove(0))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("node"))
            .collect()
    });
    let mut addresses: Vec<&String> = results.iter().map(|(_, ip)| ip).collect();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 20, "{results:?}");
    let slices = slice_pool(&c)["status"]["allocations"].clone();
    for (node, ip) in &results {
        let held = slices
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["nodeName"] == node.as_str())
            .and_then(|s| s["sliceRange"].as_str())
            .and_then(|s| s.parse::<ipnet::IpNet>().ok())
            .unwrap_or_else(|| panic!("{node} holds no slice: {slices}"));
        let addr: ipnet::IpNet = ip.parse().expect("address");
        assert!(
            held.contains(&addr.addr()),
            "{node} got {ip} outside {held}"
        );
    }
}

/// A NodeSlicePool that gives the node a slice outside the range, or of another size, is not
/// allocated from: the API's word is checked.
#[test]
fn a_slice_outside_the_range_is_refused() {
    let c = Cluster::new();
    c.add_slice_pool(json!([
        {"nodeName": "node-q", "sliceRange": "10.99.0.0/26"},
        {"nodeName": "node-r", "sliceRange": "10.88.0.0/25"}
    ]));
    for node in ["node-q", "node-r"] {
        let out = c
            .on_node(node)
            .call("ADD", &sliced("/26"), "cq", "net1", "pq");
        assert_eq!(out.err_code(), 7, "{}", out.stdout);
        assert!(
            out.stdout.contains(&format!("gives node {node} the slice"))
                && out
                    .stdout
                    .contains("which is not a /26 slice of 10.88.0.0/24"),
            "{}",
            out.stdout
        );
    }
    assert!(c.api.objects(Resource::IP_POOLS).is_empty());
    // Teardown is not blocked by it: DEL ends with the record gone, saying why it freed
    // nothing.
    let q = c.on_node("node-q");
    assert_eq!(q.recorded(), ["cq:net1"]);
    let del = q.call("DEL", &sliced("/26"), "cq", "net1", "pq");
    del.ok();
    assert!(
        del.stderr.contains("no address freed") && del.stderr.contains("10.99.0.0/26"),
        "{}",
        del.stderr
    );
    assert!(q.recorded().is_empty());
}

/// The hold a DEL leaves when `mac` answered the conflict probe for the address, as stored.
fn is_hold_of(a: &Value, mac: &str) -> bool {
    let until = a["id"]
        .as_str()
        .and_then(|id| id.strip_prefix("in-use-until-"))
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Ten minutes from the DEL.
    a["podref"] == format!("address-in-use/{mac}") && (now + 590..=now + 600).contains(&until)
}

impl Cluster {
    /// A reconciler pass frees 10.77.0.1 and deletes its reservation, each for `why`, and
    /// leaves nothing.
    fn pass_frees_the_last_address(&self, why: &str) {
        let log = self.reconcile();
        for line in [
            format!("freed 10.77.0.1 in IPPool kube-system/10.77.0.0-24: {why}"),
            format!("deleted OverlappingRangeIPReservation kube-system/10.77.0.1: {why}"),
        ] {
            assert!(log.contains(&line), "{line}\n{log}");
        }
        assert!(self.allocations("10.77.0.0-24").is_empty());
        assert!(self.reservations().is_empty());
    }

    /// DEL as an interface plugin runs it after its conflict probe found `in_use`.
    fn del_in_use(&self, container: &str, in_use: &str) -> CniOutput {
        let mut call = self.cni_call("DEL", &net(&v4()), container, "net1", "");
        call.env
            .push(("IPAM_ADDRESSES_IN_USE".into(), Some(in_use.into())));
        call.run(&self.bin, None)
    }

    /// Moves the end of the hold on `offset` (and its reservation's) into the past.
    fn end_hold(&self, offset: &str, ip: &str) {
        let mut pool = self.pool("10.77.0.0-24");
        pool["spec"]["allocations"][offset]["id"] = json!("in-use-until-1000");
        self.api.add_object(Resource::IP_POOLS, pool);
        let mut r = self
            .api
            .object(Resource::OVERLAPPING_RANGE_IP_RESERVATIONS, NS, ip)
            .expect("the hold's reservation");
        r["spec"]["containerid"] = json!("in-use-until-1000");
        self.api
            .add_object(Resource::OVERLAPPING_RANGE_IP_RESERVATIONS, r);
    }
}

/// An address the interface plugin's conflict probe found in use is held back by DEL, for
/// ten minutes, allocation and reservation both: ADDs skip it, the reconciler keeps it while
/// the hold lasts, and an ADD or a pass after it ends frees it.
#[test]
fn an_address_another_host_answered_for_is_held_then_freed() {
    let c = Cluster::new();
    let mac = "02:00:00:00:00:99";
    assert_eq!(ips(&c.add(&v4(), "ca", "a")), ["10.77.0.1/24"]);
    let del = c.del_in_use("ca", &format!("10.77.0.1={mac}"));
    assert_eq!(del.code, 0, "{}", del.stdout);
    let held = &c.allocations("10.77.0.0-24")["1"];
    assert!(is_hold_of(held, mac), "{held}");
    let (name, spec) = &c.reservations()[0];
    assert_eq!(name, "10.77.0.1");
    assert_eq!(spec["podref"], held["podref"], "{spec}");
    assert_eq!(spec["containerid"], held["id"], "{spec}");

    // The same pod's next sandbox does not get it back: it names no pod.
    assert_eq!(ips(&c.add(&v4(), "ca2", "a")), ["10.77.0.2/24"]);
    c.api
        .add_pod(pod("a", "Running", secondary("10.77.0.2"), json!([])));
    let log = c.reconcile();
    assert!(
        log.contains("freed 0 addresses, deleted 0 reservations"),
        "{log}"
    );
    assert!(is_hold_of(&c.allocations("10.77.0.0-24")["1"], mac));

    // Once over, the next ADD frees it first, and takes it.
    c.end_hold("1", "10.77.0.1");
    assert_eq!(ips(&c.add(&v4(), "cb", "b")), ["10.77.0.1/24"]);
    assert_eq!(c.allocations("10.77.0.0-24")["1"]["podref"], "default/b");
    let r: Vec<Value> = c.reservations().into_iter().map(|(_, s)| s).collect();
    assert_eq!(r[0]["podref"], "default/b", "{r:?}");

    // An entry for an address the attachment does not hold changes nothing: 10.77.0.2 is
    // freed; garbage entries are skipped.
    let del = c.del_in_use("ca2", &format!("10.77.0.9={mac},bad,10.77.0.2=zz"));
    assert_eq!(del.code, 0, "{}", del.stdout);
    assert!(!c.allocations("10.77.0.0-24").contains_key("2"));

    // Once over, a pass frees it with its reservation.
    c.api
        .add_pod(pod("b", "Running", secondary("10.77.0.1"), json!([])));
    assert_eq!(c.del_in_use("cb", &format!("10.77.0.1={mac}")).code, 0);
    assert!(is_hold_of(&c.allocations("10.77.0.0-24")["1"], mac));
    c.end_hold("1", "10.77.0.1");
    c.pass_frees_the_last_address("the hold on an address another host answered for is over");
}

/// The whole chain on a LAN: bridge with `conflictProbe` runs whereabouts; a host on the
/// bridge holds 10.77.0.1, so the ADD fails with code 11 naming it and the host's MAC, and
/// the pool holds the address back; the next ADD gets 10.77.0.2. The API server listens in
/// the node's namespace, where the plugins run.
#[test]
fn a_conflict_probe_on_the_lan_holds_the_address_in_the_pool() {
    let node = Netns::new("wh-node");
    let c = Cluster::serving(
        KubeApiServer::start_in(testkit::kube_api::Scheme::Https, &node).expect("API server"),
    );
    let lan = Netns::new("wh-lan");
    node.ip(&["link", "add", "br-wh", "type", "bridge"]);
    node.ip(&["link", "set", "br-wh", "up"]);
    lan.veth_to("lan0", &node, "lanp");
    node.ip(&["link", "set", "lanp", "master", "br-wh", "up"]);
    lan.ip(&["link", "set", "lan0", "up"]);
    lan.ip(&["addr", "add", "10.77.0.1/24", "dev", "lan0"]);
    let lan_mac = lan.ip_json(&["link", "show", "lan0"])[0]["address"]
        .as_str()
        .expect("a MAC")
        .to_owned();
    let bridge = PluginDir::new(&crate::common::plugins_bin(), &["bridge"]);
    let conf = json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
                      "bridge": "br-wh", "conflictProbe": true, "ipam": v4()});
    let add = |container: &str| {
        let mut call = c.cni_call("ADD", &conf, container, "net1", "a");
        call.path = format!("{}:{}", bridge.path().display(), call.path);
        call.run(&bridge.path().join("bridge"), Some(&node))
    };

    let failed = add("ca");
    assert_eq!(failed.err_code(), 11, "{}", failed.stdout);
    assert!(
        failed
            .stdout
            .contains("address 10.77.0.1 is already in use")
            && failed.stdout.contains(&lan_mac),
        "{}",
        failed.stdout
    );
    let allocations = c.allocations("10.77.0.0-24");
    assert_eq!(allocations.len(), 1, "{allocations:?}");
    assert!(is_hold_of(&allocations["1"], &lan_mac), "{allocations:?}");
    assert_eq!(c.reservations()[0].1["podref"], allocations["1"]["podref"]);
    // Nothing of the failed ADD is left in the pod.
    assert!(!c.pod.links().contains(&"net1".to_owned()));

    let ok = add("ca2");
    assert_eq!(ok.code, 0, "{}", ok.stdout);
    assert_eq!(ips(&ok.ok()), ["10.77.0.2/24"]);
}

impl Caller {
    /// ADD of `pod`'s `net1` with IPAMClaim `claim` (in `default`), as multus hands it on.
    fn add_claimed(&self, container: &str, pod: &str, claim: &str) -> CniOutput {
        let mut call = self.cni_call("ADD", &net(&v4()), container, "net1", pod);
        call.args = format!("{};IPAM_CLAIM_REFERENCE={claim}", call.args);
        call.run(&self.bin, None)
    }
}

impl Cluster {
    fn add_claim(&self, name: &str) {
        self.api.add_object(
            Resource::IPAM_CLAIMS,
            json!({"metadata": {"name": name, "namespace": "default"},
                   "spec": {"network": "blue", "interface": "net1"}}),
        );
    }

    fn claim_status(&self, name: &str) -> Value {
        self.api
            .object(Resource::IPAM_CLAIMS, "default", name)
            .map(|c| c["status"].clone())
            .unwrap_or_default()
    }
}

/// A pod with an IPAMClaim takes its address for the claim: the pool names the claim, and the
/// claim's status the address and the pod. DEL and GC keep it; the claim's next pod, on another
/// node under another name, gets it back; a reconciler pass keeps it whatever the pods, until
/// the claim is deleted.
#[test]
fn a_claims_address_outlives_its_pods_until_the_claim_is_deleted() {
    let c = Cluster::new();
    c.add_claim("vm1");
    let a = c.add_claimed("c1", "virt-launcher-a", "vm1");
    assert_eq!(a.code, 0, "{}", a.stdout);
    assert_eq!(ips(&a.ok()), ["10.77.0.1/24"]);
    assert_eq!(
        c.allocations("10.77.0.0-24")["1"],
        json!({"id": "c1", "podref": "ipamclaim:default/vm1", "ifname": "net1"})
    );
    assert_eq!(
        c.claim_status("vm1"),
        json!({"ips": ["10.77.0.1/24"], "ownerPod": {"name": "virt-launcher-a"}})
    );
    assert_eq!(c.reservations()[0].1["podref"], "ipamclaim:default/vm1");
    assert_eq!(c.add(&v4(), "cb", "b")["ips"][0]["address"], "10.77.0.2/24");

    // DEL and GC of the claim's pod keep the address.
    assert_eq!(c.call("DEL", &v4(), "c1", "net1", "").code, 0);
    c.age_records();
    c.gc(&v4(), Some(&[("cb", "net1")])).ok();
    assert_eq!(c.allocations("10.77.0.0-24")["1"]["id"], "c1");
    assert_eq!(c.reservations().len(), 2);

    // The VM's next pod, on another node and under another name.
    let b = c
        .on_node("node-1")
        .add_claimed("c2", "virt-launcher-b", "vm1");
    assert_eq!(ips(&b.ok()), ["10.77.0.1/24"]);
    assert_eq!(c.allocations("10.77.0.0-24")["1"]["id"], "c2");
    assert_eq!(
        c.claim_status("vm1")["ownerPod"],
        json!({"name": "virt-launcher-b"})
    );

    // No pod at all: b's address goes, the claim's stays.
    let log = c.reconcile();
    assert!(log.contains("freed 10.77.0.2 in IPPool"), "{log}");
    let left: Vec<String> = c.allocations("10.77.0.0-24").keys().cloned().collect();
    assert_eq!(left, ["1"], "{log}");

    // The claim deleted: the next pass frees its address and reservation.
    c.api
        .delete_object(Resource::IPAM_CLAIMS, "default", "vm1")
        .expect("the claim");
    c.pass_frees_the_last_address("IPAMClaim default/vm1 is gone");
}

/// A claim that does not exist fails the ADD with code 11, naming it, and writes nothing; a
/// claim in node-slice mode, whose addresses cannot follow a pod to another node, and a
/// reference that is not a name, are refused with code 7.
#[test]
fn claims_that_cannot_be_kept_are_refused_and_write_nothing() {
    let c = Cluster::new();
    let missing = c.add_claimed("c1", "a", "nope");
    assert_eq!(missing.err_code(), 11, "{}", missing.stdout);
    assert!(
        missing
            .stdout
            .contains("IPAMClaim default/nope not found: the pod's network selection names it"),
        "{}",
        missing.stdout
    );
    let bad = c.add_claimed("c1", "a", "Not_A_Name");
    assert_eq!(bad.err_code(), 7, "{}", bad.stdout);
    assert!(
        bad.stdout.contains("IPAM_CLAIM_REFERENCE"),
        "{}",
        bad.stdout
    );
    c.api.add_object(
        Resource::IPAM_CLAIMS,
        json!({"metadata": {"name": "red-vm", "namespace": "default"},
               "spec": {"network": "red", "interface": "net1"}}),
    );
    let other = c.add_claimed("c1", "a", "red-vm");
    assert_eq!(other.err_code(), 7, "{}", other.stdout);
    assert!(
        other.stdout.contains(
            r#"IPAMClaim default/red-vm is for network \"red\", and this is network \"blue\""#
        ),
        "{}",
        other.stdout
    );
    c.add_claim("vm1");
    let mut call = c.cni_call("ADD", &net(&sliced("/26")), "c1", "net1", "a");
    call.args = format!("{};IPAM_CLAIM_REFERENCE=vm1", call.args);
    let sliced_claim = call.run(&c.bin, None);
    assert_eq!(sliced_claim.err_code(), 7, "{}", sliced_claim.stdout);
    assert!(
        sliced_claim
            .stdout
            .contains("cannot follow its pod to another node"),
        "{}",
        sliced_claim.stdout
    );
    assert!(c.api.objects(Resource::IP_POOLS).is_empty());
    assert!(c.reservations().is_empty());
    assert_eq!(c.claim_status("vm1"), Value::Null);
    assert!(c.recorded().is_empty());
}

/// 50 claims at once, from two nodes: 50 addresses, each claim's status naming its own; every
/// claim's next pod, in the other order, gets the same one back.
#[test]
fn fifty_claims_at_once_keep_their_addresses() {
    let c = Cluster::new();
    for i in 0..50 {
        c.add_claim(&format!("vm{i}"));
    }
    let add_all = |round: &str, order: Vec<usize>| {
        std::thread::scope(|s| {
            let handles: Vec<_> = order
                .chunks(25)
                .enumerate()
                .map(|(n, chunk)| {
                    let node = c.on_node(&format!("node-{n}"));
                    s.spawn(move || {
                        chunk
                            .iter()
                            .map(|i| {
                                let out = node.add_claimed(
                                    &format!("{round}-{i}"),
                                    &format!("virt-launcher-{round}-{i}"),
                                    &format!("vm{i}"),
                                );
                                (*i, ips(&out.ok())[0].clone())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut got: Vec<(usize, String)> = handles
                .into_iter()
                .flat_map(|h| h.join().expect("an ADD thread"))
                .collect();
            got.sort();
            got
        })
    };
    let first = add_all("a", (0..50).collect());
    let distinct: std::collections::BTreeSet<&String> = first.iter().map(|(_, ip)| ip).collect();
    assert_eq!(distinct.len(), 50);
    for (i, ip) in &first {
        assert_eq!(c.claim_status(&format!("vm{i}"))["ips"], json!([ip]));
    }
    let again = add_all("b", (0..50).rev().collect());
    assert_eq!(again, first);
    assert_eq!(c.allocations("10.77.0.0-24").len(), 50);
}

/// A pod of StatefulSet `db` (or of none).
fn statefulset_pod(name: &str, statefulset: Option<&str>) -> Value {
    let owners: Vec<Value> = statefulset
        .map(|s| json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": s, "uid": "u1", "controller": true}))
        .into_iter()
        .collect();
    json!({"metadata": {"namespace": "default", "name": name, "ownerReferences": owners},
           "status": {"phase": "Running"}})
}

/// `keep_statefulset_addresses`: a StatefulSet's pod, deleted and made again under its name
/// (here on another node), gets its address back. DEL and the reconciler keep the address
/// while the StatefulSet wants the pod, and free it once the StatefulSet is scaled down below
/// it or deleted. A pod of no StatefulSet is as without the key.
#[test]
fn a_statefulsets_pod_keeps_its_address_until_the_statefulset_lets_it_go() {
    let c = Cluster::new();
    let ipam = json!({"type": "whereabouts", "range": "10.77.0.0/24",
                      "keep_statefulset_addresses": true});
    let sts = |replicas: u32| {
        c.api.add_object(
            Resource::STATEFULSETS,
            json!({"metadata": {"name": "db", "namespace": "default"},
                   "spec": {"replicas": replicas}}),
        );
    };
    sts(2);
    for (pod, owner) in [("db-0", Some("db")), ("db-1", Some("db")), ("web", None)] {
        c.api.add_pod(statefulset_pod(pod, owner));
    }
    assert_eq!(ips(&c.add(&ipam, "c0", "db-0")), ["10.77.0.1/24"]);
    assert_eq!(ips(&c.add(&ipam, "c1", "db-1")), ["10.77.0.2/24"]);
    assert_eq!(ips(&c.add(&ipam, "cw", "web")), ["10.77.0.3/24"]);
    let allocations = c.allocations("10.77.0.0-24");
    assert_eq!(allocations["1"]["podref"], "statefulset:default/db-0");
    assert_eq!(allocations["3"]["podref"], "default/web");

    // db-0 restarts: DEL keeps its address, the pass too, and its new pod gets it back.
    for container in ["c0", "cw"] {
        assert_eq!(c.call("DEL", &ipam, container, "net1", "").code, 0);
    }
    c.api.delete_pod("default", "db-0");
    let log = c.reconcile();
    assert!(log.contains("freed 0 addresses"), "{log}");
    c.api.add_pod(statefulset_pod("db-0", Some("db")));
    let back = c
        .on_node("node-1")
        .call("ADD", &ipam, "c0b", "net1", "db-0");
    assert_eq!(ips(&back.ok()), ["10.77.0.1/24"]);
    let held: Vec<String> = c.allocations("10.77.0.0-24").keys().cloned().collect();
    assert_eq!(held, ["1", "2"]);

    // Scaled down to one: db-1 goes, and so does its address.
    sts(1);
    c.api.delete_pod("default", "db-1");
    let log = c.reconcile();
    assert!(
        log.contains("freed 10.77.0.2 in IPPool kube-system/10.77.0.0-24: StatefulSet default/db no longer wants pod db-1"),
        "{log}"
    );
    // The StatefulSet deleted: db-0's goes with its pod.
    c.api
        .delete_object(Resource::STATEFULSETS, "default", "db")
        .expect("the StatefulSet");
    c.api.delete_pod("default", "db-0");
    let log = c.reconcile();
    assert!(
        log.contains("freed 10.77.0.1 in IPPool kube-system/10.77.0.0-24: StatefulSet default/db of pod db-0 is gone"),
        "{log}"
    );
    assert!(c.allocations("10.77.0.0-24").is_empty());
    assert!(c.reservations().is_empty());

    // Node slices cannot keep an address for a pod that may come back on another node.
    let mut sliced_keep = sliced("/26");
    sliced_keep["keep_statefulset_addresses"] = json!(true);
    let refused = c.call("ADD", &sliced_keep, "cx", "net1", "db-0");
    assert_eq!(refused.err_code(), 7, "{}", refused.stdout);
    assert!(
        refused.stdout.contains("ipam.keep_statefulset_addresses"),
        "{}",
        refused.stdout
    );
}
