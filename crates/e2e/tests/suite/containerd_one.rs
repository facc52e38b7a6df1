//! The node with Debian's containerd 1.6 instead of containerd 2: multus attaches a pod's
//! networks and writes network-status the same way.

use std::time::Duration;

use anyhow::{ensure, Context, Result};

#[test]
fn a_pod_gets_its_networks_under_containerd_1() -> Result<()> {
    let node = e2e::up_with("thin", &["--containerd", "1"])?;
    let version = node.kubectl(&[
        "get",
        "node",
        "multus-rs-node",
        "-o",
        "jsonpath={.status.nodeInfo.containerRuntimeVersion}",
    ])?;
    ensure!(
        version.starts_with("containerd://1."),
        "the runtime is {version}"
    );
    let yaml = format!(
        r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: c1
  namespace: default
spec:
  config: '{{"cniVersion": "0.4.0", "type": "bridge", "bridge": "br-c1",
    "ipam": {{"type": "host-local", "subnet": "10.34.0.0/24", "dataDir": "/var/lib/cni/e2e-c1"}}}}'
---{}"#,
        e2e::sleeping_pod("c1", Some("c1"))
    );
    node.apply(&yaml)?;
    node.wait_ready("default", "c1", Duration::from_secs(120))?;
    let pod = node.get("default", "pod/c1")?;
    let status: serde_json::Value = serde_json::from_str(
        pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
            .as_str()
            .context("no network-status")?,
    )?;
    ensure!(
        status[1]["interface"] == "net1" && status[1]["ips"][0] == "10.34.0.2",
        "network-status {status}"
    );
    node.delete(&yaml)?;
    Ok(())
}
