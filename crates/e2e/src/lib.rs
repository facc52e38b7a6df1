//! The real node of `scripts/cluster.sh`, driven as a user drives it: `kubectl` from the machine
//! with the kubeconfig `up` prints, and commands on the node through `cluster.sh exec`.
//!
//! A test brings the node up in the mode it needs with [`up`]; the node stays up between tests
//! (run one at a time, in name order), and the test command takes it down at the end.

pub mod admission;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

/// The image with busybox that the tests' pods run.
pub const TEST_IMAGE: &str = "localhost/multus-rs-test:latest";

/// Where `scripts/cluster.sh` keeps the node's state: its kubeconfigs and logs.
pub fn state_dir() -> PathBuf {
    std::env::var_os("MULTUS_RS_CLUSTER_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/multus-rs-cluster"))
}

/// `program` run in the node's network namespace, where the admin's kubeconfig
/// (`state_dir()/admin.kubeconfig`) reaches the API server. nsenter execs it, so the child's
/// PID is the program's own.
pub fn in_node_netns(program: &Path) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg("--net=/run/netns/multus-rs-node")
        .arg("--")
        .arg(program);
    cmd
}

/// A pod in `default` that sleeps, labelled `app: <name>`, with the networks annotation
/// `networks` when given.
pub fn sleeping_pod(name: &str, networks: Option<&str>) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
{}"#,
        sleeper(name, networks, "")
    )
}

/// A Deployment in `default` of `replicas` sleeping pods labelled `app: <name>`, each with the
/// networks annotation `networks` when given.
pub fn sleeping_deployment(name: &str, replicas: usize, networks: Option<&str>) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
{}"#,
        sleeper(name, networks, "    ")
    )
}

/// The rest of a sleeping pod's metadata (its label and annotation) and its spec, each line
/// after `indent`.
fn sleeper(app: &str, networks: Option<&str>, indent: &str) -> String {
    let annotations = networks
        .map(|n| format!("  annotations:\n    k8s.v1.cni.cncf.io/networks: '{n}'\n"))
        .unwrap_or_default();
    let text = format!(
        r#"  labels: {{app: {app}}}
{annotations}spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: sleep
      image: {TEST_IMAGE}
      imagePullPolicy: IfNotPresent
      command: ["sleep", "3600"]
"#
    );
    text.lines().map(|l| format!("{indent}{l}\n")).collect()
}

/// A NetworkAttachmentDefinition in `default`: a bridge named `bridge`, with the `ipam` section
/// given as JSON.
pub fn bridge_nad(name: &str, bridge: &str, ipam: &str) -> String {
    format!(
        r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: {name}
  namespace: default
spec:
  config: '{{"cniVersion": "1.0.0", "type": "bridge", "bridge": "{bridge}", "ipam": {ipam}}}'
"#
    )
}

/// A pod as the tests look at it.
pub struct PodLook {
    pub name: String,
    pub ready: bool,
    /// It has a deletionTimestamp.
    pub deleting: bool,
    /// Its network-status, entry by entry (empty until multus wrote it).
    pub networks: Vec<Value>,
}

/// The node, as `scripts/cluster.sh up` left it.
pub struct Node {
    /// What `up` printed for a user's shell: the kubeconfig and kubectl's directory.
    pub exports: Vec<String>,
    /// The node is one: the tests take it one at a time.
    _turn: MutexGuard<'static, ()>,
    /// When the test took the node: the time it held it goes to the log, for CI's budget.
    taken: Instant,
}

impl Drop for Node {
    fn drop(&mut self) {
        let test = std::thread::current().name().unwrap_or("a test").to_owned();
        // Past libtest's capture, as cluster.sh's own lines are.
        let _ = writeln!(
            std::io::stderr().lock(),
            "e2e: {test} held the node for {} s",
            self.taken.elapsed().as_secs()
        );
    }
}

static TURN: Mutex<()> = Mutex::new(());

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cluster_sh() -> PathBuf {
    root().join("scripts/cluster.sh")
}

/// `scripts/cluster.sh up MODE` (with containerd 2), and the node it printed the exports of.
pub fn up(mode: &str) -> Result<Node> {
    up_with(mode, &[])
}

