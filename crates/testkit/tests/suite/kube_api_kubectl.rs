//! The test API server checked with the real `kubectl` (client-go): the calls kubectl can make
//! get the replies a real API server gives.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::Result;
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, KubeApiServer, KubeconfigAuth, Scheme};
use testkit::Netns;

struct Kubectl {
    server: KubeApiServer,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// kubectl sends no bearer token over plain HTTP, so this is HTTPS.
    fn new() -> Result<Kubectl> {
        let server = KubeApiServer::https()?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
        let mut pod = pod_manifest("ns1", "web");
        pod["metadata"]["annotations"] = json!({ "other.io/owner": "someone-else" });
        pod["status"] = json!({ "phase": "Running", "podIP": "10.1.0.5" });
        server.add_pod(pod);
        Ok(Kubectl {
            server,
            dir,
            kubeconfig,
        })
    }

    fn run_with(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .output()
            .expect("run kubectl")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(&self.kubeconfig, args)
    }

    /// Runs kubectl, requires success, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl and requires it to fail with `expected` in its error output.
    fn fails_with(&self, kubeconfig: &Path, args: &[&str], expected: &str) {
        let out = self.run_with(kubeconfig, args);
        assert!(
            !out.status.success(),
            "kubectl {} succeeded",
            args.join(" ")
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "kubectl {}: {err}", args.join(" "));
    }

    /// The one PATCH request the server saw.
    fn the_patch(&self) -> testkit::kube_api::LoggedRequest {
        let patches: Vec<_> = self
            .server
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH")
            .collect();
        assert_eq!(patches.len(), 1, "{patches:?}");
        patches[0].clone()
    }
}

/// `kubectl patch pod web -n ns1 <flags> -p <patch>`.
fn patch_web<'a>(flags: &[&'a str], patch: &'a str) -> Vec<&'a str> {
    let mut args = vec!["patch", "pod", "web", "-n", "ns1"];
    args.extend_from_slice(flags);
    args.extend(["-p", patch]);
    args
}

#[test]
fn get_raw_pod() -> Result<()> {
    let k = Kubectl::new()?;
    let got: Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/api/v1/namespaces/ns1/pods/web"]))?;
    assert_eq!(Some(got), k.server.pod("ns1", "web"));
    // kubectl offers h2 in ALPN, as every client-go program does.
    let versions: Vec<_> = k.server.requests().iter().map(|r| r.version).collect();
    assert!(!versions.is_empty());
    assert!(
        versions.iter().all(|v| *v == http::Version::HTTP_2),
        "{versions:?}"
    );
    Ok(())
}

