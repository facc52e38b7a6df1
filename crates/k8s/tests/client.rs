//! The Kubernetes client against testkit's API server over real HTTPS (and HTTP): pods, NADs,
//! the annotations patch, events, retries, timeouts, the server going down, token rotation.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s::ObjectMeta;
use k8s::{Cause, ClientOptions, EventType, K8sError, KeepAlive, KubeClient, PodEvent};
use serde_json::json;
use testkit::kube_api::{
    pod_manifest, Fault, InCluster, KubeApiServer, KubeconfigAuth, Latency, LoggedRequest, Scheme,
};

struct Setup {
    server: KubeApiServer,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Setup {
    fn https(auth: KubeconfigAuth) -> Result<Setup> {
        Setup::with(KubeApiServer::https()?, auth)
    }

    fn with(server: KubeApiServer, auth: KubeconfigAuth) -> Result<Setup> {
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("multus.kubeconfig");
        server.write_kubeconfig(&kubeconfig, auth)?;
        Ok(Setup {
            server,
            dir,
            kubeconfig,
        })
    }

    fn client(&self, timeout_ms: u64, retries: u32) -> Result<KubeClient> {
        Ok(KubeClient::new(&ClientOptions {
            kubeconfig: Some(self.kubeconfig.clone()),
            timeout: Duration::from_millis(timeout_ms),
            retries,
            keep_alive: KeepAlive::Call,
        })?)
    }

    fn requests_to(&self, path: &str) -> Vec<LoggedRequest> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }
}

const POD_PATH: &str = "/api/v1/namespaces/ns1/pods/web";

fn add_web_pod(server: &KubeApiServer) -> serde_json::Value {
    let mut pod = pod_manifest("ns1", "web");
    pod["metadata"]["annotations"] = json!({ "other.io/owner": "someone-else" });
    pod["metadata"]["labels"] = json!({ "app": "web" });
    pod["status"] = json!({ "phase": "Running", "podIP": "10.1.0.5" });
    server.add_pod(pod)
}

fn cause(err: &K8sError) -> &Cause {
    err.cause()
        .unwrap_or_else(|| panic!("not a request error: {err}"))
}

#[test]
fn get_pod_over_https() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let stored = add_web_pod(&s.server);
    let pod = s.client(5000, 0)?.get_pod("ns1", "web")?;
    assert_eq!(
        pod.metadata.uid.as_deref(),
        stored["metadata"]["uid"].as_str()
    );
    assert_eq!(pod.metadata.name.as_deref(), Some("web"));
    assert_eq!(
        pod.metadata.annotations.unwrap_or_default()["other.io/owner"],
        "someone-else"
    );
    assert_eq!(pod.data["spec"]["nodeName"], "node-1");
    Ok(())
}

#[test]
fn plain_http_with_a_token() -> Result<()> {
    let s = Setup::with(KubeApiServer::http()?, KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let pod = s.client(5000, 0)?.get_pod("ns1", "web")?;
    assert_eq!(pod.metadata.namespace.as_deref(), Some("ns1"));
    Ok(())
}

#[test]
fn missing_pod_is_not_found_at_once_and_names_the_call() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let err = s.client(5000, 3)?.get_pod("ns1", "gone").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let text = err.to_string();
    assert!(text.starts_with("get pods ns1/gone: not found"), "{text}");
    assert!(text.contains(r#"pods "gone" not found"#), "{text}");
    assert_eq!(s.requests_to("/api/v1/namespaces/ns1/pods/gone").len(), 1);
    Ok(())
}

#[test]
fn nads_get_and_list() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let config = r#"{"cniVersion":"0.3.1","type":"bridge","name":"br"}"#;
    s.server
        .add_nad("ns1", "bridge-conf", json!({ "config": config }));
    s.server.add_nad("ns1", "from-confdir", json!({}));
    s.server
        .add_nad("ns2", "elsewhere", json!({ "config": "{}" }));
    let client = s.client(5000, 0)?;

    let nad = client.get_nad("ns1", "bridge-conf")?;
    assert_eq!(nad.spec.config, config);
    assert_eq!(nad.metadata.name.as_deref(), Some("bridge-conf"));
    assert_eq!(client.get_nad("ns1", "from-confdir")?.spec.config, "");

    let mut names: Vec<String> = client
        .list_nads("ns1")?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["bridge-conf", "from-confdir"]);
    assert!(client.list_nads("empty")?.is_empty());

    let err = client.get_nad("ns1", "nope").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        err.to_string()
            .starts_with("get network-attachment-definitions.k8s.cni.cncf.io ns1/nope: not found"),
        "{err}"
    );
    let paths: Vec<String> = s.server.requests().into_iter().map(|r| r.path).collect();
    assert!(paths.contains(
        &"/apis/k8s.cni.cncf.io/v1/namespaces/ns1/network-attachment-definitions".to_string()
    ));
    Ok(())
}

