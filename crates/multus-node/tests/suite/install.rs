//! `multus install` run as the DaemonSet runs it, against a node tree in a temporary directory.

use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MULTUS: &str = env!("CARGO_BIN_EXE_multus");
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// A node as the installer's container sees it: the host's root at `host/`, the service
/// account, and the binaries the image carries.
struct Node {
    root: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let node = Node {
            root: tempfile::tempdir().expect("a temporary directory"),
        };
        for dir in [
            node.conf_dir(),
            node.bin_dir(),
            node.sa_dir(),
            node.image_dir(),
        ] {
            std::fs::create_dir_all(dir).expect("creates a test directory");
        }
        std::fs::write(node.sa_dir().join("token"), "token-1").expect("writes a test file");
        std::fs::write(node.sa_dir().join("ca.crt"), "CA-1").expect("writes a test file");
        std::fs::copy(MULTUS, node.image_dir().join("multus")).expect("copies a file");
        let plugins = testkit::workspace_binary("cni-plugins", "plugins");
        std::fs::copy(plugins, node.image_dir().join("cni-plugins")).expect("copies a file");
        node
    }

    fn host(&self) -> PathBuf {
        self.root.path().join("host")
    }
    fn conf_dir(&self) -> PathBuf {
        self.host().join("etc/cni/net.d")
    }
    fn bin_dir(&self) -> PathBuf {
        self.host().join("opt/cni/bin")
    }
    fn sa_dir(&self) -> PathBuf {
        self.root.path().join("serviceaccount")
    }
    fn image_dir(&self) -> PathBuf {
        self.root.path().join("image")
    }

    fn write_conf(&self, name: &str, config: &Value) {
        std::fs::write(self.conf_dir().join(name), config.to_string()).expect("writes a test file");
    }

    fn command(&self, extra: &[&str]) -> Command {
        self.command_in(Command::new(self.image_dir().join("multus")), extra)
    }

    /// `multus install` with this node's flags and `extra`, run by `cmd` (the image's multus,
    /// or a wrapper that runs it as a pod would).
    fn command_in(&self, mut cmd: Command, extra: &[&str]) -> Command {
        cmd.arg("install")
            .arg(format!("--cni-bin-dir={}", self.bin_dir().display()))
            .arg(format!("--cni-conf-dir={}", self.conf_dir().display()))
            .arg(format!(
                "--multus-autoconfig-dir={}",
                self.conf_dir().display()
            ))
            .arg(format!("--host-prefix={}", self.host().display()))
            .arg(format!("--service-account-dir={}", self.sa_dir().display()))
            .args(extra)
            .env("KUBERNETES_SERVICE_HOST", "10.43.0.1")
            .env("KUBERNETES_SERVICE_PORT", "443");
        cmd
    }

    /// One pass, no watching.
    fn install(&self, extra: &[&str]) -> Output {
        let mut args = vec!["--skip-config-watch"];
        args.extend_from_slice(extra);
        self.command(&args).output().expect("runs the command")
    }

    /// One pass that must succeed: its log. Nothing goes to stdout.
    fn install_ok(&self, extra: &[&str]) -> String {
        let out = self.install(extra);
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "install failed: {log}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        log
    }

    /// Runs the installer as the DaemonSet does: watching until stopped.
    fn spawn(&self, extra: &[&str]) -> Installer {
        Installer::start(self.command(extra))
    }

    fn multus_conf(&self) -> Value {
        read_json(&self.conf_dir().join("00-multus.conf"))
    }

    fn multus_files(&self) -> Vec<String> {
        names(&self.conf_dir())
            .into_iter()
            .filter(|n| n.starts_with("00-multus"))
            .collect()
    }

    fn file(&self, rel: &str) -> PathBuf {
        self.conf_dir().join(rel)
    }
}

struct Installer {
    child: Child,
}

impl Installer {
    fn start(mut cmd: Command) -> Installer {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts the command");
        Installer { child }
    }

    fn stop(mut self) -> (bool, String) {
        // SAFETY: kill(2) on our own child's PID, which has not been reaped yet.
        unsafe {
            libc::kill(
                libc::pid_t::try_from(self.child.id()).expect("fits the type"),
                libc::SIGTERM,
            )
        };
        let out = self.wait_output();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn wait_output(&mut self) -> Output {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .child
            .try_wait()
            .expect("waits for the child")
            .is_none()
        {
            assert!(Instant::now() < deadline, "installer did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut stderr).expect("reads a test file");
        }
        Output {
            status: self.child.wait().expect("waits for the child"),
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        }
    }
}

impl Drop for Installer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

fn names(dir: &Path) -> Vec<String> {
    let mut all: Vec<String> = std::fs::read_dir(dir)
        .expect("lists the directory")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .into_string()
                .expect("a UTF-8 file name")
        })
        .collect();
    all.sort();
    all
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("reads the metadata")
        .permissions()
        .mode()
        & 0o777
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bridge_conf() -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": "cluster",
        "type": "bridge",
        "bridge": "cni0",
        "capabilities": {"portMappings": true},
        "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"}
    })
}

