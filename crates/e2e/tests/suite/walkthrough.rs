//! MicroShift's Multus walkthrough, as its guide gives it, on the real node installed from
//! deploy/microshift: a bridge NAD, a pod serving HTTP on 8080, and a request from the node to
//! the pod's second interface.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, TEST_IMAGE};

const NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: bridge-conf
  namespace: default
spec:
  config: '{
      "cniVersion": "0.4.0",
      "type": "bridge",
      "bridge": "br-test",
      "mode": "bridge",
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.10.0.0/16", "rangeStart": "10.10.1.20",
                     "rangeEnd": "10.10.3.50", "gateway": "10.10.0.254"}]],
        "dataDir": "/var/lib/cni/br-test"
      }
    }'
"#;

fn pod_yaml() -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: test-bridge
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: bridge-conf
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: {TEST_IMAGE}
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "echo Hello from net1 > /www/index.html && exec httpd -f -p 8080 -h /www"]
"#
    )
}

/// The pod's MAC of an interface, as the pod sees it.
fn mac(node: &e2e::Node, ifname: &str) -> Result<String> {
    Ok(node
        .kubectl(&[
            "exec",
            "test-bridge",
            "--",
            "cat",
            &format!("/sys/class/net/{ifname}/address"),
        ])?
        .trim()
        .to_owned())
}

#[test]
fn microshift_walkthrough() -> Result<()> {
    let node = up("microshift")?;
    let state = node.cni_state()?;
    node.apply(NAD)?;
    node.apply(&pod_yaml())?;
    node.wait_ready("default", "test-bridge", Duration::from_secs(120))?;

    // network-status, byte for byte as upstream writes it: 4-space indents, the cluster network
    // first and marked default, every entry with its MAC and an empty dns.
    let pod = node.get("default", "pod/test-bridge")?;
    let status = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
        .as_str()
        .context("no network-status")?;
    let eth0_ip = pod["status"]["podIP"].as_str().context("no pod IP")?;
    let expected = format!(
        "[{{\n    \"name\": \"ovn-kubernetes\",\n    \"interface\": \"eth0\",\n    \"ips\": [\n        \"{eth0_ip}\"\n    ],\n    \"mac\": \"{}\",\n    \"default\": true,\n    \"dns\": {{}}\n}},{{\n    \"name\": \"default/bridge-conf\",\n    \"interface\": \"net1\",\n    \"ips\": [\n        \"10.10.1.20\"\n    ],\n    \"mac\": \"{}\",\n    \"dns\": {{}}\n}}]",
        mac(&node, "eth0")?,
        mac(&node, "net1")?
    );
    ensure!(
        status == expected,
        "network-status:\n{status}\nexpected:\n{expected}"
    );

    // `kubectl describe` shows one AddedInterface per interface, from multus.
    let added = node.events("default", "test-bridge", "AddedInterface")?;
    ensure!(
        added
            == [
                format!("Add eth0 [{eth0_ip}/24] from ovn-kubernetes"),
                "Add net1 [10.10.1.20/16] from default/bridge-conf".to_owned()
            ],
        "AddedInterface events: {added:?}"
    );
    let describe = node.kubectl(&["describe", "pod", "test-bridge"])?;
    ensure!(
        describe.contains("AddedInterface") && describe.contains("multus"),
        "{describe}"
    );

    // From the node, as the guide does: an address on the bridge, then the page.
    node.exec(&["ip", "addr", "add", "10.10.3.1/16", "dev", "br-test"])?;
    let page = node.exec(&["curl", "-s", "--max-time", "10", "http://10.10.1.20:8080/"])?;
    ensure!(page.trim() == "Hello from net1", "the page: {page:?}");

    // Deleting the pod leaves nothing: no veth, no reservation, no cached result.
    let veths_with_pod = node.veths()?.len();
    node.delete(&pod_yaml())?;
    node.eventually("the pod's two veths gone", Duration::from_secs(30), || {
        Ok(node.veths()?.len() + 2 == veths_with_pod)
    })?;
    node.eventually("no CNI state left", Duration::from_secs(30), || {
        Ok(node.cni_state()? == state)
    })
    .with_context(|| format!("left: {:?}", node.cni_state()))?;
    node.exec(&["ip", "addr", "del", "10.10.3.1/16", "dev", "br-test"])?;
    node.delete(NAD)?;
    Ok(())
}