#[test]
fn annotations_patch_touches_nothing_else() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let before = add_web_pod(&s.server);
    let status = r#"[{"name":"cbr0","interface":"eth0","default":true}]"#;
    let annotations = BTreeMap::from([(
        "k8s.v1.cni.cncf.io/network-status".to_string(),
        status.to_string(),
    )]);
    s.client(5000, 0)?
        .set_pod_annotations("ns1", "web", &annotations)?;

    let after = s.server.pod("ns1", "web").expect("pod stored");
    assert_eq!(
        after["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"],
        status
    );
    assert_eq!(
        after["metadata"]["annotations"]["other.io/owner"],
        "someone-else"
    );
    assert_eq!(after["metadata"]["labels"], before["metadata"]["labels"]);
    assert_eq!(after["status"], before["status"]);
    assert_eq!(after["spec"], before["spec"]);
    assert_ne!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    let patches = s.requests_to(&format!("{POD_PATH}/status"));
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].method, "PATCH");
    assert_eq!(
        patches[0].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    let body: serde_json::Value = serde_json::from_str(&patches[0].body)?;
    assert_eq!(
        body,
        json!({ "metadata": { "annotations": { "k8s.v1.cni.cncf.io/network-status": status } } })
    );
    Ok(())
}

#[test]
fn annotations_patch_retries_conflicts_within_bounds() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let annotations = BTreeMap::from([("a".to_string(), "1".to_string())]);

    s.server.inject(Fault::Status(409), 2);
    s.client(5000, 3)?
        .set_pod_annotations("ns1", "web", &annotations)?;
    let statuses: Vec<u16> = s
        .requests_to(&format!("{POD_PATH}/status"))
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [409, 409, 200]);
    assert_eq!(
        s.server.pod("ns1", "web").expect("pod")["metadata"]["annotations"]["a"],
        "1"
    );

    s.server.clear_requests();
    s.server.inject(Fault::Status(409), 5);
    let err = s
        .client(5000, 2)?
        .set_pod_annotations("ns1", "web", &annotations)
        .unwrap_err();
    assert!(matches!(cause(&err), Cause::Conflict(_)), "{err}");
    assert!(
        err.to_string()
            .starts_with("patch pods/status ns1/web: conflict"),
        "{err}"
    );
    assert!(
        err.to_string().ends_with("(gave up after 3 attempts)"),
        "{err}"
    );
    assert_eq!(s.requests_to(&format!("{POD_PATH}/status")).len(), 3);
    Ok(())
}

#[test]
fn annotations_patch_with_a_uid_precondition() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let first = add_web_pod(&s.server);
    let uid = first["metadata"]["uid"].as_str().unwrap().to_string();
    let client = s.client(5000, 3)?;
    let annotations = BTreeMap::from([("a".to_string(), "1".to_string())]);
    client.set_pod_annotations_for_uid("ns1", "web", &uid, &annotations)?;
    assert_eq!(
        s.server.pod("ns1", "web").unwrap()["metadata"]["annotations"]["a"],
        "1"
    );

    // The pod is deleted and re-created under the same name.
    s.server.delete_pod("ns1", "web");
    add_web_pod(&s.server);
    s.server.clear_requests();
    let err = client
        .set_pod_annotations_for_uid("ns1", "web", &uid, &annotations)
        .unwrap_err();
    assert!(matches!(cause(&err), Cause::Conflict(_)), "{err}");
    assert!(
        err.to_string()
            .contains("Precondition failed: UID in precondition"),
        "{err}"
    );
    assert_eq!(
        s.requests_to(&format!("{POD_PATH}/status")).len(),
        1,
        "not retried"
    );
    assert!(
        s.server.pod("ns1", "web").unwrap()["metadata"]["annotations"]
            .get("a")
            .is_none()
    );
    Ok(())
}

#[test]
fn patch_of_a_missing_pod_is_not_found() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let err = s
        .client(5000, 3)?
        .set_pod_annotations("ns1", "web", &BTreeMap::new())
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    Ok(())
}

/// One event through [`KubeClient::record_events`], with a deadline it never meets here.
fn record_event(
    client: &KubeClient,
    pod: &ObjectMeta,
    event_type: EventType,
    reason: &str,
    message: &str,
) -> std::result::Result<(), K8sError> {
    let event = PodEvent {
        pod,
        event_type,
        reason,
        message,
        seq: 0,
    };
    client
        .record_events(&[event], Duration::from_secs(60))
        .remove(0)
}