fn plugin_names(node: &Node) -> Vec<String> {
    let out = Command::new(node.image_dir().join("cni-plugins"))
        .arg("--list")
        .output()
        .expect("runs the command");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("UTF-8 output")
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn installs_binaries_links_kubeconfig_and_a_config_around_the_primary_network() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    node.install_ok(&[]);

    for bin in ["multus", "cni-plugins"] {
        let installed = node.bin_dir().join(bin);
        assert_eq!(
            std::fs::read(&installed).unwrap(),
            std::fs::read(node.image_dir().join(bin)).unwrap()
        );
        assert_eq!(mode(&installed), 0o755);
    }
    let plugins = plugin_names(&node);
    for name in ["bridge", "host-local", "static", "passthru", "loopback"] {
        assert!(plugins.iter().any(|p| p == name), "{name} not listed");
    }
    for name in &plugins {
        let link = std::fs::read_link(node.bin_dir().join(name)).unwrap();
        assert_eq!(link, Path::new("cni-plugins"), "{name}");
    }
    // whereabouts is in multus, which carries the Kubernetes client, and so is the shim.
    for name in ["whereabouts", "multus-shim"] {
        assert_eq!(
            std::fs::read_link(node.bin_dir().join(name)).unwrap(),
            Path::new("multus")
        );
    }
    let about = Command::new(node.bin_dir().join("whereabouts"))
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&about.stdout).contains("\"1.1.0\""));
    let usage = Command::new(node.bin_dir().join("whereabouts"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Usage: whereabouts <COMMAND>"));
    // The installed link runs the plugin it is named after.
    let version = Command::new(node.bin_dir().join("bridge"))
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).contains("supportedVersions"));

    let conf_path = node.file("00-multus.conf");
    assert_eq!(mode(&conf_path), 0o600);
    assert_eq!(
        node.multus_conf(),
        json!({
            "cniVersion": "0.4.0",
            "name": "multus-cni-network",
            "type": "multus",
            "capabilities": {"portMappings": true},
            "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
            "delegates": [bridge_conf()]
        })
    );

    let kubeconfig = node.file("multus.d/multus.kubeconfig");
    assert_eq!(mode(&kubeconfig), 0o600);
    assert_eq!(mode(&node.file("multus.d/token")), 0o600);
    assert_eq!(
        std::fs::read_to_string(node.file("multus.d/token")).unwrap(),
        "token-1"
    );
    assert_eq!(
        std::fs::read_to_string(node.file("multus.d/ca.crt")).unwrap(),
        "CA-1"
    );
    // kubectl reads it as a kubeconfig: the token by file, the CA by file.
    let view = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["config", "view", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        view.status.success(),
        "{}",
        String::from_utf8_lossy(&view.stderr)
    );
    let view: Value = serde_json::from_slice(&view.stdout).unwrap();
    assert_eq!(view["current-context"], "multus-context");
    assert_eq!(
        view["clusters"][0]["cluster"]["server"],
        "https://10.43.0.1:443"
    );
    assert_eq!(
        view["clusters"][0]["cluster"]["certificate-authority"],
        "/etc/cni/net.d/multus.d/ca.crt"
    );
    assert_eq!(
        view["users"][0]["user"]["tokenFile"],
        "/etc/cni/net.d/multus.d/token"
    );

    for dir in [node.bin_dir(), node.conf_dir(), node.file("multus.d")] {
        let temp: Vec<String> = names(&dir)
            .into_iter()
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(
            temp.is_empty(),
            "temp files left in {}: {temp:?}",
            dir.display()
        );
    }
}

