//! CNI STATUS under containerd 2 on the real node: with a cluster network of CNI 1.1.0, the
//! shim's `00-multus.conf` is 1.1.0 too, and containerd asks it STATUS. While thick mode's
//! daemon is away (its config still in place), the node reports its network not ready, naming
//! the daemon's socket, and takes no pod; once the daemon is back, the node is ready again.

use std::time::Duration;

use anyhow::{Context, Result};
use e2e::{up, Node};
use serde_json::Value;

const CLUSTER_CONF: &str = "/etc/cni/net.d/10-cluster.conflist";

/// The node's Ready condition: its status and message.
fn ready(node: &Node) -> Result<(String, String)> {
    let n: Value =
        serde_json::from_str(&node.kubectl(&["get", "node", "multus-rs-node", "-o", "json"])?)?;
    let c = n["status"]["conditions"]
        .as_array()
        .context("conditions")?
        .iter()
        .find(|c| c["type"] == "Ready")
        .context("no Ready condition")?
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    Ok((text("status"), text("message")))
}

/// The cluster network's config with `version` as its cniVersion.
fn cluster_version(node: &Node, version: &str) -> Result<()> {
    node.exec(&[
        "sh",
        "-c",
        r#"sed "s/\"cniVersion\": *\"[^\"]*\"/\"cniVersion\": \"$1\"/" "$0" > "$0.new" && mv "$0.new" "$0""#,
        CLUSTER_CONF,
        version,
    ])?;
    Ok(())
}

#[test]
fn containerd_holds_pods_while_thick_modes_daemon_is_away() -> Result<()> {
    let node = up("thick")?;
    cluster_version(&node, "1.1.0")?;
    let result = held(&node);
    // The node as it was, whatever happened.
    let _ = node.bring_multus_back();
    cluster_version(&node, "1.0.0")?;
    node.multus_rolled_out()?;
    node.eventually(
        "00-multus.conf back at 1.0.0",
        Duration::from_secs(60),
        || {
            Ok(node
                .exec(&["cat", "/etc/cni/net.d/00-multus.conf"])?
                .contains(r#""cniVersion":"1.0.0""#))
        },
    )?;
    result
}

fn held(node: &Node) -> Result<()> {
    node.eventually("00-multus.conf at 1.1.0", Duration::from_secs(60), || {
        Ok(node
            .exec(&["cat", "/etc/cni/net.d/00-multus.conf"])?
            .contains(r#""cniVersion":"1.1.0""#))
    })?;
    node.eventually("the node Ready", Duration::from_secs(60), || {
        Ok(ready(node)?.0 == "True")
    })?;

    // The daemon away: its pod gone from the node, 00-multus.conf left in place.
    node.send_multus_away()?;
    let mut said = String::new();
    node.eventually(
        "the node's network not ready",
        Duration::from_secs(90),
        || {
            let (status, message) = ready(node)?;
            said = message;
            Ok(status == "False")
        },
    )?;
    anyhow::ensure!(
        said.contains("NetworkReady=false") && said.contains("multus-shim"),
        "the node says: {said}"
    );
    anyhow::ensure!(
        said.contains("/run/multus/multus.sock"),
        "the node's condition does not name the daemon's socket: {said}"
    );

    // Back, and the node is ready again.
    node.bring_multus_back()?;
    node.eventually("the node Ready again", Duration::from_secs(120), || {
        Ok(ready(node)?.0 == "True")
    })?;
    Ok(())
}
