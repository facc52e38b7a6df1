//! What a user sees on the real node when a pod's networks cannot be had.

use std::time::Duration;

use anyhow::{ensure, Result};
use e2e::{up, TEST_IMAGE};

/// A pod naming a NAD that does not exist stays without a sandbox, and `kubectl describe`
/// says which NAD is missing; deleting it leaves nothing.
#[test]
fn a_missing_nad_is_named_in_describe() -> Result<()> {
    let node = up("thin")?;
    let state = node.cni_state()?;
    let veths = node.veths()?.len();
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: wants-missing
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: no-such-nad
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: sleep
      image: {TEST_IMAGE}
      imagePullPolicy: IfNotPresent
      command: ["sleep", "3600"]
"#
    );
    node.apply(&pod)?;
    node.eventually(
        "a NoNetworkFound event on the pod",
        Duration::from_secs(60),
        || {
            Ok(!node
                .events("default", "wants-missing", "NoNetworkFound")?
                .is_empty())
        },
    )?;
    let found = node.events("default", "wants-missing", "NoNetworkFound")?;
    ensure!(
        found.iter().all(|m| m
            == "cannot find a network-attachment-definition (no-such-nad) in namespace (default)"),
        "NoNetworkFound: {found:?}"
    );
    let describe = node.kubectl(&["describe", "pod", "wants-missing"])?;
    ensure!(
        describe.contains("NoNetworkFound") && describe.contains("no-such-nad"),
        "describe does not say which NAD: {describe}"
    );
    let phase = node.kubectl(&[
        "get",
        "pod",
        "wants-missing",
        "-o",
        "jsonpath={.status.phase}",
    ])?;
    ensure!(phase == "Pending", "phase {phase}");
    node.delete(&pod)?;
    node.eventually("nothing left", Duration::from_secs(30), || {
        Ok(node.cni_state()? == state && node.veths()?.len() == veths)
    })?;
    Ok(())
}