#[test]
fn current_binaries_are_left_untouched_and_changed_ones_replaced() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    node.install_ok(&[]);
    let stat = |name: &str| {
        let m = std::fs::symlink_metadata(node.bin_dir().join(name)).unwrap();
        (m.ino(), m.mtime_nsec(), m.mtime())
    };
    let before: Vec<_> = ["multus", "cni-plugins", "bridge"].map(stat).to_vec();
    let out = node.install_ok(&[]);
    assert!(out.contains("is current"), "{out}");
    let after: Vec<_> = ["multus", "cni-plugins", "bridge"].map(stat).to_vec();
    assert_eq!(before, after, "an up-to-date install rewrote files");

    // A new image: only the binary that changed is replaced.
    let mut newer = std::fs::read(node.image_dir().join("cni-plugins")).unwrap();
    newer.extend_from_slice(b"\0v2");
    std::fs::write(node.image_dir().join("cni-plugins"), &newer).unwrap();
    node.install_ok(&[]);
    assert_eq!(
        std::fs::read(node.bin_dir().join("cni-plugins")).unwrap(),
        newer
    );
    assert_eq!(stat("multus"), before[0]);
    assert_ne!(stat("cni-plugins").0, before[1].0);
}

#[test]
fn replaces_a_binary_while_a_plugin_runs_from_it() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    node.install_ok(&[]);
    // A plugin blocked reading its config keeps the installed file busy as its text.
    let mut running = Command::new(node.bin_dir().join("bridge"))
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "busy")
        .env("CNI_NETNS", "/proc/self/ns/net")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", node.bin_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let installed = node.bin_dir().join("cni-plugins");
    wait_until("the plugin runs", || {
        std::fs::read_link(format!("/proc/{}/exe", running.id())).is_ok_and(|exe| exe == installed)
    });
    // The race is real: writing the file in place, as a plain copy would, fails.
    let in_place = std::fs::OpenOptions::new().write(true).open(&installed);
    assert_eq!(
        in_place.err().and_then(|e| e.raw_os_error()),
        Some(libc::ETXTBSY)
    );

    let mut newer = std::fs::read(node.image_dir().join("cni-plugins")).unwrap();
    newer.extend_from_slice(b"\0v2");
    std::fs::write(node.image_dir().join("cni-plugins"), &newer).unwrap();
    node.install_ok(&[]);
    assert_eq!(std::fs::read(&installed).unwrap(), newer);
    assert!(
        running.try_wait().unwrap().is_none(),
        "the running plugin was disturbed"
    );
    drop(running.stdin.take());
    running.wait().unwrap();
}

