//! `cargo xtask bench-cluster`: pod-ready latency on the real node of scripts/cluster.sh, side
//! by side in one run. A Deployment of 100 pods, each on the cluster network and two NADs
//! (bridge + host-local), under: no multus; the same three networks without multus (a shell
//! plugin that runs the three bridge calls multus would, and nothing else); the same plugin
//! also making the API writes every multus owes a pod (network-status and its events); ours
//! thin and thick (deploy/); and upstream multus in thin and thick mode, built from its module
//! into a local image and installed with the DaemonSet manifests its module ships. For each:
//! the latency from `kubectl apply` to each pod's Ready, p50 and p99; multus's memory on the node (PSS of its processes) idle, at the
//! burst's peak, and with the pods running; multus's API requests per pod, counted in the
//! API server's audit log over the pods' creation and deletion; and the machine's CPU time from
//! the `kubectl apply` to the last Ready, by the part of the node that spent it.

use std::collections::HashMap;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use e2e::Node;
use serde_json::Value;

/// The name upstream's image gets here; its manifests name ghcr.io's, which cannot be pulled.
const UPSTREAM_IMAGE: &str = "localhost/multus-cni:v4.3.0";
/// What upstream's manifests call the image.
const UPSTREAM_REFS: [&str; 2] = [
    "ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot-thick",
    "ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot",
];
/// The executables whose memory is multus's, ours and upstream's: the plugin, the shim, the
/// daemon, and what the DaemonSet's container runs.
const MULTUS_EXES: [&str; 4] = ["multus", "multus-shim", "multus-daemon", "thin_entrypoint"];

/// The parts of the node whose CPU time the burst measures, by executable. A process's time
/// includes its children's once it has reaped them: the runtime's includes the CNI plugins it
/// runs (thin multus and its delegates), and multus's includes the delegates its daemon runs.
/// "the rest" is what the machine spent beyond these (the scheduler, the controllers, the
/// shims, runc, the pods, kubectl).
const CPU_PARTS: [(&str, &[&str]); 5] = [
    ("API server", &["kube-apiserver"]),
    ("etcd", &["etcd"]),
    ("kubelet", &["kubelet"]),
    ("runtime and CNI", &["containerd", "crio"]),
    ("multus", &["multus", "multus-daemon", "thin_entrypoint"]),
];

/// The two NADs each pod attaches: name and subnet.
const NADS: [(&str, &str); 2] = [("bench-a", "10.61.0.0/24"), ("bench-b", "10.62.0.0/24")];

fn ipam(subnet: &str) -> String {
    format!(r#"{{"type": "host-local", "subnet": "{subnet}"}}"#)
}

fn nads() -> String {
    NADS.map(|(name, subnet)| e2e::bridge_nad(name, &format!("br-{name}"), &ipam(subnet)))
        .join("---\n")
}

/// The plugin of the "same networks" setups: eth0 from the cluster network's bridge, then net1
/// and net2 from the NADs' bridges, as multus would call them, with no cache. With `api.env`
/// beside its configs it then makes the writes every multus owes each pod, in one curl on one
/// connection: the network-status PATCH and an `AddedInterface` event per interface.
const FANOUT: &str = r##"#!/bin/sh
d=/etc/cni/fanout
address() { printf '%s\n' "$1" | sed -n 's/.*"address": *"\([^"/]*\).*/\1/p' | head -n 1; }
event() { # interface address network
  printf '{"metadata":{"generateName":"%s.","namespace":"%s"},"involvedObject":{"apiVersion":"v1","kind":"Pod","namespace":"%s","name":"%s"},"reason":"AddedInterface","message":"Add %s [%s] from %s","type":"Normal","source":{"component":"multus"},"firstTimestamp":"%s","lastTimestamp":"%s","count":1}' \
    "$pod" "$ns" "$ns" "$pod" "$1" "$2" "$3" "$now" "$now"
}
writes() {
  . $d/api.env
  for kv in $(printf '%s' "$CNI_ARGS" | tr ';' ' '); do
    case $kv in K8S_POD_NAMESPACE=*) ns=${kv#*=} ;; K8S_POD_NAME=*) pod=${kv#*=} ;; esac
  done
  a0=$(address "$out") a1=$(address "$n1") a2=$(address "$n2")
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  status=$(printf '{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/network-status":"[{\\"name\\":\\"cluster\\",\\"interface\\":\\"eth0\\",\\"ips\\":[\\"%s\\"],\\"default\\":true},{\\"name\\":\\"default/bench-a\\",\\"interface\\":\\"net1\\",\\"ips\\":[\\"%s\\"]},{\\"name\\":\\"default/bench-b\\",\\"interface\\":\\"net2\\",\\"ips\\":[\\"%s\\"]}]"}}}' "$a0" "$a1" "$a2")
  base=$server/api/v1/namespaces/$ns
  set -- -sSf -o /dev/null --cacert "$ca" -H "Authorization: Bearer $(cat "$token")"
  curl -Z "$@" -X PATCH -H 'Content-Type: application/merge-patch+json' -d "$status" "$base/pods/$pod/status" \
    --next "$@" -H 'Content-Type: application/json' -d "$(event eth0 "$a0" cluster)" "$base/events" \
    --next "$@" -H 'Content-Type: application/json' -d "$(event net1 "$a1" default/bench-a)" "$base/events" \
    --next "$@" -H 'Content-Type: application/json' -d "$(event net2 "$a2" default/bench-b)" "$base/events" >&2
}
case $CNI_COMMAND in
  ADD)
    out=$(/opt/cni/bin/bridge <$d/eth0.json) || { echo "$out"; exit 1; }
    n1=$(CNI_IFNAME=net1 /opt/cni/bin/bridge <$d/net1.json) || { echo "$n1"; exit 1; }
    n2=$(CNI_IFNAME=net2 /opt/cni/bin/bridge <$d/net2.json) || { echo "$n2"; exit 1; }
    if [ -f $d/api.env ] && ! writes; then
      echo '{"cniVersion": "1.0.0", "code": 999, "msg": "the API writes failed"}'
      exit 1
    fi
    echo "$out"
    ;;
  DEL)
    for n in net2 net1; do CNI_IFNAME=$n /opt/cni/bin/bridge <$d/$n.json >/dev/null; done
    exec /opt/cni/bin/bridge <$d/eth0.json
    ;;
  VERSION) echo '{"cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]}' ;;
