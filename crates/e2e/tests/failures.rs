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

/// Pods deleted while the API server is down: the kubelet tears them down, multus's DEL works
/// without the API, and the pods are gone once the server is back.
#[test]
fn pods_deleted_while_the_api_server_is_down() -> Result<()> {
    let node = up("thin")?;
    let nad = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: outage
  namespace: default
spec:
  config: '{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-outage",
    "ipam": {"type": "host-local", "subnet": "10.32.0.0/24", "dataDir": "/var/lib/cni/e2e-outage"}}'
"#;
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: outage
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: outage
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: sleep
      image: {TEST_IMAGE}
      imagePullPolicy: IfNotPresent
      command: ["sleep", "3600"]
"#
    );
    let state = node.cni_state()?;
    let veths = node.veths()?.len();
    node.apply(nad)?;
    node.apply(&pod)?;
    node.wait_ready("default", "outage", Duration::from_secs(120))?;
    ensure!(node.veths()?.len() == veths + 2);

    node.kubectl(&["delete", "pod", "outage", "--wait=false"])?;
    e2e::cluster(&["stop", "apiserver"])?;
    let torn_down = node.eventually(
        "the pod's networks deleted with the API server down",
        Duration::from_secs(90),
        || Ok(node.veths()?.len() == veths && node.cni_state()? == state),
    );
    e2e::cluster(&["start", "apiserver"])?;
    torn_down?;
    node.eventually("the pod gone", Duration::from_secs(60), || {
        let out = node.kubectl_output(&["get", "pod", "outage"], None)?;
        Ok(String::from_utf8_lossy(&out.stderr).contains("NotFound"))
    })?;
    node.delete(nad)?;
    Ok(())
}
