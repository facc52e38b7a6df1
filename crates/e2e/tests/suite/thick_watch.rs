//! Thick mode's caches against a real watch: a NAD changed between two pods is what the second
//! pod gets.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::up;

fn nad(subnet: &str) -> String {
    let ipam = format!(
        r#"{{"type": "host-local", "subnet": "{subnet}", "dataDir": "/var/lib/cni/e2e-watch"}}"#
    );
    e2e::bridge_nad("changing", "br-watch", &ipam)
}

fn pod(name: &str) -> String {
    e2e::sleeping_pod(name, Some("changing"))
}

/// The last NAD version the thick daemon's cache has seen, from its metrics on its socket.
fn nad_cache_version(node: &e2e::Node) -> Result<i64> {
    node.daemon_metrics()?
        .lines()
        .find_map(|l| l.strip_prefix("multus_cache_resource_version{kind=\"nads\"} "))
        .and_then(|v| v.trim().parse().ok())
        .context("no NAD cache version in the daemon's metrics")
}

#[test]
fn a_nad_changed_between_two_pods() -> Result<()> {
    let node = up("thick")?;
    node.apply(&nad("10.30.0.0/24"))?;
    node.apply(&pod("before"))?;
    node.wait_ready("default", "before", Duration::from_secs(120))?;
    ensure!(node.ipv4("before", "net1")?.starts_with("10.30.0."));

    node.apply(&nad("10.31.0.0/24"))?;
    node.apply(&pod("after"))?;
    node.wait_ready("default", "after", Duration::from_secs(120))?;
    let after = node.ipv4("after", "net1")?;
    ensure!(
        after.starts_with("10.31.0."),
        "the second pod got {after}: the old NAD"
    );
    // The first pod keeps what it had.
    ensure!(node.ipv4("before", "net1")?.starts_with("10.30.0."));

    node.delete(&format!("{}---\n{}", pod("before"), pod("after")))?;
    node.delete(&nad("10.31.0.0/24"))?;
    Ok(())
}

/// The API server restarted after etcd moved on and compacted: the daemon's watches resume
/// from versions that are gone, get 410, list again, and a NAD changed after that is what
/// the next pod gets.
#[test]
fn the_watch_lists_again_after_a_restart_over_a_compaction() -> Result<()> {
    let node = up("thick")?;
    node.apply(&nad("10.30.0.0/24"))?;
    node.apply(&pod("first"))?;
    node.wait_ready("default", "first", Duration::from_secs(120))?;

    let etcd = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/peers.sh"
    ))
    .args(["dir", "etcd"])
    .output()?;
    let etcdctl = format!("{}/etcdctl", String::from_utf8_lossy(&etcd.stdout).trim());
    let endpoint = "--endpoints=http://127.0.0.1:2379";
    // Revisions past everything the daemon has seen, outside the API server's keys, then
    // compacted away.
    for i in 0..5 {
        node.exec(&[&etcdctl, endpoint, "put", "/e2e/bump", &i.to_string()])?;
    }
    let status = node.exec(&[&etcdctl, endpoint, "endpoint", "status", "-w", "json"])?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    let revision = status[0]["Status"]["header"]["revision"]
        .as_i64()
        .context("etcd's revision")?;
    node.exec(&[&etcdctl, endpoint, "compact", &revision.to_string()])?;
    node.exec(&[&etcdctl, endpoint, "del", "/e2e/bump"])?;
    e2e::cluster(&["stop", "apiserver"])?;
    e2e::cluster(&["start", "apiserver"])?;

    node.eventually(
        "the daemon's NAD watch lists again after a 410",
        Duration::from_secs(60),
        || {
            let logs = node.daemon_log()?;
            Ok(logs.lines().any(|l| {
                l.contains("watch of network-attachment-definitions from version")
                    && l.contains("expired, listing again")
            }))
        },
    )?;
    // The NAD changed after that reaches the daemon's cache through the watch that listed
    // again (the version the cache has seen moves past the one before the change); then the
    // next pod gets it.
    let before = nad_cache_version(&node)?;
    node.apply(&nad("10.31.0.0/24"))?;
    node.eventually(
        "the changed NAD in the daemon's cache",
        Duration::from_secs(60),
        || Ok(nad_cache_version(&node)? > before),
    )?;
    node.apply(&pod("second"))?;
    node.wait_ready("default", "second", Duration::from_secs(120))?;
    let second = node.ipv4("second", "net1")?;
    ensure!(
        second.starts_with("10.31.0."),
        "after the restart, the new pod got {second}"
    );
    node.delete(&format!("{}---\n{}", pod("first"), pod("second")))?;
    node.delete(&nad("10.31.0.0/24"))?;
    Ok(())
}