#[test]
fn events_sent_together_are_all_stored() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let client = s.client(5000, 0)?;
    let pod = client.get_pod("ns1", "web")?;
    let events: Vec<PodEvent> = ["AddedInterface", "AddedInterface", "SecondaryDefaultRoute"]
        .iter()
        .enumerate()
        .map(|(seq, reason)| PodEvent {
            pod: &pod.metadata,
            event_type: EventType::Normal,
            reason,
            message: "m",
            seq,
        })
        .collect();
    let results = client.record_events(&events, Duration::from_secs(60));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut names: Vec<String> = s
        .server
        .events()
        .iter()
        .map(|e| {
            e["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.dedup();
    assert_eq!(names.len(), 3, "{names:?}");
    Ok(())
}

/// `n` `AddedInterface` events on `pod`.
fn added_interfaces(pod: &ObjectMeta, n: usize) -> Vec<PodEvent<'_>> {
    (0..n)
        .map(|seq| PodEvent {
            pod,
            event_type: EventType::Normal,
            reason: "AddedInterface",
            message: "m",
            seq,
        })
        .collect()
}

#[test]
fn events_are_sent_a_few_at_a_time() -> Result<()> {
    // Over HTTP/1.1, each event in flight is a connection of its own.
    let s = Setup::with(KubeApiServer::http()?, KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let client = s.client(5000, 0)?;
    let pod = client.get_pod("ns1", "web")?;
    s.server.set_latency(testkit::kube_api::Latency {
        read: Duration::ZERO,
        write: Duration::from_millis(100),
    });
    let results = client.record_events(
        &added_interfaces(&pod.metadata, 20),
        Duration::from_secs(60),
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let posts: Vec<_> = s
        .server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/events"))
        .collect();
    assert_eq!(posts.len(), 20);
    // The most in flight at one moment: those being served when one of them arrived.
    let most = posts
        .iter()
        .map(|p| {
            posts
                .iter()
                .filter(|q| q.arrived <= p.arrived && p.arrived < q.served)
                .count()
        })
        .max()
        .unwrap_or_default();
    assert!(
        (2..=k8s::EVENTS_IN_FLIGHT).contains(&most),
        "{most} events were in flight at once"
    );
    Ok(())
}

#[test]
fn event_is_stored_when_the_call_returns() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let stored = add_web_pod(&s.server);
    let client = s.client(5000, 0)?;
    let pod = client.get_pod("ns1", "web")?;
    record_event(
        &client,
        &pod.metadata,
        EventType::Normal,
        "AddedInterface",
        "Add net1 [10.10.0.2/24] from ns1/bridge-conf",
    )?;
    let long = "é".repeat(1000);
    record_event(
        &client,
        &pod.metadata,
        EventType::Warning,
        "NoNetworkFound",
        &long,
    )?;

    let events = s.server.events();
    assert_eq!(events.len(), 2);
    let e = &events[0];
    assert_eq!(e["reason"], "AddedInterface");
    assert_eq!(e["type"], "Normal");
    assert_eq!(e["message"], "Add net1 [10.10.0.2/24] from ns1/bridge-conf");
    assert_eq!(e["metadata"]["namespace"], "ns1");
    assert!(e["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .starts_with("web."));
    assert_eq!(e["involvedObject"]["kind"], "Pod");
    assert_eq!(e["involvedObject"]["name"], "web");
    assert_eq!(e["involvedObject"]["uid"], stored["metadata"]["uid"]);
    assert_eq!(e["source"]["component"], "multus");
    assert_eq!(e["count"], 1);
    assert_eq!(events[1]["type"], "Warning");
    let message = events[1]["message"].as_str().unwrap_or_default();
    assert_eq!(
        message,
        "é".repeat(512),
        "cut to 1024 bytes on a char boundary"
    );
    Ok(())
}

#[test]
fn event_whose_reply_was_lost_is_not_an_error() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let client = s.client(5000, 2)?;
    let pod = client.get_pod("ns1", "web")?;
    // The first create is stored but its reply is lost; the retry meets AlreadyExists, which
    // means the event is there.
    s.server.inject(Fault::LoseReply, 1);
    record_event(
        &client,
        &pod.metadata,
        EventType::Normal,
        "AddedInterface",
        "Add net1",
    )?;
    assert_eq!(s.server.events().len(), 1);
    let served: Vec<(u16, bool)> = s
        .requests_to("/api/v1/namespaces/ns1/events")
        .iter()
        .map(|r| (r.status, r.replied))
        .collect();
    assert_eq!(served, [(201, false), (409, true)]);
    Ok(())
}

#[test]
fn server_errors_are_retried_and_bounded() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);

    s.server.inject(Fault::Status(500), 2);
    s.server.inject(Fault::Close, 1);
    s.client(5000, 3)?.get_pod("ns1", "web")?;
    let statuses: Vec<u16> = s.requests_to(POD_PATH).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [500, 500, 0, 200]);

    s.server.clear_requests();
    s.server.inject(Fault::Status(503), 10);
    let err = s.client(5000, 2)?.get_pod("ns1", "web").unwrap_err();
    assert!(matches!(cause(&err), Cause::Api { code: 503, .. }), "{err}");
    assert!(err.to_string().contains("503"), "{err}");
    assert_eq!(s.requests_to(POD_PATH).len(), 3);
    Ok(())
}

#[test]
fn a_slow_attempt_times_out_and_the_retry_succeeds() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    s.server.inject(Fault::Delay(Duration::from_secs(3)), 1);
    let pod = s.client(400, 2)?.get_pod("ns1", "web")?;
    assert_eq!(pod.metadata.name.as_deref(), Some("web"));
    Ok(())
}