esac
"##;

/// What the fanout plugin's writes run as: a ServiceAccount named as multus's (so the audit
/// log counts its requests as multus's), allowed those writes and nothing else.
const WRITER: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: multus, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bench-network-writes}
rules:
  - {apiGroups: [""], resources: [pods/status], verbs: [patch]}
  - {apiGroups: [""], resources: [events], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bench-network-writes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bench-network-writes}
subjects: [{kind: ServiceAccount, name: multus, namespace: kube-system}]
"#;

/// Gives the fanout plugin the API server, its CA and a token of [`WRITER`]'s.
fn fanout_writes(node: &Node) -> Result<()> {
    node.apply(WRITER)?;
    let state = e2e::state_dir();
    let kubeconfig = std::fs::read_to_string(state.join("admin.kubeconfig"))?;
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("the admin's kubeconfig names no server")?;
    let token = node.kubectl(&[
        "create",
        "token",
        "multus",
        "-n",
        "kube-system",
        "--duration",
        "2h",
    ])?;
    let dir = state.join("node/etc/cni/fanout");
    std::fs::write(dir.join("token"), token.trim())?;
    std::fs::write(
        dir.join("api.env"),
        format!(
            "server={server}\nca={}\ntoken=/etc/cni/fanout/token\n",
            state.join("pki/ca.crt").display()
        ),
    )?;
    Ok(())
}

/// Puts the fanout plugin on the node, first in its config directory; returns what to remove.
fn install_fanout() -> Result<Vec<PathBuf>> {
    let node = e2e::state_dir().join("node");
    let conf_dir = node.join("etc/cni/net.d");
    let cluster: Value = serde_json::from_str(&std::fs::read_to_string(
        conf_dir.join("10-cluster.conflist"),
    )?)?;
    let mut eth0 = cluster["plugins"][0].clone();
    eth0["cniVersion"] = cluster["cniVersion"].clone();
    eth0["name"] = cluster["name"].clone();
    let dir = node.join("etc/cni/fanout");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("eth0.json"), eth0.to_string())?;
    for (i, (name, subnet)) in NADS.iter().enumerate() {
        let conf = format!(
            r#"{{"cniVersion": "1.0.0", "name": "{name}", "type": "bridge", "bridge": "br-{name}", "ipam": {}}}"#,
            ipam(subnet)
        );
        std::fs::write(dir.join(format!("net{}.json", i + 1)), conf)?;
    }
    let plugin = node.join("opt/cni/bin/fanout");
    std::fs::write(&plugin, FANOUT)?;
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let conf = conf_dir.join("00-fanout.conf");
    std::fs::write(
        &conf,
        r#"{"cniVersion": "1.0.0", "name": "cluster", "type": "fanout"}"#,
    )?;
    // The runtime reloads its config directory on a change.
    std::thread::sleep(Duration::from_secs(3));
    Ok(vec![conf, plugin, dir])
}