/// `scripts/cluster.sh up MODE ARGS...`.
pub fn up_with(mode: &str, args: &[&str]) -> Result<Node> {
    // A test that failed while it held the node leaves it usable for the next.
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let taken = Instant::now();
    let mut child = Command::new(cluster_sh())
        .args(["up", mode])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running scripts/cluster.sh up")?;
    let said = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            // Passed on as it comes, and its end kept for the error: why a start failed.
            let mut end = std::collections::VecDeque::new();
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                let _ = writeln!(std::io::stderr(), "{line}");
                if end.len() == 60 {
                    end.pop_front();
                }
                end.push_back(line);
            }
            Vec::from(end).join("\n")
        })
    });
    let out = child
        .wait_with_output()
        .context("waiting for scripts/cluster.sh up")?;
    let said = said.and_then(|t| t.join().ok()).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "scripts/cluster.sh up {mode} {} failed: {stdout}\n{said}",
        args.join(" ")
    );
    let exports: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let [.., kubeconfig, path] = exports.as_slice() else {
        bail!("scripts/cluster.sh up printed {stdout:?}");
    };
    ensure!(
        kubeconfig.starts_with("export KUBECONFIG=") && path.starts_with("export PATH="),
        "the last two lines of up: {kubeconfig:?} {path:?}"
    );
    Ok(Node {
        exports,
        _turn: turn,
        taken,
    })
}

