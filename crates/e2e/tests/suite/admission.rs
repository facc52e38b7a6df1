//! The admission webhook (deploy/admission) on the real API server: what `kubectl apply` says
//! to a harmful NAD, to one with only warnings and to a pod with a broken annotation; its
//! certificate renewed while NADs are applied; 200 NADs at once; and the webhook down under
//! each failure policy.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};
use e2e::{up, Node};
use serde_json::{json, Value};

/// The review's troublemaker: the node's NIC, the pod network's addresses, a default route.
const TROUBLEMAKER: &str = r#"{"cniVersion": "0.3.1", "type": "macvlan", "master": "enp1s0",
  "ipam": {"type": "host-local", "subnet": "10.42.0.0/24",
           "routes": [{"dst": "0.0.0.0/0", "gw": "10.42.0.100"}]}}"#;

/// A NAD with a default route, which the test's policy denies.
const SNEAKY: &str = r#"{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-sneaky",
  "ipam": {"type": "host-local", "subnet": "192.168.88.0/24",
           "routes": [{"dst": "0.0.0.0/0", "gw": "192.168.88.1"}]}}"#;

fn nad(name: &str, config: &str) -> Value {
    json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"config": config}})
}

fn clean_config(i: usize) -> String {
    json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-adm",
           "ipam": {"type": "host-local", "subnet": format!("192.168.{}.0/24", i % 250)}})
    .to_string()
}

/// deploy/admission/base as a user applies it, with the webhook's rounds and certificate
/// made short enough to see a renewal within the test, and a policy that denies default routes.
fn admission_objects() -> Result<Vec<Value>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/admission/base");
    let out = Command::new("kubectl").args(["kustomize", dir]).output()?;
    ensure!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut objects = testkit::manifests::objects(&String::from_utf8(out.stdout)?)?;
    for o in &mut objects {
        if o["kind"] == "Deployment" && o["metadata"]["name"] == "multus-admission" {
            let command = o
                .pointer_mut("/spec/template/spec/containers/0/command")
                .and_then(Value::as_array_mut)
                .context("the webhook's command")?;
            for arg in ["--certificate-lifetime", "150", "--interval", "3"] {
                command.push(arg.into());
            }
        }
        if o["kind"] == "ConfigMap" && o["metadata"]["name"] == "multus-admission-policy" {
            o["data"]["policy.yaml"] = "defaultRoute: deny\n".into();
        }
    }
    Ok(objects)
}

/// The objects deploy/admission adds to deploy/base: what the test removes again.
fn added_objects(all: &[Value]) -> Result<Vec<Value>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/base");
    let out = Command::new("kubectl").args(["kustomize", dir]).output()?;
    ensure!(out.status.success(), "kubectl kustomize deploy/base");
    let key = |o: &Value| format!("{}/{}", o["kind"], o["metadata"]["name"]);
    let base: BTreeSet<String> = testkit::manifests::objects(&String::from_utf8(out.stdout)?)?
        .iter()
        .map(key)
        .collect();
    Ok(all
        .iter()
        .filter(|o| !base.contains(&key(o)))
        .cloned()
        .collect())
}

fn list(items: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// `kubectl apply` of `objects`: whether it succeeded, and what it printed.
fn apply(node: &Node, objects: &[Value], extra: &[&str]) -> Result<(bool, String)> {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    let out = node.kubectl_output(&args, Some(&list(objects)))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

/// The certificate the webhook serves now, as the Secret says.
fn served_certificate(node: &Node) -> Result<String> {
    node.kubectl(&[
        "get",
        "secret",
        "-n",
        "multus",
        "multus-admission-tls",
        "-o",
        "jsonpath={.data.tls\\.crt}",
    ])
}

/// Removes the webhook's objects when the test ends, whatever happened: a configuration
/// left behind with no webhook would refuse every later test's NADs.
struct Installed<'a> {
    node: &'a Node,
    objects: Vec<Value>,
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        let _ = self.node.kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            "multus-admission",
            "--ignore-not-found",
        ]);
        let _ = self.node.delete(&list(&self.objects));
        let _ = self.node.kubectl(&[
            "delete",
            "secret",
            "-n",
            "multus",
            "multus-admission-tls",
            "--ignore-not-found",
        ]);
    }
}