#[derive(Clone, Copy, PartialEq)]
enum Setup {
    NoMultus,
    SameNetworks,
    /// The same networks and the writes every multus owes each pod.
    SameNetworksAndWrites,
    Ours(&'static str),
    Upstream(&'static str),
}

impl Setup {
    fn label(self) -> String {
        match self {
            Setup::NoMultus => "no multus".into(),
            Setup::SameNetworks => "the same networks, no multus".into(),
            Setup::SameNetworksAndWrites => "the same networks and writes, no multus".into(),
            Setup::Ours(mode) => format!("multus-rs {mode}"),
            Setup::Upstream(mode) => format!("upstream v4.3.0 {mode}"),
        }
    }
}

const SETUPS: [Setup; 7] = [
    Setup::NoMultus,
    Setup::SameNetworks,
    Setup::SameNetworksAndWrites,
    Setup::Ours("thin"),
    Setup::Ours("thick"),
    Setup::Upstream("thin"),
    Setup::Upstream("thick"),
];

/// One burst's figures.
struct Figures {
    ready: Vec<Duration>,
    /// Sandboxes the runtime had to make again because an ADD failed.
    failed_adds: usize,
    idle_kb: u64,
    peak_kb: u64,
    running_kb: u64,
    requests: usize,
    verbs: Vec<(String, usize)>,
    /// From the apply to the last Ready.
    cpu: CpuSpent,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut pods = 100;
    let mut rounds = 1;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || -> Result<usize> {
            it.next()
                .with_context(|| format!("{a} takes a number"))?
                .parse()
                .with_context(|| format!("{a} takes a number"))
        };
        match a.as_str() {
            "--pods" => pods = value()?,
            "--rounds" => rounds = value()?,
            _ => bail!("usage: cargo xtask bench-cluster [--pods N] [--rounds N]"),
        }
    }
    this_image_on_the_node()?;
    let upstream_archive = upstream_image()?;

    let mut results: HashMap<String, Vec<Figures>> = HashMap::new();
    for round in 1..=rounds {
        for setup in SETUPS {
            eprintln!("bench-cluster: round {round}, {}", setup.label());
            let figures = with_setup(setup, &upstream_archive, |node| burst(node, setup, pods))?;
            results.entry(setup.label()).or_default().push(figures);
        }
    }
    report(&results, pods, rounds)
}

/// Builds our image once, for every `up` of the run to import.
pub fn this_image_on_the_node() -> Result<()> {
    crate::image::run(&["amd64".to_owned()])?;
    let bins = crate::build_release()?;
    let archive = bins
        .parent()
        .context("release dir")?
        .join(crate::image::ARCHIVE);
    std::env::set_var("MULTUS_RS_CLUSTER_IMAGE", &archive);
    Ok(())
}

/// Installs `setup` on the node, runs `f`, and takes an upstream install away again.
fn with_setup<T>(setup: Setup, archive: &Path, f: impl FnOnce(&Node) -> Result<T>) -> Result<T> {
    match setup {
        Setup::NoMultus => f(&e2e::up("bare")?),
        Setup::SameNetworks | Setup::SameNetworksAndWrites => {
            let node = e2e::up("bare")?;
            let installed = install_fanout()?;
            let writes = setup == Setup::SameNetworksAndWrites;
            let out = if writes {
                fanout_writes(&node).and_then(|()| f(&node))
            } else {
                f(&node)
            };
            for path in installed {
                let _ = std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir_all(&path));
            }
            if writes {
                node.delete(WRITER)?;
            }
            out
        }
        Setup::Ours(mode) => {
            let node = e2e::up(mode)?;
            node.apply(&nads())?;
            let out = f(&node);
            node.delete(&nads())?;
            out
        }
        Setup::Upstream(mode) => {
            let node = e2e::up("bare")?;
            let ctr = testkit::peers::build("containerd")?.join("ctr");
            let ctr = ctr.display().to_string();
            let archive = archive.display().to_string();
            node.exec(&[&ctr, "-n", "k8s.io", "images", "import", &archive])?;
            let manifest = upstream_manifest(mode)?;
            node.apply(&manifest)?;
            let installed = node.eventually(
                &format!("upstream's {mode} DaemonSet available and 00-multus.conf written"),
                Duration::from_secs(180),
                || {
                    let ds = node.get("kube-system", "ds/kube-multus-ds")?;
                    let conf = node.exec(&["ls", "/etc/cni/net.d"])?;
                    Ok(ds["status"]["numberAvailable"] == 1 && conf.contains("00-multus.conf"))
                },
            );
            // A daemon that starts, writes its config and then crashes was available once.
            let installed = installed.and_then(|()| {
                std::thread::sleep(Duration::from_secs(5));
                let pods = node.get("kube-system", "pods")?;
                let restarts: i64 = pods["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|p| {
                        p["status"]["containerStatuses"]
                            .as_array()
                            .into_iter()
                            .flatten()
                    })
                    .filter_map(|c| c["restartCount"].as_i64())
                    .sum();
                ensure!(
                    restarts == 0,
                    "upstream's {mode} DaemonSet restarted {restarts} times"
                );
                Ok(())
            });
            let out = installed.and_then(|()| {
                node.apply(&nads())?;
                let out = f(&node);
                node.delete(&nads())?;
                out
            });
            node.delete(&manifest)?;
            // What upstream leaves on the node: its config (.conf or .conflist, as the cluster
            // network's), kubeconfig and socket.
            node.exec(&[
                "sh",
                "-c",
                "rm -rf /etc/cni/net.d/00-multus.conf* /etc/cni/net.d/multus.d /run/multus",
            ])?;
            out
        }
    }
}

