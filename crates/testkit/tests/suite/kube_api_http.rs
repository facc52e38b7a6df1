//! The test API server at the HTTP level, over plain HTTP: framing (keep-alive, chunked bodies,
//! `Expect: 100-continue`), `Status` replies, and the fault switches.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;
use testkit::kube_api::{pod_manifest, Fault, KubeApiServer, Latency};

use crate::common;
use common::Conn;

fn get(server: &KubeApiServer, path: &str, token: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        server.addr()
    )
}

fn patch(server: &KubeApiServer, path: &str, content_type: &str, body: &str) -> String {
    format!(
        "PATCH {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr(),
        server.token(),
        body.len()
    )
}

const POD: &str = "/api/v1/namespaces/ns1/pods/web";

fn delete(server: &KubeApiServer, path: &str, body: &str) -> String {
    format!(
        "DELETE {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr(),
        server.token(),
        body.len()
    )
}

/// A pod deleted as the API server deletes it: refused (409) when a precondition does not hold,
/// else gone at once, at a new resourceVersion.
#[test]
fn a_pod_is_deleted_with_its_preconditions() -> Result<()> {
    let server = KubeApiServer::http()?;
    let mut pod = pod_manifest("ns1", "web");
    pod["metadata"]["uid"] = json!("uid-web");
    server.add_pod(pod);
    let stored = server.pod("ns1", "web").expect("the pod");
    let mut c = Conn::open(&server)?;
    let stale = r#"{"preconditions": {"resourceVersion": "0"}}"#;
    let (code, body) = c.send(&delete(&server, POD, stale))?;
    assert_eq!((code, body["reason"].clone()), (409, json!("Conflict")));
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("Precondition failed: ResourceVersion in precondition: 0")),
        "{body}"
    );
    assert!(server.pod("ns1", "web").is_some());

    let options = json!({"preconditions": {"uid": "uid-web",
                                           "resourceVersion": stored["metadata"]["resourceVersion"]}});
    let (code, body) = c.send(&delete(&server, POD, &options.to_string()))?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["uid"], "uid-web");
    assert_ne!(
        body["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );
    assert!(server.pod("ns1", "web").is_none());
    let (code, _) = c.send(&delete(&server, POD, ""))?;
    assert_eq!(code, 404);
    Ok(())
}

#[test]
fn status_objects_for_failures() -> Result<()> {
    let server = KubeApiServer::http()?;
    let mut c = Conn::open(&server)?;

    let (code, body) = c.send(&get(&server, POD, "wrong"))?;
    assert_eq!(code, 401);
    assert_eq!(
        body,
        json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401 })
    );

    let (code, body) = c.send(&get(&server, POD, &server.token()))?;
    assert_eq!(code, 404);
    assert_eq!(body["reason"], "NotFound");
    assert_eq!(body["message"], r#"pods "web" not found"#);
    assert_eq!(
        body["details"],
        json!({ "name": "web", "group": "", "kind": "pods" })
    );

    let (code, body) = c.send(&get(&server, "/api/v1/secrets", &server.token()))?;
    assert_eq!((code, body["reason"].clone()), (404, json!("NotFound")));

    server.add_pod(pod_manifest("ns1", "web"));
    let (code, body) = c.send(&patch(&server, POD, "application/json-patch+json", "[]"))?;
    assert_eq!(
        (code, body["reason"].clone()),
        (415, json!("UnsupportedMediaType"))
    );
    let (code, body) = c.send(&patch(&server, POD, "application/merge-patch+json", "[1]"))?;
    assert_eq!((code, body["reason"].clone()), (400, json!("BadRequest")));

    // A pod may be deleted, its status may not.
    let delete = format!(
        "DELETE {POD}/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        server.token()
    );
    let (code, body) = c.send(&delete)?;
    assert_eq!(
        (code, body["reason"].clone()),
        (405, json!("MethodNotAllowed"))
    );

    let logged: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
    assert_eq!(logged, [401, 404, 404, 415, 400, 405]);
    Ok(())
}