#[test]
fn a_1_0_conflist_primary_gives_a_conflist_with_every_plugins_capabilities() {
    let node = Node::new();
    // Left by an older install with a pre-1.0 primary: it must not stay beside the conflist.
    std::fs::write(node.file("00-multus.conf"), "{}").unwrap();
    let primary = json!({
        "cniVersion": "1.0.0",
        "name": "cluster",
        "plugins": [
            {"type": "bridge", "capabilities": {"ips": true}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    node.write_conf("10-cluster.conflist", &primary);
    node.install_ok(&[]);
    assert_eq!(node.multus_files(), ["00-multus.conflist"]);
    assert_eq!(
        read_json(&node.file("00-multus.conflist")),
        json!({
            "cniVersion": "1.0.0",
            "name": "multus-cni-network",
            "plugins": [{
                "type": "multus",
                "capabilities": {"ips": true, "portMappings": true},
                "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
                "delegates": [primary]
            }]
        })
    );
}

#[test]
fn the_primary_is_the_first_config_by_name_or_the_named_one_never_multus_itself() {
    let node = Node::new();
    let a = json!({"cniVersion": "0.3.1", "name": "a", "type": "bridge"});
    let b = json!({"cniVersion": "0.3.1", "name": "b", "type": "bridge"});
    node.write_conf("20-b.conf", &b);
    node.write_conf("10-a.conf", &a);
    std::fs::write(node.file("05-notes.txt"), "not a config").unwrap();
    node.install_ok(&[]);
    assert_eq!(node.multus_conf()["delegates"][0], a);
    // A second pass finds 00-multus.conf first by name and must skip it.
    node.install_ok(&[]);
    assert_eq!(node.multus_conf()["delegates"][0], a);
    node.install_ok(&["--multus-master-cni-file-name=20-b.conf"]);
    assert_eq!(node.multus_conf()["delegates"][0], b);
}

#[test]
fn flags_flow_into_the_config() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    std::fs::write(node.host().join("ready"), "").unwrap();
    node.install_ok(&[
        "--namespace-isolation",
        "--global-namespaces=default,shared",
        "--multus-log-level=Verbose",
        "--multus-log-file=/var/log/multus.log",
        "--multus-log-max-size=1",
        "--multus-log-max-backups=3",
        "--multus-log-compress",
        "--multus-log-to-stderr=false",
        "--additional-bin-dir=/usr/libexec/cni",
        "--multus-cni-conf-dir=/etc/cni/multus/net.d",
        "--readiness-indicator-file=/ready",
        "--override-network-name=true",
        "--multus-kubeconfig-file-host=/run/multus/kubeconfig",
    ]);
    assert_eq!(
        node.multus_conf(),
        json!({
            "cniVersion": "0.4.0",
            "name": "cluster",
            "type": "multus",
            "capabilities": {"portMappings": true},
            "namespaceIsolation": true,
            "globalNamespaces": "default,shared",
            "logToStderr": false,
            "logLevel": "verbose",
            "logFile": "/var/log/multus.log",
            "logOptions": {"maxSize": 1, "maxBackups": 3, "compress": true},
            "binDir": "/usr/libexec/cni",
            "confDir": "/etc/cni/multus/net.d",
            "readinessindicatorfile": "/ready",
            "kubeconfig": "/run/multus/kubeconfig",
            "delegates": [bridge_conf()]
        })
    );
    let kubeconfig = std::fs::read_to_string(node.file("multus.d/multus.kubeconfig")).unwrap();
    assert!(
        kubeconfig.contains("tokenFile: \"/run/multus/token\""),
        "{kubeconfig}"
    );
}

#[test]
fn a_given_config_file_is_copied_as_is() {
    let node = Node::new();
    let given = node.root.path().join("70-mine.conf");
    let config = json!({"cniVersion": "0.3.1", "name": "mine", "type": "multus", "delegates": []});
    std::fs::write(&given, config.to_string()).unwrap();
    node.install_ok(&[&format!("--multus-conf-file={}", given.display())]);
    assert_eq!(read_json(&node.file("70-mine.conf")), config);
    assert_eq!(mode(&node.file("70-mine.conf")), 0o600);
    assert!(node.multus_files().is_empty());
}

#[test]
fn rename_conf_file_hides_the_primary_from_the_runtime() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    node.install_ok(&["--rename-conf-file"]);
    assert!(!node.file("10-bridge.conf").exists());
    assert_eq!(read_json(&node.file("10-bridge.conf.old")), bridge_conf());
    assert_eq!(node.multus_conf()["delegates"][0], bridge_conf());
}

/// Each bad input fails with a message naming what is wrong, and writes no multus config.
#[test]
fn bad_inputs_fail_clearly_and_write_no_config() {
    struct Case {
        name: &'static str,
        primary: Option<Value>,
        flags: Vec<String>,
        setup: fn(&Node),
        message: &'static str,
    }
    let no_setup: fn(&Node) = |_| {};
    let cases = [
        Case {
            name: "capability that is not a bool",
            primary: Some(
                json!({"cniVersion": "0.4.0", "name": "c", "type": "bridge", "capabilities": {"portMappings": "yes"}}),
            ),
            flags: vec![],
            setup: no_setup,
            message: "capabilities.portMappings is \"yes\", not true or false",
        },
        Case {
            name: "conflist plugin capability that is not a bool",
            primary: Some(
                json!({"cniVersion": "1.0.0", "name": "c", "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": 1}}]}),
            ),
            flags: vec![],
            setup: no_setup,
            message: "plugins[1].capabilities.portMappings is 1",
        },
        Case {
            name: "plugins not a list",
            primary: Some(json!({"cniVersion": "1.0.0", "name": "c", "plugins": {}})),
            flags: vec![],
            setup: no_setup,
            message: "plugins is not a list",
        },
        Case {
            name: "no cniVersion",
            primary: Some(json!({"name": "c", "type": "bridge"})),
            flags: vec![],
            setup: no_setup,
            message: "no cniVersion",
        },
        Case {
            name: "unknown cniVersion",
            primary: Some(json!({"cniVersion": "9.9.9", "name": "c", "type": "bridge"})),
            flags: vec![],
            setup: no_setup,
            message: "cniVersion: incompatible CNI versions",
        },
        Case {
            name: "--cni-version differs",
            primary: Some(bridge_conf()),
            flags: vec!["--cni-version=1.0.0".into()],
            setup: no_setup,
            message: "cniVersion is \"0.4.0\" but --cni-version is \"1.0.0\"",
        },
        Case {
            name: "--override-network-name without a name",
            primary: Some(json!({"cniVersion": "0.4.0", "type": "bridge"})),
            flags: vec!["--override-network-name".into()],
            setup: no_setup,
            message: "no network name",
        },
        Case {
            name: "bad log level",
            primary: Some(bridge_conf()),
            flags: vec!["--multus-log-level=loud".into()],
            setup: no_setup,
            message: "--multus-log-level=loud: use one of debug, verbose, error, panic",
        },
        Case {
            name: "deleting pods without the node's name",
            primary: Some(bridge_conf()),
            flags: vec!["--delete-pods-missing-networks".into()],
            setup: no_setup,
            message: "--delete-pods-missing-networks needs --node-name",
        },
        Case {
            name: "a check period out of range",
            primary: Some(bridge_conf()),
            flags: vec![
                "--node-name=n".into(),
                "--missing-networks-check-seconds=0".into(),
            ],
            setup: no_setup,
            message: "--missing-networks-check-seconds=0: use 1 to 3600",
        },
        Case {
            name: "a per-node certificate without the node's name",
            primary: Some(bridge_conf()),
            flags: vec!["--per-node-certificate-dir=/var/lib/multus/certs".into()],
            setup: no_setup,
            message: "--per-node-certificate-dir needs --node-name",
        },
        Case {
            name: "a per-node certificate too short-lived",
            primary: Some(bridge_conf()),
            flags: vec![
                "--node-name=n".into(),
                "--per-node-certificate-dir=/var/lib/multus/certs".into(),
                "--per-node-certificate-duration=5m".into(),
            ],
            setup: no_setup,
            message: "--per-node-certificate-duration=\"5m\": use a Go duration of 10m or more",
        },
        Case {
            name: "missing service account token",
            primary: Some(bridge_conf()),
            flags: vec![],
            setup: |n| std::fs::remove_file(n.sa_dir().join("token")).unwrap(),
            message: "serviceaccount/token",
        },
        Case {
            name: "missing bin dir",
            primary: Some(bridge_conf()),
            flags: vec![],
            setup: |n| std::fs::remove_dir_all(n.bin_dir()).unwrap(),
            message: "opt/cni/bin is not a directory",
        },
        Case {
            name: "given config that is not JSON",
            primary: None,
            flags: vec![],
            setup: |n| std::fs::write(n.root.path().join("given.conf"), "{half").unwrap(),
            message: "not a CNI config (a JSON object)",
        },
        Case {
            name: "a primary that never comes",
            primary: None,
            flags: vec!["--wait-timeout=1".into()],
            setup: no_setup,
            message: "gave up after 1 s waiting for a CNI config in",
        },
        Case {
            name: "a readiness file that never comes",
            primary: Some(bridge_conf()),
            flags: vec![
                "--wait-timeout=1".into(),
                "--readiness-indicator-file=/run/ready".into(),
            ],
            setup: no_setup,
            message: "waiting for the readiness indicator file",
        },
        Case {
            name: "a primary that never becomes valid JSON",
            primary: None,
            flags: vec!["--wait-timeout=1".into()],
            setup: |n| std::fs::write(n.file("10-half.conf"), "{\"cniVersion\": ").unwrap(),
            message: "10-half.conf to hold a JSON object",
        },
    ];
    for case in cases {
        let node = Node::new();
        if let Some(primary) = &case.primary {
            node.write_conf("10-primary.conf", primary);
        }
        (case.setup)(&node);
        let mut flags: Vec<String> = case.flags.clone();
        if case.name.starts_with("given config") {
            flags.push(format!(
                "--multus-conf-file={}",
                node.root.path().join("given.conf").display()
            ));
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let out = node.install(&flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", case.name);
        assert!(stderr.contains(case.message), "{}: {stderr}", case.name);
        if node.conf_dir().exists() {
            let written: Vec<String> = names(&node.conf_dir())
                .into_iter()
                .filter(|n| n.starts_with("00-multus") || n == "given.conf" || n.starts_with('.'))
                .collect();
            assert!(written.is_empty(), "{}: wrote {written:?}", case.name);
        }
    }
}

#[test]
fn waits_for_the_readiness_file_and_the_primary_before_writing() {
    let node = Node::new();
    let installer = node.spawn(&[
        "--readiness-indicator-file=/run/ovn/ready",
        "--wait-timeout=30",
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    node.write_conf("10-bridge.conf", &bridge_conf());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        node.multus_files().is_empty(),
        "written before the readiness file existed"
    );
    std::fs::create_dir_all(node.host().join("run/ovn")).unwrap();
    std::fs::write(node.host().join("run/ovn/ready"), "").unwrap();
    wait_until("00-multus.conf is written", || {
        node.file("00-multus.conf").exists()
    });
    assert_eq!(node.multus_conf()["delegates"][0], bridge_conf());
    let (ok, stderr) = installer.stop();
    assert!(ok, "{stderr}");
}

#[test]
fn follows_changes_and_removes_its_config_on_exit() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    let installer = node.spawn(&["--cleanup-config-on-exit"]);
    wait_until("00-multus.conf is written", || {
        node.file("00-multus.conf").exists()
    });
    let kubeconfig = std::fs::read(node.file("multus.d/multus.kubeconfig")).unwrap();

    // The primary network changes its config.
    let mut changed = bridge_conf();
    changed["capabilities"]["bandwidth"] = json!(true);
    node.write_conf("10-bridge.conf", &changed);
    wait_until("the change reaches 00-multus.conf", || {
        node.multus_conf()["delegates"][0] == changed
    });
    assert_eq!(
        node.multus_conf()["capabilities"],
        json!({"portMappings": true, "bandwidth": true})
    );

    // The service account token rotates: the token file follows, the kubeconfig stays.
    std::fs::write(node.sa_dir().join("token"), "token-2").unwrap();
    wait_until("the token file is rewritten", || {
        std::fs::read_to_string(node.file("multus.d/token")).is_ok_and(|t| t == "token-2")
    });
    assert_eq!(
        std::fs::read(node.file("multus.d/multus.kubeconfig")).unwrap(),
        kubeconfig
    );
    std::fs::write(node.sa_dir().join("ca.crt"), "CA-2").unwrap();
    wait_until("the CA file is rewritten", || {
        std::fs::read_to_string(node.file("multus.d/ca.crt")).is_ok_and(|t| t == "CA-2")
    });

    // Someone removes the multus config: it comes back.
    std::fs::remove_file(node.file("00-multus.conf")).unwrap();
    wait_until("00-multus.conf is back", || {
        node.file("00-multus.conf").exists()
    });

    // A primary config caught halfway through being written never yields a broken config.
    std::fs::write(node.file("10-bridge.conf"), "{\"cniVersion\": \"0.4").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(node.multus_conf()["delegates"][0], changed);

    let (ok, stderr) = installer.stop();
    assert!(ok, "{stderr}");
    match std::fs::metadata(node.file("00-multus.conf")) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound),
        Ok(_) => panic!("00-multus.conf was left behind on exit"),
    }
}

