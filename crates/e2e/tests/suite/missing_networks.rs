//! A pod that runs without a network it asks for, on the real node in thick mode: the daemon
//! reports it when two looks in a row find it so (a Warning event on the pod, a line in its log),
//! and with `deletePodsMissingNetworks` (and `delete` on pods granted) deletes it, so that its
//! Deployment makes it again.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::{json, Value};

const APP: &str = "strays";

fn nad() -> String {
    e2e::bridge_nad(
        "wanted",
        "br-wanted",
        r#"{"type": "host-local", "subnet": "10.37.0.0/24", "dataDir": "/var/lib/cni/e2e-wanted"}"#,
    )
}

/// The Deployment's one pod, once it is Ready: its name and UID.
fn the_pod(node: &Node) -> Result<(String, String)> {
    let mut found = None;
    node.eventually("the Deployment's pod", Duration::from_secs(120), || {
        let pods = node.pods_labelled(APP)?;
        found = pods
            .iter()
            .find(|p| p.ready && !p.deleting)
            .map(|p| p.name.clone());
        Ok(found.is_some())
    })?;
    let name = found.context("no pod")?;
    let pod = node.get("default", &format!("pod/{name}"))?;
    let uid = pod["metadata"]["uid"].as_str().context("uid")?.to_owned();
    Ok((name, uid))
}

/// The shipped daemon config with `keys` set, and the daemon restarted with it.
fn reconfigure(node: &Node, shipped: &str, keys: Value) -> Result<()> {
    let mut config: Value = serde_json::from_str(shipped)?;
    if let (Some(config), Some(keys)) = (config.as_object_mut(), keys.as_object()) {
        config.extend(keys.clone());
    }
    node.set_daemon_config(&config.to_string())
}

#[test]
fn thick_mode_reports_a_pod_without_its_networks_and_deletes_it_when_asked() -> Result<()> {
    let node = up("thick")?;
    let shipped = node.daemon_config()?;
    let result = reported_and_deleted(&node, &shipped);
    // The node as it was, whatever happened.
    node.set_daemon_config(&shipped)?;
    result
}

fn reported_and_deleted(node: &Node, shipped: &str) -> Result<()> {
    // Looks every 5 s rather than 30, so that the test waits less; without hot-plug, which
    // would attach a network named after the pod started.
    let keys = json!({"missingNetworksCheckSeconds": 5, "hotPlug": false});
    reconfigure(node, shipped, keys)?;
    let deployment = e2e::sleeping_deployment(APP, 1, None);
    // A pod no controller would make again: reported, never deleted.
    let bare = e2e::sleeping_pod("stray-bare", None);
    node.apply(&nad())?;
    node.apply(&deployment)?;
    node.apply(&bare)?;
    node.wait_ready("default", "stray-bare", Duration::from_secs(120))?;
    let (pod, uid) = the_pod(node)?;
    // As a pod whose sandbox came up while multus's config was not in place: it asks for a
    // network that nothing attached.
    for p in [pod.as_str(), "stray-bare"] {
        node.kubectl(&["annotate", "pod", p, "k8s.v1.cni.cncf.io/networks=wanted"])?;
    }
    // Found at two looks in a row.
    let mut said = Vec::new();
    node.eventually("a MissingNetworks event", Duration::from_secs(60), || {
        said = node.events("default", &pod, "MissingNetworks")?;
        Ok(!said.is_empty())
    })?;
    ensure!(
        said.len() == 1 && said[0].starts_with("the pod runs without default/wanted"),
        "{said:?}"
    );
    let log = node.daemon_log()?;
    ensure!(
        log.lines()
            .any(|l| l.contains(&format!("pod=default/{pod}")) && l.contains("runs without")),
        "{log}"
    );
    ensure!(
        node.get("default", &format!("pod/{pod}"))?["metadata"]["uid"] == uid.as_str(),
        "the pod was deleted without being asked to"
    );

    // Asked to, the daemon deletes it, and the Deployment makes another.
    let grant = r#"[{"op": "add", "path": "/rules/-", "value":
                     {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}}]"#;
    node.kubectl(&["patch", "clusterrole", "multus", "--type=json", "-p", grant])?;
    reconfigure(
        node,
        shipped,
        json!({"missingNetworksCheckSeconds": 5, "deletePodsMissingNetworks": true, "hotPlug": false}),
    )?;
    node.eventually("the pod deleted", Duration::from_secs(120), || {
        Ok(node
            .kubectl_output(&["get", "pod", &pod], None)?
            .status
            .code()
            == Some(1))
    })?;
    let (again_name, again) = the_pod(node)?;
    ensure!(again != uid, "the Deployment's pod is still {uid}");
    // Its replacement without the network too (as when the runtime still does not run multus):
    // reported, not deleted again.
    node.kubectl(&[
        "annotate",
        "pod",
        &again_name,
        "k8s.v1.cni.cncf.io/networks=wanted",
    ])?;
    node.eventually("the replacement reported", Duration::from_secs(60), || {
        Ok(node
            .events("default", &again_name, "MissingNetworks")?
            .iter()
            .any(|m| {
                m.contains("not deleted: a pod of its controller was deleted for this already")
            }))
    })?;
    ensure!(
        node.get("default", &format!("pod/{again_name}"))?["metadata"]["uid"] == again.as_str(),
        "the replacement was deleted too"
    );
    let mut bare_said = Vec::new();
    node.eventually(
        "the bare pod reported again",
        Duration::from_secs(60),
        || {
            bare_said = node.events("default", "stray-bare", "MissingNetworks")?;
            Ok(bare_said
                .iter()
                .any(|m| m.ends_with("not deleted: no workload controller would make it again")))
        },
    )?;
    node.get("default", "pod/stray-bare")
        .context("the pod no controller owns was deleted")?;

    let role: Value =
        serde_json::from_str(&node.kubectl(&["get", "clusterrole", "multus", "-o", "json"])?)?;
    let rules = role["rules"].as_array().map_or(0, Vec::len);
    let revoke = json!([{"op": "remove", "path": format!("/rules/{}", rules - 1)}]).to_string();
    node.kubectl(&[
        "patch",
        "clusterrole",
        "multus",
        "--type=json",
        "-p",
        &revoke,
    ])?;
    node.delete(&deployment)?;
    node.delete(&bare)?;
    node.delete(&nad())?;
    Ok(())
}