#[test]
fn a_slow_server_is_a_timeout_error_within_the_bound() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    s.server
        .set_latency(Latency::uniform(Duration::from_secs(5)));
    let started = Instant::now();
    let err = s.client(300, 1)?.get_pod("ns1", "web").unwrap_err();
    let took = started.elapsed();
    assert!(matches!(cause(&err), Cause::Timeout(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "get pods ns1/web: no reply within 300ms (gave up after 2 attempts)"
    );
    // Two attempts of 300 ms and one backoff: far below the server's 5 s.
    assert!(took < Duration::from_secs(3), "took {took:?}");
    Ok(())
}

#[test]
fn server_down_is_a_clear_error_then_it_comes_back() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let client = s.client(2000, 2)?;
    client.get_pod("ns1", "web")?;

    s.server.go_down();
    let started = Instant::now();
    let err = client.get_pod("ns1", "web").unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(cause(&err), Cause::Transport { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("get pods ns1/web: connection to the API server failed"),
        "{text}"
    );
    assert!(text.contains("onnection refused"), "{text}");
    // The refusal itself is kept, under the cause, for whoever walks the chain.
    let mut refused = None;
    let mut next = std::error::Error::source(cause(&err));
    while let Some(e) = next {
        refused = refused.or(e.downcast_ref::<std::io::Error>().map(std::io::Error::kind));
        next = e.source();
    }
    assert_eq!(
        refused,
        Some(std::io::ErrorKind::ConnectionRefused),
        "{err:?}"
    );

    s.server.come_back()?;
    client.get_pod("ns1", "web")?;
    Ok(())
}

#[test]
fn wrong_token_is_unauthorized_and_not_retried() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let client = s.client(5000, 3)?;
    s.server.set_token("another");
    let err = client.get_pod("ns1", "web").unwrap_err();
    assert!(matches!(cause(&err), Cause::Unauthorized(_)), "{err}");
    assert_eq!(s.requests_to(POD_PATH).len(), 1);
    Ok(())
}

#[test]
fn no_credentials_is_unauthorized() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::None)?;
    add_web_pod(&s.server);
    let err = s.client(5000, 3)?.get_pod("ns1", "web").unwrap_err();
    assert!(matches!(cause(&err), Cause::Unauthorized(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "get pods ns1/web: unauthorized (the API server refused the credentials): Unauthorized"
    );
    Ok(())
}

fn write_token(path: &Path, token: &str) -> Result<()> {
    // As the kubelet does for projected tokens: a new file renamed into place.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{token}\n"))?;
    std::fs::rename(tmp, path)?;
    Ok(())
}

#[test]
fn rotated_token_file_is_used_by_the_next_call() -> Result<()> {
    let server = KubeApiServer::https()?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    write_token(&token_file, &server.token())?;
    let s = Setup::with(server, KubeconfigAuth::TokenFile(token_file.clone()))?;
    add_web_pod(&s.server);
    let client = s.client(5000, 0)?;
    client.get_pod("ns1", "web")?;

    // The server rotates first: the file still holds the old token.
    s.server.set_token("rotated-1");
    let err = client.get_pod("ns1", "web").unwrap_err();
    assert!(matches!(cause(&err), Cause::Unauthorized(_)), "{err}");

    // The same client picks up the new file at once.
    write_token(&token_file, "rotated-1")?;
    client.get_pod("ns1", "web")?;
    s.server.set_token("rotated-2");
    write_token(&token_file, "rotated-2")?;
    client.get_pod("ns1", "web")?;

    std::fs::remove_file(&token_file)?;
    let err = client.get_pod("ns1", "web").unwrap_err();
    assert!(matches!(cause(&err), Cause::Token { .. }), "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "get pods ns1/web: bearer token file {}",
            token_file.display()
        )),
        "{err}"
    );
    drop(s.dir);
    Ok(())
}

#[test]
fn token_file_wins_over_an_inline_token() -> Result<()> {
    let server = KubeApiServer::https()?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    write_token(&token_file, "from-file")?;
    let s = Setup::with(server, KubeconfigAuth::TokenFile(token_file))?;
    // Add a stale inline token next to tokenFile.
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&s.kubeconfig)?)?;
    config["users"][0]["user"]["token"] = json!("stale-inline");
    std::fs::write(&s.kubeconfig, serde_json::to_vec(&config)?)?;
    s.server.set_token("from-file");
    add_web_pod(&s.server);
    s.client(5000, 0)?.get_pod("ns1", "web")?;
    Ok(())
}

/// A kubeconfig as people write them: YAML, two documents, and files named relative to it.
#[test]
fn yaml_kubeconfig_with_relative_files_and_two_documents() -> Result<()> {
    let server = KubeApiServer::https()?;
    add_web_pod(&server);
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("creds"))?;
    std::fs::write(
        dir.path().join("creds/ca.crt"),
        server.ca_pem().unwrap_or_default(),
    )?;
    write_token(&dir.path().join("creds/token"), &server.token())?;
    let kubeconfig = dir.path().join("multus.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority: creds/ca.crt\nusers:\n- name: multus\n  user:\n    tokenFile: creds/token\n---\ncontexts:\n- name: multus\n  context:\n    cluster: local\n    user: multus\ncurrent-context: multus\n",
            server.url()
        ),
    )?;
    let client = KubeClient::new(&ClientOptions {
        kubeconfig: Some(kubeconfig.clone()),
        ..ClientOptions::default()
    })?;
    assert_eq!(
        client.get_pod("ns1", "web")?.metadata.name.as_deref(),
        Some("web")
    );

    std::fs::write(&kubeconfig, "clusters: [unclosed")?;
    let err = KubeClient::new(&ClientOptions {
        kubeconfig: Some(kubeconfig.clone()),
        ..ClientOptions::default()
    })
    .err()
    .expect("setup fails");
    assert!(
        err.to_string()
            .contains(&format!("{} is not a kubeconfig", kubeconfig.display())),
        "{err}"
    );
    Ok(())
}

