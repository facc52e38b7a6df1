//! Hot-plug on the real node, in thick mode: a running pod's networks follow its networks
//! annotation, edited with `kubectl annotate` (docs/hotplug.md).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};

const ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

fn nad(name: &str, bridge: &str, subnet: &str) -> String {
    e2e::bridge_nad(
        name,
        bridge,
        &format!(
            r#"{{"type": "host-local", "subnet": "{subnet}", "dataDir": "/var/lib/cni/e2e-hotplug"}}"#
        ),
    )
}

fn nads() -> String {
    [
        nad("hp-a", "br-hpa", "10.40.0.0/24"),
        nad("hp-b", "br-hpb", "10.41.0.0/24"),
    ]
    .join("---\n")
}

/// The pod's interfaces other than `lo`, sorted.
fn links(node: &Node, pod: &str) -> Result<Vec<String>> {
    let out = node.kubectl(&["exec", pod, "--", "ip", "-o", "link", "show"])?;
    let mut names: Vec<String> = out
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    Ok(names)
}

/// The names and interfaces the pod's network-status shows.
fn status(node: &Node, pod: &str) -> Result<Vec<(String, String)>> {
    let pod = node.get("default", &format!("pod/{pod}"))?;
    let text = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
        .as_str()
        .unwrap_or("[]");
    let entries: Vec<serde_json::Value> = serde_json::from_str(text)?;
    Ok(entries
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (text("name"), text("interface"))
        })
        .collect())
}

fn annotate(node: &Node, pod: &str, networks: &str) -> Result<()> {
    node.kubectl(&[
        "annotate",
        "--overwrite",
        "pod",
        pod,
        &format!("{ANNOTATION}={networks}"),
    ])?;
    Ok(())
}

