//! podman as a real runtime: its CNI backend, configured in a scratch directory, calling the
//! plugins of a test's `CNI_PATH`, inside a node namespace the test owns.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::Netns;

/// The tag of the local busybox image.
const BUSYBOX: &str = "localhost/busybox:test";

/// podman with its configuration and storage under `scratch`; network configs go in
/// [`Podman::net_dir`].
pub struct Podman {
    scratch: PathBuf,
    env: Vec<(&'static str, String)>,
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl Podman {
    pub fn new(scratch: &Path, plugin_dir: &Path) -> Podman {
        for d in ["net", "tmp"] {
            std::fs::create_dir_all(scratch.join(d)).expect("mkdir");
        }
        write(
            &scratch.join("containers.conf"),
            &format!(
                "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1000:1000\"]\n\
                 [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{}\"]\nnetwork_config_dir = \"{}\"\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\ntmp_dir = \"{}\"\n",
                plugin_dir.display(),
                scratch.join("net").display(),
                scratch.join("tmp").display()
            ),
        );
        write(
            &scratch.join("storage.conf"),
            &format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                scratch.join("storage").display(),
                scratch.join("runroot").display()
            ),
        );
        let env = vec![
            (
                "CONTAINERS_CONF",
                scratch.join("containers.conf").display().to_string(),
            ),
            (
                "CONTAINERS_STORAGE_CONF",
                scratch.join("storage.conf").display().to_string(),
            ),
            // podman passes its environment on to the plugins it runs.
            (
                cni::path_roots::ROOTS_FILE_ENV,
                crate::test_path_roots().display().to_string(),
            ),
        ];
        Podman {
            scratch: scratch.to_path_buf(),
            env,
        }
    }

    /// `podman` with this configuration.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Where network configs (`<name>.conflist`) go.
    pub fn net_dir(&self) -> PathBuf {
        self.scratch.join("net")
    }

    /// Writes the network config `<name>.conflist`.
    pub fn add_network(&self, name: &str, conflist: &str) {
        write(&self.net_dir().join(format!("{name}.conflist")), conflist);
    }

    /// `sh -c <script>` in a busybox container on `network`, inside `node`, removed after
    /// (`--rm`); asserts that podman succeeded and returns the container's stdout.
    pub fn run_busybox(&self, node: &Netns, network: &str, script: &str) -> String {
        self.import_busybox(BUSYBOX);
        let out = self.run(node, network, BUSYBOX, script);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "podman run failed:\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Imports a busybox image as `tag`, made locally: no image can be pulled here.
    fn import_busybox(&self, tag: &str) {
        let root = self.scratch.join("rootfs");
        for d in ["bin", "etc", "proc", "sys", "dev", "tmp"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir rootfs");
        }
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("copy busybox");
        let list = Command::new("/bin/busybox")
            .arg("--list")
            .output()
            .expect("busybox --list");
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            let link = root.join("bin").join(applet);
            if !link.exists() {
                std::os::unix::fs::symlink("busybox", link).expect("applet link");
            }
        }
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .args(["-c", "."])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run tar");
        let out = self
            .command()
            .args(["import", "--change", "CMD [\"/bin/sh\"]", "-", tag])
            .stdin(tar.stdout.take().expect("tar stdout"))
            .output()
            .expect("podman import");
        assert!(
            tar.wait().expect("tar").success(),
            "tar of the rootfs failed"
        );
        assert!(
            out.status.success(),
            "podman import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `podman run --rm --network <network> <image> sh -c <script>` inside `node`.
    fn run(&self, node: &Netns, network: &str, image: &str, script: &str) -> Output {
        // Only the network namespace is joined: `ip netns exec` would also remount /sys and
        // hide the cgroup mounts runc needs.
        let mut cmd = self.command();
        node.enter_on_exec(&mut cmd);
        cmd.args(["--network-backend", "cni", "run", "--rm"])
            .args(["--network", network, image, "sh", "-c", script])
            .output()
            .expect("run podman")
    }
}

/// A scratch directory for a podman test, beneath `/run/cni`, one of the node's default path
/// roots: podman's cleanup after `--rm` runs the plugins' DEL without the environment podman
/// was started with, so only the default roots hold there.
pub fn scratch() -> tempfile::TempDir {
    std::fs::create_dir_all("/run/cni").expect("mkdir /run/cni");
    tempfile::Builder::new()
        .prefix("multus-rs-podman-")
        .tempdir_in("/run/cni")
        .expect("tempdir")
}

/// Asserts that no veth is left in `node`: `--rm` tore the container's attachments down.
pub fn assert_no_veth(node: &Netns) {
    let links = node.links();
    assert!(
        !links.iter().any(|l| l.starts_with("veth")),
        "veth left behind: {links:?}"
    );
}
