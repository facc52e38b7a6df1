//! Thick mode's caches against a real watch: a NAD changed between two pods is what the second
//! pod gets.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node, TEST_IMAGE};

fn nad(subnet: &str) -> String {
    format!(
        r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: changing
  namespace: default
spec:
  config: '{{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-watch",
    "ipam": {{"type": "host-local", "subnet": "{subnet}", "dataDir": "/var/lib/cni/e2e-watch"}}}}'
"#
    )
}

fn pod(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: changing
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: sleep
      image: {TEST_IMAGE}
      imagePullPolicy: IfNotPresent
      command: ["sleep", "3600"]
"#
    )
}

fn net1(node: &Node, pod: &str) -> Result<String> {
    let addr = node.kubectl(&["exec", pod, "--", "ip", "-4", "-o", "addr", "show", "net1"])?;
    addr.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .map(str::to_owned)
        .with_context(|| format!("{pod} has no net1 address: {addr}"))
}

#[test]
fn a_nad_changed_between_two_pods() -> Result<()> {
    let node = up("thick")?;
    node.apply(&nad("10.30.0.0/24"))?;
    node.apply(&pod("before"))?;
    node.wait_ready("default", "before", Duration::from_secs(120))?;
    ensure!(net1(&node, "before")?.starts_with("10.30.0."));

    node.apply(&nad("10.31.0.0/24"))?;
    node.apply(&pod("after"))?;
    node.wait_ready("default", "after", Duration::from_secs(120))?;
    let after = net1(&node, "after")?;
    ensure!(
        after.starts_with("10.31.0."),
        "the second pod got {after}: the old NAD"
    );
    // The first pod keeps what it had.
    ensure!(net1(&node, "before")?.starts_with("10.30.0."));

    node.delete(&format!("{}---\n{}", pod("before"), pod("after")))?;
    node.delete(&nad("10.31.0.0/24"))?;
    Ok(())
}