/// The Deployment of `pods` made at once: each pod's time to Ready, multus's memory and API
/// requests; then the Deployment deleted and its pods gone.
fn burst(node: &Node, setup: Setup, pods: usize) -> Result<Figures> {
    let deployment = e2e::sleeping_deployment("bench", pods, Some("bench-a,bench-b"));
    let idle_kb = settle_memory()?;
    let audit = audit_log();
    let audit_from = std::fs::metadata(&audit).map(|m| m.len()).unwrap_or(0);

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(multus_pss_kb());
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        })
    };
    let ready_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut watch = Command::new(crate::workspace_root().join("scripts/cluster.sh"));
    watch
        .args([
            "exec",
            "--",
            "kubectl",
            "get",
            "pods",
            "-l",
            "app=bench",
            "-w",
            "-o",
        ])
        .arg(r#"jsonpath={.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}"#)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Its own group, ended as one: cluster.sh, nsenter and kubectl.
        .process_group(0);
    let mut watcher = watch.spawn().context("running kubectl get -w")?;
    let stdout = watcher.stdout.take().context("the watch's stdout")?;
    let reader = {
        let ready_at = ready_at.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(name) = line.strip_suffix(" True") {
                    let mut seen = ready_at.lock().unwrap_or_else(|p| p.into_inner());
                    seen.entry(name.to_owned()).or_insert_with(Instant::now);
                }
            }
        })
    };
    // The watch is open before the first pod exists, so no Ready is seen late in a list.
    std::thread::sleep(Duration::from_secs(2));

    let cpu_before = CpuClock::read()?;
    let start = Instant::now();
    node.apply(&deployment)?;
    let all_ready = node.eventually(
        &format!("{pods} pods Ready"),
        Duration::from_secs(900),
        || Ok(ready_at.lock().map(|s| s.len()).unwrap_or(0) >= pods),
    );
    let cpu = CpuClock::read()?.since(&cpu_before);
    if let Ok(group) = i32::try_from(watcher.id()) {
        // SAFETY: kill(2) on the watch's own process group, which we made; no memory is touched.
        unsafe { libc::kill(-group, libc::SIGTERM) };
    }
    let _ = watcher.wait();
    let _ = reader.join();
    stop.store(true, Ordering::Relaxed);
    if let Err(e) = all_ready {
        let _ = node.delete(&deployment);
        return Err(e);
    }
    let peak_kb = sampler.join().unwrap_or(0);
    if matches!(
        setup,
        Setup::SameNetworksAndWrites | Setup::Ours(_) | Setup::Upstream(_)
    ) {
        every_pod_has_its_networks(node, pods)?;
    }
    if matches!(setup, Setup::SameNetworks | Setup::SameNetworksAndWrites) {
        // Without multus no network-status: each NAD's bridge has a port per pod.
        for (name, _) in NADS {
            let ports =
                node.exec(&["ip", "-o", "link", "show", "master", &format!("br-{name}")])?;
            ensure!(
                ports.lines().count() == pods,
                "br-{name} has {} ports for {pods} pods",
                ports.lines().count()
            );
        }
    }
    let failed_adds = failed_sandboxes(node)?;
    let running_kb = settle_memory()?;
    let ready: Vec<Duration> = ready_at
        .lock()
        .map_err(|_| anyhow::anyhow!("the watch's reader panicked"))?
        .values()
        .map(|t| t.duration_since(start))
        .collect();

    node.delete(&deployment)?;
    node.eventually("the pods gone", Duration::from_secs(600), || {
        Ok(node
            .kubectl(&["get", "pods", "-l", "app=bench", "-o", "name"])?
            .trim()
            .is_empty())
    })?;
    // The audit log is written as requests complete; the last DEL's may trail the pod's end.
    std::thread::sleep(Duration::from_secs(3));
    let (requests, verbs) = multus_requests(&audit, audit_from)?;
    Ok(Figures {
        ready,
        failed_adds,
        idle_kb,
        peak_kb,
        running_kb,
        requests,
        verbs,
        cpu,
    })
}