#[test]
fn the_webhook_refuses_harm_and_warns_at_kubectl_apply() -> Result<()> {
    let node = up("thin")?;
    let objects = admission_objects()?;
    let installed = Installed {
        node: &node,
        objects: added_objects(&objects)?,
    };
    let (ok, text) = apply(&node, &objects, &[])?;
    ensure!(ok, "deploy/admission/base: {text}");
    node.kubectl(&[
        "rollout",
        "status",
        "-n",
        "multus",
        "deployment/multus-admission",
        "--timeout=180s",
    ])?;
    // The webhook answers once its certificate is in the caBundle.
    node.eventually("the webhook answering", Duration::from_secs(60), || {
        Ok(apply(
            &node,
            &[nad("probe", &clean_config(0))],
            &["--dry-run=server"],
        )?
        .0)
    })?;

    // The troublemaker: refused, saying what, where and how to fix it.
    let (ok, text) = apply(&node, &[nad("troublemaker", TROUBLEMAKER)], &[])?;
    ensure!(!ok, "the troublemaker was admitted: {text}");
    for wanted in [
        "denied the request",
        "NetworkAttachmentDefinition default/troublemaker is refused",
        "spec.config.ipam.subnet [reserved-overlap]",
        "overlaps the cluster's pod network",
        "fix: use a range outside",
    ] {
        ensure!(
            text.contains(wanted),
            "{wanted:?} not in kubectl's answer: {text}"
        );
    }
    ensure!(
        node.kubectl(&[
            "get",
            "net-attach-def",
            "troublemaker",
            "--ignore-not-found"
        ])?
        .is_empty(),
        "the troublemaker exists"
    );

    // Only warnings: admitted, and kubectl prints them.
    let warned = r#"{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-adm",
      "ipam": {"type": "host-local", "subnet": "192.168.77.0/24", "gateway": "192.168.78.1"}}"#;
    let (ok, text) = apply(&node, &[nad("warned", warned)], &[])?;
    ensure!(ok, "the NAD with warnings was refused: {text}");
    ensure!(
        text.contains("Warning: spec.config.ipam.gateway [gateway-outside-range]"),
        "no warning printed: {text}"
    );
    // This test's policy denies default routes.
    let (ok, text) = apply(&node, &[nad("sneaky", SNEAKY)], &[])?;
    ensure!(
        !ok && text.contains("[ipam-default-route]") && text.contains("defaultRoute: deny"),
        "{text}"
    );
    node.kubectl(&["delete", "net-attach-def", "warned"])?;

    // A pod whose annotation multus would refuse is refused at create.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bad-annotation", "namespace": "default",
                     "annotations": {"k8s.v1.cni.cncf.io/networks": "Not_A_Name"}},
        "spec": {"containers": [{"name": "c", "image": e2e::TEST_IMAGE, "command": ["sleep", "1"]}]}});
    let (ok, text) = apply(&node, &[pod], &[])?;
    if ok {
        node.kubectl(&["delete", "pod", "bad-annotation", "--wait=false"])?;
    }
    ensure!(!ok && text.contains("[annotation]"), "the pod: {text}");

    // The certificate is renewed while NADs are applied: every apply passes, and the Secret
    // serves a new certificate before the end.
    let first = served_certificate(&node)?;
    let started = Instant::now();
    let mut applied = 0;
    while served_certificate(&node)? == first {
        ensure!(
            started.elapsed() < Duration::from_secs(240),
            "no renewal after {applied} applies in {:?}",
            started.elapsed()
        );
        let (ok, text) = apply(&node, &[nad("rotating", &clean_config(applied))], &[])?;
        ensure!(ok, "an apply during the renewal failed: {text}");
        applied += 1;
    }
    // The replicas pick the new one up within a round; applies go on passing.
    for i in 0..20 {
        let (ok, text) = apply(&node, &[nad("rotating", &clean_config(i))], &[])?;
        ensure!(ok, "an apply after the renewal failed: {text}");
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!(
        "renewed after {:?} and {applied} applies",
        started.elapsed()
    );

    // 200 NADs at once.
    let many: Vec<Value> = (0..200)
        .map(|i| nad(&format!("many-{i}"), &clean_config(i)))
        .collect();
    let started = Instant::now();
    let (ok, text) = apply(&node, &many, &[])?;
    ensure!(ok, "200 NADs: {text}");
    eprintln!(
        "200 NADs applied through the webhook in {:?}",
        started.elapsed()
    );
    let count = node.kubectl(&["get", "net-attach-def", "-o", "name"])?;
    ensure!(
        count.lines().filter(|l| l.contains("many-")).count() == 200,
        "{count}"
    );
    node.delete(&list(&many))?;
    node.kubectl(&["delete", "net-attach-def", "rotating"])?;

    // The webhook down: Fail refuses, Ignore admits.
    node.kubectl(&[
        "scale",
        "-n",
        "multus",
        "deployment/multus-admission",
        "--replicas=0",
    ])?;
    node.eventually("no webhook pod", Duration::from_secs(60), || {
        Ok(node
            .kubectl(&[
                "get",
                "pods",
                "-n",
                "multus",
                "-l",
                "app=multus-admission",
                "-o",
                "name",
            ])?
            .trim()
            .is_empty())
    })?;
    let (ok, text) = apply(
        &node,
        &[nad("while-down", &clean_config(1))],
        &["--dry-run=server"],
    )?;
    ensure!(
        !ok && text.contains("failed calling webhook"),
        "Fail with the webhook down: {text}"
    );
    for i in 0..2 {
        node.kubectl(&[
            "patch",
            "validatingwebhookconfiguration",
            "multus-admission",
            "--type=json",
            "-p",
            &format!(
                r#"[{{"op":"replace","path":"/webhooks/{i}/failurePolicy","value":"Ignore"}}]"#
            ),
        ])?;
    }
    let (ok, text) = apply(
        &node,
        &[nad("while-down", &clean_config(1))],
        &["--dry-run=server"],
    )?;
    ensure!(ok, "Ignore with the webhook down: {text}");
    drop(installed);
    Ok(())
}
