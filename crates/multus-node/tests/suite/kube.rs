//! The real `multus` binary against the testkit Kubernetes API server (HTTPS, bearer token):
//! how multus uses the API (the status PATCH, retries, the API or the pod missing, DEL from the
//! cache), with bridge + host-local delegates from `cni-plugins`.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{cni_error, Cluster, NETWORKS};
use common::CONTAINER_ID;
use serde_json::{json, Value};
use testkit::kube_api::{Fault, KubeconfigAuth, Latency, Scheme};

#[test]
fn the_status_is_a_merge_patch_of_the_annotations_on_pods_status() {
    let c = Cluster::new(
        json!({NETWORKS: "bridge-conf", "other.io/keep": "me"}),
        json!({}),
    );
    c.bridge_nad("default", "bridge-conf", "10.10.0.0/24");
    let result = c.cmd("ADD").ok();
    assert_eq!(result["ips"][0]["address"], "10.88.0.2/24");
    assert_eq!(c.network_status().unwrap().as_array().unwrap().len(), 2);
    // Other annotations stay.
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
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn a_pod_the_api_does_not_have_fails_the_add_instead_of_faking_success() {
    let c = Cluster::new(json!({}), json!({}));
    c.server.delete_pod("default", "web");
    let (code, msg) = c.add_err();
    assert_eq!(code, 11);
    assert!(msg.contains("pod default/web not found"), "{msg}");
    c.sb.assert_clean("no pod");
}

#[test]
fn a_uid_mismatch_fails_before_anything_runs() {
    let c = Cluster::new(json!({NETWORKS: "a"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    let mut call = c.call("ADD");
    call.args = call.args.replace(&c.uid, "another-uid");
    let (code, msg) = cni_error(&c.run(&call));
    assert_eq!(code, 3);
    assert!(
        msg.contains("pod default/web") && msg.contains("another-uid") && msg.contains(&c.uid),
        "{msg}"
    );
    c.assert_add_left_nothing("uid mismatch");

    // A static pod's mirror in the API has a UID of its own: no mismatch.
    c.set_pod(json!({NETWORKS: "a", "kubernetes.io/config.source": "file"}));
    c.run(&call).ok();
    assert_eq!(c.sb.pod_links(), ["eth0", "net1"]);
    let mut del = c.call("DEL");
    del.args = call.args.clone();
    c.run(&del).ok();
    c.sb.assert_clean("static pod after DEL");
}

#[test]
fn a_conflict_on_the_status_patch_is_retried() {
    let c = Cluster::new(json!({}), json!({}));
    // The cluster network takes a second, so the conflict can be queued for the PATCH alone.
    c.sb.script("slow", r#"sleep 1; exec "$(dirname "$0")/bridge""#);
    let mut conf: Value = serde_json::from_str(&c.conf).unwrap();
    conf["delegates"][0]["type"] = json!("slow");
    let mut call = c.call("ADD");
    call.stdin = conf.to_string();
    let sb = &c.sb;
    std::thread::scope(|s| {
        let multus = s.spawn(|| sb.run(&call));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !c.server.requests().iter().any(|r| r.method == "GET") {
            assert!(Instant::now() < deadline, "multus never fetched the pod");
            std::thread::sleep(Duration::from_millis(5));
        }
        c.server.inject(Fault::Status(409), 1);
        multus.join().unwrap().ok();
    });
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
    c.sb.assert_clean("after DEL");
}

/// ADD of a pod selecting the bridge NAD `default/a` while the server answers `times`
/// requests `method path` with `status`: the cluster, and the CNI error's code and message.
fn add_failing_on(method: &str, path: &str, status: u16, times: usize) -> (Cluster, u64, String) {
    let c = Cluster::new(json!({NETWORKS: "a"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.server
        .inject_on(method, path, Fault::Status(status), times);
    let (code, msg) = c.add_err();
    (c, code, msg)
}

#[test]
fn a_failed_network_status_write_rolls_back_the_add() {
    // Every try of the PATCH (apiRetries is 1) meets a conflict.
    let (c, code, msg) = add_failing_on(
        "PATCH",
        "/api/v1/namespaces/default/pods/web/status",
        409,
        2,
    );
    assert_eq!(code, 11);
    assert!(
        msg.starts_with("kubernetes:") && msg.contains("409"),
        "{msg}"
    );
    let patches = c
        .server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(patches, 2);
    c.assert_add_left_nothing("status write failed");
    // Nothing was announced for interfaces that are gone.
    assert_eq!(c.events("AddedInterface"), Vec::<String>::new());
}

#[test]
fn del_works_from_the_cache_with_the_api_down_and_the_pod_deleted() {
    let c = Cluster::attached();
    c.server.delete_pod("default", "web");
    c.server.go_down();
    let start = Instant::now();
    c.cmd("DEL").ok();
    assert!(start.elapsed() < Duration::from_secs(20));
    c.sb.assert_clean("DEL with the API down");
}

#[test]
fn del_with_its_cache_asks_nothing_of_the_api() {
    let c = Cluster::attached();
    c.server.clear_requests();
    c.cmd("DEL").ok();
    assert_eq!(c.server.requests().len(), 0, "{:?}", c.server.requests());
    c.sb.assert_clean("DEL from the cache");
}

/// The runtime's second DEL: after StopPodSandbox, with no namespace, once the first DEL has
/// removed the cache. It asks nothing of the API and logs nothing at warning level or above,
/// with the API up or down.
#[test]
fn a_second_del_without_a_namespace_makes_no_api_call_and_no_noise() {
    let c = Cluster::new(json!({ NETWORKS: "a" }), json!({"logLevel": "error"}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.cmd("ADD").ok();
    c.cmd("DEL").ok();
    c.sb.assert_clean("after the first DEL");
    let mut second = c.call("DEL");
    second.netns = String::new();
    c.server.clear_requests();
    let out = c.run(&second);
    out.ok();
    assert_eq!(out.stderr, "");
    assert_eq!(c.server.requests().len(), 0, "{:?}", c.server.requests());
    c.server.go_down();
    let out = c.run(&second);
    out.ok();
    assert_eq!(out.stderr, "", "with the API down");
    c.sb.assert_clean("after the second DEL");
}

#[test]
fn del_without_a_cache_rebuilds_the_networks_from_the_api() {
    let c = Cluster::attached();
    std::fs::remove_file(c.sb.cni_dir().join(CONTAINER_ID)).unwrap();
    c.server.clear_requests();
    c.cmd("DEL").ok();
    // The pod and its NAD were read again.
    let gets: Vec<String> = c
        .server
        .requests()
        .iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.path.clone())
        .collect();
    assert!(gets.iter().any(|p| p.ends_with("/pods/web")), "{gets:?}");
    assert!(
        gets.iter()
            .any(|p| p.ends_with("/network-attachment-definitions/a")),
        "{gets:?}"
    );
    c.sb.assert_clean("DEL rebuilt from the API");
}

#[test]
fn check_status_and_gc_cover_the_networks_from_annotations() {
    let mut c = Cluster::new(json!({NETWORKS: "a"}), json!({}));
    c.conf = c.conf.replace("\"1.0.0\"", "\"1.1.0\"");
    let conf = c.sb.bridge("a", &c.bridge_name(), "10.20.0.0/24", "1.1.0");
    c.nad("default", "a", conf);
    c.cmd("ADD").ok();
    c.cmd("CHECK").ok();
    c.sb.pod.ip(&["addr", "flush", "dev", "net1"]);
    let (_, msg) = cni_error(&c.cmd("CHECK"));
    assert!(msg.contains("network default/a on interface net1"), "{msg}");
    c.cmd("STATUS").ok();
    // GC with no valid attachment: every network, the annotation's too, lets go of the pod.
    let mut gc_conf: Value = serde_json::from_str(&c.conf).unwrap();
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    c.run(&c.sb.call("GC", &gc_conf.to_string())).ok();
    assert_eq!(c.sb.reservations(), Vec::<String>::new());
    assert_eq!(c.sb.cache_files(), Vec::<String>::new());
}

#[test]
fn an_api_that_is_down_fails_the_add_within_its_bounds() {
    let c = Cluster::new(json!({}), json!({}));
    c.server.go_down();
    let start = Instant::now();
    let (code, msg) = c.add_err();
    assert_eq!(code, 11);
    assert!(msg.contains("kubernetes"), "{msg}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    c.sb.assert_clean("API down");
}

#[test]
fn pods_in_system_namespaces_get_no_network_status() {
    let c = Cluster::new(json!({}), json!({"systemNamespaces": ["default"]}));
    c.cmd("ADD").ok();
    assert!(c.network_status().is_none());
    assert!(c.server.requests().iter().all(|r| r.method != "PATCH"));
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn a_repeated_add_is_refused_and_the_first_one_stays_deletable_from_its_cache() {
    let c = Cluster::attached();
    let files = c.sb.cache_files();
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("on interface eth0") && msg.contains("already has an interface"),
        "{msg}"
    );
    // The first ADD's interfaces, reservations and caches are untouched.
    assert_eq!(c.sb.pod_links(), ["eth0", "net1"]);
    assert_eq!(c.sb.reservations().len(), 2);
    assert_eq!(c.sb.cache_files(), files);
    // So DEL needs no API to remove all of it.
    c.server.go_down();
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

#[test]
fn a_nad_the_api_refuses_to_serve_fails_the_add_naming_it() {
    let (c, code, msg) = add_failing_on(
        "GET",
        "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/a",
        403,
        1,
    );
    // Trying again will not help: the code says the configuration (RBAC) is what to fix.
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("get network-attachment-definitions.k8s.cni.cncf.io default/a: forbidden (check the RBAC rules of multus's service account)"),
        "{msg}"
    );
    c.assert_add_left_nothing("NAD forbidden");

    // Credentials the server refuses: code 7 too, naming the call.
    let token = c.sb.dir.path().join("stale-token");
    std::fs::write(&token, "another-token").expect("a token file");
    c.server
        .write_kubeconfig(
            &c.sb.dir.path().join("multus.kubeconfig"),
            KubeconfigAuth::TokenFile(token),
        )
        .expect("the kubeconfig");
    let (code, msg) = c.add_err();
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("get pods default/web: unauthorized"), "{msg}");
    c.assert_add_left_nothing("unauthorized");
}

/// Events are best effort: an events endpoint that hangs holds up ADD by one short deadline
/// for all its events together (2 s, the API timeout here), not a request budget per event.
#[test]
fn a_hanging_events_endpoint_holds_up_add_by_one_short_deadline() {
    let c = Cluster::new(json!({NETWORKS: "a,b"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.30.0.0/24");
    c.server.inject_on(
        "POST",
        "/api/v1/namespaces/default/events",
        Fault::Delay(Duration::from_secs(10)),
        10,
    );
    let started = Instant::now();
    c.cmd("ADD").ok();
    let took = started.elapsed();
    // Three events one after another, each with a retry, took over 12 s before.
    assert!(took < Duration::from_secs(5), "ADD took {took:?}");
    assert_eq!(c.sb.pod_links(), ["eth0", "net1", "net2"]);
    assert!(c.network_status().is_some());
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

/// Two ADDs of one container at once (a runtime retrying): one attaches, the other waits for it
/// and is refused, and its failure undoes nothing of the first's. DEL then cleans everything.
#[test]
fn concurrent_adds_of_one_container_never_undo_each_other() {
    let c = Cluster::new(json!({NETWORKS: "a,b"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.30.0.0/24");
    for round in 0..5 {
        let call = c.call("ADD");
        let node = &c.sb.node;
        let multus = common::multus_bin();
        let outs: Vec<testkit::CniOutput> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..2)
                .map(|_| s.spawn(|| call.run(&multus, Some(node))))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let ok: Vec<&testkit::CniOutput> = outs.iter().filter(|o| o.code == 0).collect();
        assert_eq!(ok.len(), 1, "round {round}: {outs:?}");
        let refused = outs.iter().find(|o| o.code != 0).unwrap();
        let (_, msg) = cni_error(refused);
        assert!(
            msg.contains("already has an interface"),
            "round {round}: {msg}"
        );
        // The winner's attachment is whole: interfaces, addresses, reservations, caches.
        assert_eq!(c.sb.pod_links(), ["eth0", "net1", "net2"], "round {round}");
        for ifname in ["eth0", "net1", "net2"] {
            assert_eq!(c.sb.pod_addrs(ifname).len(), 1, "round {round}: {ifname}");
        }
        assert_eq!(c.sb.reservations().len(), 3, "round {round}");
        assert!(c.sb.cni_dir().join(CONTAINER_ID).exists(), "round {round}");
        c.cmd("DEL").ok();
        c.sb.assert_clean(&format!("round {round}, after DEL"));
    }
}

/// An API reply past the 4 MiB cap (no Kubernetes object is that large) is refused, not read
/// into memory.
#[test]
fn an_api_reply_past_the_cap_is_refused() {
    let c = Cluster::new(json!({"huge": "x".repeat(5 << 20)}), json!({}));
    let (code, msg) = c.add_err();
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.contains("get pods default/web: the reply is larger than 4 MiB"),
        "{msg}"
    );
    // Refused at once, not retried.
    let gets = c
        .server
        .requests()
        .iter()
        .filter(|r| r.method == "GET")
        .count();
    assert_eq!(gets, 1);
    c.assert_add_left_nothing("reply past the cap");
}

/// An ADD reads the pod, then every NAD it selects in one round side by side (a NAD selected
/// twice is read once), then patches the status and records its events, all over one HTTP/2
/// connection: one TLS handshake per process.
#[test]
fn an_add_reads_its_nads_side_by_side_over_one_http2_connection() {
    let c = Cluster::new(json!({ NETWORKS: "a,b,c,a@net9" }), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.21.0.0/24");
    c.bridge_nad("default", "c", "10.22.0.0/24");
    c.server.set_latency(Latency {
        read: Duration::from_millis(300),
        write: Duration::ZERO,
    });
    c.cmd("ADD").ok();
    let requests = c.server.requests();
    let calls: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    let nad = |name: &str| {
        format!(
            "GET /apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/{name}"
        )
    };
    assert_eq!(calls[0], "GET /api/v1/namespaces/default/pods/web");
    let mut nads = calls[1..4].to_vec();
    nads.sort();
    assert_eq!(nads, [nad("a"), nad("b"), nad("c")], "{calls:?}");
    assert_eq!(calls[4], "PATCH /api/v1/namespaces/default/pods/web/status");
    assert!(
        calls[5..].iter().all(|c| c.starts_with("POST ")),
        "{calls:?}"
    );
    assert_eq!(calls.len(), 5 + 5, "an event per interface: {calls:?}");
    let nads = &requests[1..4];
    for nad in nads {
        assert!(
            nads.iter().all(|o| nad.overlaps(o)),
            "read one after another"
        );
    }
    assert!(requests.iter().all(|r| r.version == http::Version::HTTP_2));
    assert_eq!(c.server.connections(), 1);
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

/// Where the API server offers no HTTP/2, the same ADD goes over HTTP/1.1, its NAD reads side
/// by side on connections of their own.
#[test]
fn without_http2_an_add_reads_its_nads_over_a_few_http1_connections() {
    let c = Cluster::serving(
        Scheme::HttpsHttp1Only,
        "default",
        json!({ NETWORKS: "a,b" }),
        json!({}),
    );
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.21.0.0/24");
    c.server
        .set_latency(Latency::uniform(Duration::from_millis(200)));
    c.cmd("ADD").ok();
    assert!(c.network_status().is_some());
    let requests = c.server.requests();
    assert!(requests.iter().all(|r| r.version == http::Version::HTTP_11));
    assert!(requests[1].overlaps(&requests[2]), "{requests:?}");
    // The pod's connection serves one NAD read, a second opens for the other; the events
    // (three, side by side) may open one more.
    let connections = c.server.connections();
    assert!((2..=4).contains(&connections), "{connections} connections");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}

/// An API server that goes silent on the connection (as one failing over behind a VIP does)
/// does not hold every retry: HTTP/2 pings find the connection dead and the retry connects
/// again, so the ADD goes through.
#[test]
fn a_connection_that_goes_silent_is_dropped_and_the_retry_connects_again() {
    let c = Cluster::new(json!({ NETWORKS: "a" }), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.server.inject_on(
        "GET",
        "/api/v1/namespaces/default/pods/web",
        Fault::Stall,
        1,
    );
    let start = Instant::now();
    c.cmd("ADD").ok();
    let took = start.elapsed();
    let gets = c
        .server
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/namespaces/default/pods/web")
        .count();
    assert_eq!(gets, 2, "the stalled attempt and its retry");
    assert_eq!(c.server.connections(), 2);
    // Well before the attempt's own 2 s timeout would have run out twice.
    assert!(took < Duration::from_secs(4), "{took:?}");
    c.cmd("DEL").ok();
    c.sb.assert_clean("after DEL");
}