#[test]
fn get_raw_nads() -> Result<()> {
    let k = Kubectl::new()?;
    let stored = k.server.add_nad(
        "ns1",
        "bridge-conf",
        json!({ "config": r#"{"type":"bridge"}"# }),
    );
    k.server.add_nad("ns2", "other", json!({}));
    let base = "/apis/k8s.cni.cncf.io/v1/namespaces/ns1/network-attachment-definitions";
    let got: Value =
        serde_json::from_str(&k.ok(&["get", "--raw", &format!("{base}/bridge-conf")]))?;
    assert_eq!(got, stored);
    let list: Value = serde_json::from_str(&k.ok(&["get", "--raw", base]))?;
    assert_eq!(list["kind"], "NetworkAttachmentDefinitionList");
    assert_eq!(list["items"], json!([stored]));

    k.fails_with(&k.kubeconfig, &["get", "--raw", &format!("{base}/nope")], r#"Error from server (NotFound): network-attachment-definitions.k8s.cni.cncf.io "nope" not found"#);
    Ok(())
}

#[test]
fn missing_pod_is_not_found() -> Result<()> {
    let k = Kubectl::new()?;
    k.fails_with(
        &k.kubeconfig,
        &["get", "--raw", "/api/v1/namespaces/ns1/pods/nope"],
        r#"Error from server (NotFound): pods "nope" not found"#,
    );
    Ok(())
}

#[test]
fn wrong_token_is_unauthorized() -> Result<()> {
    // (Without any credentials kubectl would prompt for a password instead.)
    let k = Kubectl::new()?;
    let kubeconfig = k.dir.path().join("kubeconfig-wrong");
    k.server
        .write_kubeconfig(&kubeconfig, KubeconfigAuth::None)?;
    let mut config: Value = serde_json::from_slice(&std::fs::read(&kubeconfig)?)?;
    config["users"][0]["user"]["token"] = json!("wrong");
    std::fs::write(&kubeconfig, serde_json::to_vec(&config)?)?;
    k.fails_with(
        &kubeconfig,
        &["get", "--raw", "/api/v1/namespaces/ns1/pods/web"],
        "error: You must be logged in to the server (Unauthorized)",
    );
    let statuses: Vec<u16> = k.server.requests().iter().map(|r| r.status).collect();
    assert!(
        !statuses.is_empty() && statuses.iter().all(|s| *s == 401),
        "{statuses:?}"
    );
    Ok(())
}

#[test]
fn token_file_kubeconfig() -> Result<()> {
    let k = Kubectl::new()?;
    let token = k.dir.path().join("token");
    std::fs::write(&token, k.server.token())?;
    let kubeconfig = k.dir.path().join("kubeconfig-file");
    k.server
        .write_kubeconfig(&kubeconfig, KubeconfigAuth::TokenFile(token))?;
    let out = k.run_with(
        &kubeconfig,
        &["get", "--raw", "/api/v1/namespaces/ns1/pods/web"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn patch_status_merge_keeps_other_fields() -> Result<()> {
    let k = Kubectl::new()?;
    let before = k.server.pod("ns1", "web").unwrap();
    let out = k.ok(&patch_web(
        &["--subresource=status", "--type", "merge"],
        r#"{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/network-status":"[]"}}}"#,
    ));
    assert_eq!(out.trim(), "pod/web patched");
    let after = k.server.pod("ns1", "web").unwrap();
    assert_eq!(
        after["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"],
        "[]"
    );
    assert_eq!(
        after["metadata"]["annotations"]["other.io/owner"],
        "someone-else"
    );
    assert_eq!(after["status"], before["status"]);
    assert_eq!(after["spec"], before["spec"]);
    assert_ne!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let patch = k.the_patch();
    assert_eq!(patch.path, "/api/v1/namespaces/ns1/pods/web/status");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    Ok(())
}

#[test]
fn patch_strategic_merge_of_the_pod() -> Result<()> {
    let k = Kubectl::new()?;
    let out = k.ok(&patch_web(
        &[],
        r#"{"metadata":{"labels":{"app":"web"},"annotations":{"other.io/owner":null}}}"#,
    ));
    assert_eq!(out.trim(), "pod/web patched");
    let after = k.server.pod("ns1", "web").unwrap();
    assert_eq!(after["metadata"]["labels"]["app"], "web");
    assert_eq!(after["metadata"]["annotations"], json!({}));
    let patch = k.the_patch();
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    Ok(())
}

#[test]
fn patch_with_a_stale_resource_version_conflicts() -> Result<()> {
    let k = Kubectl::new()?;
    let current = k.server.pod("ns1", "web").unwrap()["metadata"]["resourceVersion"].clone();
    let current = current.as_str().unwrap();
    let patch = |rv: &str| {
        format!(r#"{{"metadata":{{"resourceVersion":"{rv}","annotations":{{"a":"{rv}"}}}}}}"#)
    };
    k.fails_with(
        &k.kubeconfig,
        &patch_web(&["--type", "merge"], &patch("0")),
        r#"Operation cannot be fulfilled on pods "web": the object has been modified"#,
    );
    assert!(
        k.server.pod("ns1", "web").unwrap()["metadata"]["annotations"]
            .get("a")
            .is_none()
    );
    k.ok(&patch_web(&["--type", "merge"], &patch(current)));
    assert_eq!(
        k.server.pod("ns1", "web").unwrap()["metadata"]["annotations"]["a"],
        current
    );
    Ok(())
}

#[test]
fn create_raw_event() -> Result<()> {
    let k = Kubectl::new()?;
    let file = k.dir.path().join("event.json");
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "name": "web.1", "namespace": "ns1" },
        "involvedObject": { "kind": "Pod", "namespace": "ns1", "name": "web" },
        "reason": "AddedInterface",
        "message": "Add net1",
        "type": "Normal",
    });
    std::fs::write(&file, event.to_string())?;
    let path = "/api/v1/namespaces/ns1/events";
    let created: Value =
        serde_json::from_str(&k.ok(&["create", "--raw", path, "-f", file.to_str().unwrap()]))?;
    assert_eq!(created["reason"], "AddedInterface");
    assert!(created["metadata"]["uid"].is_string());
    let stored = k.server.events();
    assert_eq!(stored, [created]);

    k.fails_with(
        &k.kubeconfig,
        &["create", "--raw", path, "-f", file.to_str().unwrap()],
        r#"events "web.1" already exists"#,
    );
    Ok(())
}

#[test]
fn server_inside_a_node_namespace() -> Result<()> {
    let node = Netns::new("kapi");
    let server = KubeApiServer::start_in(Scheme::Https, &node)?;
    server.add_pod(pod_manifest("ns1", "web"));
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
    let get = |ns: Option<&Netns>| {
        let mut cmd = match ns {
            Some(ns) => ns.command("kubectl"),
            None => Command::new("kubectl"),
        };
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(["--request-timeout", "5s", "get", "--raw"])
            .arg("/api/v1/namespaces/ns1/pods/web")
            .output()
            .expect("run kubectl")
    };
    let out = get(Some(&node));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !get(None).status.success(),
        "reachable outside the node namespace"
    );

    server.go_down();
    assert!(
        !get(Some(&node)).status.success(),
        "still serving while down"
    );
    server.come_back()?;
    let out = get(Some(&node));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
