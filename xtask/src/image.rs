//! `cargo xtask image [amd64|index]`: builds the container image from deploy/Containerfile with
//! podman, for amd64 and arm64, then runs each the way the DaemonSet does against a node tree
//! in a temporary directory, and checks what it installed (arm64's under qemu-user). The amd64
//! image is left as a docker-archive beside the x86_64 release binaries, for
//! scripts/cluster.sh; the two as one OCI image index in an oci-archive beside it, which
//! `cargo xtask package` names by digest and a release pushes as it is. `amd64` does the first
//! alone, which needs no aarch64 build; `index` the second.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use crate::Arch;

/// The amd64 image, which the tests here run.
const IMAGE: &str = "localhost/multus-rs:latest";
/// The arm64 image.
const ARM_IMAGE: &str = "localhost/multus-rs:latest-arm64";
/// The index of the two, under the release's tag.
const INDEX: &str = concat!("localhost/multus-rs:", env!("CARGO_PKG_VERSION"));
/// The saved amd64 image's file name, in the x86_64 release directory.
pub(crate) const ARCHIVE: &str = "multus-rs-image.tar";
/// The saved index's file name, in the x86_64 release directory.
pub(crate) const INDEX_ARCHIVE: &str = "multus-rs-image-index.tar";
/// Where upstream's thick image has its daemon and shim, which its DaemonSet runs.
const UPSTREAM_BIN: &str = "/usr/src/multus-cni/bin";
const UPSTREAM_LINKS: [&str; 2] = ["multus-daemon", "multus-shim"];

/// What `cargo xtask image` builds and checks.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    /// The amd64 image alone, saved for scripts/cluster.sh and checked: what a node here runs.
    Amd64,
    /// Both images as the release's index, built twice to the same digests, the arm64 image
    /// checked under qemu-user.
    Index,
}