#[test]
fn help_names_every_flag_the_manifests_use() {
    let out = Command::new(MULTUS)
        .args(["install", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--multus-conf-file",
        "--cni-bin-dir",
        "--cni-conf-dir",
        "--multus-autoconfig-dir",
        "--multus-kubeconfig-file-host",
        "--multus-master-cni-file-name",
        "--readiness-indicator-file",
        "--cleanup-config-on-exit",
        "--skip-multus-binary-copy",
        "--namespace-isolation",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn a_symlinked_multus_d_is_refused_and_nothing_written_through_it() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    let elsewhere = node.root.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, node.file("multus.d")).unwrap();
    let out = node.install(&[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("multus.d"), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(
        names(&elsewhere),
        Vec::<String>::new(),
        "the token went through the link"
    );
}

#[test]
fn symlinks_at_installed_files_are_replaced_by_the_files_never_written_through() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    let victims = node.root.path().join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    std::fs::create_dir_all(node.file("multus.d")).unwrap();
    // Targets that already hold what the installer would write: a write through the link
    // would go unnoticed, and so would the link.
    let planted = [
        (
            node.bin_dir().join("multus"),
            std::fs::read(node.image_dir().join("multus")).unwrap(),
        ),
        (node.file("multus.d/token"), b"token-1".to_vec()),
        (node.file("00-multus.conf"), b"{}".to_vec()),
    ];
    for (i, (at, content)) in planted.iter().enumerate() {
        let victim = victims.join(i.to_string());
        std::fs::write(&victim, content).unwrap();
        std::os::unix::fs::symlink(&victim, at).unwrap();
    }
    node.install_ok(&[]);
    for (i, (at, content)) in planted.iter().enumerate() {
        let meta = std::fs::symlink_metadata(at).unwrap();
        assert!(meta.is_file(), "{} is still a link", at.display());
        assert_eq!(
            &std::fs::read(victims.join(i.to_string())).unwrap(),
            content
        );
    }
    assert_eq!(
        std::fs::read_to_string(node.file("multus.d/token")).unwrap(),
        "token-1"
    );
    assert_eq!(node.multus_conf()["type"], "multus");
}

#[test]
fn whereabouts_flat_file_names_multus_kubeconfig_and_keeps_the_nodes_own() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    node.install_ok(&["--whereabouts-flat-file"]);
    let flat = node.conf_dir().join("whereabouts.d/whereabouts.conf");
    let written: Value = serde_json::from_slice(&std::fs::read(&flat).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"datastore": "kubernetes",
               "kubernetes": {"kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig"}})
    );
    assert_eq!(mode(&flat), 0o644);
    // Without the flag, or with it again, nothing changes; a file of the node's own is kept.
    let theirs =
        r#"{"kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"}}"#;
    std::fs::write(&flat, theirs).unwrap();
    let out = node.install_ok(&["--whereabouts-flat-file"]);
    assert!(out.contains("is the node's own: kept"), "{out}");
    assert_eq!(std::fs::read_to_string(&flat).unwrap(), theirs);
    // A symlink in place of the directory is refused, not followed.
    let other = Node::new();
    other.write_conf("10-bridge.conf", &bridge_conf());
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), other.conf_dir().join("whereabouts.d")).unwrap();
    let out = other.install(&["--whereabouts-flat-file"]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// The node's name goes beside the flat file for node-slice mode, as the reference's installer
/// writes it (no newline); a name that is not a node's is refused before anything is written.
#[test]
fn whereabouts_node_name_is_written_beside_the_flat_file() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    let out = node.install_ok(&[
        "--whereabouts-flat-file",
        "--whereabouts-node-name=worker-1",
    ]);
    let file = node.conf_dir().join("whereabouts.d/nodename");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "worker-1");
    assert!(out.contains("nodename (worker-1)"), "{out}");
    let again = node.install_ok(&[
        "--whereabouts-flat-file",
        "--whereabouts-node-name=worker-1",
    ]);
    assert!(!again.contains("nodename"), "{again}");
    let bad = Node::new();
    bad.write_conf("10-bridge.conf", &bridge_conf());
    let out = bad.install(&["--whereabouts-flat-file", "--whereabouts-node-name=../x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a Kubernetes node name"),
        "{out:?}"
    );
    assert!(!bad.conf_dir().join("whereabouts.d/nodename").exists());
}

