//! The scenarios of upstream multus's own end-to-end suite, on this node and against ours:
//! a simple pod, macvlan with static addresses, a secondary network's default route, a static
//! pod, subdirectory chaining onto the cluster network, and many pods at once in thick mode,
//! with the daemon's shipped config and with `connectionLimit` 1.
//! Upstream runs them on kind with CentOS pods; here the pods run the busybox test image and
//! the node's second interface (`eth1`, macvlan's master) is one end of a veth pair.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node, TEST_IMAGE};

/// Waits until the pods labelled `app: <one of apps>` are Ready.
fn ready(node: &Node, apps: &[&str]) -> Result<()> {
    let selector = format!("app in ({})", apps.join(","));
    let out = node.kubectl_output(
        &[
            "wait",
            "--for=condition=Ready",
            "-l",
            &selector,
            "--timeout=180s",
            "pod",
        ],
        None,
    )?;
    if !out.status.success() {
        let describe = node.kubectl(&["describe", "pods", "-l", &selector])?;
        anyhow::bail!("pods {selector} not Ready:\n{describe}");
    }
    Ok(())
}

fn default_gateway(node: &Node, pod: &str) -> Result<String> {
    let out = node.kubectl(&["exec", pod, "--", "ip", "route", "show", "default"])?;
    out.split_whitespace()
        .skip_while(|w| *w != "via")
        .nth(1)
        .map(str::to_owned)
        .with_context(|| format!("{pod} has no default route: {out}"))
}

/// The node's `eth1`, macvlan's master in upstream's cases: a veth whose peer stays in the node.
fn node_eth1(node: &Node) -> Result<()> {
    let links = node.exec(&["ip", "-o", "link", "show"])?;
    if !links.contains(" eth1@") {
        node.exec(&[
            "ip",
            "link",
            "add",
            "eth1",
            "type",
            "veth",
            "peer",
            "name",
            "eth1-peer",
        ])?;
        node.exec(&["ip", "link", "set", "eth1", "up"])?;
        node.exec(&["ip", "link", "set", "eth1-peer", "up"])?;
    }
    Ok(())
}

const MACVLAN_NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan1-config
  namespace: default
spec:
  config: '{"cniVersion": "1.0.0", "plugins": [
      {"type": "macvlan", "capabilities": {"ips": true}, "master": "eth1", "mode": "bridge",
       "ipam": {"type": "static"}},
      {"type": "tuning"}]}'
"#;

/// The default-route case's NAD, as upstream writes it: no `ips` capability; the address
/// reaches static IPAM through CNI_ARGS.
const DEFAULT_ROUTE_NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: default-route-config
  namespace: default
spec:
  config: '{"cniVersion": "1.0.0", "plugins": [
      {"type": "macvlan", "master": "eth1", "mode": "bridge", "ipam": {"type": "static"}}]}'
"#;

#[test]
fn simple_pod() -> Result<()> {
    let node = up("thin")?;
    let yaml = e2e::sleeping_pod("simple-centos1", None);
    node.apply(&yaml)?;
    ready(&node, &["simple-centos1"])?;
    ensure!(node.ipv4("simple-centos1", "eth0")?.starts_with("10.42.0."));
    node.delete(&yaml)?;
    Ok(())
}

