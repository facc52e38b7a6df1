//! `cargo xtask image`: builds the container image from deploy/Containerfile with podman, then
//! runs it the way the DaemonSet does against a node tree in a temporary directory, and checks
//! what it installed. The image is left as a docker-archive beside the release binaries.

use std::path::Path;

use anyhow::{ensure, Context, Result};

const IMAGE: &str = "localhost/multus-rs:latest";
/// The saved image's file name, in the release directory.
pub(crate) const ARCHIVE: &str = "multus-rs-image.tar";
/// Where upstream's thick image has its daemon and shim, which its DaemonSet runs.
const UPSTREAM_BIN: &str = "/usr/src/multus-cni/bin";
const UPSTREAM_LINKS: [&str; 2] = ["multus-daemon", "multus-shim"];

pub fn run() -> Result<()> {
    let podman = Podman::new()?;
    let plugins = crate::build_release()?;
    let bins = plugins.parent().context("release dir")?;
    let root = crate::workspace_root();
    let context = bins.join("image");
    std::fs::create_dir_all(&context)?;
    for name in ["multus", "cni-plugins"] {
        std::fs::copy(bins.join(name), context.join(name))
            .with_context(|| format!("copying {name} into the image context"))?;
    }
    let upstream = context.join("upstream");
    std::fs::create_dir_all(&upstream)?;
    for name in UPSTREAM_LINKS {
        let link = upstream.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/usr/bin/multus", &link)
            .with_context(|| format!("linking {name} in the image context"))?;
    }
    // /var/run, as every distribution has it: runtimes name the pod's netns by
    // /var/run/netns/..., which the thick daemon opens inside its pod.
    let var = context.join("var");
    std::fs::create_dir_all(&var)?;
    let _ = std::fs::remove_file(var.join("run"));
    std::os::unix::fs::symlink("../run", var.join("run")).context("linking var/run")?;
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
    // The image as an archive beside the binaries, which scripts/cluster.sh imports into the
    // node's containerd: podman's storage here is scratch.
    let archive = bins.join(ARCHIVE);
    // podman save does not replace an archive.
    let _ = std::fs::remove_file(&archive);
    podman.run(&[
        "save",
        "--quiet",
        "--format=docker-archive",
        "-o",
        &archive.display().to_string(),
        IMAGE,
    ])?;
    println!("saved {IMAGE} to {}", archive.display());
    upstream_paths_run(&podman)?;
    println!("multus-daemon and multus-shim run from upstream's paths in the image");

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
    podman.run_as_daemonset(&host, &sa, &["--rm"], &["--skip-config-watch"])?;

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

    // The DaemonSet's log: the container relays what multus calls append to the node's log
    // file, across a rotation.
    let log = host.join("var/log/multus/multus.log");
    std::fs::create_dir_all(log.parent().context("log dir")?)?;
    podman.run_as_daemonset(
        &host,
        &sa,
        &["-d", "--name=multus-relay"],
        &["--relay-log=/host/var/log/multus/multus.log"],
    )?;
    let relayed = relay_survives_rotation(&podman, &host, &log);
    let _ = podman.run(&["rm", "-f", "multus-relay"]);
    relayed?;
    println!("the container relayed multus's log lines to its own, across a rotation");
    Ok(())
}

/// The daemon and the shim at upstream's paths run as themselves: the daemon prints its
/// version, the shim (a CNI plugin, called without a command) what it is.
fn upstream_paths_run(podman: &Podman) -> Result<()> {
    for (name, args, says) in [
        ("multus-daemon", &["-version"][..], "multus-daemon "),
        ("multus-shim", &[], "multus-rs shim "),
    ] {
        let entrypoint = format!("--entrypoint={UPSTREAM_BIN}/{name}");
        let mut run = vec!["run", "--rm", "--network=none", &entrypoint, IMAGE];
        run.extend_from_slice(args);
        let said = podman.output(&run)?;
        ensure!(said.contains(says), "{UPSTREAM_BIN}/{name} said: {said}");
    }
    Ok(())
}