/// Thick mode's init container: the binaries and links, and nothing else (its daemon writes
/// the multus config).
#[test]
fn binaries_only_installs_the_binaries_and_stops() {
    let node = Node::new();
    let out = node.install_ok(&["--binaries-only"]);
    assert!(
        out.contains("installed the binaries (--binaries-only)"),
        "{out}"
    );
    assert!(node.bin_dir().join("multus").is_file());
    assert_eq!(
        std::fs::read_link(node.bin_dir().join("multus-shim")).unwrap(),
        Path::new("multus")
    );
    let shim = Command::new(node.bin_dir().join("multus-shim"))
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&shim.stdout).contains("\"1.1.0\""));
    let written: Vec<_> = std::fs::read_dir(node.conf_dir()).unwrap().collect();
    assert!(written.is_empty(), "no config is written: {written:?}");
}

#[test]
fn the_tenant_policy_flags_go_into_the_multus_config() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    node.install_ok(&[
        "--cluster-cidrs=10.42.0.0/16,10.43.0.0/16",
        "--host-port-ranges=80,30000-32767",
    ]);
    let conf = node.multus_conf();
    assert_eq!(
        conf["clusterCIDRs"],
        json!(["10.42.0.0/16", "10.43.0.0/16"])
    );
    assert_eq!(conf["hostPortRanges"], json!(["80", "30000-32767"]));
    // Wrong values are refused before anything is written.
    for bad in ["--cluster-cidrs=10.42.0.0/33", "--host-port-ranges=0-10"] {
        let fresh = Node::new();
        fresh.write_conf("10-bridge.conf", &bridge_conf());
        let out = fresh.install(&[bad]);
        assert!(!out.status.success(), "{bad}");
        assert!(!fresh.conf_dir().join("00-multus.conf").exists(), "{bad}");
    }
}