/// `scripts/cluster.sh ARGS` that must succeed (`stop apiserver`, ...): its stdout.
pub fn cluster(args: &[&str]) -> Result<String> {
    let out = Command::new(cluster_sh())
        .args(args)
        .output()
        .context("running scripts/cluster.sh")?;
    ensure!(
        out.status.success(),
        "cluster.sh {}: {}",
        args.join(" "),
        text(&out)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Node {
    /// kubectl on the node, where `cluster.sh exec` gives it the admin's kubeconfig: the test
    /// itself runs in a network namespace of its own, which cannot reach the machine's loopback
    /// port that the printed exports name.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        let mut cmd = Command::new(cluster_sh());
        cmd.args(["exec", "--", "kubectl"])
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("running kubectl")?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .context("kubectl's stdin")?
                .write_all(input.as_bytes())?;
        }
        Ok(child.wait_with_output()?)
    }

    /// kubectl that must succeed: its stdout.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = self.kubectl_output(args, None)?;
        ensure!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            text(&out)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<()> {
        let out = self.kubectl_output(&["apply", "-f", "-"], Some(yaml))?;
        ensure!(out.status.success(), "kubectl apply: {}", text(&out));
        Ok(())
    }

    /// `kubectl delete -f -` of `yaml`, waiting until the objects are gone.
    pub fn delete(&self, yaml: &str) -> Result<()> {
        let out = self.kubectl_output(
            &[
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s",
                "-f",
                "-",
            ],
            Some(yaml),
        )?;
        ensure!(out.status.success(), "kubectl delete: {}", text(&out));
        Ok(())
    }

    /// A command on the node (its network and mount namespaces), not yet started.
    pub fn exec_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(cluster_sh());
        cmd.arg("exec").arg("--").args(args);
        cmd
    }

    /// A command on the node (its network and mount namespaces); its stdout.
    pub fn exec(&self, args: &[&str]) -> Result<String> {
        let out = self
            .exec_command(args)
            .output()
            .context("running scripts/cluster.sh exec")?;
        ensure!(
            out.status.success(),
            "on the node, {}: {}",
            args.join(" "),
            text(&out)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A request from the node to the API server (through the service's address, as multus
    /// reaches it) on `/api/v1/namespaces/<path>`, with `credential`: curl's arguments, in
    /// shell words. The status code and the reply's message. A PATCH sets a probe annotation;
    /// a DELETE has no body.
    pub fn api_as(&self, credential: &str, method: &str, path: &str) -> Result<(u16, String)> {
        let body = match method {
            "PATCH" => r#"{"metadata":{"annotations":{"multus-rs.test/probe":"x"}}}"#,
            _ => "",
        };
        let ca = state_dir().join("pki/ca.crt");
        let script = format!(
            r#"curl -sS --cacert "$3" {credential} \
                 -H 'Content-Type: application/merge-patch+json' -X "$0" \
                 ${{2:+-d "$2"}} \
                 -w '\n%{{http_code}}' "https://10.43.0.1:443/api/v1/namespaces/$1""#
        );
        let out = self.exec(&[
            "sh",
            "-c",
            &script,
            method,
            path,
            body,
            &ca.display().to_string(),
        ])?;
        let (body, code) = out.trim_end().rsplit_once('\n').context("no status code")?;
        let reply: Value = serde_json::from_str(body)?;
        let message = reply["message"].as_str().unwrap_or_default().to_owned();
        Ok((code.parse()?, message))
    }

    /// The object as JSON.
    pub fn get(&self, namespace: &str, what: &str) -> Result<Value> {
        let out = self.kubectl(&["-n", namespace, "get", what, "-o", "json"])?;
        serde_json::from_str(&out).with_context(|| format!("kubectl get {what}: {out}"))
    }

    /// The pods in `default` labelled `app: <app>`, as the tests look at them.
    pub fn pods_labelled(&self, app: &str) -> Result<Vec<PodLook>> {
        let selector = format!("app={app}");
        let out = self.kubectl(&[
            "-n", "default", "get", "pods", "-l", &selector, "-o", "json",
        ])?;
        let list: Value = serde_json::from_str(&out).context("kubectl get pods")?;
        let mut out = Vec::new();
        for p in list["items"].as_array().into_iter().flatten() {
            let networks =
                match p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str() {
                    Some(text) => serde_json::from_str(text)
                        .with_context(|| format!("network-status is not a list: {text}"))?,
                    None => Vec::new(),
                };
            out.push(PodLook {
                name: p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                ready: p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
                deleting: !p["metadata"]["deletionTimestamp"].is_null(),
                networks,
            });
        }
        Ok(out)
    }

    /// Waits until the pod is Ready; on timeout, the error carries `kubectl describe`.
    pub fn wait_ready(&self, namespace: &str, pod: &str, timeout: Duration) -> Result<()> {
        let out = self.kubectl_output(
            &[
                "-n",
                namespace,
                "wait",
                "--for=condition=Ready",
                &format!("pod/{pod}"),
                &format!("--timeout={}s", timeout.as_secs()),
            ],
            None,
        )?;
        if !out.status.success() {
            let describe = self
                .kubectl(&["-n", namespace, "describe", "pod", pod])
                .unwrap_or_default();
            bail!(
                "pod {namespace}/{pod} is not Ready: {}\n{describe}",
                text(&out)
            );
        }
        Ok(())
    }

    /// The messages of the pod's events with this reason, oldest first.
    pub fn events(&self, namespace: &str, pod: &str, reason: &str) -> Result<Vec<String>> {
        let list = self.kubectl(&[
            "-n",
            namespace,
            "get",
            "events",
            "--sort-by=.metadata.creationTimestamp",
            "--field-selector",
            &format!("involvedObject.kind=Pod,involvedObject.name={pod},reason={reason}"),
            "-o",
            "json",
        ])?;
        let list: Value = serde_json::from_str(&list)?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["message"].as_str().map(str::to_owned))
            .collect())
    }

    /// Polls `check` every 200 ms until it returns Ok(true), for at most `timeout`.
    /// Waits until every pod of multus's DaemonSet runs its current template.
    pub fn multus_rolled_out(&self) -> Result<()> {
        self.kubectl(&[
            "-n",
            "multus",
            "rollout",
            "status",
            "ds/multus",
            "--timeout=180s",
        ])?;
        Ok(())
    }

    /// Takes multus's DaemonSet off the node (a nodeSelector no node matches), as when its pod
    /// is evicted or its image cannot be pulled; the files it installed stay.
    pub fn send_multus_away(&self) -> Result<()> {
        self.patch_multus_node_selector(serde_json::json!("x"))
    }

    /// Undoes [`Node::send_multus_away`].
    pub fn bring_multus_back(&self) -> Result<()> {
        self.patch_multus_node_selector(Value::Null)
    }

    fn patch_multus_node_selector(&self, value: Value) -> Result<()> {
        let patch = serde_json::json!({"spec": {"template": {"spec": {"nodeSelector":
            {"multus-rs.test/nowhere": value}}}}})
        .to_string();
        self.kubectl(&[
            "-n",
            "multus",
            "patch",
            "ds",
            "multus",
            "--type=merge",
            "-p",
            &patch,
        ])?;
        Ok(())
    }

    /// The newest multus pod that runs thick mode's daemon and is not being deleted, as the
    /// API has it: `ds/multus` and `items[0]` name any pod the DaemonSet's selector matches,
    /// and a pod of a replaced install can still be there.
    pub fn daemon_pod(&self) -> Result<Value> {
        let pods: Value = serde_json::from_str(&self.kubectl(&[
            "-n",
            "multus",
            "get",
            "pods",
            "-l",
            "app=multus",
            "-o",
            "json",
        ])?)?;
        let runs_daemon = |p: &&Value| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["spec"]["containers"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["name"] == "multus-daemon"))
        };
        pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(runs_daemon)
            .max_by_key(|p| p["metadata"]["creationTimestamp"].as_str().unwrap_or(""))
            .cloned()
            .context("no multus pod runs the daemon")
    }

    /// The log of thick mode's daemon, from [`Node::daemon_pod`].
    pub fn daemon_log(&self) -> Result<String> {
        let pod = self.daemon_pod()?;
        let name = pod["metadata"]["name"].as_str().context("the pod's name")?;
        self.kubectl(&["-n", "multus", "logs", name, "-c", "multus-daemon"])
    }

    /// Thick mode's daemon config, as the ConfigMap holds it.
    pub fn daemon_config(&self) -> Result<String> {
        let map = self.get("multus", "configmap/multus-daemon-config")?;
        map["data"]["daemon-config.json"]
            .as_str()
            .map(str::to_owned)
            .context("the ConfigMap has no daemon-config.json")
    }

    /// Replaces thick mode's daemon config and restarts the daemon on it.
    pub fn set_daemon_config(&self, json: &str) -> Result<()> {
        self.store_daemon_config(json)?;
        self.kubectl(&["-n", "multus", "rollout", "restart", "ds/multus"])?;
        self.multus_rolled_out()
    }

    /// Replaces thick mode's daemon config in its ConfigMap only: the daemon reads it when it
    /// next starts.
    pub fn store_daemon_config(&self, json: &str) -> Result<()> {
        let patch = serde_json::json!({"data": {"daemon-config.json": json}}).to_string();
        self.kubectl(&[
            "-n",
            "multus",
            "patch",
            "configmap",
            "multus-daemon-config",
            "--type=merge",
            "-p",
            &patch,
        ])?;
        Ok(())
    }

    pub fn eventually(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = check();
            if let Ok(true) = last {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{what}: not after {timeout:?} (last check: {last:?})");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The thick daemon's metrics, from its socket on the node.
    pub fn daemon_metrics(&self) -> Result<String> {
        self.exec(&[
            "curl",
            "-sS",
            "--unix-socket",
            "/run/multus/multus.sock",
            "http://multus/metrics",
        ])
    }

    /// The pod's IPv4 address on `ifname`, without its prefix length.
    pub fn ipv4(&self, pod: &str, ifname: &str) -> Result<String> {
        let out = self.kubectl(&["exec", pod, "--", "ip", "-4", "-o", "addr", "show", ifname])?;
        out.split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .map(|a| a.split('/').next().unwrap_or(a).to_owned())
            .with_context(|| format!("{pod} has no IPv4 address on {ifname}: {out}"))
    }

    /// The node's veth links: one per pod on a bridge network, host side.
    pub fn veths(&self) -> Result<Vec<String>> {
        let out = self.exec(&["ip", "-o", "link", "show", "type", "veth"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_owned())
            .collect())
    }

    /// What pods left in the node's /var/lib/cni, sorted: every file but host-local's lock and
    /// last-reserved markers, which outlive their pods by design.
    pub fn cni_state(&self) -> Result<Vec<String>> {
        let out = self.exec(&[
            "find",
            "/var/lib/cni",
            "-type",
            "f",
            "!",
            "-name",
            "lock",
            "!",
            "-name",
            "last_reserved_ip.*",
        ])?;
        // Sorted: `find` lists in the directory's order, which a file made and removed again
        // can change while the set stays the same.
        let mut files: Vec<String> = out.lines().map(str::to_owned).collect();
        files.sort_unstable();
        Ok(files)
    }
}

/// The machine's clock since boot (`/proc/uptime`), in seconds: the one a pod reads too, so
/// that a time the pod saw and one the test saw can be compared.
pub fn uptime() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/uptime")?;
    text.split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .context("/proc/uptime")
}