#[test]
fn setup_errors_name_the_kubeconfig() {
    let err = KubeClient::new(&ClientOptions {
        kubeconfig: Some(PathBuf::from("/nonexistent/multus.kubeconfig")),
        ..ClientOptions::default()
    })
    .err()
    .expect("setup fails");
    let text = err.to_string();
    assert!(
        text.starts_with(
            "Kubernetes client setup from kubeconfig /nonexistent/multus.kubeconfig: "
        ),
        "{text}"
    );
    assert!(err.cause().is_none());
}

/// The in-cluster path, as in a pod: the API server's address in the environment and the
/// service account's token, CA and namespace under /var/run/secrets. This test runs itself
/// again through testkit's in-cluster wrapper (a private mount namespace holding those files).
#[test]
fn in_cluster_credentials() -> Result<()> {
    if std::env::var_os("IN_CLUSTER_CHILD").is_some() {
        assert!(k8s::in_cluster_available());
        let pod = KubeClient::new(&ClientOptions::default())?.get_pod("ns1", "web")?;
        println!("uid={}", pod.metadata.uid.unwrap_or_default());
        return Ok(());
    }
    let server = KubeApiServer::https()?;
    add_web_pod(&server);
    let in_cluster = InCluster::new(&server, "ns1")?;
    let out = std::process::Command::new(in_cluster.wrap(&std::env::current_exe()?)?)
        .args([
            "in_cluster_credentials",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("IN_CLUSTER_CHILD", "1")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let uid = server.pod("ns1", "web").unwrap()["metadata"]["uid"].clone();
    assert!(
        stdout.contains(&format!("uid={}\n", uid.as_str().unwrap())),
        "{stdout}"
    );
    Ok(())
}

#[test]
fn in_cluster_detection_follows_the_environment() {
    // The test binaries run outside any cluster.
    assert!(!k8s::in_cluster_available());
    let err = KubeClient::new(&ClientOptions::default())
        .err()
        .expect("no in-cluster setup");
    assert!(
        err.to_string()
            .starts_with("Kubernetes client setup from in-cluster credentials: "),
        "{err}"
    );
}

#[test]
fn a_certificate_from_another_ca_is_refused() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    // The kubeconfig trusts another server's CA.
    let other = KubeApiServer::https()?;
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&s.kubeconfig)?)?;
    let other_config = s.dir.path().join("other");
    other.write_kubeconfig(&other_config, KubeconfigAuth::Token)?;
    let other_config: serde_json::Value = serde_json::from_slice(&std::fs::read(&other_config)?)?;
    config["clusters"][0]["cluster"]["certificate-authority-data"] =
        other_config["clusters"][0]["cluster"]["certificate-authority-data"].clone();
    std::fs::write(&s.kubeconfig, serde_json::to_vec(&config)?)?;

    let err = s.client(2000, 1)?.get_pod("ns1", "web").unwrap_err();
    assert!(matches!(cause(&err), Cause::Transport { .. }), "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
    assert!(s.requests_to(POD_PATH).is_empty());
    Ok(())
}

/// A kubeconfig of the form `multus install` writes: YAML, the CA and the token as files
/// beside it (or no CA with `insecure-skip-tls-verify`).
#[test]
fn installer_style_yaml_kubeconfig() -> Result<()> {
    let server = KubeApiServer::https()?;
    add_web_pod(&server);
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("ca.crt"), server.ca_pem().unwrap())?;
    write_token(&dir.path().join("token"), &server.token())?;
    for tls in [
        format!(
            "certificate-authority: \"{}\"",
            dir.path().join("ca.crt").display()
        ),
        "insecure-skip-tls-verify: true".to_string(),
    ] {
        let kubeconfig = dir.path().join("multus.kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "# the form multus install writes: YAML, files beside it
apiVersion: v1
kind: Config
current-context: node
contexts:
- name: node
  context: {{ cluster: api, user: cni }}
clusters:
- name: api
  cluster:
    server: \"{}\"
    {tls}
users:
- name: cni
  user:
    tokenFile: \"{}\"
",
                server.url(),
                dir.path().join("token").display()
            ),
        )?;
        let client = KubeClient::new(&ClientOptions {
            kubeconfig: Some(kubeconfig),
            ..ClientOptions::default()
        })?;
        let pod = client.get_pod("ns1", "web")?;
        assert_eq!(pod.metadata.name.as_deref(), Some("web"), "{tls}");
    }
    Ok(())
}

fn add_nads(server: &KubeApiServer, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let name = format!("net{i}");
            let config = format!(r#"{{"cniVersion":"0.3.1","type":"bridge","name":"{name}"}}"#);
            server.add_nad("ns1", &name, json!({ "config": config }));
            name
        })
        .collect()
}