/// `--admission-policy`: the policy is copied to multus.d and named in the config; a change is
/// followed; a policy that does not read leaves the copy in force (said once), and at the first
/// pass, with no copy yet, stops the installer before any config names it.
#[test]
fn the_admission_policy_is_copied_followed_and_never_replaced_by_a_broken_one() {
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    let policy = node.root.path().join("policy.yaml");
    std::fs::write(&policy, "allowedTypes: [bridge]\n").unwrap();

    let broken = node.root.path().join("broken.yaml");
    std::fs::write(&broken, "allowedType: [bridge]\n").unwrap();
    let out = node.install(&[&format!("--admission-policy={}", broken.display())]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && log.contains("allowedType"),
        "{log}"
    );
    assert!(
        node.multus_files().is_empty(),
        "a config was written: {log}"
    );

    let flag = format!("--admission-policy={}", policy.display());
    let installer = node.spawn(&[&flag]);
    let copy = node.file("multus.d/admission-policy.yaml");
    wait_until("the policy is copied", || {
        std::fs::read_to_string(&copy).is_ok_and(|t| t == "allowedTypes: [bridge]\n")
    });
    wait_until("00-multus.conf names it", || {
        node.file("00-multus.conf").exists()
    });
    assert_eq!(
        node.multus_conf()["admissionPolicy"],
        "/etc/cni/net.d/multus.d/admission-policy.yaml"
    );
    std::fs::write(&policy, "allowedTypes: [bridge, macvlan]\n").unwrap();
    wait_until("the change is copied", || {
        std::fs::read_to_string(&copy).is_ok_and(|t| t.contains("macvlan"))
    });
    std::fs::write(&policy, "defaultRoute: sometimes\n").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(std::fs::read_to_string(&copy).unwrap().contains("macvlan"));
    let (ok, log) = installer.stop();
    assert!(ok, "{log}");
    assert_eq!(log.matches("sometimes").count(), 1, "said once: {log}");
}