#[test]
fn simple_macvlan() -> Result<()> {
    let node = up("thin")?;
    node_eth1(&node)?;
    let pods = [
        e2e::sleeping_pod(
            "macvlan1-worker1",
            Some(r#"[{"name": "macvlan1-config", "ips": ["10.1.1.11/24"]}]"#),
        ),
        e2e::sleeping_pod(
            "macvlan1-worker2",
            Some(r#"[{"name": "macvlan1-config", "ips": ["10.1.1.12/24"]}]"#),
        ),
    ]
    .join("---\n");
    node.apply(MACVLAN_NAD)?;
    node.apply(&pods)?;
    ready(&node, &["macvlan1-worker1", "macvlan1-worker2"])?;
    ensure!(node.ipv4("macvlan1-worker1", "net1")? == "10.1.1.11");
    ensure!(node.ipv4("macvlan1-worker2", "net1")? == "10.1.1.12");
    // Both on the same master in bridge mode: they reach each other.
    node.kubectl(&[
        "exec",
        "macvlan1-worker1",
        "--",
        "ping",
        "-c",
        "1",
        "-W",
        "5",
        "10.1.1.12",
    ])?;
    node.delete(&pods)?;
    node.delete(MACVLAN_NAD)?;
    Ok(())
}

#[test]
fn default_route() -> Result<()> {
    let node = up("thin")?;
    node_eth1(&node)?;
    let pods = [
        e2e::sleeping_pod(
            "default-route-worker1",
            Some(
                r#"[{"name": "default-route-config", "ips": ["10.1.1.21/24"], "default-route": ["10.1.1.254"]}]"#,
            ),
        ),
        e2e::sleeping_pod(
            "default-route-worker2",
            Some(r#"[{"name": "default-route-config", "ips": ["10.1.1.22/24"]}]"#),
        ),
    ]
    .join("---\n");
    node.apply(DEFAULT_ROUTE_NAD)?;
    node.apply(&pods)?;
    ready(&node, &["default-route-worker1", "default-route-worker2"])?;
    ensure!(node.ipv4("default-route-worker1", "net1")? == "10.1.1.21");
    ensure!(default_gateway(&node, "default-route-worker1")? == "10.1.1.254");
    ensure!(node.ipv4("default-route-worker2", "net1")? == "10.1.1.22");
    ensure!(default_gateway(&node, "default-route-worker2")? == "10.42.0.1");
    node.delete(&pods)?;
    node.delete(DEFAULT_ROUTE_NAD)?;
    Ok(())
}

#[test]
fn static_pod() -> Result<()> {
    let node = up("thin")?;
    let nad = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: bridge-nad
  namespace: default
spec:
  config: '{"cniVersion": "0.3.1", "name": "testnet", "type": "bridge", "bridge": "testnet0",
    "ipam": {"type": "host-local", "subnet": "10.10.0.0/16"}}'
"#;
    node.apply(nad)?;
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: static-web
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: "bridge-nad"
spec:
  containers:
    - name: web
      image: {TEST_IMAGE}
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "trap : TERM INT; sleep 10000 & wait"]
"#
    );
    node.exec(&[
        "sh",
        "-c",
        &format!("cat > /etc/kubernetes/manifests/static-web.yaml <<'EOF'\n{manifest}EOF"),
    ])?;
    // The mirror pod the kubelet creates is named after the node.
    let name = "static-web-multus-rs-node";
    node.eventually("the static pod's mirror", Duration::from_secs(120), || {
        Ok(node
            .kubectl_output(&["get", "pod", name], None)?
            .status
            .success())
    })?;
    node.wait_ready("default", name, Duration::from_secs(120))?;
    ensure!(node.ipv4(name, "net1")?.starts_with("10.10."));
    node.exec(&["rm", "/etc/kubernetes/manifests/static-web.yaml"])?;
    node.eventually("the static pod gone", Duration::from_secs(120), || {
        Ok(!node
            .kubectl_output(&["get", "pod", name], None)?
            .status
            .success())
    })?;
    node.delete(nad)?;
    Ok(())
}

/// In thick mode, as upstream runs it: `00-multus.conf` names the cluster network by path, and a
/// conflist file gets its subdirectory's plugins. (Thin mode's `00-multus.conf` carries the
/// cluster network inline, in upstream's installer as in ours, so there is no file to chain to.)
#[test]
fn subdirectory_chaining() -> Result<()> {
    let node = up("thick")?;
    // A plugin config in the cluster network's subdirectory (named after the network, here
    // "cluster"), appended to its plugins: tuning sets a sysctl on eth0.
    node.exec(&[
        "sh",
        "-c",
        r#"mkdir -p /etc/cni/net.d/cluster && cat > /etc/cni/net.d/cluster/sysctltwiddle.conf <<'EOF'
{"cniVersion": "1.0.0", "name": "sysctltwiddle", "type": "tuning",
 "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}}
EOF"#,
    ])?;
    let yaml = e2e::sleeping_pod("sysctl-modified", None);
    let result = (|| {
        node.apply(&yaml)?;
        ready(&node, &["sysctl-modified"])?;
        let value = node.kubectl(&[
            "exec",
            "sysctl-modified",
            "--",
            "cat",
            "/proc/sys/net/ipv4/conf/eth0/arp_filter",
        ])?;
        ensure!(value.trim() == "1", "arp_filter on eth0 is {value}");
        node.delete(&yaml)
    })();
    node.exec(&["rm", "-r", "/etc/cni/net.d/cluster"])?;
    result
}

#[test]
fn many_pods_in_thick_mode() -> Result<()> {
    let node = up("thick")?;
    six_pods_at_once(&node)
}

/// Upstream's connection-limit case: the same six pods with the daemon taking one call at a
/// time.
#[test]
fn many_pods_with_a_connection_limit_of_one() -> Result<()> {
    let node = up("thick")?;
    let shipped = node.daemon_config()?;
    ensure!(
        shipped.contains("\"connectionLimit\": 16"),
        "the shipped daemon config: {shipped}"
    );
    node.set_daemon_config(&shipped.replace("\"connectionLimit\": 16", "\"connectionLimit\": 1"))?;
    let result = (|| {
        let log = node.daemon_log()?;
        ensure!(
            log.contains("(1 calls at once"),
            "the daemon did not take the limit: {log}"
        );
        six_pods_at_once(&node)
    })();
    node.set_daemon_config(&shipped)?;
    result
}

fn six_pods_at_once(node: &Node) -> Result<()> {
    let deployment = e2e::sleeping_deployment("many", 6, None);
    node.apply(&deployment)?;
    node.eventually("6 pods", Duration::from_secs(60), || {
        let names = node.kubectl(&["get", "pods", "-l", "app=many", "-o", "name"])?;
        Ok(names.lines().count() == 6)
    })?;
    let ready = ready(node, &["many"]);
    node.delete(&deployment)?;
    ready
}
