//! The admission webhook (deploy/admission) on the real API server: what `kubectl apply` says
//! to a harmful NAD, to one with only warnings and to a pod with a broken annotation; its
//! certificate renewed while NADs are applied; 200 NADs at once; and the webhook down under
//! each failure policy.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use e2e::admission::list;
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

/// The webhook's rounds and certificate made short enough to see a renewal within the test,
/// and a policy that denies default routes.
fn for_this_test(o: &mut Value) {
    if o["kind"] == "Deployment" && o["metadata"]["name"] == "multus-admission" {
        if let Some(command) = o
            .pointer_mut("/spec/template/spec/containers/0/command")
            .and_then(Value::as_array_mut)
        {
            for arg in ["--certificate-lifetime", "60", "--interval", "3"] {
                command.push(arg.into());
            }
        }
    }
    if o["kind"] == "ConfigMap" && o["metadata"]["name"] == "multus-admission-policy" {
        o["data"]["policy.yaml"] = "defaultRoute: deny\n".into();
    }
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

#[test]
fn the_webhook_refuses_harm_and_warns_at_kubectl_apply() -> Result<()> {
    let node = up("thin")?;
    let admission = e2e::admission::install(&node, "base", for_this_test)?;

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
    let first = admission.served_certificate()?;
    let started = Instant::now();
    let mut applied = 0;
    while admission.served_certificate()? == first {
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

    // A NAD the webhook never saw is refused on the node, with an event saying why, and
    // nothing is left of the pod's attempt.
    let (ok, text) = apply(&node, &[nad("sneaky", SNEAKY)], &[])?;
    ensure!(ok, "the NAD while the webhook is down: {text}");
    refused_at_add(
        &node,
        "sneaky",
        "/etc/cni/net.d/multus.d/admission-policy.yaml",
    )?;
    drop(admission);
    Ok(())
}

/// Thick mode: a NAD created before the webhook existed is refused by the daemon at the pod's
/// ADD, under the policy the daemon reads from its config (`admissionPolicy`).
#[test]
fn the_thick_daemon_refuses_a_nad_the_policy_denies() -> Result<()> {
    let node = up("thick")?;
    let (ok, text) = apply(&node, &[nad("older", SNEAKY)], &[])?;
    ensure!(ok, "the NAD before the webhook: {text}");
    let admission = e2e::admission::install(&node, "thick", |o| {
        if o["kind"] == "ConfigMap" && o["metadata"]["name"] == "multus-admission-policy" {
            o["data"]["policy.yaml"] = "defaultRoute: deny\n".into();
        }
    })?;
    refused_at_add(&node, "older", "/etc/multus-admission/policy.yaml")?;
    drop(admission);
    Ok(())
}

/// A pod on NAD `nad`, which the policy at `policy` (as the node reads it) denies for its
/// default route: it stays Pending with a NetworkRefused event naming the network, the policy
/// and the check, and once it and the NAD are deleted nothing of it is left on the node.
fn refused_at_add(node: &Node, nad: &str, policy: &str) -> Result<()> {
    let state = node.cni_state()?;
    let veths = node.veths()?.len();
    let name = format!("{nad}-pod");
    let pod = e2e::sleeping_pod(&name, Some(nad));
    node.apply(&pod)?;
    node.eventually("a NetworkRefused event", Duration::from_secs(90), || {
        Ok(!node.events("default", &name, "NetworkRefused")?.is_empty())
    })?;
    let said = node.events("default", &name, "NetworkRefused")?;
    let wanted = format!(
        "network default/{nad} on interface net1: refused by the admission policy {policy}"
    );
    ensure!(
        said.iter()
            .all(|m| m.contains(&wanted) && m.contains("[ipam-default-route]")),
        "NetworkRefused: {said:?}"
    );
    let phase = node.kubectl(&["get", "pod", &name, "-o", "jsonpath={.status.phase}"])?;
    ensure!(phase == "Pending", "the refused pod is {phase}");
    node.delete(&pod)?;
    node.kubectl(&["delete", "net-attach-def", nad])?;
    node.eventually(
        "nothing left of the refused pod",
        Duration::from_secs(30),
        || {
            let now = node.cni_state()?;
            Ok(now.iter().all(|f| state.contains(f)) && node.veths()?.len() <= veths)
        },
    )
}
