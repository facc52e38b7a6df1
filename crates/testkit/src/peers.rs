//! The real upstream peers (the reference plugins, multus, whereabouts, containerd, Kubernetes,
//! etcd) as `scripts/peers.sh` builds them from their Go modules, cached outside the clone by
//! version.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

/// The directory of `peer`'s binaries (`scripts/peers.sh build <peer>`): built first when it
/// is missing or was built from other pins. A build needs the Go module proxy, which a test's
/// network namespace cannot reach; scripts/deps.sh builds the peers the tests use beforehand.
pub fn build(peer: &str) -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["build", peer])
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        out.status.success(),
        "scripts/peers.sh build {peer} failed (run scripts/deps.sh, which builds it with the \
         network): {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let stdout =
        String::from_utf8(out.stdout).context("peers.sh printed a path that is not UTF-8")?;
    let dir = PathBuf::from(
        stdout
            .lines()
            .last()
            .context("scripts/peers.sh build printed no directory")?,
    );
    ensure!(dir.is_dir(), "{} is not a directory", dir.display());
    Ok(dir)
}

/// Where `scripts/peers.sh` keeps its builds.
fn cache() -> PathBuf {
    std::env::var_os("MULTUS_RS_PEERS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/multus-rs-test"))
}

/// The reference plugins' pinned release, read from the peer's go.mod when the tests are built:
/// tests also run in the VM, where neither the script nor Go is at hand, from the same path.
const CNI_PLUGINS_GO_MOD: &str = include_str!("../../../test-support/peers/cni-plugins/go.mod");

/// The directory of the reference plugins at their pinned release (v1.9.1), which
/// scripts/deps.sh builds before the tests run. Panics, naming the command, when it is missing.
pub fn cni_plugins_dir() -> PathBuf {
    let version = CNI_PLUGINS_GO_MOD
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("github.com/containernetworking/plugins ")
        })
        .and_then(|rest| rest.split_whitespace().next())
        .expect(
            "test-support/peers/cni-plugins/go.mod requires github.com/containernetworking/plugins",
        );
    let dir = cache().join(format!("cni-plugins-{version}"));
    assert!(
        dir.join("bridge").is_file(),
        "{} has no reference plugins: run `scripts/peers.sh build cni-plugins`",
        dir.display()
    );
    dir
}