/// Two multus DELs, the node's log rotated between them: `podman logs` shows each call's line.
fn relay_survives_rotation(podman: &Podman, host: &Path, log: &Path) -> Result<()> {
    podman.wait_for_log("multus-relay", "multus install: watching")?;
    for (n, pod) in ["relay-pod-1", "relay-pod-2"].iter().enumerate() {
        if n == 1 {
            // As multus rotates: the file becomes a backup, the next call starts a new one.
            std::fs::rename(log, log.with_extension("log.1"))?;
        }
        multus_del(host, log, pod)?;
        podman.wait_for_log("multus-relay", &format!("pod=default/{pod}"))?;
    }
    Ok(())
}

/// A DEL by the installed multus, as a runtime calls it, logging to `log`.
fn multus_del(host: &Path, log: &Path, pod: &str) -> Result<()> {
    let conf = serde_json::json!({
        "cniVersion": "0.4.0", "name": "multus-cni-network", "type": "multus",
        "logFile": log, "logLevel": "verbose", "logToStderr": false,
        "cniDir": host.join("var/lib/cni/multus"),
        "delegates": [{"cniVersion": "0.4.0", "name": "cluster", "type": "bridge"}],
    });
    let mut child = std::process::Command::new(host.join("opt/cni/bin/multus"))
        .env_clear()
        .env("CNI_COMMAND", "DEL")
        .env("CNI_CONTAINERID", pod)
        .env("CNI_NETNS", "")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", host.join("opt/cni/bin"))
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    use std::io::Write;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(conf.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "multus DEL: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(())
}

/// podman with its configuration and storage in a scratch directory: nothing stays on the
/// machine.
pub(crate) struct Podman {
    podman: testkit::podman::Podman,
    _scratch: tempfile::TempDir,
}

impl Podman {
    pub(crate) fn new() -> Result<Podman> {
        let scratch = tempfile::tempdir()?;
        // No container here uses a CNI network: the plugin dir is never read.
        let podman = testkit::podman::Podman::new(scratch.path(), scratch.path());
        Ok(Podman {
            podman,
            _scratch: scratch,
        })
    }

    /// `multus install` in the image with `install_args`, as the DaemonSet runs it: the node's
    /// tree `host` at /host and the service account `sa`.
    fn run_as_daemonset(
        &self,
        host: &Path,
        sa: &Path,
        run_args: &[&str],
        install_args: &[&str],
    ) -> Result<()> {
        let mounts = [
            format!("{}:/host", host.display()),
            format!(
                "{}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
                sa.display()
            ),
        ];
        let mut args = vec!["run"];
        args.extend_from_slice(run_args);
        args.extend_from_slice(&[
            "--network=none",
            "-e",
            "KUBERNETES_SERVICE_HOST=10.43.0.1",
            "-v",
            &mounts[0],
            "-v",
            &mounts[1],
            IMAGE,
            "install",
        ]);
        args.extend_from_slice(install_args);
        self.run(&args)
    }

    /// Waits (at most 30 s) until `container`'s log has a line containing `needle`.
    fn wait_for_log(&self, container: &str, needle: &str) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = self
                .podman
                .command()
                .args(["logs", container])
                .output()
                .context("running podman logs")?;
            // The container's stdout and stderr, as podman gives them back: its own lines are
            // on stderr, the multus log it relays on stdout.
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if text.lines().any(|l| l.contains(needle)) {
                return Ok(());
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "{container}'s log has no {needle:?} after 30 s:\n{text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    pub(crate) fn run(&self, args: &[&str]) -> Result<()> {
        self.output(args).map(drop)
    }

    /// What a podman command that must succeed printed, stdout and stderr.
    fn output(&self, args: &[&str]) -> Result<String> {
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
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