/// Over HTTP/2 a whole ADD's calls (the pod, its NADs side by side, the status patch, the
/// events) share one connection and one TLS handshake. Three NAD reads delayed 300 ms each
/// take less than the 900 ms they would take one after another.
#[test]
fn an_adds_calls_share_one_http2_connection() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let names = add_nads(&s.server, 3);
    let client = s.client(5000, 0)?;
    let pod = client.get_pod("ns1", "web")?;
    s.server.set_latency(Latency {
        read: Duration::from_millis(300),
        write: Duration::ZERO,
    });
    let wanted: Vec<(&str, &str)> = names.iter().map(|n| ("ns1", n.as_str())).collect();
    let start = Instant::now();
    let nads = client.get_nads(&wanted);
    let took = start.elapsed();
    let got: Vec<Option<String>> = nads
        .into_iter()
        .map(|nad| nad.map(|n| n.metadata.name).ok().flatten())
        .collect();
    assert_eq!(got, names.iter().cloned().map(Some).collect::<Vec<_>>());
    assert!(took < Duration::from_millis(900), "one by one: {took:?}");
    s.server.set_latency(Latency::ZERO);
    client.set_pod_annotations("ns1", "web", &BTreeMap::from([("a".into(), "b".into())]))?;
    let sent = client.record_events(&added_interfaces(&pod.metadata, 3), Duration::from_secs(60));
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let versions: Vec<_> = s.server.requests().iter().map(|r| r.version).collect();
    assert_eq!(versions, [http::Version::HTTP_2; 8]);
    assert_eq!(s.server.connections(), 1);
    Ok(())
}

/// Where the server offers no HTTP/2, NADs read side by side each take an HTTP/1.1
/// connection, never more than [`k8s::CALLS_IN_FLIGHT`] at a time, and come back in the order
/// asked, a missing one in its place.
#[test]
fn without_http2_reads_side_by_side_take_a_few_http1_connections() -> Result<()> {
    let s = Setup::with(
        KubeApiServer::start(Scheme::HttpsHttp1Only)?,
        KubeconfigAuth::Token,
    )?;
    let mut names = add_nads(&s.server, 20);
    names.insert(7, "missing".into());
    s.server
        .set_latency(Latency::uniform(Duration::from_millis(50)));
    let client = s.client(5000, 0)?;
    let wanted: Vec<(&str, &str)> = names.iter().map(|n| ("ns1", n.as_str())).collect();
    let nads = client.get_nads(&wanted);
    for (name, nad) in names.iter().zip(&nads) {
        match nad {
            Ok(nad) => assert_eq!(nad.metadata.name.as_ref(), Some(name)),
            Err(e) => assert!(name == "missing" && e.is_not_found(), "{name}: {e}"),
        }
    }
    assert_eq!(nads.len(), 21);
    let versions: Vec<_> = s.server.requests().iter().map(|r| r.version).collect();
    assert_eq!(versions, [http::Version::HTTP_11; 21]);
    let connections = s.server.connections();
    assert!(connections > 1, "read one by one on one connection");
    assert!(
        connections <= k8s::CALLS_IN_FLIGHT as u64,
        "{connections} connections"
    );
    Ok(())
}

/// A kubeconfig that names a proxy is refused when the client is made, naming the kubeconfig
/// and the key: the API server is reached directly or not at all.
#[test]
fn a_proxy_url_is_a_setup_error() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let mut kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&s.kubeconfig)?)?;
    kubeconfig["clusters"][0]["cluster"]["proxy-url"] = json!("http://127.0.0.1:9");
    std::fs::write(&s.kubeconfig, kubeconfig.to_string())?;
    let err = match s.client(5000, 0) {
        Ok(_) => anyhow::bail!("a client through a proxy"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with(&format!(
            "Kubernetes client setup from kubeconfig {}",
            s.kubeconfig.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("proxy-url http://127.0.0.1:9/ is not supported"),
        "{err}"
    );
    assert!(s.server.requests().is_empty());
    Ok(())
}

/// A cluster's lists come in pages (`limit` and `continue`), and a page that would pass the
/// reply cap is asked again at half the size: 600 pods of 20 KiB each are 12 MiB in all, and a
/// first page of 250 of them is past the 4 MiB cap.
#[test]
fn whole_lists_are_read_in_pages_under_the_reply_cap() -> Result<()> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    let padding = "x".repeat(20 << 10);
    for i in 0..600 {
        let mut pod = pod_manifest(&format!("ns{}", i % 7), &format!("pod-{i:03}"));
        pod["metadata"]["annotations"] = json!({ "pad": padding });
        s.server.add_pod(pod);
    }
    let client = s.client(5000, 0)?;
    let pods = client.list_pods_everywhere(&mut Some)?;
    let mut names: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 600, "every pod once");
    let lists = s.requests_to("/api/v1/pods");
    let queries: Vec<&str> = lists.iter().map(|r| r.query.as_str()).collect();
    assert_eq!(queries[0], "limit=250", "{queries:?}");
    assert!(queries[1].starts_with("limit=125"), "{queries:?}");
    assert!(
        queries[2..].iter().all(|q| q.contains("&continue=")),
        "{queries:?}"
    );
    assert_eq!(lists.len(), 1 + 600usize.div_ceil(125), "{queries:?}");

    // An expired continue token (410 Gone) starts the list over; a third expiry is an error
    // that names the list.
    const POOLS: testkit::kube_api::Resource = testkit::kube_api::Resource::IP_POOLS;
    for i in 0..300 {
        s.server.add_object(
            POOLS,
            json!({"metadata": {"name": format!("pool-{i:03}"), "namespace": "kube-system"},
                   "spec": {"range": "10.0.0.0/24", "allocations": {}}}),
        );
    }
    let resource = k8s::Resource {
        group: "whereabouts.cni.cncf.io",
        version: "v1alpha1",
        plural: "ippools",
    };
    let path = "/apis/whereabouts.cni.cncf.io/v1alpha1/ippools";
    s.server
        .inject_with_param("GET", path, "continue", Fault::Status(410), 2);
    assert_eq!(client.list_objects_everywhere(resource)?.len(), 300);
    assert_eq!(
        s.requests_to(path).len(),
        6,
        "3 lists of 2 pages, 2 cut short"
    );
    s.server
        .inject_with_param("GET", path, "continue", Fault::Status(410), 3);
    let err = client.list_objects_everywhere(resource).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("list ippools in namespace (all namespaces): API server replied 410"),
        "{err}"
    );
    Ok(())
}