/// Every pod lists eth0 and both NADs in network-status: no pod went without its networks.
fn every_pod_has_its_networks(node: &Node, pods: usize) -> Result<()> {
    let list: Value =
        serde_json::from_str(&node.kubectl(&["get", "pods", "-l", "app=bench", "-o", "json"])?)?;
    let complete = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
                .as_str()
                .and_then(|t| serde_json::from_str::<Vec<Value>>(t).ok())
                .is_some_and(|s| s.len() == 3)
        })
        .count();
    ensure!(
        complete == pods,
        "{complete} of {pods} pods list three networks"
    );
    Ok(())
}

/// The FailedCreatePodSandBox events of the Deployment's pods as they are now.
fn failed_sandboxes(node: &Node) -> Result<usize> {
    let pods: Value =
        serde_json::from_str(&node.kubectl(&["get", "pods", "-l", "app=bench", "-o", "json"])?)?;
    let uids: Vec<&str> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["uid"].as_str())
        .collect();
    let events: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=FailedCreatePodSandBox",
        "-o",
        "json",
    ])?)?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["uid"]
                .as_str()
                .is_some_and(|u| uids.contains(&u))
        })
        .filter_map(|e| e["count"].as_u64())
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .sum())
}

/// multus's memory once it is quiet: the median of 3 s of samples.
fn settle_memory() -> Result<u64> {
    let mut samples: Vec<u64> = (0..15)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            multus_pss_kb()
        })
        .collect();
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

/// The proportional set size of every multus process on the machine, in KB: shared pages of a
/// binary run many times at once count once, and so does an address space two processes
/// share (a daemon's child between its clone and its exec).
fn multus_pss_kb() -> u64 {
    let mut counted: Vec<libc::pid_t> = Vec::new();
    let mut total = 0;
    for (pid, dir, name) in machine_processes() {
        if !MULTUS_EXES.contains(&name.as_str()) || counted.iter().any(|c| same_memory(pid, *c)) {
            continue;
        }
        let pss = std::fs::read_to_string(dir.join("smaps_rollup"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("Pss:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            });
        if let Some(pss) = pss {
            counted.push(pid);
            total += pss;
        }
    }
    total
}

/// Every process on the machine with the file name of its executable: (pid, /proc/PID, name).
/// A kernel thread, or a process gone while listed, has none and is left out.
fn machine_processes() -> Vec<(libc::pid_t, PathBuf, String)> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse().ok()?;
            let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
            let name = exe.file_name()?.to_string_lossy().into_owned();
            Some((pid, entry.path(), name))
        })
        .collect()
}

/// Whether processes `a` and `b` share one address space (kcmp(2), KCMP_VM).
fn same_memory(a: libc::pid_t, b: libc::pid_t) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp(2) compares two processes' kernel objects; it takes plain integers and
    // touches none of our memory.
    unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) == 0 }
}

/// The machine's CPU clock at one moment: its busy and stolen time, and the time of each live
/// process of a part of the node (its own and its reaped children's). In clock ticks.
struct CpuClock {
    busy: u64,
    steal: u64,
    /// The processes of CPU_PARTS, by (pid, start time), so a pid used again is another
    /// process: the index of their part, and their time.
    processes: HashMap<(libc::pid_t, u64), (usize, u64)>,
}

