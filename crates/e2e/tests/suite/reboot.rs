//! The most-reported problem upstream: after a node reboots, pods come back without their
//! secondary networks. Here the node's runtime side loses power and boots again
//! (`scripts/cluster.sh reboot`): every pod comes back with all of its networks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::Value;

const PODS: usize = 4;

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
        node.eventually(
            &format!("{pod} running again in a new sandbox"),
            Duration::from_secs(180),
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
                Ok(ready.status.success() && interfaces(&node, pod)?.1 > *restarts)
            },
        )?;
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
