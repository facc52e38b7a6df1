//! `scripts/cluster.sh down` leaves nothing of the node: no network namespace, no process, no
//! mount, no cgroup, no state. (Tests run in name order, module first: the walkthrough after
//! this one brings a fresh node up again.)

use std::path::Path;
use std::process::Command;

use anyhow::{bail, ensure, Result};

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
