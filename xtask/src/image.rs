//! `cargo xtask image`: builds the container image from deploy/Containerfile with podman, then
//! runs it the way the DaemonSet does against a node tree in a temporary directory, and checks
//! what it installed.

use std::path::Path;

use anyhow::{ensure, Context, Result};

const IMAGE: &str = "localhost/multus-rs:latest";

pub fn run() -> Result<()> {
    let podman = Podman::new()?;
    let plugins = crate::build_release()?;
    let bins = plugins.parent().context("release dir")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let context = bins.join("image");
    std::fs::create_dir_all(&context)?;
    for name in ["multus", "cni-plugins"] {
        std::fs::copy(bins.join(name), context.join(name))
            .with_context(|| format!("copying {name} into the image context"))?;
    }
    podman.run(&[
        "build",
        "--quiet",
        "--network=none",
        "-f",
        &root.join("deploy/Containerfile").display().to_string(),
        "-t",
        IMAGE,
        // The release's own tag, as the packages' manifests and release info name it.
        "-t",
        &format!("localhost/multus-rs:{}", env!("CARGO_PKG_VERSION")),
        &context.display().to_string(),
    ])?;
    println!("built {IMAGE} (also tagged {})", env!("CARGO_PKG_VERSION"));

    // A node as the DaemonSet mounts it.
    let node = tempfile::tempdir()?;
    let host = node.path().join("host");
    let sa = node.path().join("serviceaccount");
    for dir in [
        host.join("etc/cni/net.d"),
        host.join("opt/cni/bin"),
        sa.clone(),
    ] {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(sa.join("token"), "token")?;
    std::fs::write(sa.join("ca.crt"), "ca")?;
    std::fs::write(
        host.join("etc/cni/net.d/10-bridge.conf"),
        r#"{"cniVersion": "0.4.0", "name": "cluster", "type": "bridge"}"#,
    )?;
    let result = podman.run(&[
        "run",
        "--rm",
        "--network=none",
        "-e",
        "KUBERNETES_SERVICE_HOST=10.43.0.1",
        "-v",
        &format!("{}:/host", host.display()),
        "-v",
        &format!(
            "{}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
            sa.display()
        ),
        IMAGE,
        "install",
        "--skip-config-watch",
    ]);
    result?;

    let conf = std::fs::read_to_string(host.join("etc/cni/net.d/00-multus.conf"))?;
    ensure!(
        conf.contains("\"type\": \"multus\""),
        "00-multus.conf: {conf}"
    );
    ensure!(host
        .join("etc/cni/net.d/multus.d/multus.kubeconfig")
        .exists());
    for name in ["multus", "cni-plugins"] {
        ensure!(
            std::fs::read(host.join("opt/cni/bin").join(name))? == std::fs::read(bins.join(name))?,
            "{name} was not installed from the image"
        );
    }
    let bridge = std::fs::read_link(host.join("opt/cni/bin/bridge"))?;
    ensure!(
        bridge == Path::new("cni-plugins"),
        "bridge links to {}",
        bridge.display()
    );
    println!("the image installed multus, cni-plugins, the plugin links and 00-multus.conf");
    Ok(())
}

/// podman with its configuration and storage in a scratch directory: nothing stays on the
/// machine.
struct Podman {
    podman: testkit::podman::Podman,
    _scratch: tempfile::TempDir,
}

impl Podman {
    fn new() -> Result<Podman> {
        let scratch = tempfile::tempdir()?;
        // No container here uses a CNI network: the plugin dir is never read.
        let podman = testkit::podman::Podman::new(scratch.path(), scratch.path());
        Ok(Podman {
            podman,
            _scratch: scratch,
        })
    }

    fn run(&self, args: &[&str]) -> Result<()> {
        let out = self
            .podman
            .command()
            .args(args)
            .output()
            .context("running podman")?;
        ensure!(
            out.status.success(),
            "podman {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}