pub fn run(args: &[String]) -> Result<()> {
    let parts: &[Part] = match args {
        [] => &[Part::Amd64, Part::Index],
        [one] if one == "amd64" => &[Part::Amd64],
        [one] if one == "index" => &[Part::Index],
        _ => bail!("usage: cargo xtask image [amd64|index]"),
    };
    let arches: &[Arch] = if parts.contains(&Part::Index) {
        &Arch::ALL
    } else {
        &[Arch::X86_64]
    };
    let mut arch_bins = BTreeMap::new();
    for &arch in arches {
        let plugins = crate::build_release_for(arch)?;
        arch_bins.insert(
            arch.oci(),
            plugins.parent().context("release dir")?.to_path_buf(),
        );
    }
    let bins = arch_bins[Arch::X86_64.oci()].clone();
    let context = bins.join("image");
    // Each architecture's binaries under its OCI name, which the Containerfile's TARGETARCH
    // picks.
    for (oci, dir) in &arch_bins {
        std::fs::create_dir_all(context.join(oci))?;
        for name in ["multus", "cni-plugins"] {
            std::fs::copy(dir.join(name), context.join(oci).join(name))
                .with_context(|| format!("copying {oci} {name} into the image context"))?;
        }
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
    let build = Build {
        root: crate::workspace_root(),
        context,
        epoch: crate::source_date_epoch()?,
    };
    for part in parts {
        match part {
            Part::Amd64 => amd64(&build, &bins)?,
            Part::Index => index(&build, &bins, &arch_bins[Arch::Aarch64.oci()])?,
        }
    }
    Ok(())
}

/// The amd64 image, saved as a docker-archive beside the x86_64 binaries and run the ways a
/// node runs it.
fn amd64(build: &Build, bins: &Path) -> Result<()> {
    let podman = Podman::new()?;
    build.image(&podman, "linux/amd64", IMAGE, None)?;
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

    let node = ScratchNode::new()?;
    installs_on(&podman, IMAGE, &node, bins)?;
    println!("the image installed multus, cni-plugins, the plugin links and 00-multus.conf");
    let (host, sa) = (&node.host, &node.sa);

    // The DaemonSet's log: the container relays what multus calls append to the node's log
    // file, across a rotation.
    let log = host.join("var/log/multus/multus.log");
    std::fs::create_dir_all(log.parent().context("log dir")?)?;
    podman.run_as_daemonset(
        IMAGE,
        host,
        sa,
        &["-d", "--name=multus-relay"],
        &["--relay-log=/host/var/log/multus/multus.log"],
    )?;
    let relayed = relay_survives_rotation(&podman, host, &log);
    let _ = podman.run(&["rm", "-f", "multus-relay"]);
    relayed?;
    println!("the container relayed multus's log lines to its own, across a rotation");
    Ok(())
}

/// Both images as one index in an oci-archive beside the x86_64 binaries, built again in
/// another store to the same digests; the arm64 image installs its binaries under qemu-user.
fn index(build: &Build, bins: &Path, arm_bins: &Path) -> Result<()> {
    let podman = Podman::new()?;
    let index_archive = bins.join(INDEX_ARCHIVE);
    let digests = build.index(&podman, &index_archive)?;
    for (arch, digest) in &digests {
        println!("{INDEX} {arch}: {digest}");
    }
    // Built again from the same binaries in another store, the images are the same to the
    // byte: their digests depend on nothing but the binaries and the commit.
    let again = tempfile::tempdir()?;
    let digests_again = build.index(&Podman::new()?, &again.path().join(INDEX_ARCHIVE))?;
    ensure!(
        digests_again == digests,
        "the image built twice has other digests: {digests:?}, then {digests_again:?}"
    );
    println!("built again in another store: the same digests");
    let arm_node = ScratchNode::new()?;
    installs_on(&podman, ARM_IMAGE, &arm_node, arm_bins)?;
    println!("the arm64 image, under qemu-user, installed its aarch64 binaries");
    Ok(())
}

/// What every image is built from: deploy/Containerfile, the context holding each
/// architecture's binaries, and the commit's time.
struct Build {
    root: PathBuf,
    context: PathBuf,
    epoch: String,
}

impl Build {
    /// The image for `platform` as `tag`, added to the manifest list `manifest` if one is
    /// given.
    fn image(
        &self,
        podman: &Podman,
        platform: &str,
        tag: &str,
        manifest: Option<&str>,
    ) -> Result<()> {
        let containerfile = self.root.join("deploy/Containerfile").display().to_string();
        let context = self.context.display().to_string();
        let mut args = vec![
            "build",
            "--quiet",
            "--network=none",
            "--platform",
            platform,
            // The commit's time, not the build's: the same commit, the same image digests.
            "--timestamp",
            &self.epoch,
            "-f",
            &containerfile,
            "-t",
            tag,
        ];
        if let Some(manifest) = manifest {
            args.extend_from_slice(&["--manifest", manifest]);
        }
        args.push(&context);
        podman.run(&args)?;
        println!("built {tag} ({platform})");
        Ok(())
    }

    /// Both platforms' images as one index under the release's tag, pushed to the oci-archive
    /// `index_archive`: each platform's digest.
    fn index(&self, podman: &Podman, index_archive: &Path) -> Result<BTreeMap<String, String>> {
        for (platform, tag) in [("linux/amd64", IMAGE), ("linux/arm64", ARM_IMAGE)] {
            // The index under the release's own tag, which the packages name by digest.
            self.image(podman, platform, tag, Some(INDEX))?;
        }
        let _ = std::fs::remove_file(index_archive);
        podman.run(&[
            "manifest",
            "push",
            "--quiet",
            "--all",
            "--format=oci",
            INDEX,
            &format!("oci-archive:{}", index_archive.display()),
        ])?;
        index_digests(index_archive)
    }
}

/// Each architecture's image manifest digest in the OCI index archive `archive` (`oci-archive`
/// layout: index.json names the image index blob, which names a manifest per platform).
pub(crate) fn index_digests(archive: &Path) -> Result<BTreeMap<String, String>> {
    let member = |name: &str| -> Result<serde_json::Value> {
        let out = std::process::Command::new("tar")
            .arg("-xOf")
            .arg(archive)
            .arg(name)
            .output()
            .with_context(|| format!("running tar on {}", archive.display()))?;
        ensure!(
            out.status.success(),
            "{} has no {name}: run `cargo xtask image`",
            archive.display()
        );
        serde_json::from_slice(&out.stdout).with_context(|| format!("parsing {name}"))
    };
    let blob = |digest: &serde_json::Value| -> Result<String> {
        let digest = digest.as_str().context("a digest")?;
        let hex = digest.strip_prefix("sha256:").context("a sha256 digest")?;
        ensure!(
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "digest {digest:?}"
        );
        Ok(format!("blobs/sha256/{hex}"))
    };
    let top = member("index.json")?;
    let index = member(&blob(&top["manifests"][0]["digest"])?)?;
    let mut digests = BTreeMap::new();
    for m in index["manifests"]
        .as_array()
        .context("the index's manifests")?
    {
        let arch = m["platform"]["architecture"]
            .as_str()
            .context("a platform")?;
        blob(&m["digest"])?;
        let digest = m["digest"].as_str().context("a digest")?;
        digests.insert(arch.to_owned(), digest.to_owned());
    }
    for arch in Arch::ALL {
        ensure!(
            digests.contains_key(arch.oci()),
            "{} has no {} image",
            archive.display(),
            arch.oci()
        );
    }
    Ok(digests)
}

/// A node as the DaemonSet mounts it: its tree, with a cluster network's config, and a
/// service account.
struct ScratchNode {
    _dir: tempfile::TempDir,
    host: PathBuf,
    sa: PathBuf,
}

impl ScratchNode {
    fn new() -> Result<ScratchNode> {
        let dir = tempfile::tempdir()?;
        let host = dir.path().join("host");
        let sa = dir.path().join("serviceaccount");
        for d in [
            host.join("etc/cni/net.d"),
            host.join("opt/cni/bin"),
            sa.clone(),
        ] {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(sa.join("token"), "token")?;
        std::fs::write(sa.join("ca.crt"), "ca")?;
        std::fs::write(
            host.join("etc/cni/net.d/10-bridge.conf"),
            r#"{"cniVersion": "0.4.0", "name": "cluster", "type": "bridge"}"#,
        )?;
        Ok(ScratchNode {
            _dir: dir,
            host,
            sa,
        })
    }
}

/// `multus install` from `image` on `node`: it writes 00-multus.conf and the kubeconfig, and
/// installs `bins`' multus and cni-plugins with the plugin links.
fn installs_on(podman: &Podman, image: &str, node: &ScratchNode, bins: &Path) -> Result<()> {
    let host = &node.host;
    podman.run_as_daemonset(image, host, &node.sa, &["--rm"], &["--skip-config-watch"])?;
    let conf = std::fs::read_to_string(host.join("etc/cni/net.d/00-multus.conf"))?;
    ensure!(
        conf.contains("\"type\": \"multus\""),
        "{image}: 00-multus.conf: {conf}"
    );
    ensure!(
        host.join("etc/cni/net.d/multus.d/multus.kubeconfig")
            .exists(),
        "{image} wrote no kubeconfig"
    );
    for name in ["multus", "cni-plugins"] {
        ensure!(
            std::fs::read(host.join("opt/cni/bin").join(name))? == std::fs::read(bins.join(name))?,
            "{name} was not installed from {image}"
        );
    }
    let bridge = std::fs::read_link(host.join("opt/cni/bin/bridge"))?;
    ensure!(
        bridge == Path::new("cni-plugins"),
        "{image}: bridge links to {}",
        bridge.display()
    );
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

    /// `multus install` in `image` with `install_args`, as the DaemonSet runs it: the node's
    /// tree `host` at /host and the service account `sa`.
    fn run_as_daemonset(
        &self,
        image: &str,
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
            image,
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
