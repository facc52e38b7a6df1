//! The most-reported problem upstream: after a node reboots, pods come back without their
//! secondary networks. Here the node's runtime side loses power and boots again
//! (`scripts/cluster.sh reboot`): every pod comes back with all of its networks. Booted without
//! multus's config, in thick mode: under containerd 1.x every pod comes back with its networks or
//! is reported; under containerd 2 and CRI-O, with multus's config in a directory of its own,
//! every pod comes back with its networks.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::Value;

const PODS: usize = 4;
/// How often thick mode's daemon looks for pods missing networks in the reboots without
/// multus's config.
const CHECK: Duration = Duration::from_secs(5);

fn nad() -> String {
    e2e::bridge_nad(
        "survives",
        "br-reboot",
        r#"{"type": "host-local", "subnet": "10.33.0.0/24", "dataDir": "/var/lib/cni/e2e-reboot"}"#,
    )
}

fn pods() -> String {
    (0..PODS)
        .map(|i| e2e::sleeping_pod(&format!("reboot-{i}"), Some("survives")))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Each pod's interfaces by name, as the pod sees them, and its restart count.
fn interfaces(node: &Node, pod: &str) -> Result<(Vec<String>, i64)> {
    let links = node.kubectl(&["exec", pod, "--", "ls", "/sys/class/net"])?;
    let mut names: Vec<String> = links.split_whitespace().map(str::to_owned).collect();
    names.sort();
    let status: Value = node.get("default", &format!("pod/{pod}"))?;
    let restarts = status["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .context("restartCount")?;
    Ok((names, restarts))
}

/// Network-status names each interface the pod has.
fn status_interfaces(node: &Node, pod: &str) -> Result<Vec<String>> {
    let p = node.get("default", &format!("pod/{pod}"))?;
    let text = p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
        .as_str()
        .context("no network-status")?;
    let list: Vec<Value> = serde_json::from_str(text)?;
    Ok(list
        .iter()
        .filter_map(|e| e["interface"].as_str().map(str::to_owned))
        .collect())
}

/// Waits until `pod` is Ready in a sandbox made after the reboot (its restart count past
/// `before`).
fn back_in_a_new_sandbox(node: &Node, pod: &str, before: i64) -> Result<()> {
    node.eventually(
        &format!("{pod} running again in a new sandbox"),
        Duration::from_secs(240),
        || {
            let ready = node.kubectl_output(
                &[
                    "wait",
                    "--for=condition=Ready",
                    &format!("pod/{pod}"),
                    "--timeout=1s",
                ],
                None,
            )?;
            Ok(ready.status.success() && interfaces(node, pod)?.1 > before)
        },
    )
}

#[test]
fn every_pod_comes_back_with_all_its_networks() -> Result<()> {
    let node = up("thin")?;
    node.apply(&nad())?;
    node.apply(&pods())?;
    let mut before = BTreeMap::new();
    for i in 0..PODS {
        let pod = format!("reboot-{i}");
        node.wait_ready("default", &pod, Duration::from_secs(120))?;
        before.insert(pod.clone(), interfaces(&node, &pod)?);
    }

    e2e::cluster(&["reboot"])?;

    for (pod, (links, restarts)) in &before {
        ensure!(links.contains(&"net1".to_owned()), "{pod} had {links:?}");
        back_in_a_new_sandbox(&node, pod, *restarts)?;
        let (after, _) = interfaces(&node, pod)?;
        ensure!(
            &after == links,
            "{pod} came back with {after:?}, before the reboot {links:?}"
        );
        let listed = status_interfaces(&node, pod)?;
        ensure!(
            listed == ["eth0", "net1"],
            "{pod}'s network-status after the reboot lists {listed:?}"
        );
    }
    node.delete(&pods())?;
    node.delete(&nad())?;
    Ok(())
}

/// The reboot upstream's users report: the node boots with the cluster network's config in
/// place and multus's gone (as upstream's thick daemon removes it when it stops), so the
/// runtime may make sandboxes with the cluster network alone before multus's daemon is back.
/// Thick mode, on the node `up_args` makes, whose runtime reports a version starting with
/// `runtime`: no pod runs without its networks, or each one that does is reported within a
/// minute of the daemon's return (a `MissingNetworks` event). How many pods came back with
/// their networks.
fn primary_first(up_args: &[&str], runtime: &str) -> Result<usize> {
    let node = e2e::up_with("thick", up_args)?;
    let version = node.kubectl(&[
        "get",
        "node",
        "multus-rs-node",
        "-o",
        "jsonpath={.status.nodeInfo.containerRuntimeVersion}",
    ])?;
    ensure!(version.starts_with(runtime), "the runtime is {version}");
    // The daemon that starts after the reboot looks every CHECK rather than every 30 s, so
    // that the waits below are short.
    let mut config: Value = serde_json::from_str(&node.daemon_config()?)?;
    config["missingNetworksCheckSeconds"] = CHECK.as_secs().into();
    node.store_daemon_config(&config.to_string())?;
    node.apply(&nad())?;
    node.apply(&pods())?;
    let mut restarts = BTreeMap::new();
    for i in 0..PODS {
        let pod = format!("reboot-{i}");
        node.wait_ready("default", &pod, Duration::from_secs(120))?;
        let listed = status_interfaces(&node, &pod)?;
        ensure!(
            listed == ["eth0", "net1"],
            "{pod}'s network-status before the reboot lists {listed:?}"
        );
        restarts.insert(pod.clone(), interfaces(&node, &pod)?.1);
    }

    // Only this boot's reports count.
    node.kubectl(&[
        "delete",
        "events",
        "--field-selector",
        "reason=MissingNetworks",
    ])?;
    e2e::cluster(&["reboot", "--without-multus-config"])?;

    for (pod, before) in &restarts {
        back_in_a_new_sandbox(&node, pod, *before)?;
    }
    node.multus_rolled_out()?;
    // The daemon's image has no cat: its config volume is read on the node.
    let pod = node.daemon_pod()?;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .context("the daemon pod's uid")?;
    let read = e2e::cluster(&[
        "exec",
        "--",
        "cat",
        &format!(
            "/var/lib/kubelet/pods/{}/volumes/kubernetes.io~configmap/daemon-config/daemon-config.json",
            uid.trim()
        ),
    ])?;
    let read: Value = serde_json::from_str(&read)?;
    ensure!(
        read["missingNetworksCheckSeconds"] == CHECK.as_secs(),
        "the daemon came back with {read}"
    );
    let (mut whole, mut reported) = (0, 0);
    for pod in restarts.keys() {
        let mut outcome = None;
        node.eventually(
            &format!("{pod} with its networks, or reported"),
            Duration::from_secs(60),
            || {
                let (links, _) = interfaces(&node, pod)?;
                outcome = if links.contains(&"net1".to_owned()) {
                    Some(true)
                } else if node
                    .events("default", pod, "MissingNetworks")?
                    .iter()
                    .any(|m| m.contains("runs without default/survives"))
                {
                    Some(false)
                } else {
                    None
                };
                Ok(outcome.is_some())
            },
        )?;
        if outcome == Some(true) {
            whole += 1;
        } else {
            reported += 1;
        }
    }
    // Two more looks of the daemon: a pod that came back with its networks is never reported
    // (the kubelet may report its new address after multus wrote its network-status). With no
    // such pod, there is nothing to wait for.
    if whole > 0 {
        std::thread::sleep(2 * CHECK + Duration::from_secs(5));
    }
    for pod in restarts.keys() {
        let (links, _) = interfaces(&node, pod)?;
        let said = node.events("default", pod, "MissingNetworks")?;
        ensure!(
            !links.contains(&"net1".to_owned()) || said.is_empty(),
            "{pod} has its networks and was reported: {said:?}"
        );
    }
    // Past libtest's capture, into CI's log: the closing note quotes this line.
    let _ = writeln!(
        std::io::stderr().lock(),
        "e2e: reboot without multus's config, up {}: {whole} of {PODS} pods came back with their networks, {reported} without them and reported",
        up_args.join(" ")
    );
    node.delete(&pods())?;
    node.delete(&nad())?;
    Ok(whole)
}

/// Under Debian's containerd 1.6, which also shows that multus attaches pods and writes their
/// network-status under containerd 1.x. (Under containerd 2 and CRI-O the runtime picks the
/// cluster network's config the same way, and the daemon that reports the pods is the same:
/// that case costs CI more than it shows, so they run the layout below instead.)
#[test]
fn a_reboot_with_the_cluster_networks_config_first_leaves_no_pod_unreported_containerd_1(
) -> Result<()> {
    primary_first(&["--containerd", "1"], "containerd://1.").map(drop)
}

/// The same reboot with multus's config in a directory of its own, the one the runtime reads
/// (deploy/own-conf-dir, and the runtime's setting docs/install.md gives): the runtime never
/// sees the cluster network's config, so it makes no sandbox until multus's config is back, and
/// every pod comes back with its networks.
fn own_conf_dir(runtime_args: &[&str], runtime: &str) -> Result<()> {
    let up_args = [runtime_args, &["--own-conf-dir"]].concat();
    let whole = primary_first(&up_args, runtime)?;
    ensure!(
        whole == PODS,
        "{whole} of {PODS} pods came back with their networks"
    );
    Ok(())
}

#[test]
fn a_reboot_in_a_conf_dir_of_multus_own_brings_every_pod_back_whole_containerd_2() -> Result<()> {
    own_conf_dir(&["--containerd", "2"], "containerd://2.")
}

#[test]
fn a_reboot_in_a_conf_dir_of_multus_own_brings_every_pod_back_whole_cri_o() -> Result<()> {
    own_conf_dir(&["--cri-o"], "cri-o://")
}