#[test]
fn chunked_body_and_expect_continue() -> Result<()> {
    let server = KubeApiServer::http()?;
    server.add_pod(pod_manifest("ns1", "web"));
    let mut c = Conn::open(&server)?;
    let body = r#"{"metadata":{"annotations":{"a":"1"}}}"#;
    let (first, rest) = body.split_at(10);
    let raw = format!(
        "PATCH {POD}/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/strategic-merge-patch+json\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{rest}\r\n0\r\n\r\n",
        server.token(),
        first.len(),
        rest.len()
    );
    let (code, pod) = c.send(&raw)?;
    assert_eq!(code, 200, "{pod}");
    assert_eq!(pod["metadata"]["annotations"]["a"], "1");
    // The connection stays usable.
    let (code, pod) = c.send(&get(&server, POD, &server.token()))?;
    assert_eq!(code, 200);
    assert_eq!(pod["metadata"]["annotations"]["a"], "1");
    Ok(())
}

#[test]
fn status_subresource_cannot_change_spec_and_main_cannot_change_status() -> Result<()> {
    let server = KubeApiServer::http()?;
    let before = server.add_pod(pod_manifest("ns1", "web"));
    let mut c = Conn::open(&server)?;
    let sneaky = r#"{"spec":{"nodeName":"other"},"status":{"phase":"Failed"},"metadata":{"uid":null,"name":"x","labels":{"l":"1"}}}"#;
    let (code, _) = c.send(&patch(
        &server,
        &format!("{POD}/status"),
        "application/merge-patch+json",
        sneaky,
    ))?;
    assert_eq!(code, 200);
    let after = server.pod("ns1", "web").unwrap();
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(after["status"]["phase"], "Failed");
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(after["metadata"]["name"], "web");
    assert_eq!(after["metadata"]["labels"]["l"], "1");

    let (code, _) = c.send(&patch(&server, POD, "application/merge-patch+json", sneaky))?;
    assert_eq!(code, 200);
    let last = server.pod("ns1", "web").unwrap();
    assert_eq!(last["spec"]["nodeName"], "other");
    assert_eq!(last["status"], after["status"]);
    let versions: Vec<u64> = [&before, &after, &last]
        .iter()
        .map(|p| {
            p["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        versions[0] < versions[1] && versions[1] < versions[2],
        "{versions:?}"
    );
    Ok(())
}

/// Reads and writes wait as long as the latency model says: at least their own delay, and a
/// read not the write's.
#[test]
fn reads_and_writes_have_latencies_of_their_own() -> Result<()> {
    let server = KubeApiServer::http()?;
    server.add_pod(pod_manifest("ns1", "web"));
    server.set_latency(Latency {
        read: Duration::from_millis(50),
        write: Duration::from_millis(1500),
    });
    let mut c = Conn::open(&server)?;
    let start = Instant::now();
    assert_eq!(c.send(&get(&server, POD, &server.token()))?.0, 200);
    let read = start.elapsed();
    let start = Instant::now();
    let body = r#"{"metadata":{"annotations":{"a":"b"}}}"#;
    let reply = c.send(&patch(&server, POD, "application/merge-patch+json", body))?;
    assert_eq!(reply.0, 200, "{}", reply.1);
    let write = start.elapsed();
    assert!(read >= Duration::from_millis(50), "{read:?}");
    assert!(read < Duration::from_millis(1500), "{read:?}");
    assert!(write >= Duration::from_millis(1500), "{write:?}");
    for (name, profile) in [
        ("zero", Latency::ZERO),
        ("datacenter", Latency::DATACENTER),
        ("edge", Latency::EDGE),
    ] {
        assert_eq!(Latency::profile(name), Some(profile));
    }
    assert_eq!(Latency::profile("fast"), None);
    Ok(())
}

#[test]
fn faults_latency_close_and_down() -> Result<()> {
    let server = KubeApiServer::http()?;
    server.add_pod(pod_manifest("ns1", "web"));
    let token = server.token();

    server.inject(Fault::Status(500), 1);
    server.inject(Fault::Close, 1);
    let mut c = Conn::open(&server)?;
    let (code, body) = c.send(&get(&server, POD, &token))?;
    assert_eq!(
        (code, body["reason"].clone()),
        (500, json!("InternalError"))
    );
    assert!(
        c.send(&get(&server, POD, &token)).is_err(),
        "closed without a reply"
    );
    let mut c = Conn::open(&server)?;
    assert_eq!(c.send(&get(&server, POD, &token))?.0, 200);

    server.go_down();
    let refused = TcpStream::connect(server.addr()).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(
        c.send(&get(&server, POD, &token)).is_err(),
        "open connections are closed"
    );
    server.come_back()?;
    let mut c = Conn::open(&server)?;
    assert_eq!(c.send(&get(&server, POD, &token))?.0, 200);
    Ok(())
}

#[test]
fn faults_aimed_at_one_method_and_path() -> Result<()> {
    let server = KubeApiServer::http()?;
    server.add_pod(pod_manifest("ns1", "web"));
    let status = format!("{POD}/status");
    server.inject_on("PATCH", &status, Fault::Status(409), 1);
    let mut c = Conn::open(&server)?;
    let body = r#"{"metadata":{"annotations":{"a":"1"}}}"#;
    assert_eq!(c.send(&get(&server, POD, &server.token()))?.0, 200);
    assert_eq!(
        c.send(&patch(&server, POD, "application/merge-patch+json", body))?
            .0,
        200
    );
    let (code, reply) = c.send(&patch(
        &server,
        &status,
        "application/merge-patch+json",
        body,
    ))?;
    assert_eq!((code, reply["reason"].clone()), (409, json!("Conflict")));
    assert_eq!(
        c.send(&patch(
            &server,
            &status,
            "application/merge-patch+json",
            body
        ))?
        .0,
        200
    );
    Ok(())
}

/// A watch-list, as client-go's informers ask for one: the objects there are as ADDED, a
/// bookmark marking the end of them, then the changes; `sendInitialEvents` without
/// `resourceVersionMatch=NotOlderThan` is refused as kube-apiserver refuses it.
#[test]
fn a_watch_list_sends_the_initial_events_then_their_end() -> Result<()> {
    use std::io::{BufRead, BufReader, Read, Write};

    let server = KubeApiServer::http()?;
    server.add_pod(pod_manifest("ns1", "web"));
    server.add_pod(pod_manifest("ns2", "db"));
    let at = server.pod("ns2", "db").expect("db")["metadata"]["resourceVersion"].clone();
    let watch = "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true";
    let mut c = Conn::open(&server)?;
    let (code, status) = c.send(&get(&server, watch, &server.token()))?;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        "{status}"
    );

    let stream = TcpStream::connect(server.addr())?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream);
    let request = get(
        &server,
        &format!("{watch}&resourceVersionMatch=NotOlderThan&resourceVersion={at}"),
        &server.token(),
    );
    reader.get_mut().write_all(request.as_bytes())?;
    let mut head = String::new();
    while head.is_empty() || !head.ends_with("\r\n\r\n") {
        anyhow::ensure!(reader.read_line(&mut head)? > 0, "the head: {head}");
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // One event per chunk.
    let mut next = || -> Result<serde_json::Value> {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let mut data = vec![0; usize::from_str_radix(size.trim(), 16)? + 2];
        reader.read_exact(&mut data)?;
        Ok(serde_json::from_slice(&data)?)
    };
    let mut initial = Vec::new();
    for _ in 0..2 {
        let event = next()?;
        assert_eq!(event["type"], "ADDED", "{event}");
        initial.push(event["object"]["metadata"]["name"].clone());
    }
    initial.sort_by_key(|n| n.to_string());
    assert_eq!(initial, [json!("db"), json!("web")]);
    let end = next()?;
    assert_eq!(end["type"], "BOOKMARK", "{end}");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(end["object"]["metadata"]["resourceVersion"], at);
    server.add_pod(pod_manifest("ns1", "later"));
    let later = loop {
        let event = next()?;
        if event["type"] != "BOOKMARK" {
            break event;
        }
    };
    assert_eq!(later["type"], "ADDED", "{later}");
    assert_eq!(later["object"]["metadata"]["name"], "later");
    Ok(())
}