/// A collection kept in step: the list, then the watch's changes for the node's pods only;
/// a 410 (the history compacted away) lists again, a failed watch is made again from the
/// last version seen, and nothing in between is missed.
#[test]
fn a_reflected_collection_follows_list_watch_410_and_failures() -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let s = Setup::https(KubeconfigAuth::Token)?;
    s.server.set_bookmark_interval(Duration::from_millis(100));
    let on_node = |ns: &str, name: &str, node: &str| {
        let mut pod = pod_manifest(ns, name);
        pod["spec"]["nodeName"] = json!(node);
        pod
    };
    s.server.add_pod(on_node("a", "mine", "node-1"));
    s.server.add_pod(on_node("a", "theirs", "node-2"));
    let client = s.client(5000, 0)?;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let collection = k8s::Collection {
        path: "/api/v1/pods".into(),
        field_selector: Some("spec.nodeName=node-1".into()),
        resource: "pods",
        trim: std::convert::identity,
    };
    let reflector = {
        let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
        std::thread::spawn(move || {
            client.reflect(&collection, &stop, &mut |change| {
                let name =
                    |v: &serde_json::Value| v["metadata"]["name"].as_str().unwrap_or("").to_owned();
                let line = match change {
                    k8s::Change::Listed(items) => {
                        format!("listed {:?}", items.iter().map(name).collect::<Vec<_>>())
                    }
                    k8s::Change::Applied(v) => format!("applied {}", name(&v)),
                    k8s::Change::Deleted(v) => format!("deleted {}", name(&v)),
                };
                seen.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            })
        })
    };
    let wait_for = |want: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if got == want || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(wait_for(&["listed [\"mine\"]"]), ["listed [\"mine\"]"]);
    s.server.add_pod(on_node("b", "new", "node-1"));
    s.server.add_pod(on_node("b", "elsewhere", "node-2"));
    s.server.delete_pod("a", "mine");
    let want = ["listed [\"mine\"]", "applied new", "deleted mine"];
    assert_eq!(wait_for(&want), want);
    // The history is compacted away under the watch: it lists again.
    s.server.compact();
    let want = [
        "listed [\"mine\"]",
        "applied new",
        "deleted mine",
        "listed [\"new\"]",
    ];
    assert_eq!(wait_for(&want), want);
    // A watch that fails is made again from the last version: the change made meanwhile
    // comes through, and nothing is listed again.
    let watches = |s: &Setup| {
        s.server
            .requests()
            .iter()
            .filter(|r| r.path == "/api/v1/pods" && r.query.contains("watch=1"))
            .count()
    };
    let before = watches(&s);
    s.server
        .inject_with_param("GET", "/api/v1/pods", "watch", Fault::Status(500), 1);
    s.server.set_bookmark_interval(Duration::from_secs(60));
    // End the current watch: its client gives up on it after a missed connection.
    s.server.go_down();
    s.server.add_pod(on_node("c", "while-down", "node-1"));
    s.server.come_back()?;
    let want = [
        "listed [\"mine\"]",
        "applied new",
        "deleted mine",
        "listed [\"new\"]",
        "applied while-down",
    ];
    assert_eq!(wait_for(&want), want);
    assert!(watches(&s) >= before + 2, "the failed watch was made again");
    let lists = s
        .server
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.query.contains("watch"))
        .count();
    assert_eq!(lists, 2, "listed at the start and after the 410 only");
    stop.store(true, Ordering::SeqCst);
    reflector.join().expect("the reflector stops");
    Ok(())
}

/// A server (or a proxy before it) that ends every watch at once with nothing in it: the
/// watch is made again after a growing back-off, not in a loop.
#[test]
fn watches_that_end_at_once_are_backed_off() -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let s = Setup::https(KubeconfigAuth::Token)?;
    s.server
        .inject_with_param("GET", "/api/v1/pods", "watch", Fault::EndWatch, 10_000);
    let client = s.client(5000, 0)?;
    let stop = Arc::new(AtomicBool::new(false));
    let reflector = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || client.reflect(&k8s::Collection::pods(None), &stop, &mut |_| {}))
    };
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    reflector.join().expect("the reflector stops");
    let watches = s
        .server
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && r.query.contains("watch=1"))
        .count();
    // 0.2 + 0.4 + 0.8 + 1.6 s of back-off fit in 3 s: about 4 watches, never hundreds.
    assert!((2..=8).contains(&watches), "{watches} watches in 3 s");
    Ok(())
}