/// With --node-name, the installer looks at its node's pods as a pod of the node, with its
/// service account: a running pod whose network-status lacks a network it asks for gets one
/// MissingNetworks event and a line in the log, and with --delete-pods-missing-networks is
/// deleted when a ReplicaSet owns it; a pod with its networks, another node's and a pod still
/// starting get nothing.
#[test]
fn reports_the_nodes_pods_running_without_their_networks_and_deletes_when_asked() {
    use testkit::kube_api::{pod_manifest, InCluster, KubeApiServer, Scheme};
    let node = Node::new();
    node.write_conf("10-bridge.conf", &bridge_conf());
    let netns = testkit::Netns::new("inst-missing");
    let server = KubeApiServer::start_in(Scheme::Https, &netns).expect("starts the test server");
    let status = r#"[{"name": "cluster", "interface": "eth0", "ips": ["10.88.0.7"], "default": true},
                     {"name": "default/a", "interface": "net1"}]"#;
    for (name, node_name, annotations, phase) in [
        ("stray", "node-1", json!({NETWORKS: "a"}), "Running"),
        ("owned", "node-1", json!({NETWORKS: "a"}), "Running"),
        (
            "fine",
            "node-1",
            json!({NETWORKS: "a", "k8s.v1.cni.cncf.io/network-status": status}),
            "Running",
        ),
        ("elsewhere", "node-2", json!({NETWORKS: "a"}), "Running"),
        ("starting", "node-1", json!({NETWORKS: "a"}), "Pending"),
    ] {
        let mut pod = pod_manifest("default", name);
        pod["metadata"]["uid"] = json!(format!("uid-{name}"));
        pod["metadata"]["annotations"] = annotations;
        pod["spec"]["nodeName"] = json!(node_name);
        pod["status"]["phase"] = json!(phase);
        pod["status"]["podIPs"] = json!([{"ip": "10.88.0.7"}]);
        if name == "owned" {
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": "web-1", "uid": "uid-web-1", "controller": true}]);
        }
        server.add_pod(pod);
    }
    let in_cluster = InCluster::new(&server, "multus").expect("in-cluster credentials");
    let multus = in_cluster
        .wrap(&node.image_dir().join("multus"))
        .expect("a wrapper");
    let installer = Installer::start(node.command_in(
        netns.command(multus),
        &[
            "--node-name=node-1",
            "--missing-networks-check-seconds=1",
            "--delete-pods-missing-networks",
        ],
    ));
    let said = |server: &KubeApiServer| -> Vec<(String, String)> {
        server
            .events()
            .iter()
            .filter(|e| e["reason"] == "MissingNetworks")
            .map(|e| {
                assert_eq!(e["type"], "Warning");
                (
                    e["involvedObject"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    e["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    wait_until("two MissingNetworks events", || said(&server).len() >= 2);
    // More looks find the pod left, and say nothing more.
    std::thread::sleep(Duration::from_secs(3));
    let (ok, log) = installer.stop();
    assert!(ok, "{log}");
    let mut events = said(&server);
    events.sort();
    let [(owned, owned_said), (stray, stray_said)] = &events[..] else {
        panic!("{events:?}");
    };
    assert_eq!((owned.as_str(), stray.as_str()), ("owned", "stray"));
    for message in [owned_said, stray_said] {
        assert!(
            message
                .starts_with("the pod runs without default/a: its network-status does not show it"),
            "{message}"
        );
    }
    assert!(
        owned_said.ends_with("; deleted, so that its controller makes it again with its networks"),
        "{owned_said}"
    );
    assert!(
        stray_said.ends_with("; not deleted: no workload controller would make it again"),
        "{stray_said}"
    );
    assert!(
        server.pod("default", "owned").is_none(),
        "the owned pod is still there"
    );
    assert!(
        server.pod("default", "stray").is_some(),
        "the bare pod was deleted"
    );
    let deletes = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(deletes, 1);
    assert!(
        log.lines()
            .any(|l| l.contains("pod default/stray: the pod runs without default/a")),
        "{log}"
    );
}