#[test]
fn a_running_pods_networks_follow_its_annotation() -> Result<()> {
    let node = up("thick")?;
    let (state, veths) = (node.cni_state()?, node.veths()?.len());
    // Names of this run's own: events outlive their pods.
    let (pod, peer_pod) = (
        format!("hp-pod-{}", std::process::id()),
        format!("hp-peer-{}", std::process::id()),
    );
    let (pod, peer_pod) = (pod.as_str(), peer_pod.as_str());
    node.apply(&nads())?;
    node.apply(&e2e::sleeping_pod(peer_pod, Some("hp-b")))?;
    node.apply(&e2e::sleeping_pod(pod, Some("hp-a")))?;
    node.wait_ready("default", peer_pod, Duration::from_secs(120))?;
    node.wait_ready("default", pod, Duration::from_secs(120))?;
    ensure!(links(&node, pod)? == ["eth0", "net1"]);
    let peer = node.ipv4(peer_pod, "net1")?;
    let net1 = node.ipv4(pod, "net1")?;

    // Gains net2: the pod pings the peer on it within a second of the annotation. The pod
    // tries from before the change, and says when it first got an answer.
    let script = format!(
        "until ping -c1 -W1 -I net2 {peer} >/dev/null 2>&1; do sleep 0.02; done; \
         cut -d' ' -f1 /proc/uptime"
    );
    let pinger = node
        .exec_command(&["kubectl", "exec", pod, "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("kubectl exec")?;
    std::thread::sleep(Duration::from_millis(500));
    let changed = e2e::uptime()?;
    annotate(&node, pod, "hp-a,hp-b")?;
    let answered = pinger.wait_with_output()?;
    let answered: f64 = String::from_utf8_lossy(&answered.stdout)
        .trim()
        .parse()
        .context("the pod's clock")?;
    let took = answered - changed;
    eprintln!("hotplug: net2 answered {took:.3} s after the annotation changed");
    ensure!(
        took < 1.0,
        "the pod could ping on net2 only {took:.3} s after the change"
    );
    ensure!(links(&node, pod)? == ["eth0", "net1", "net2"]);
    node.eventually("network-status with net2", Duration::from_secs(10), || {
        Ok(status(&node, pod)?.contains(&("default/hp-b".into(), "net2".into())))
    })?;
    let added = node.events("default", pod, "AddedInterface")?;
    ensure!(
        added
            .iter()
            .any(|m| m.starts_with("Add net2 [10.41.0.") && m.ends_with("from default/hp-b")),
        "{added:?}"
    );
    let net2 = node.ipv4(pod, "net2")?;

    // Loses net1; net2 keeps its name and address.
    annotate(&node, pod, "hp-b")?;
    node.eventually("net1 gone", Duration::from_secs(10), || {
        Ok(links(&node, pod)? == ["eth0", "net2"])
    })?;
    ensure!(node.ipv4(pod, "net2")? == net2);
    node.eventually(
        "network-status without net1",
        Duration::from_secs(10),
        || Ok(status(&node, pod)?.len() == 2),
    )?;
    let removed = node.events("default", pod, "RemovedInterface")?;
    ensure!(removed == ["Remove net1 from default/hp-a"], "{removed:?}");

    // A network that does not exist: the pod keeps running with what it had, and an event
    // says why.
    annotate(&node, pod, "hp-b,hp-nowhere")?;
    node.eventually("a NoNetworkFound event", Duration::from_secs(10), || {
        Ok(node
            .events("default", pod, "NoNetworkFound")?
            .iter()
            .any(|m| m.contains("hp-nowhere")))
    })?;
    ensure!(links(&node, pod)? == ["eth0", "net2"]);
    node.wait_ready("default", pod, Duration::from_secs(5))?;
    ensure!(net1.starts_with("10.40.0."));

    // Deleted right after a change: nothing is left of either.
    annotate(&node, pod, "hp-a,hp-b")?;
    node.kubectl(&["delete", "pod", pod, peer_pod, "--wait=true"])?;
    node.eventually("nothing left", Duration::from_secs(30), || {
        Ok(node.cni_state()? == state && node.veths()?.len() <= veths)
    })
    .with_context(|| format!("left {:?}", node.cni_state()))?;
    node.delete(&nads())?;
    Ok(())
}

/// The PID of the multus daemon the node runs (deploy/thick's command line).
fn daemon_pid() -> Result<i32> {
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if words.first().is_some_and(|w| w.ends_with(b"multus"))
            && words.get(1) == Some(&&b"daemon"[..])
            && words.get(2) == Some(&&b"-config"[..])
        {
            return Ok(pid);
        }
    }
    anyhow::bail!("no multus daemon runs")
}

/// Twenty pods changed by one `kubectl annotate`, with the daemon killed in the middle: every
/// pod ends with both networks, once, and network-status says so.
#[test]
fn twenty_pods_changed_at_once_with_the_daemon_killed_mid_change() -> Result<()> {
    const APP: &str = "hp-many";
    let node = up("thick")?;
    let (state, veths) = (node.cni_state()?, node.veths()?.len());
    node.apply(&nads())?;
    let deployment = e2e::sleeping_deployment(APP, 20, Some("hp-a"));
    node.apply(&deployment)?;
    node.eventually("20 pods ready", Duration::from_secs(180), || {
        Ok(node.pods_labelled(APP)?.iter().filter(|p| p.ready).count() == 20)
    })?;
    node.kubectl(&[
        "annotate",
        "--overwrite",
        "pods",
        "-l",
        &format!("app={APP}"),
        &format!("{ANNOTATION}=hp-a,hp-b"),
    ])?;
    // Some pods are changed by now, some not yet.
    std::thread::sleep(Duration::from_millis(300));
    let pid = daemon_pid()?;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {pid}: {killed}");
    node.eventually("the daemon started again", Duration::from_secs(60), || {
        Ok(daemon_pid().is_ok_and(|again| again != pid))
    })?;
    node.eventually(
        "every pod with both networks",
        Duration::from_secs(120),
        || {
            let pods = node.pods_labelled(APP)?;
            Ok(pods.len() == 20
                && pods.iter().all(|p| {
                    let names: Vec<&str> = p
                        .networks
                        .iter()
                        .filter_map(|e| e["name"].as_str())
                        .collect();
                    names.len() == 3 && names[1..] == ["default/hp-a", "default/hp-b"]
                }))
        },
    )?;
    // The new daemon finished what the killed one had not done.
    let log = node.daemon_log()?;
    let finished = log
        .lines()
        .filter(|l| l.contains("hot-plug{") && l.contains("Add net2 ["))
        .count();
    eprintln!("hotplug: the restarted daemon added net2 to {finished} pods");
    for p in node.pods_labelled(APP)?.iter().take(5) {
        ensure!(
            links(&node, &p.name)? == ["eth0", "net1", "net2"],
            "{}: {:?}",
            p.name,
            links(&node, &p.name)?
        );
    }
    node.delete(&deployment)?;
    node.eventually("nothing left", Duration::from_secs(120), || {
        Ok(node.pods_labelled(APP)?.is_empty()
            && node.cni_state()? == state
            && node.veths()?.len() <= veths)
    })
    .with_context(|| format!("left {:?}", node.cni_state()))?;
    node.delete(&nads())?;
    Ok(())
}

/// The hot-plug syncs the node's multus daemon has made, from its metrics on its socket.
fn syncs(node: &Node) -> Result<i64> {
    Ok(node
        .daemon_metrics()?
        .lines()
        .filter(|l| l.starts_with("multus_hot_plug_syncs_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum())
}

/// Upstream's hot-plug, multus-dynamic-networks-controller, beside the built-in one on the same
/// annotation: its requests made by `delegate-client` (scripts/peers.sh), with upstream's own
/// request builder and reply type, to a sandbox and netns found through the CRI as the
/// controller finds them. Each network is made once, whichever comes first, and the reply
/// reads into upstream's types.
#[test]
fn upstreams_delegate_requests_beside_built_in_hot_plug() -> Result<()> {
    let node = up("thick")?;
    let (state, veths) = (node.cni_state()?, node.veths()?.len());
    let pod = format!("hp-ctl-{}", std::process::id());
    node.apply(&nads())?;
    node.apply(&e2e::sleeping_pod(&pod, Some("hp-a")))?;
    node.wait_ready("default", &pod, Duration::from_secs(120))?;
    let crictl = testkit::peers::build("containerd")?.join("crictl");
    let client = testkit::peers::build("multus")?.join("delegate-client");
    let crictl = |args: &[&str]| {
        let mut all = vec![
            crictl.to_str().unwrap_or_default(),
            "-r",
            "unix:///run/containerd/containerd.sock",
        ];
        all.extend(args);
        node.exec(&all)
    };
    let sandbox = crictl(&["pods", "--name", &pod, "--state", "ready", "-q"])?
        .trim()
        .to_owned();
    let inspect: serde_json::Value = serde_json::from_str(&crictl(&["inspectp", &sandbox])?)?;
    let netns = inspect["info"]["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["type"] == "network")
        .and_then(|n| n["path"].as_str())
        .context("the sandbox's network namespace")?
        .to_owned();
    let uid = node.get("default", &format!("pod/{pod}"))?["metadata"]["uid"]
        .as_str()
        .context("uid")?
        .to_owned();
    let spec = node.get("default", "network-attachment-definitions/hp-b")?["spec"]["config"]
        .as_str()
        .context("hp-b's config")?
        .to_owned();
    let delegate = |command: &str, ifname: &str| -> Result<String> {
        let mut cmd = node.exec_command(&[
            client.to_str().unwrap_or_default(),
            "/run/multus/multus.sock",
            command,
            &sandbox,
            &netns,
            ifname,
            "default",
            &pod,
            &uid,
            "hp-b",
        ]);
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, spec.as_bytes())?;
        let out = child.wait_with_output()?;
        ensure!(
            out.status.success(),
            "delegate-client {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };

    for round in 0..2 {
        // As the controller does on the change: no interface named, so ours names it.
        let before = syncs(&node)?;
        annotate(&node, &pod, "hp-a,hp-b")?;
        let result: serde_json::Value = serde_json::from_str(&delegate("ADD", "")?)?;
        let address = result["ips"][0]["address"].as_str().unwrap_or_default();
        ensure!(address.starts_with("10.41.0."), "round {round}: {result}");
        node.eventually("the daemon's own sync", Duration::from_secs(10), || {
            Ok(syncs(&node)? > before)
        })?;
        ensure!(
            links(&node, &pod)? == ["eth0", "net1", "net2"],
            "round {round}: {:?}",
            links(&node, &pod)?
        );
        let before = syncs(&node)?;
        annotate(&node, &pod, "hp-a")?;
        ensure!(delegate("DEL", "net2")? == "null", "round {round}");
        node.eventually("the daemon's own sync", Duration::from_secs(10), || {
            Ok(syncs(&node)? > before)
        })?;
        ensure!(links(&node, &pod)? == ["eth0", "net1"], "round {round}");
    }
    node.kubectl(&["delete", "pod", &pod, "--wait=true"])?;
    node.eventually("nothing left", Duration::from_secs(30), || {
        Ok(node.cni_state()? == state && node.veths()?.len() <= veths)
    })
    .with_context(|| format!("left {:?}", node.cni_state()))?;
    node.delete(&nads())?;
    Ok(())
}