/// CPU time spent between two readings of the clock, in seconds.
struct CpuSpent {
    busy: f64,
    steal: f64,
    /// As CPU_PARTS.
    parts: [f64; CPU_PARTS.len()],
}

impl CpuClock {
    fn read() -> Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        // cpu user nice system idle iowait irq softirq steal ...
        let total: Vec<u64> = stat
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("cpu "))
            .context("/proc/stat has no cpu line")?
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        ensure!(total.len() >= 8, "/proc/stat's cpu line is short");
        let busy = total[0] + total[1] + total[2] + total[5] + total[6];
        let mut processes = HashMap::new();
        for (pid, dir, name) in machine_processes() {
            let Some(part) = CPU_PARTS
                .iter()
                .position(|(_, names)| names.contains(&name.as_str()))
            else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(dir.join("stat")) else {
                continue;
            };
            // After the command's closing parenthesis: fields 3 on, so utime (14) is at 11.
            let Some(fields) = text.rsplit_once(") ").map(|(_, f)| f) else {
                continue;
            };
            let fields: Vec<u64> = fields
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            if fields.len() < 20 {
                continue;
            }
            let ticks = fields[11] + fields[12] + fields[13] + fields[14];
            processes.insert((pid, fields[19]), (part, ticks));
        }
        Ok(CpuClock {
            busy,
            steal: total[7],
            processes,
        })
    }

    /// What each part spent since `before`: the time of every process alive now, less what it
    /// had spent at `before`.
    fn since(&self, before: &CpuClock) -> CpuSpent {
        // /proc counts in USER_HZ, 100 a second on every architecture this runs on.
        let seconds = |ticks: u64| ticks as f64 / 100.0;
        let mut parts = [0.0; CPU_PARTS.len()];
        for (key, (part, ticks)) in &self.processes {
            let earlier = before.processes.get(key).map_or(0, |(_, t)| *t);
            parts[*part] += seconds(ticks.saturating_sub(earlier));
        }
        CpuSpent {
            busy: seconds(self.busy.saturating_sub(before.busy)),
            steal: seconds(self.steal.saturating_sub(before.steal)),
            parts,
        }
    }
}

fn audit_log() -> PathBuf {
    e2e::state_dir().join("logs/audit.log")
}