/// A server that hands back the continue token it was sent would have the list go on for
/// good: it ends at the second page, with an error that says why.
#[test]
fn a_list_whose_continue_token_repeats_ends_with_an_error() -> Result<()> {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let s = Setup::with(KubeApiServer::http()?, KubeconfigAuth::Token)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let served = Arc::new(AtomicUsize::new(0));
    let counting = Arc::clone(&served);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let counting = Arc::clone(&counting);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut conn = conn;
                loop {
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                        line.clear();
                    }
                    if line != "\r\n" {
                        return;
                    }
                    counting.fetch_add(1, Ordering::SeqCst);
                    let body = r#"{"kind":"PodList","metadata":{"continue":"same","resourceVersion":"7"},"items":[]}"#;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let text = std::fs::read_to_string(&s.kubeconfig)?;
    std::fs::write(
        &s.kubeconfig,
        text.replace(&s.server.url(), &format!("http://{addr}")),
    )?;
    let err = s
        .client(5000, 0)?
        .list_pods_everywhere(&mut Some)
        .unwrap_err();
    assert!(
        err.to_string().contains("the same continue token twice"),
        "{err}"
    );
    assert_eq!(served.load(Ordering::SeqCst), 2);
    Ok(())
}

/// A TCP proxy in front of the server that can hold every byte, both ways: a connection that
/// goes silent, as one does behind a VIP whose server fails over, or on a slow link.
struct StallingProxy {
    addr: std::net::SocketAddr,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl StallingProxy {
    fn to(upstream: std::net::SocketAddr) -> Result<StallingProxy> {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stalled = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (stall, count) = (Arc::clone(&stalled), Arc::clone(&accepted));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    let stall = Arc::clone(&stall);
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            while stall.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Ok(StallingProxy {
            addr,
            stalled,
            accepted,
        })
    }

    /// Holds every byte for `how_long`, then lets them through.
    fn stall(&self, how_long: Duration) {
        use std::sync::atomic::Ordering;
        self.stalled.store(true, Ordering::SeqCst);
        std::thread::sleep(how_long);
        self.stalled.store(false, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A client of `s`'s server through `proxy`, with `keep_alive`.
fn proxied_client(s: &Setup, proxy: &StallingProxy, keep_alive: KeepAlive) -> Result<KubeClient> {
    let text = std::fs::read_to_string(&s.kubeconfig)?;
    let through = text.replace(&s.server.addr().to_string(), &proxy.addr.to_string());
    let kubeconfig = s.dir.path().join("proxied.kubeconfig");
    std::fs::write(&kubeconfig, through)?;
    Ok(KubeClient::new(&ClientOptions {
        kubeconfig: Some(kubeconfig),
        timeout: Duration::from_secs(5),
        retries: 1,
        keep_alive,
    })?)
}

/// A call made while the connection is silent for `stall`: how many connections it took.
fn connections_for_a_call_through_a_stall(keep_alive: KeepAlive, stall: Duration) -> Result<usize> {
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let proxy = StallingProxy::to(s.server.addr())?;
    let client = proxied_client(&s, &proxy, keep_alive)?;
    client.get_pod("ns1", "web")?;
    std::thread::scope(|scope| {
        scope.spawn(|| proxy.stall(stall));
        std::thread::sleep(Duration::from_millis(100));
        client.get_pod("ns1", "web")
    })?;
    Ok(proxy.accepted())
}

#[test]
fn a_cni_call_drops_a_connection_that_went_silent_and_a_daemon_waits() -> Result<()> {
    // A CNI call gives a silent connection up within a second and tries again on a new one.
    assert_eq!(
        connections_for_a_call_through_a_stall(KeepAlive::Call, Duration::from_millis(1500))?,
        2
    );
    // A long-lived process waits the same answer out on the connection it has.
    assert_eq!(
        connections_for_a_call_through_a_stall(KeepAlive::Process, Duration::from_millis(1500))?,
        1
    );
    Ok(())
}

#[test]
fn a_daemons_watch_outlives_a_slow_answer() -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let s = Setup::https(KubeconfigAuth::Token)?;
    add_web_pod(&s.server);
    let proxy = StallingProxy::to(s.server.addr())?;
    let client = proxied_client(&s, &proxy, KeepAlive::Process)?;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let reflector = {
        let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
        std::thread::spawn(move || {
            client.reflect(&k8s::Collection::pods(None), &stop, &mut |change| {
                let name = |v: &serde_json::Value| {
                    v["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                };
                let names: Vec<String> = match change {
                    k8s::Change::Listed(items) => items.iter().map(name).collect(),
                    k8s::Change::Applied(v) => vec![name(&v)],
                    k8s::Change::Deleted(_) => Vec::new(),
                };
                seen.lock().unwrap_or_else(|e| e.into_inner()).extend(names);
            })
        })
    };
    let sees = |name: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|n| n == name)
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    };
    s.server.add_pod(pod_manifest("ns1", "before"));
    assert!(sees("before"));
    // Two seconds without an answer: the watch carries on on the same connection.
    proxy.stall(Duration::from_secs(2));
    s.server.add_pod(pod_manifest("ns1", "after"));
    assert!(sees("after"));
    assert_eq!(proxy.accepted(), 1, "the watch's connection was torn down");
    stop.store(true, Ordering::SeqCst);
    s.server.add_pod(pod_manifest("ns1", "last"));
    reflector.join().expect("the reflector stops");
    Ok(())
}
