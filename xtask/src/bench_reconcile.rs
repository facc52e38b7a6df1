//! `cargo xtask bench-reconcile [--pods N]`: what freeing addresses costs on a large cluster,
//! on the real node of scripts/cluster.sh (whereabouts mode). N pods (10,000 unless told) are
//! bound to a Node object that no kubelet serves, each showing an address of one whereabouts
//! pool in its network-status; the pool holds their N allocations and N/10 more of pods that
//! are gone. Then, with the shipped controller scaled to 0 so that only the measured one runs:
//! - one `whereabouts reconcile` pass: its time and peak memory (max RSS);
//! - `whereabouts control`: its memory after its first pass, and while every pod is deleted at
//!   once; and the time from the deletion until the pool is empty.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use e2e::Node;
use serde_json::{json, Value};

const NAMESPACE: &str = "bench-reconcile";
/// The node the pods are bound to: an object only, so nothing runs them.
const GHOST: &str = "bench-ghost";
const POOL: &str = "10.80.0.0-16";
/// Pods created per request.
const BATCH: usize = 500;

pub fn run(args: &[String]) -> Result<()> {
    let mut pods = 10_000;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--pods" => pods = rest.next().context("--pods N")?.parse()?,
            other => bail!("bench-reconcile: unknown argument {other}"),
        }
    }
    ensure!((1..=50_000).contains(&pods), "--pods: 1 to 50000");
    let multus = crate::build_release()?
        .parent()
        .context("release dir")?
        .join("multus");
    let node = e2e::up("whereabouts")?;
    // The measured processes run in the node's network namespace, as the admin.
    let kubeconfig = e2e::state_dir().join("admin.kubeconfig");
    scale_controller(&node, 0)?;
    let measured = (|| {
        let made = Instant::now();
        populate(&node, pods)?;
        eprintln!(
            "bench-reconcile: {pods} pods and their pool made in {:?}",
            made.elapsed()
        );
        let (pass, pass_kib) = reconcile_pass(&multus, &kubeconfig, pods / 10)?;
        let control = control(&node, &multus, &kubeconfig, pods)?;
        Ok::<_, anyhow::Error>((pass, pass_kib, control))
    })();
    let cleaned = cleanup(&node);
    let (pass, pass_kib, c) = measured?;
    cleaned?;
    println!("whereabouts with {pods} pods on the real node (kube-apiserver, etcd)\n");
    println!("| what | time | memory |");
    println!("|---|---|---|");
    println!(
        "| `whereabouts reconcile`: one pass, freeing {} | {:.2} s | max RSS {:.1} MiB |",
        pods / 10,
        pass.as_secs_f64(),
        pass_kib as f64 / 1024.0
    );
    println!(
        "| `whereabouts control`: its first pass | {:.2} s | RSS after it {:.1} MiB |",
        c.first_pass.as_secs_f64(),
        c.idle_kib as f64 / 1024.0
    );
    println!(
        "| `whereabouts control`: all {pods} pods deleted at once, until the pool is empty | {:.2} s | max RSS {:.1} MiB |",
        c.freed_all.as_secs_f64(),
        c.peak_kib as f64 / 1024.0
    );
    Ok(())
}

fn scale_controller(node: &Node, replicas: u32) -> Result<()> {
    node.kubectl(&[
        "-n",
        "multus",
        "scale",
        "deployment/whereabouts-controller",
        &format!("--replicas={replicas}"),
    ])?;
    Ok(())
}

/// The pool's address at `offset` (under 65,536: `--pods` is at most 50,000, and a tenth more).
fn ip(offset: usize) -> String {
    let [hi, lo] = u16::try_from(offset).unwrap_or(u16::MAX).to_be_bytes();
    std::net::Ipv4Addr::new(10, 80, hi, lo).to_string()
}

fn pod_name(i: usize) -> String {
    format!("p-{i:05}")
}

/// The namespace, the Node object, the pods (pod `i` shows address `i + 1`), and the pool with
/// their allocations and `pods / 10` of gone pods.
fn populate(node: &Node, pods: usize) -> Result<()> {
    node.kubectl(&["create", "namespace", NAMESPACE])?;
    let ghost = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": GHOST}});
    create(node, &ghost)?;
    for start in (0..pods).step_by(BATCH) {
        let items: Vec<Value> = (start..pods.min(start + BATCH))
            .map(|i| {
                let status = json!([
                    {"name": "cbr0", "ips": ["10.42.0.9"], "default": true},
                    {"name": format!("{NAMESPACE}/wb"), "interface": "net1", "ips": [ip(i + 1)]},
                ]);
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": pod_name(i), "namespace": NAMESPACE,
                                    "annotations": {"k8s.v1.cni.cncf.io/network-status": status.to_string()}},
                       "spec": {"nodeName": GHOST, "tolerations": [{"operator": "Exists"}],
                                "containers": [{"name": "sleep", "image": e2e::TEST_IMAGE}]}})
            })
            .collect();
        create(
            node,
            &json!({"apiVersion": "v1", "kind": "List", "items": items}),
        )?;
    }
    let alloc = |id: String, podref: String| json!({"id": id, "podref": podref, "ifname": "net1"});
    let mut allocations = serde_json::Map::new();
    for i in 0..pods {
        allocations.insert(
            (i + 1).to_string(),
            alloc(format!("c{i}"), format!("{NAMESPACE}/{}", pod_name(i))),
        );
    }
    for i in 0..pods / 10 {
        allocations.insert(
            (pods + 1 + i).to_string(),
            alloc(format!("g{i}"), format!("{NAMESPACE}/gone-{i}")),
        );
    }
    create(
        node,
        &json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
                "metadata": {"name": POOL, "namespace": "kube-system"},
                "spec": {"range": "10.80.0.0/16", "allocations": allocations}}),
    )
}

