//! whereabouts on the real node: the reconciler's CronJob, run as a Job with the shipped RBAC,
//! frees a leaked address and keeps a live pod's.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::{json, Value};

const NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: wb
  namespace: default
spec:
  config: '{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-wb",
    "ipam": {"type": "whereabouts", "range": "10.21.0.0/24"}}'
"#;

fn pod() -> String {
    e2e::sleeping_pod("wb-live", Some("wb"))
}

/// The pool of 10.21.0.0/24: its namespace, name and allocations.
fn pool(node: &Node) -> Result<(String, String, serde_json::Map<String, Value>)> {
    let pools: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "ippools.whereabouts.cni.cncf.io",
        "-A",
        "-o",
        "json",
    ])?)?;
    let p = pools["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["spec"]["range"] == "10.21.0.0/24")
        .context("no pool for 10.21.0.0/24")?;
    Ok((
        p["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        p["spec"]["allocations"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    ))
}

#[test]
fn the_reconciler_job_frees_a_leaked_address() -> Result<()> {
    let node = up("whereabouts")?;
    node.apply(NAD)?;
    node.apply(&pod())?;
    node.wait_ready("default", "wb-live", Duration::from_secs(120))?;
    let (ns, name, live) = pool(&node)?;
    ensure!(live.len() == 1, "allocations {live:?}");

    // A leak: an allocation whose pod is gone, as a node that died before its DEL leaves it.
    let leak = json!({"spec": {"allocations": {"200": {
        "id": "0123456789abcdef", "podref": "default/gone", "ifname": "net1"}}}});
    node.kubectl(&[
        "-n",
        &ns,
        "patch",
        "ippools.whereabouts.cni.cncf.io",
        &name,
        "--type=merge",
        "-p",
        &leak.to_string(),
    ])?;
    ensure!(pool(&node)?.2.len() == 2);

    node.kubectl(&[
        "-n",
        "multus",
        "create",
        "job",
        "reconcile-now",
        "--from=cronjob/whereabouts-reconciler",
    ])?;
    let done = node.kubectl_output(
        &[
            "-n",
            "multus",
            "wait",
            "--for=condition=Complete",
            "job/reconcile-now",
            "--timeout=120s",
        ],
        None,
    )?;
    let logs = node
        .kubectl(&["-n", "multus", "logs", "job/reconcile-now"])
        .unwrap_or_default();
    ensure!(
        done.status.success(),
        "the reconciler Job did not complete: {logs}"
    );
    let (_, _, after) = pool(&node)?;
    ensure!(
        after.len() == 1 && after.keys().eq(live.keys()),
        "after the reconciler: {after:?} (the live pod's: {live:?}); its log: {logs}"
    );

    node.kubectl(&[
        "-n",
        "multus",
        "delete",
        "job",
        "reconcile-now",
        "--wait=true",
    ])?;
    node.delete(&pod())?;
    node.eventually("the pool empty", Duration::from_secs(30), || {
        Ok(pool(&node)?.2.is_empty())
    })?;
    node.delete(NAD)?;
    Ok(())
}
