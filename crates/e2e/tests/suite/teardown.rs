//! `scripts/cluster.sh down` leaves nothing of the node: no network namespace, no process, no
//! mount, no cgroup, no state. (Tests run in name order, module first: the walkthrough after
//! this one brings a fresh node up again.)

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

/// A start that fails says why at once, with the end of the failed part's log, and the next `up`
/// takes the half-started node down and starts again rather than failing on what is left; so
/// does an `up` on a node with a part no longer running.
#[test]
fn a_failed_start_says_why_and_the_next_up_starts_again() -> Result<()> {
    e2e::cluster(&["down"])?;
    let state = e2e::state_dir();
    std::fs::create_dir_all(&state)?;
    // etcd's data directory is a file: etcd exits at its start.
    let in_the_way = state.join("etcd");
    std::fs::write(&in_the_way, "not a directory")?;
    let failed = match e2e::up("thin") {
        Ok(_) => bail!("up succeeded with etcd's data directory a file"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        failed.contains("etcd exited at its start")
            && failed.contains("the end of")
            && failed.contains("failed to list data directory"),
        "{failed}"
    );
    std::fs::remove_file(&in_the_way)?;
    up_runs_a_pod("after-a-failed-start")?;

    // A part that died since (here stopped, as a test that failed half-way may leave it): the
    // next `up` starts the node again.
    e2e::cluster(&["stop", "kubelet"])?;
    up_runs_a_pod("after-a-dead-kubelet")
}

/// `up thin`, and a pod named `name` runs on the node and is deleted.
fn up_runs_a_pod(name: &str) -> Result<()> {
    let node = e2e::up("thin")?;
    node.apply(&e2e::sleeping_pod(name, None))?;
    node.wait_ready("default", name, std::time::Duration::from_secs(120))?;
    node.kubectl(&["delete", "pod", name, "--wait=true"])?;
    Ok(())
}

/// `up` returns only once no pod of a replaced DaemonSet is left in multus's namespace. Such a
/// pod (the DaemonSet controller can make one from a stale cache while an install is replaced)
/// carries the new DaemonSet's labels, and `kubectl logs ds/multus` may pick it.
#[test]
fn an_up_waits_for_a_replaced_daemonsets_pods_to_go() -> Result<()> {
    let node = e2e::up("thin")?;
    // A pod as a replaced DaemonSet leaves it: multus's labels, controlled by a DaemonSet that
    // is gone (so that the one there now does not adopt it), kept by a finalizer until the
    // test lets it go, and gated so that it never runs.
    node.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: multus-stray
  namespace: multus
  labels:
    app: multus
  finalizers:
    - multus-rs.test/held
  ownerReferences:
    - apiVersion: apps/v1
      kind: DaemonSet
      name: multus
      uid: 00000000-0000-0000-0000-00000000000d
      controller: true
spec:
  schedulingGates:
    - name: multus-rs.test/never
  containers:
    - name: multus
      image: {}
      command: ["sleep", "3600"]
"#,
        e2e::TEST_IMAGE
    ))?;
    let release = || {
        node.kubectl(&[
            "-n",
            "multus",
            "patch",
            "pod",
            "multus-stray",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .and_then(|_| {
            node.kubectl(&[
                "-n",
                "multus",
                "delete",
                "pod",
                "multus-stray",
                "--ignore-not-found",
                "--wait=true",
            ])
        })
    };
    let waited = up_sees_the_stray_pod(&release);
    if waited.is_err() {
        // The pod goes anyway, so that the tests after this one have a clean namespace.
        let _ = release();
    }
    waited
}

/// Runs `up thin` again: it must say it waits for `multus-stray`, still be waiting 3 s later,
/// and succeed once `release` has let the pod go.
fn up_sees_the_stray_pod(release: &dyn Fn() -> Result<String>) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster.sh");
    let mut again = Command::new(&script)
        .args(["up", "thin"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let (said, lines) = std::sync::mpsc::channel();
    let stderr = again.stderr.take().context("up's stderr")?;
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let _ = said.send(line);
        }
    });
    let mut seen = Vec::new();
    let waiting = loop {
        match lines.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => {
                let found = line.contains("waiting for pods of a replaced DaemonSet to go")
                    && line.contains("multus-stray");
                seen.push(line);
                if found {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    if !waiting {
        let _ = again.kill();
        let _ = again.wait();
        bail!(
            "up never said it waits for the stray pod:\n{}",
            seen.join("\n")
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    if let Some(status) = again.try_wait()? {
        bail!("up ended ({status}) with a replaced DaemonSet's pod still there");
    }
    release()?;
    let status = again.wait()?;
    let _ = reader.join();
    seen.extend(lines.try_iter());
    ensure!(
        status.success(),
        "up failed after the pod went:\n{}",
        seen.join("\n")
    );
    Ok(())
}

#[test]
fn down_leaves_nothing() -> Result<()> {
    let node = e2e::up("thin")?;
    // A pod running when the node goes down: its sandbox, netns and veths go too.
    node.apply(&e2e::sleeping_pod("left-running", None))?;
    node.wait_ready(
        "default",
        "left-running",
        std::time::Duration::from_secs(120),
    )?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster.sh");
    let out = Command::new(&script).arg("down").output()?;
    ensure!(
        out.status.success(),
        "down: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let netns = Command::new("ip").args(["netns", "list"]).output()?;
    let netns = String::from_utf8_lossy(&netns.stdout);
    ensure!(!netns.contains("multus-rs-node"), "netns left: {netns}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    ensure!(
        !mounts.contains("multus-rs-cluster") && !mounts.contains("multus-rs-node"),
        "mounts left: {}",
        mounts
            .lines()
            .filter(|l| l.contains("multus-rs"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for dir in std::fs::read_dir("/sys/fs/cgroup")? {
        let cgroup = dir?.path().join("multus-rs-cluster");
        ensure!(!cgroup.exists(), "cgroup left: {}", cgroup.display());
    }
    let state = e2e::state_dir();
    ensure!(!state.exists(), "state left in {}", state.display());
    ensure!(
        !Path::new("/run/multus-rs-cluster").exists(),
        "/run/multus-rs-cluster left"
    );
    // No process of the node: none runs a binary of the peers' cache, and none names the
    // node or its state (the loopback forwarder does both).
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let exe = exe.to_string_lossy();
        ensure!(
            !exe.contains("/var/cache/multus-rs-test/")
                && !cmdline.contains("multus-rs-node")
                && !cmdline.contains("multus-rs-cluster"),
            "process {} left: {exe} {cmdline}",
            entry.file_name().to_string_lossy()
        );
    }
    Ok(())
}