/// The requests multus's ServiceAccount made since `from` in the audit log: how many, and
/// how many per verb and resource.
fn multus_requests(audit: &Path, from: u64) -> Result<(usize, Vec<(String, usize)>)> {
    use std::io::{Read, Seek};
    let mut file = std::fs::File::open(audit)
        .with_context(|| format!("opening the audit log {}", audit.display()))?;
    file.seek(std::io::SeekFrom::Start(from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut by_verb: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let user = event["user"]["username"].as_str().unwrap_or_default();
        let multus = user.starts_with("system:serviceaccount:") && user.ends_with(":multus");
        if !multus || event["stage"] != "ResponseComplete" {
            continue;
        }
        let what = format!(
            "{} {}{}",
            event["verb"].as_str().unwrap_or_default(),
            event["objectRef"]["resource"].as_str().unwrap_or_default(),
            event["objectRef"]["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default()
        );
        *by_verb.entry(what).or_default() += 1;
    }
    let mut verbs: Vec<(String, usize)> = by_verb.into_iter().collect();
    verbs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok((verbs.iter().map(|(_, n)| n).sum(), verbs))
}

/// Upstream's binaries in an image laid out as upstream's: all of them in
/// /usr/src/multus-cni/bin, the installer and the thin entrypoint also at /. Saved as an
/// archive for the node's containerd.
fn upstream_image() -> Result<PathBuf> {
    let bins = testkit::peers::build("multus")?;
    let podman = crate::image::Podman::new()?;
    let context = tempfile::tempdir()?;
    let rootfs = context.path().join("rootfs");
    let src = rootfs.join("usr/src/multus-cni/bin");
    std::fs::create_dir_all(&src)?;
    std::fs::create_dir_all(rootfs.join("tmp"))?;
    std::fs::create_dir_all(rootfs.join("var"))?;
    std::fs::create_dir_all(rootfs.join("etc"))?;
    // As in upstream's base image: the daemon asks who it runs as, from /etc/passwd.
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\n",
    )?;
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n")?;
    // As in upstream's base image: the runtime names a pod's netns /var/run/netns/...
    std::os::unix::fs::symlink("../run", rootfs.join("var/run"))?;
    for name in [
        "multus",
        "multus-daemon",
        "multus-shim",
        "passthru",
        "install_multus",
        "thin_entrypoint",
    ] {
        std::fs::copy(bins.join(name), src.join(name))
            .with_context(|| format!("copying upstream's {name}"))?;
    }
    for name in ["install_multus", "thin_entrypoint"] {
        std::fs::copy(bins.join(name), rootfs.join(name))?;
    }
    std::fs::write(
        context.path().join("Containerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/thin_entrypoint\"]\n",
    )?;
    let ctx = context.path().display().to_string();
    podman.run(&[
        "build",
        "--quiet",
        "--network=none",
        "-t",
        UPSTREAM_IMAGE,
        &ctx,
    ])?;
    let archive = crate::workspace_root().join("target/multus-cni-v4.3.0-image.tar");
    let _ = std::fs::remove_file(&archive);
    let out = archive.display().to_string();
    podman.run(&[
        "save",
        "--quiet",
        "--format=docker-archive",
        "-o",
        &out,
        UPSTREAM_IMAGE,
    ])?;
    Ok(archive)
}

/// Upstream's DaemonSet manifest for `mode`, as its module ships it, with the local image and
/// without the CPU and memory limits: ours sets no CPU limit, and a throttled daemon would
/// measure the limit rather than the code.
fn upstream_manifest(mode: &str) -> Result<String> {
    let modules = crate::workspace_root().join("test-support/peers/multus");
    let out = Command::new("go")
        .args([
            "list",
            "-m",
            "-f",
            "{{.Dir}}",
            "gopkg.in/k8snetworkplumbingwg/multus-cni.v4",
        ])
        .current_dir(&modules)
        .output()
        .context("running go list for upstream multus's module")?;
    ensure!(
        out.status.success(),
        "go list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    let file = match mode {
        "thick" => "multus-daemonset-thick.yml",
        _ => "multus-daemonset.yml",
    };
    let path = dir.join("deployments").join(file);
    let mut text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for r in UPSTREAM_REFS {
        text = text.replace(r, UPSTREAM_IMAGE);
    }
    ensure!(
        text.contains(UPSTREAM_IMAGE),
        "{} names no image we know",
        path.display()
    );
    Ok(without_limits(&text))
}

/// The YAML without its `limits:` blocks.
fn without_limits(yaml: &str) -> String {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = String::new();
    let mut skipping: Option<usize> = None;
    for line in yaml.lines() {
        if let Some(level) = skipping {
            if !line.trim().is_empty() && indent(line) > level {
                continue;
            }
            skipping = None;
        }
        if line.trim() == "limits:" {
            skipping = Some(indent(line));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The nearest-rank percentile `p` (0 to 100) in milliseconds.
pub fn percentile(sorted: &[Duration], p: usize) -> f64 {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// The CPU time of each setup's burst, by part of the node, median over the rounds; and how
/// much more the machine spent than without multus.
fn cpu_report(results: &HashMap<String, Vec<Figures>>) -> Result<()> {
    let summary = |setup: Setup| -> Result<Vec<f64>> {
        let runs = results
            .get(&setup.label())
            .context("a setup without results")?;
        let pick = |f: &dyn Fn(&CpuSpent) -> f64| median(runs.iter().map(|r| f(&r.cpu)).collect());
        let mut row = vec![pick(&|c| c.busy)];
        row.extend((0..CPU_PARTS.len()).map(|i| pick(&|c| c.parts[i])));
        row.push(pick(&|c| c.busy - c.parts.iter().sum::<f64>()));
        row.push(pick(&|c| c.steal));
        Ok(row)
    };
    let parts: Vec<&str> = CPU_PARTS.iter().map(|(name, _)| *name).collect();
    println!(
        "CPU seconds from the apply to the last Ready, median over the rounds\n\n| setup | all | over no multus | {} | the rest | stolen |",
        parts.join(" | ")
    );
    println!("|---|---|---|{}---|---|", "---|".repeat(parts.len()));
    let base = summary(Setup::NoMultus)?;
    for setup in SETUPS {
        let row = summary(setup)?;
        let cells: Vec<String> = row[1..].iter().map(|v| format!("{v:.1}")).collect();
        println!(
            "| {} | {:.1} | {:.1} | {} |",
            setup.label(),
            row[0],
            row[0] - base[0],
            cells.join(" | ")
        );
    }
    println!();
    for mode in ["thin", "thick"] {
        let ours = summary(Setup::Ours(mode))?[0] - base[0];
        let theirs = summary(Setup::Upstream(mode))?[0] - base[0];
        println!(
            "{mode}: CPU over no multus, ours / upstream's: {ours:.1} / {theirs:.1} s, {:.2}x",
            ours / theirs
        );
    }
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn report(results: &HashMap<String, Vec<Figures>>, pods: usize, rounds: usize) -> Result<()> {
    // Per setup, the median over the rounds of each figure.
    let summary = |label: &str| -> Result<[f64; 7]> {
        let runs = results.get(label).context("a setup without results")?;
        let pick = |f: &dyn Fn(&Figures) -> f64| median(runs.iter().map(f).collect());
        let sorted = |f: &Figures| {
            let mut r = f.ready.clone();
            r.sort();
            r
        };
        Ok([
            pick(&|f| percentile(&sorted(f), 50)),
            pick(&|f| percentile(&sorted(f), 99)),
            pick(&|f| f.idle_kb as f64 / 1024.0),
            pick(&|f| f.peak_kb as f64 / 1024.0),
            pick(&|f| f.running_kb as f64 / 1024.0),
            pick(&|f| f.requests as f64 / pods as f64),
            pick(&|f| f.failed_adds as f64),
        ])
    };
    println!("{pods} pods with 2 NADs each, made at once; median of {rounds} round(s)\n");
    println!("| setup | ready p50 (ms) | ready p99 (ms) | over no multus, p50 / p99 (ms) | multus PSS idle / peak / pods running (MiB) | API requests per pod | failed ADDs |");
    println!("|---|---|---|---|---|---|---|");
    let base = summary(&Setup::NoMultus.label())?;
    let same = summary(&Setup::SameNetworks.label())?;
    let writes = summary(&Setup::SameNetworksAndWrites.label())?;
    for setup in SETUPS {
        let s = summary(&setup.label())?;
        let over = if setup == Setup::NoMultus {
            String::new()
        } else {
            format!("{:.0} / {:.0}", s[0] - base[0], s[1] - base[1])
        };
        println!(
            "| {} | {:.0} | {:.0} | {over} | {:.1} / {:.1} / {:.1} | {:.2} | {:.0} |",
            setup.label(),
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[5],
            s[6]
        );
    }
    println!();
    for mode in ["thin", "thick"] {
        let ours = summary(&Setup::Ours(mode).label())?;
        let theirs = summary(&Setup::Upstream(mode).label())?;
        println!(
            "{mode}: overhead over no multus, ours / upstream's: p50 {:.2}x, p99 {:.2}x; peak memory {:.2}x; API requests {:.2}x",
            (ours[0] - base[0]) / (theirs[0] - base[0]),
            (ours[1] - base[1]) / (theirs[1] - base[1]),
            ours[3] / theirs[3],
            ours[5] / theirs[5],
        );
        for (over, floor) in [
            ("the same networks", same),
            ("the same networks and writes", writes),
        ] {
            println!(
                "{mode}: over {over} without multus, ours / upstream's: p50 {:.0} / {:.0} ms, p99 {:.0} / {:.0} ms",
                ours[0] - floor[0],
                theirs[0] - floor[0],
                ours[1] - floor[1],
                theirs[1] - floor[1],
            );
        }
    }
    println!();
    cpu_report(results)?;
    println!();
    for setup in SETUPS.into_iter().skip(2) {
        let Some(last) = results.get(&setup.label()).and_then(|r| r.last()) else {
            continue;
        };
        let verbs: Vec<String> = last.verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
        println!("{} requests: {}", setup.label(), verbs.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_list_names_this_process_by_its_executable() {
        let me = libc::pid_t::try_from(std::process::id()).expect("pid");
        let exe = std::env::current_exe().expect("exe");
        let name = exe.file_name().expect("name").to_string_lossy();
        let listed = machine_processes();
        assert!(
            listed.iter().any(|(pid, _, n)| *pid == me && *n == name),
            "{me} {name} not among {} processes",
            listed.len()
        );
        // A process shares its address space with itself and with no other.
        let other = listed
            .iter()
            .find(|(pid, _, _)| *pid != me)
            .expect("another");
        assert!(same_memory(me, me));
        assert!(!same_memory(me, other.0));
    }

    #[test]
    fn the_cpu_clock_moves_while_this_process_works() {
        let before = CpuClock::read().expect("read");
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spent = CpuClock::read().expect("read").since(&before);
        assert!(
            spent.busy >= 0.1,
            "{} s busy after 200 ms of work",
            spent.busy
        );
    }
}
