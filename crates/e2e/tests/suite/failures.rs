//! What a user sees on the real node when a pod's networks cannot be had.

use std::time::Duration;

use anyhow::{ensure, Context as _, Result};
use e2e::up;

/// A pod naming a NAD that does not exist stays without a sandbox, and `kubectl describe`
/// says which NAD is missing; deleting it leaves nothing.
#[test]
fn a_missing_nad_is_named_in_describe() -> Result<()> {
    let node = up("thin")?;
    let state = node.cni_state()?;
    let veths = node.veths()?.len();
    let pod = e2e::sleeping_pod("wants-missing", Some("no-such-nad"));
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
    // Nothing of this pod left: what the node held before may only have gone (a pod of the
    // mode `up` replaced may still have been going away when the baseline was taken).
    node.eventually("nothing left", Duration::from_secs(30), || {
        let now = node.cni_state()?;
        Ok(now.iter().all(|f| state.contains(f)) && node.veths()?.len() <= veths)
    })?;
    Ok(())
}

/// Pods deleted while the API server is down: the kubelet tears them down, multus's DEL works
/// without the API, and the pods are gone once the server is back.
///
/// The API server is stopped only once the kubelet has begun the pod's termination (its preStop
/// hook leaves a mark on the node), and the hook holds the teardown until the server is surely
/// down: stopping it right after `kubectl delete` could beat the deletion's watch event to the
/// kubelet, and then nothing is torn down until the server is back.
#[test]
fn pods_deleted_while_the_api_server_is_down() -> Result<()> {
    const MARK: &str = "/var/log/e2e-outage/stopping";
    let node = up("thin")?;
    let nad = &e2e::bridge_nad(
        "outage",
        "br-outage",
        r#"{"type": "host-local", "subnet": "10.32.0.0/24", "dataDir": "/var/lib/cni/e2e-outage"}"#,
    );
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
  terminationGracePeriodSeconds: 30
  volumes:
    - name: mark
      hostPath: {{path: /var/log/e2e-outage, type: DirectoryOrCreate}}
  containers:
    - name: sleep
      image: {}
      imagePullPolicy: IfNotPresent
      command: ["sleep", "3600"]
      volumeMounts: [{{name: mark, mountPath: /mark}}]
      lifecycle:
        preStop:
          exec: {{command: ["sh", "-c", "touch /mark/stopping; sleep 15"]}}
"#,
        e2e::TEST_IMAGE
    );
    node.exec(&["rm", "-rf", "/var/log/e2e-outage"])?;
    // The baseline may still hold what an earlier test's pods are giving back: only this pod's
    // interfaces and files are checked for.
    let state = node.cni_state()?;
    let veths = node.veths()?;
    node.apply(nad)?;
    node.apply(&pod)?;
    node.wait_ready("default", "outage", Duration::from_secs(120))?;
    let ours: Vec<String> = node
        .veths()?
        .into_iter()
        .filter(|v| !veths.contains(v))
        .collect();
    ensure!(ours.len() == 2, "the pod's veths: {ours:?}");
    let held = |node: &e2e::Node| -> Result<Vec<String>> {
        Ok(node
            .cni_state()?
            .into_iter()
            .filter(|f| !state.contains(f))
            .collect())
    };
    ensure!(!held(&node)?.is_empty(), "the pod's address is not held");

    node.kubectl(&["delete", "pod", "outage", "--wait=false"])?;
    node.eventually(
        "the kubelet terminating the pod",
        Duration::from_secs(60),
        || Ok(node.exec(&["test", "-e", MARK]).is_ok()),
    )?;
    e2e::cluster(&["stop", "apiserver"])?;
    let still_up = node.veths()?;
    let torn_down = if ours.iter().all(|v| still_up.contains(v)) {
        node.eventually(
            "the pod's networks deleted with the API server down",
            Duration::from_secs(90),
            || {
                let now = node.veths()?;
                Ok(ours.iter().all(|v| !now.contains(v)) && held(&node)?.is_empty())
            },
        )
    } else {
        Err(anyhow::anyhow!(
            "the pod was torn down before the API server had stopped"
        ))
    };
    e2e::cluster(&["start", "apiserver"])?;
    torn_down?;
    node.eventually("the pod gone", Duration::from_secs(60), || {
        let out = node.kubectl_output(&["get", "pod", "outage"], None)?;
        Ok(String::from_utf8_lossy(&out.stderr).contains("NotFound"))
    })?;
    node.exec(&["rm", "-rf", "/var/log/e2e-outage"])?;
    node.delete(nad)?;
    Ok(())
}