fn create(node: &Node, object: &Value) -> Result<()> {
    let out = node.kubectl_output(&["create", "-f", "-"], Some(&object.to_string()))?;
    ensure!(
        out.status.success(),
        "kubectl create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn allocations(node: &Node) -> Result<usize> {
    let pool = node.get(
        "kube-system",
        &format!("ippools.whereabouts.cni.cncf.io/{POOL}"),
    )?;
    Ok(pool["spec"]["allocations"]
        .as_object()
        .map_or(0, serde_json::Map::len))
}

/// Waits for the child and returns how it ended and its max RSS in KiB.
fn wait_measured(child: std::process::Child) -> Result<(i32, i64)> {
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped (the Child is never waited on); `status` and
    // `usage` are valid for writes for the call.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    ensure!(reaped == pid, "wait4: {}", std::io::Error::last_os_error());
    Ok((status, usage.ru_maxrss))
}

fn reconcile_pass(multus: &Path, kubeconfig: &Path, orphans: usize) -> Result<(Duration, i64)> {
    let started = Instant::now();
    let mut child = e2e::in_node_netns(multus)
        .args(["whereabouts", "reconcile", "--kubeconfig"])
        .arg(kubeconfig)
        .stderr(Stdio::piped())
        .spawn()
        .context("whereabouts reconcile")?;
    // Its log's last line is the summary.
    let mut text = String::new();
    if let Some(out) = child.stderr.take() {
        for line in BufReader::new(out).lines() {
            text = line?;
        }
    }
    let (status, kib) = wait_measured(child)?;
    let took = started.elapsed();
    ensure!(status == 0, "whereabouts reconcile failed: {text}");
    ensure!(
        text.contains(&format!("freed {orphans} addresses")),
        "the pass did not free the {orphans} orphans: {text}"
    );
    Ok((took, kib))
}

struct Control {
    first_pass: Duration,
    idle_kib: u64,
    freed_all: Duration,
    peak_kib: i64,
}

/// A field of /proc/PID/status, in KiB.
fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

fn control(node: &Node, multus: &Path, kubeconfig: &Path, pods: usize) -> Result<Control> {
    let started = Instant::now();
    let mut child = e2e::in_node_netns(multus)
        .args(["whereabouts", "control", "--kubeconfig"])
        .arg(kubeconfig)
        .stderr(Stdio::piped())
        .spawn()
        .context("whereabouts control")?;
    let pid = child.id();
    let (lines, seen) = mpsc::channel();
    let out = child.stderr.take().context("the controller's log")?;
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let measured = (|| {
        loop {
            let line = seen
                .recv_timeout(Duration::from_secs(300))
                .context("the controller's first pass did not end in 5 minutes")?;
            if line.contains(" a whole pass:") {
                break;
            }
        }
        let first_pass = started.elapsed();
        let idle_kib = status_kib(pid, "VmRSS:")?;
        let deleting = Instant::now();
        let out = node.kubectl_output(
            // No kubelet confirms these deletions: the API removes the pods at once.
            &[
                "-n",
                NAMESPACE,
                "delete",
                "pods",
                "--all",
                "--grace-period=0",
                "--force",
                "--wait=false",
            ],
            None,
        )?;
        ensure!(
            out.status.success(),
            "kubectl delete: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        loop {
            let left = allocations(node)?;
            if left == 0 {
                break;
            }
            ensure!(
                deleting.elapsed() < Duration::from_secs(900),
                "{left} of {pods} addresses still held 15 minutes after the deletion"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        Ok((first_pass, idle_kib, deleting.elapsed()))
    })();
    // SAFETY: signalling our own child, which is not reaped yet.
    unsafe { libc::kill(libc::pid_t::try_from(pid)?, libc::SIGKILL) };
    let (_, peak_kib) = wait_measured(child)?;
    let (first_pass, idle_kib, freed_all) = measured?;
    Ok(Control {
        first_pass,
        idle_kib,
        freed_all,
        peak_kib,
    })
}

/// Removes what the bench made and brings the shipped controller back.
fn cleanup(node: &Node) -> Result<()> {
    for args in [
        vec![
            "-n",
            NAMESPACE,
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
        ],
        vec!["delete", "namespace", NAMESPACE, "--ignore-not-found"],
        vec!["delete", "node", GHOST, "--ignore-not-found"],
        vec![
            "-n",
            "kube-system",
            "delete",
            "ippools.whereabouts.cni.cncf.io",
            POOL,
            "--ignore-not-found",
        ],
    ] {
        node.kubectl(&args)?;
    }
    scale_controller(node, 1)
}