/// containerd restarted while a burst of 50 pods is being set up: every pod ends up Running
/// with both of its networks and an address of its own, and deleting them leaves nothing, not
/// even for the sandboxes the restart cut short.
#[test]
fn containerd_restarted_during_a_burst_of_50_pods() -> Result<()> {
    const PODS: usize = 50;
    let node = up("thin")?;
    let nad = &e2e::bridge_nad(
        "burst",
        "br-burst",
        r#"{"type": "host-local", "subnet": "10.34.0.0/24", "dataDir": "/var/lib/cni/e2e-burst"}"#,
    );
    let burst = e2e::sleeping_deployment("burst", PODS, Some("burst"));
    let state = node.cni_state()?;
    let veths = node.veths()?.len();
    node.apply(nad)?;
    node.apply(&burst)?;
    // Restart once some sandboxes are up and others are still being made.
    node.eventually("a first pod Running", Duration::from_secs(120), || {
        Ok(running(&node)?.len() >= 5)
    })?;
    let cut_short = running(&node)?.len();
    e2e::cluster(&["stop", "containerd"])?;
    e2e::cluster(&["start", "containerd"])?;
    ensure!(cut_short < PODS, "the burst was over before the restart");

    let mut last = Vec::new();
    node.eventually(
        "every pod Running with eth0 and net1",
        Duration::from_secs(400),
        || {
            last = running(&node)?;
            Ok(last.len() == PODS)
        },
    )?;
    let mut addresses: Vec<&str> = last.iter().map(|(_, ip)| ip.as_str()).collect();
    addresses.sort_unstable();
    addresses.dedup();
    ensure!(addresses.len() == PODS, "net1 addresses shared: {last:?}");
    // host-local holds one address per pod: none for the sandboxes the restart cut short.
    let held = node
        .cni_state()?
        .iter()
        .filter(|f| f.starts_with("/var/lib/cni/e2e-burst/"))
        .count();
    ensure!(
        held == PODS,
        "host-local holds {held} addresses for {PODS} pods"
    );

    node.delete(&burst)?;
    let mut left = String::new();
    node.eventually("nothing left", Duration::from_secs(120), || {
        let (now, veths_now) = (node.cni_state()?, node.veths()?.len());
        let added: Vec<&String> = now.iter().filter(|f| !state.contains(f)).collect();
        let gone: Vec<&String> = state.iter().filter(|f| !now.contains(f)).collect();
        left = format!("files added {added:?}, gone {gone:?}; {veths_now} veths, {veths} before");
        Ok(added.is_empty() && gone.is_empty() && veths_now == veths)
    })
    .with_context(|| left.clone())?;
    node.delete(nad)?;
    Ok(())
}

/// The burst's Running, Ready pods whose network-status lists eth0 and net1: name and net1's
/// address.
fn running(node: &e2e::Node) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for p in node.pods_labelled("burst")? {
        let ifaces: Vec<&str> = p
            .networks
            .iter()
            .filter_map(|s| s["interface"].as_str())
            .collect();
        let net1 = p
            .networks
            .iter()
            .find(|s| s["interface"] == "net1")
            .and_then(|s| s["ips"][0].as_str());
        if let (true, ["eth0", "net1"], Some(ip)) = (p.ready, ifaces.as_slice(), net1) {
            out.push((p.name.clone(), ip.to_owned()));
        }
    }
    Ok(out)
}
