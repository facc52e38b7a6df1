//! Thick mode through the real binaries: `multus-daemon` (the `multus` binary under that name)
//! in the sandbox's node namespace, against testkit's API server over HTTPS with the RBAC of
//! deploy/thick enforced (the daemon runs as multus's ServiceAccount), and `multus-shim`
//! exec'd as a runtime execs a CNI plugin. Also upstream's protocol both ways: requests in the
//! shape upstream's shim sends, and our shim against a daemon that answers as upstream's does.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{cni_error, enforce_rbac, Cluster, NETWORKS};
use common::{multus_bin, CONTAINER_ID, POD_NAME};
use serde_json::{json, Value};
use testkit::{CniCall, CniOutput, PluginDir};

struct Thick {
    c: Cluster,
    links: PluginDir,
    sock: PathBuf,
    config: PathBuf,
    log: PathBuf,
    daemon: Option<Child>,
    /// deploy/thick's layout: the daemon's root, made again at each start.
    root: Option<tempfile::TempDir>,
}

/// deploy/thick's mounts, in a private mount namespace, for a daemon chrooted into a root of
/// its own (`$1`): the node's root at /hostroot (`chrootDir`); the node's CNI config directory
/// (`$3`) and /run (`$4`) under /host, at /host<node path>; /run/netns; the scratch directory
/// (`$5`, where the plugin, cache and IPAM directories are) at its node path, as the DaemonSet
/// mounts /opt/cni/bin and /var/lib/cni/multus; and the directory of the built binaries
/// (`$2`), which the plugin links point into. The daemon's command line follows.
const DAEMONSET_ROOT: &str = r#"set -e
root=$1 bins=$2 conf=$3 run=$4 scratch=$5; shift 5
mount -t tmpfs tmpfs "$root"
for d in usr etc dev proc sys; do mkdir "$root/$d"; mount --rbind "/$d" "$root/$d"; done
for d in bin sbin lib lib64; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"
  elif [ -d "/$d" ]; then mkdir "$root/$d"; mount --rbind "/$d" "$root/$d"; fi
done
for d in "$bins" "$scratch"; do mkdir -p "$root/$d"; mount --bind "$d" "$root/$d"; done
mkdir -p "$root/run/netns" "$root/hostroot" "$root/host$conf" "$root/host$run"
mount --rbind /run/netns "$root/run/netns"
mount --rbind / "$root/hostroot"
mount --bind "$conf" "$root/host$conf"
mount --bind "$run" "$root/host$run"
exec chroot "$root" "$@""#;

impl Thick {
    /// A daemon for the cluster's node, `extra` keys in its config, serving once ready.
    fn new(annotations: Value, extra: Value) -> Thick {
        let t = Thick::prepared(annotations, None);
        let config = t.config(extra);
        t.started(&config)
    }

    /// The daemon's config for the sandbox, with `extra` keys.
    fn config(&self, extra: Value) -> Value {
        let t = self;
        let sb = &t.c.sb;
        let mut config = json!({
            "cniVersion": "1.0.0",
            "cniConfigDir": sb.conf_dir(),
            "multusAutoconfigDir": sb.conf_dir(),
            "socketDir": t.sock,
            "daemonSocketDir": t.sock,
            "binDir": sb.plugins.path(),
            "cniDir": sb.cni_dir(),
            "confDir": sb.conf_dir(),
            "kubeconfig": sb.dir.path().join("multus.kubeconfig"),
            "logLevel": "verbose",
            "logToStderr": true,
        });
        if let (Value::Object(base), Value::Object(more)) = (&mut config, extra) {
            base.extend(more);
        }
        config
    }

    /// A daemon as deploy/thick runs it, in a root of its own ([`DAEMONSET_ROOT`]) with
    /// deploy/thick's config: the node's CNI config directory and /run seen under /host, its
    /// root as `chrootDir`. The shim runs on the node, as ever.
    fn in_daemonset_layout(annotations: Value) -> Thick {
        let t = Thick::prepared(
            annotations,
            Some(tempfile::tempdir().expect("the daemon's root")),
        );
        let sb = &t.c.sb;
        let host = |p: &std::path::Path| format!("/host{}", p.display());
        let config = json!({
            "chrootDir": "/hostroot",
            "cniVersion": "1.0.0",
            "cniConfigDir": host(&sb.conf_dir()),
            "multusAutoconfigDir": host(&sb.conf_dir()),
            "socketDir": host(&t.sock),
            "binDir": sb.plugins.path(),
            "cniDir": sb.cni_dir(),
            "kubeconfig": sb.dir.path().join("multus.kubeconfig"),
            "logLevel": "verbose",
            "logToStderr": true,
        });
        t.started(&config)
    }

    /// The cluster, the links, the node's cluster network and /run; no daemon yet.
    fn prepared(annotations: Value, root: Option<tempfile::TempDir>) -> Thick {
        let c = Cluster::new(annotations, json!({}));
        enforce_rbac(&c.server, "thick");
        let links = PluginDir::new(&multus_bin(), &["multus-daemon", "multus-shim"]);
        let primary = c.sb.cluster("cluster", "cni0", "10.88.0.0/24", "1.0.0");
        c.sb.write_conf("10-cluster.conf", &primary);
        std::fs::create_dir_all(c.sb.dir.path().join("run")).expect("the node's /run");
        Thick {
            sock: c.sb.dir.path().join("run/multus"),
            config: c.sb.dir.path().join("daemon-config.json"),
            log: c.sb.dir.path().join("daemon.log"),
            c,
            links,
            daemon: None,
            root,
        }
    }

    /// Writes the daemon's config and starts it.
    fn started(mut self, config: &Value) -> Thick {
        std::fs::write(&self.config, config.to_string()).expect("daemon config");
        self.start();
        self
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let node = &self.c.sb.node;
        let daemon = self.links.path().join("multus-daemon");
        let mut cmd = match &self.root {
            None => node.command(&daemon),
            Some(root) => {
                let mut cmd = node.command("unshare");
                cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
                    .args([DAEMONSET_ROOT, "daemonset-root"])
                    .arg(root.path())
                    .arg(multus_bin().parent().expect("the binaries' directory"))
                    .arg(self.c.sb.conf_dir())
                    .arg(self.c.sb.dir.path().join("run"))
                    .arg(std::env::temp_dir())
                    .arg(&daemon);
                cmd
            }
        };
        cmd.args(["-config".as_ref(), self.config.as_os_str()])
            .env("MULTUS_NODE_NAME", "node-1")
            .env(cni::path_roots::ROOTS_FILE_ENV, testkit::test_path_roots())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        self.daemon = Some(cmd.spawn().expect("start the daemon"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.request("GET", "/readyz", b"").map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "not ready: {}",
                self.daemon_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn socket(&self) -> PathBuf {
        self.sock.join("multus.sock")
    }

    /// One raw HTTP request on the socket: the status and body, or `None` when nothing
    /// answers.
    fn request(&self, method: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
        self.raw(&http(method, path, body))
    }

    /// A `POST /cni` of `body`, its answer left unread: the client stays, or goes when the
    /// stream is dropped.
    fn post_unread(&self, body: &[u8]) -> UnixStream {
        let mut s = UnixStream::connect(self.socket()).expect("connect");
        s.write_all(&http("POST", "/cni", body)).expect("send");
        s
    }

    fn raw(&self, bytes: &[u8]) -> Option<(u16, Vec<u8>)> {
        let mut s = UnixStream::connect(self.socket()).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        s.write_all(bytes).ok()?;
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).ok()?;
        let text = String::from_utf8_lossy(&reply);
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n")?.1.as_bytes().to_vec();
        Some((status, body))
    }

    /// The shim's config, as the daemon wrote it.
    fn shim_conf(&self) -> String {
        std::fs::read_to_string(self.c.sb.conf_dir().join("00-multus.conf"))
            .expect("00-multus.conf")
    }

    fn shim_call(&self, command: &str) -> CniCall {
        let mut call = self.c.call(command);
        call.stdin = self.shim_conf();
        call
    }

    fn shim(&self, command: &str) -> CniOutput {
        self.c.sb.run_in_node(
            &self.links.path().join("multus-shim"),
            &self.shim_call(command),
        )
    }

    /// Signals the daemon and waits for it to exit: its status and how long it took.
    fn signal(&mut self, sig: i32) -> (Option<i32>, Duration) {
        signal(self.daemon.take().expect("a daemon"), sig)
    }

    /// A daemon with `extra` keys for pods that get the NAD `slow`, whose plugin takes
    /// `seconds` over ADD.
    fn slow(seconds: &str, extra: Value) -> Thick {
        let t = Thick::new(json!({NETWORKS: "slow"}), extra);
        t.c.sb.script(
            "slow",
            &format!(
                r#"cat > /dev/null
if [ "$CNI_COMMAND" = ADD ]; then
  sleep {seconds}
  echo '{{"cniVersion":"1.0.0","interfaces":[{{"name":"net1"}}],"ips":[]}}'
fi"#
            ),
        );
        t.c.nad(
            "default",
            "slow",
            json!({"cniVersion": "1.0.0", "name": "slow", "type": "slow"}),
        );
        t
    }

    /// The daemon's metrics.
    fn metrics(&self) -> String {
        let (_, text) = self.request("GET", "/metrics", b"").expect("metrics");
        String::from_utf8_lossy(&text).into_owned()
    }

    /// A metric's value.
    fn metric(&self, line_start: &str) -> i64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
            .unwrap_or(-1)
    }

    /// Waits until the daemon's NAD cache has seen resourceVersion `rv`.
    fn nads_seen(&self, rv: &Value) {
        let rv: i64 = rv.as_str().and_then(|r| r.parse().ok()).expect("a version");
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.metric("multus_cache_resource_version{kind=\"nads\"}") < rv {
            assert!(
                Instant::now() < deadline,
                "the NAD cache is behind: {}",
                self.metrics()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A pod on this node, with its own namespace, and the shim's call for it.
    fn pod(&self, name: &str, annotations: Value) -> (testkit::Netns, CniCall) {
        let mut pod = testkit::kube_api::pod_manifest("default", name);
        pod["metadata"]["annotations"] = annotations;
        let stored = self.c.server.add_pod(pod);
        let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        let netns = testkit::Netns::new("tp");
        let mut call = self.shim_call("ADD");
        call.container_id = format!("ctr-{name}");
        call.netns = netns.path().display().to_string();
        call.args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID=ctr-{name};K8S_POD_UID={uid}"
        );
        (netns, call)
    }

    /// Requests that are not the caches' lists and watches, from `from` on in the log.
    fn calls_since(&self, from: usize) -> Vec<String> {
        self.c
            .server
            .requests()
            .iter()
            .skip(from)
            .filter(|r| {
                !(r.method == "GET" && (r.query.contains("watch=") || r.query.contains("limit=")))
            })
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// Events with this reason, once the daemon has sent them (after its reply).
    fn events_soon(&self, reason: &str, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.c.events(reason);
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An HTTP/1.1 request's bytes.
fn http(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: dummy\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

fn signal(mut child: Child, sig: i32) -> (Option<i32>, Duration) {
    let pid = i32::try_from(child.id()).expect("pid");
    let at = Instant::now();
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(pid, sig) };
    let status = child.wait().expect("wait for the daemon");
    (status.code(), at.elapsed())
}

impl Drop for Thick {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

#[test]
fn a_pod_with_two_nads_through_the_shim() {
    let t = Thick::new(json!({NETWORKS: "a,b"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.c.bridge_nad("default", "b", "10.21.0.0/24");
    // The shim's config, as upstream's daemon writes it.
    let conf: Value = serde_json::from_str(&t.shim_conf()).expect("JSON");
    assert_eq!(conf["type"], "multus-shim");
    assert_eq!(conf["name"], "multus-cni-network");
    assert_eq!(
        conf["clusterNetwork"],
        json!(t.c.sb.conf_dir().join("10-cluster.conf"))
    );
    assert_eq!(conf["daemonSocketDir"], json!(t.sock));
    let result = t.shim("ADD").ok();
    assert_eq!(
        result["cniVersion"], "1.0.0",
        "the conf's version: {result}"
    );
    assert_eq!(result["ips"][0]["address"], "10.88.0.2/24");
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1", "net2"]);
    let status = t.c.network_status().expect("network-status");
    let names: Vec<&str> = status
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["cluster", "default/a", "default/b"]);
    assert_eq!(status[1]["interface"], "net1");
    assert_eq!(status[2]["ips"], json!(["10.21.0.2"]));
    assert_eq!(
        t.events_soon("AddedInterface", 3),
        [
            "Add eth0 [10.88.0.2/24] from cluster",
            "Add net1 [10.20.0.2/24] from default/a",
            "Add net2 [10.21.0.2/24] from default/b",
        ]
    );
    // CHECK goes through the daemon too (STATUS and GC: their own tests below).
    let mut check = t.shim_call("CHECK");
    check.stdin = serde_json::to_string(&{
        let mut c: Value = serde_json::from_str(&t.shim_conf()).unwrap();
        c["prevResult"] = result.clone();
        c
    })
    .unwrap();
    let out =
        t.c.sb
            .run_in_node(&t.links.path().join("multus-shim"), &check);
    assert_eq!(out.code, 0, "CHECK: {out:?}\n{}", t.daemon_log());
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
    // The daemon logged the calls with their pod, container and interface.
    let log = t.daemon_log();
    assert!(log.contains(&format!("pod=default/{POD_NAME}")), "{log}");
    assert!(log.contains(&format!("container={CONTAINER_ID}")), "{log}");
}

impl Thick {
    /// A daemon and cluster network of CNI 1.1.0, which have STATUS and GC.
    fn v1_1(extra: Value) -> Thick {
        let mut extra = extra;
        extra["cniVersion"] = json!("1.1.0");
        let t = Thick::new(json!({}), extra);
        t.c.sb.write_conf(
            "10-cluster.conf",
            &t.c.sb.cluster("cluster", "cni0", "10.88.0.0/24", "1.1.0"),
        );
        t
    }

    /// A STATUS or GC as the runtime sends it: no container, the shim's config with `extra`
    /// keys.
    fn network_wide(&self, command: &str, extra: Value) -> CniOutput {
        let mut call = self.shim_call(command);
        let mut conf: Value = serde_json::from_str(&call.stdin).expect("the shim's config");
        if let (Value::Object(c), Value::Object(e)) = (&mut conf, extra) {
            c.extend(e);
        }
        call.stdin = conf.to_string();
        call.container_id = String::new();
        call.netns = String::new();
        call.ifname = String::new();
        self.c
            .sb
            .run_in_node(&self.links.path().join("multus-shim"), &call)
    }
}

/// STATUS through the shim is the daemon's: ready when the readiness indicator file exists
/// and the cluster network's own STATUS succeeds, code 50 saying why otherwise; with the
/// daemon down, code 50 naming the socket.
#[test]
fn status_through_the_shim_says_whether_the_node_can_take_pods() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    std::fs::write(&ready, "").expect("the readiness file");
    let mut t = Thick::v1_1(json!({"readinessindicatorfile": ready}));
    t.network_wide("STATUS", json!({})).ok();

    std::fs::remove_file(&ready).expect("remove the readiness file");
    let (code, msg) = cni_error(&t.network_wide("STATUS", json!({})));
    assert_eq!(code, 50, "{msg}");
    assert!(
        msg.contains(&format!("readiness indicator file {}", ready.display())),
        "{msg}"
    );
    std::fs::write(&ready, "").expect("the readiness file");
    t.network_wide("STATUS", json!({})).ok();

    // The cluster network's STATUS is asked, and its failure passed on.
    t.c.sb.script(
        "sick",
        r#"cat > /dev/null
if [ "$CNI_COMMAND" = STATUS ]; then
  echo '{"cniVersion":"1.1.0","code":50,"msg":"sick: the uplink is down"}'; exit 1
fi"#,
    );
    t.c.sb.write_conf(
        "10-cluster.conf",
        &json!({"cniVersion": "1.1.0", "name": "cluster", "type": "sick"}),
    );
    let (code, msg) = cni_error(&t.network_wide("STATUS", json!({})));
    assert_eq!(code, 50, "{msg}");
    assert!(msg.contains("the uplink is down"), "{msg}");

    // The cluster network's config gone (its pod restarting): not ready, naming it.
    let cluster = t.c.sb.conf_dir().join("10-cluster.conf");
    std::fs::remove_file(&cluster).expect("remove the cluster network's config");
    let (code, msg) = cni_error(&t.network_wide("STATUS", json!({})));
    assert_eq!(code, 50, "{msg}");
    assert!(
        msg.contains("the cluster network is not ready: its config cannot be read"),
        "{msg}"
    );

    t.signal(libc::SIGKILL);
    let (code, msg) = cni_error(&t.network_wide("STATUS", json!({})));
    assert_eq!(code, 50, "{msg}");
    assert!(msg.contains(&t.socket().display().to_string()), "{msg}");
}

/// GC through the shim is the daemon's: the attachments of containers the runtime no longer
/// lists are deleted from the node, on every network (the NAD's is CNI 1.0.0, which has no GC
/// of its own, but DEL), and the valid ones are kept. Without the runtime's list, it is
/// refused.
#[test]
fn gc_through_the_shim_collects_stale_attachments_and_keeps_valid_ones() {
    let t = Thick::v1_1(json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    let shim = t.links.path().join("multus-shim");
    let (kept_ns, kept) = t.pod("kept", json!({NETWORKS: "a"}));
    let (stale_ns, stale) = t.pod("stale", json!({NETWORKS: "a"}));
    for call in [&kept, &stale] {
        t.c.sb.run_in_node(&shim, call).ok();
    }
    assert_eq!(t.c.sb.reservations().len(), 4);

    let (code, msg) = cni_error(&t.network_wide("GC", json!({})));
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("cni.dev/valid-attachments"), "{msg}");
    assert_eq!(t.c.sb.reservations().len(), 4);

    t.network_wide(
        "GC",
        json!({"cni.dev/valid-attachments": [{"containerID": kept.container_id, "ifname": "eth0"}]}),
    )
    .ok();
    assert_eq!(stale_ns.links(), ["lo"]);
    let mut kept_links = kept_ns.links();
    kept_links.sort();
    assert_eq!(kept_links, ["eth0", "lo", "net1"]);
    assert_eq!(t.c.sb.reservations().len(), 2);
    let cached = t.c.sb.cache_files();
    assert!(
        cached.iter().all(|f| !f.contains(&stale.container_id)),
        "{cached:?}"
    );
    assert!(
        cached.iter().any(|f| f.contains(&kept.container_id)),
        "{cached:?}"
    );
    let mut del = kept.clone();
    del.command = "DEL".into();
    t.c.sb.run_in_node(&shim, &del).ok();
    t.c.sb.assert_clean("after GC and DEL");
}

#[test]
fn del_with_the_daemon_down_is_done_by_the_shim_and_add_fails_at_once() {
    let mut t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.shim("ADD").ok();
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);
    // The pod's readiness probe: the daemon is ready.
    let probe = |t: &Thick| {
        std::process::Command::new(multus_bin())
            .args(["daemon", "-ready"])
            .arg(&t.sock)
            .output()
            .expect("the probe runs")
    };
    assert!(probe(&t).status.success());
    // A crash-looping daemon: gone without a word.
    t.signal(libc::SIGKILL);
    let down = probe(&t);
    assert!(!down.status.success());
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("multus.sock"),
        "{down:?}"
    );
    let at = Instant::now();
    let out = t.shim("ADD");
    let (code, msg) = cni_error(&out);
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.contains(&t.socket().display().to_string())
            && msg.contains("check the multus daemon pod on this node"),
        "{msg}"
    );
    assert!(at.elapsed() < Duration::from_secs(2), "{:?}", at.elapsed());
    // DEL needs no daemon: the shim deletes from the delegate cache.
    t.shim("DEL").ok();
    t.c.sb.assert_clean("DEL without the daemon");
    // And again: nothing left to do is no error.
    t.shim("DEL").ok();
}

/// In deploy/thick's layout the daemon sees the node's CNI config directory and /run under
/// /host, but writes 00-multus.conf for the shim on the node: with the node's paths, which it
/// finds through `chrootDir`. So with the daemon down, the shim's DEL reads the cluster
/// network even without a cache: a repeated DEL, or one after an ADD that died before its
/// cache was written.
#[test]
fn del_without_the_daemon_works_in_the_daemonsets_layout() {
    let mut t = Thick::in_daemonset_layout(json!({NETWORKS: "a"}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    // The delegates ran chrooted in the node's root.
    t.shim("ADD").ok();
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);
    t.signal(libc::SIGKILL);
    t.shim("DEL").ok();
    t.c.sb.assert_clean("DEL without the daemon");
    let again = t.shim("DEL");
    assert_eq!(
        again.code, 0,
        "a DEL without the daemon or a cache: {again:?}"
    );
    // What the shim read: every path as the node sees it.
    let conf: Value = serde_json::from_str(&t.shim_conf()).expect("JSON");
    let sb = &t.c.sb;
    assert_eq!(
        conf["clusterNetwork"],
        json!(sb.conf_dir().join("10-cluster.conf"))
    );
    assert_eq!(conf["cniDir"], json!(sb.cni_dir()));
    assert_eq!(conf["daemonSocketDir"], json!(t.sock));
}

#[test]
fn sigterm_finishes_the_calls_in_hand_then_exits() {
    let mut t = Thick::slow("1.5", json!({}));
    let shim = t.links.path().join("multus-shim");
    let call = t.shim_call("ADD");
    let daemon = t.daemon.take().expect("a daemon");
    let node = &t.c.sb.node;
    let (added, (code, took)) = std::thread::scope(|s| {
        let adding = s.spawn(|| call.run(&shim, Some(node)));
        // The ADD is in the daemon's hands when the signal comes.
        std::thread::sleep(Duration::from_millis(500));
        let stopped = signal(daemon, libc::SIGTERM);
        (adding.join().expect("ADD"), stopped)
    });
    assert_eq!(code, Some(0), "{}", t.daemon_log());
    assert!(took < Duration::from_secs(10), "{took:?}");
    added.ok();
    assert!(!t.socket().exists(), "the socket is removed");
    let log = t.daemon_log();
    assert!(
        log.contains("stopping: finishing the calls in hand"),
        "{log}"
    );
    // With the daemon gone, DEL is the shim's.
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
}

#[test]
fn a_newer_daemons_socket_outlives_the_older_and_a_shared_socket_dir_is_refused() {
    let mut t = Thick::new(json!({}), json!({}));
    let older = t.daemon.take().expect("a daemon");
    let inode = |t: &Thick| std::fs::symlink_metadata(t.socket()).map(|m| m.ino()).ok();
    let olders = inode(&t);
    // A second daemon on the same path, as during a rolling update with surge.
    t.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    while inode(&t) == olders {
        assert!(Instant::now() < deadline, "{}", t.daemon_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _) = signal(older, libc::SIGTERM);
    assert_eq!(code, Some(0), "{}", t.daemon_log());
    assert!(
        t.socket().exists(),
        "the older daemon removed the newer's socket"
    );
    // start() may have seen the older one ready: the newer one is ready in its own time.
    let deadline = Instant::now() + Duration::from_secs(20);
    while t.request("GET", "/readyz", b"").map(|r| r.0) != Some(200) {
        assert!(Instant::now() < deadline, "{}", t.daemon_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _) = t.signal(libc::SIGTERM);
    assert_eq!(code, Some(0));
    assert!(!t.socket().exists(), "a daemon removes its own socket");

    // A socket directory others can write to is not ours to serve from: refused, untouched.
    std::fs::set_permissions(&t.sock, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out =
        t.c.sb
            .node
            .command(t.links.path().join("multus-daemon"))
            .args(["-config".as_ref(), t.config.as_os_str()])
            .stdin(Stdio::null())
            .output()
            .expect("run the daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("writable by no one else"), "{stderr}");
    assert!(stderr.contains(&t.sock.display().to_string()), "{stderr}");
    let mode = std::fs::metadata(&t.sock)
        .expect("socketDir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o1777, "the directory's mode was changed");
    assert!(!t.socket().exists());

    // A socketDir that is a symlink is refused, even to a directory the daemon could use.
    let elsewhere = t.links.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::remove_dir(&t.sock).expect("rmdir");
    std::os::unix::fs::symlink(&elsewhere, &t.sock).expect("symlink");
    let out =
        t.c.sb
            .node
            .command(t.links.path().join("multus-daemon"))
            .args(["-config".as_ref(), t.config.as_os_str()])
            .stdin(Stdio::null())
            .output()
            .expect("run the daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "socketDir {} is a symbolic link, which is never followed",
            t.sock.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("ls").count(),
        0,
        "the daemon wrote through the symlink"
    );
}

#[test]
fn a_burst_past_the_queue_is_refused_and_a_call_past_its_deadline_says_so() {
    let t = Thick::slow(
        "3",
        json!({"connectionLimit": 1, "maxQueuedRequests": 1, "requestTimeoutSeconds": 1}),
    );
    let shim = t.links.path().join("multus-shim");
    let node = &t.c.sb.node;
    let outs: Vec<CniOutput> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..3)
            .map(|i| {
                let mut call = t.shim_call("ADD");
                call.container_id = format!("burst{i}");
                let shim = &shim;
                // One at a time into the daemon, so the order is known.
                std::thread::sleep(Duration::from_millis(300));
                s.spawn(move || call.run(shim, Some(node)))
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("call")).collect()
    });
    outs[0].ok();
    let (expired, msg) = cni_error(&outs[1]);
    assert_eq!(expired, 11, "{msg}");
    assert!(
        msg.contains("gave up at its deadline (requestTimeoutSeconds)"),
        "{msg}"
    );
    let (rejected, msg) = cni_error(&outs[2]);
    assert_eq!(rejected, 11, "{msg}");
    assert!(msg.contains("(maxQueuedRequests)"), "{msg}");
    let (_, metrics) = t.request("GET", "/metrics", b"").expect("metrics");
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        "multus_requests_total{command=\"ADD\",result=\"ok\"} 1",
        "multus_requests_total{command=\"unknown\",result=\"expired\"} 1",
        "multus_requests_total{command=\"unknown\",result=\"rejected\"} 1",
        "multus_requests_in_flight 0",
        "multus_requests_queued 0",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    let mut del = t.shim_call("DEL");
    del.container_id = "burst0".into();
    del.run(&shim, Some(node)).ok();
}

/// A call whose deadline passes while every worker is inside a slow delegate is answered at
/// its deadline, not when a worker frees, which may be past the kubelet's own timeout.
#[test]
fn a_call_past_its_deadline_is_answered_while_every_worker_is_busy() {
    let t = Thick::slow(
        "8",
        json!({"connectionLimit": 1, "requestTimeoutSeconds": 1}),
    );
    let shim = t.links.path().join("multus-shim");
    let node = &t.c.sb.node;
    let call = t.shim_call("ADD");
    std::thread::scope(|s| {
        let busy = s.spawn(|| call.run(&shim, Some(node)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.metric("multus_requests_in_flight") != 1 {
            assert!(Instant::now() < deadline, "{}", t.metrics());
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut queued = t.shim_call("ADD");
        queued.container_id = "queued".into();
        let at = Instant::now();
        let out = queued.run(&shim, Some(node));
        let took = at.elapsed();
        let (code, msg) = cni_error(&out);
        assert_eq!(code, 11, "{msg}");
        assert!(
            msg.contains("gave up at its deadline (requestTimeoutSeconds)"),
            "{msg}"
        );
        // The point is when: about a second after its 1 s deadline at most, while the worker
        // still has 7 s of its delegate to go. The margin is generous for a loaded machine;
        // before, the answer came when the worker freed, 8 s in.
        assert!(took < Duration::from_secs(3), "answered after {took:?}");
        assert!(!busy.is_finished(), "the worker freed first");
        assert_eq!(t.metric("multus_requests_in_flight"), 1);
        busy.join().expect("the call in hand").ok();
    });
    assert_eq!(
        t.metric("multus_requests_total{command=\"unknown\",result=\"expired\"}"),
        1
    );
    let mut del = t.shim_call("DEL");
    del.container_id = call.container_id.clone();
    del.run(&shim, Some(node)).ok();
}

/// The queue is bounded in bytes too: calls of up to 4 MiB each would let a long queue hold
/// gigabytes.
#[test]
fn the_calls_held_are_bounded_in_bytes() {
    let t = Thick::slow("3", json!({"connectionLimit": 1, "maxQueuedRequests": 100}));
    let shim = t.links.path().join("multus-shim");
    let node = &t.c.sb.node;
    let call = t.shim_call("ADD");
    std::thread::scope(|s| {
        let busy = s.spawn(|| call.run(&shim, Some(node)));
        std::thread::sleep(Duration::from_millis(300));
        let body = vec![b' '; (4 << 20) - 1024];
        // 16 of them fit in 64 MiB, with the call in hand.
        let queued: Vec<UnixStream> = (0..16).map(|_| t.post_unread(&body)).collect();
        let mut refused = t.post_unread(&body);
        refused
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut reply = String::new();
        refused.read_to_string(&mut reply).expect("the refusal");
        assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
        let e: Value = serde_json::from_str(reply.split_once("\r\n\r\n").map_or("", |r| r.1))
            .expect("a CNI error");
        assert_eq!(e["code"], 11, "{reply}");
        assert!(
            e["msg"]
                .as_str()
                .unwrap_or("")
                .contains("holds as many bytes of calls as it takes (64 MiB)"),
            "{reply}"
        );
        assert!(t.metric("multus_requests_held_bytes") > 16 * ((4 << 20) - 1024));
        assert_eq!(t.metric("multus_requests_queued"), 16);
        // Their shims gone, the queued calls are skipped, and their bytes given back.
        drop(queued);
        busy.join().expect("the call in hand").ok();
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.metric("multus_requests_held_bytes") != 0 {
        assert!(Instant::now() < deadline, "{}", t.metrics());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        t.metric("multus_requests_total{command=\"unknown\",result=\"abandoned\"}"),
        16
    );
    let mut del = t.shim_call("DEL");
    del.container_id = call.container_id.clone();
    del.run(&shim, Some(node)).ok();
}

#[test]
fn a_hung_delegate_is_killed_and_a_call_its_shim_left_is_skipped() {
    let t = Thick::slow(
        "300",
        json!({"connectionLimit": 1, "delegateTimeoutSeconds": 2}),
    );
    let shim = t.links.path().join("multus-shim");
    let node = &t.c.sb.node;
    let call = t.shim_call("ADD");
    let out = std::thread::scope(|s| {
        let hung = s.spawn(|| call.run(&shim, Some(node)));
        // Queued behind it, then given up: its runtime's timeout killed the shim.
        std::thread::sleep(Duration::from_millis(500));
        drop(t.post_unread(call.stdin.as_bytes()));
        hung.join().expect("the hung call")
    });
    let (code, msg) = cni_error(&out);
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("did not finish within 2 s"), "{msg}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.metric("multus_requests_total{command=\"unknown\",result=\"abandoned\"}") != 1 {
        assert!(Instant::now() < deadline, "{}", t.metrics());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The worker is free again, and the skipped call ran nothing.
    assert_eq!(t.metric("multus_requests_in_flight"), 0);
    assert_eq!(
        t.metric("multus_requests_total{command=\"ADD\",result=\"error\"}"),
        1
    );
}

/// Upstream's `perNodeCertificate`: a daemon that cannot get its node's certificate does not
/// start, and says why: no node name, or a bootstrap kubeconfig it cannot read. (The
/// certificate asked for, approved, signed and renewed: the real node's e2e case.)
#[test]
fn a_per_node_certificate_that_cannot_be_had_stops_the_daemon_saying_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let links = PluginDir::new(&multus_bin(), &["multus-daemon"]);
    let config = dir.path().join("daemon-config.json");
    let socket_dir = dir.path().join("run");
    let bootstrap = dir.path().join("kubelet.kubeconfig");
    let certificates = json!({"enabled": true, "bootstrapKubeconfig": bootstrap,
                              "certDir": dir.path().join("certs")});
    std::fs::write(
        &config,
        json!({"perNodeCertificate": certificates, "socketDir": socket_dir}).to_string(),
    )
    .expect("the config");
    let start = |node: Option<&str>| {
        let mut daemon = std::process::Command::new(links.path().join("multus-daemon"));
        daemon
            .args(["-config".as_ref(), config.as_os_str()])
            .env_remove("MULTUS_NODE_NAME")
            .stdin(Stdio::null());
        if let Some(node) = node {
            daemon.env("MULTUS_NODE_NAME", node);
        }
        let out = daemon.output().expect("run the daemon");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        stderr
    };
    let stderr = start(None);
    assert!(
        stderr.contains("perNodeCertificate: MULTUS_NODE_NAME is not set"),
        "{stderr}"
    );
    let stderr = start(Some("node-1"));
    assert!(
        stderr.contains("perNodeCertificate:")
            && stderr.contains(&format!("bootstrap kubeconfig {}", bootstrap.display())),
        "{stderr}"
    );
    assert!(!socket_dir.exists(), "it served without its credential");
}

#[test]
fn bad_requests_on_the_socket_get_clear_answers() {
    let t = Thick::new(json!({}), json!({}));
    let text = |r: Option<(u16, Vec<u8>)>| {
        let (status, body) = r.expect("an answer");
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    assert_eq!(text(t.raw(b"GARBAGE\r\n\r\n")).0, 400);
    assert_eq!(text(t.request("GET", "/nowhere", b"")).0, 404);
    assert_eq!(text(t.request("GET", "/cni", b"")).0, 405);
    assert_eq!(
        text(t.raw(b"POST /cni HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n")).0,
        413
    );
    assert_eq!(
        text(t.raw(b"POST /cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")).0,
        411
    );
    for (body, code, want) in [
        ("not json", 6, "the request is not a CNI request"),
        (r#"{"config": "***"}"#, 6, "config is not base64"),
        (
            r#"{"env": {}}"#,
            4,
            "required env variables [CNI_COMMAND] missing",
        ),
        (
            r#"{"env": {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "../x", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0"}}"#,
            4,
            "invalid characters in containerID",
        ),
        (
            r#"{"env": {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}, "config": "WzFd"}"#,
            6,
            "the network config is not a JSON object",
        ),
    ] {
        let (status, reply) = text(t.request("POST", "/cni", body.as_bytes()));
        assert_eq!(status, 400, "{body}: {reply}");
        let e: Value = serde_json::from_str(&reply).expect("a CNI error");
        assert_eq!(e["code"], code, "{body}: {reply}");
        assert!(
            e["msg"].as_str().unwrap_or("").contains(want),
            "{body}: {reply}"
        );
    }
    // A client that sends nothing does not hold the daemon: the next request is answered.
    let _silent = UnixStream::connect(t.socket()).expect("connect");
    assert_eq!(text(t.request("GET", "/healthz", b"")).0, 200);
    assert_eq!(text(t.request("POST", "/healthz", b"null")).0, 200);
    // One that sends its head a byte a second is cut off at the whole request's deadline,
    // though each byte comes well within it.
    let mut slow = UnixStream::connect(t.socket()).expect("connect");
    slow.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let started = Instant::now();
    let mut cut = None;
    for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        let mut buf = [0u8; 64];
        let closed = slow.write_all(&[*byte]).is_err() || matches!(slow.read(&mut buf), Ok(0));
        if closed {
            cut = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(900));
    }
    let cut = cut.expect("the trickling client was never cut off");
    assert!(
        cut >= Duration::from_secs(4) && cut < Duration::from_secs(9),
        "{cut:?}"
    );
}

/// Requests exactly as upstream's shim sends them: the whole environment, the config in
/// base64, a `/healthz` poll first; the reply as upstream's shim reads it.
#[test]
fn upstreams_shim_requests_are_served() {
    let t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    assert_eq!(
        t.request("POST", "/healthz", b"null").map(|r| r.0),
        Some(200)
    );
    let call = t.shim_call("ADD");
    let mut env = serde_json::Map::new();
    for (k, v) in [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", &call.container_id),
        ("CNI_NETNS", &call.netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", &call.args),
        ("CNI_PATH", "/opt/cni/bin"),
        ("PATH", "/usr/sbin:/usr/bin"),
        ("HOME", "/root"),
    ] {
        env.insert(k.into(), json!(v));
    }
    use base64::Engine;
    let config = base64::engine::general_purpose::STANDARD.encode(call.stdin.as_bytes());
    let body = json!({"env": env, "config": config}).to_string();
    let (status, reply) = t.request("POST", "/cni", body.as_bytes()).expect("reply");
    let reply: Value = serde_json::from_slice(&reply).expect("JSON");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["Result"]["cniVersion"], "1.1.0", "{reply}");
    assert_eq!(reply["Result"]["ips"][0]["address"], "10.88.0.2/24");
    env.insert("CNI_COMMAND".into(), json!("DEL"));
    let body = json!({"env": env, "config": config}).to_string();
    let (status, reply) = t.request("POST", "/cni", body.as_bytes()).expect("reply");
    assert_eq!((status, reply.len()), (200, 0));
    t.c.sb.assert_clean("after DEL");
}

/// Our shim against a daemon that answers as upstream's v4.3.0 does: ADD's result under
/// `Result` in 1.1.0 (Content-Type text/plain), errors as plain text with status 400.
#[test]
fn our_shim_speaks_to_a_daemon_that_answers_as_upstreams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("multus.sock");
    let listener = UnixListener::bind(&socket).expect("listen");
    let links = PluginDir::new(&multus_bin(), &["multus-shim"]);
    let served = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for reply in [
            r#"{"Result":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.88.0.9/24","interface":0}]}}"#,
            "error configuring pod [default/web] networking: something failed\n",
            // Not HTTP: a daemon that answered, badly.
            "garbled",
        ] {
            let (conn, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut head = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("head");
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().expect("length");
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("body");
            seen.push((head, String::from_utf8_lossy(&body).into_owned()));
            let status = if reply.starts_with('{') { 200 } else { 400 };
            let mut w = conn;
            if reply == "garbled" {
                w.write_all(b"\x00\x01 not a status line\r\n\r\n")
                    .expect("reply");
                continue;
            }
            write!(
                w,
                "HTTP/1.1 {status} X\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{reply}",
                reply.len()
            )
            .expect("reply");
        }
        seen
    });
    let conf = json!({"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim",
                      "clusterNetwork": "/etc/cni/net.d/10-x.conf", "daemonSocketDir": dir.path()})
    .to_string();
    let mut call = CniCall::new("ADD", &conf);
    call.netns = "/proc/1/ns/net".into();
    call.path = "/opt/cni/bin".into();
    call.args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web".into();
    call.env
        .push(("CNI_NETNS_OVERRIDE".into(), Some("1".into())));
    let shim = links.path().join("multus-shim");
    let added = call.run(&shim, None).ok();
    // Converted to the conf's version, as upstream's shim does.
    assert_eq!(added["cniVersion"], "0.3.1", "{added}");
    assert_eq!(added["ips"][0]["address"], "10.88.0.9/24");
    let failed = call.run(&shim, None);
    let (code, msg) = cni_error(&failed);
    assert_eq!(code, 999, "{msg}");
    assert!(
        msg.contains("the multus daemon answered 400: error configuring pod [default/web] networking: something failed"),
        "{msg}"
    );
    // A reply that is not HTTP is told apart from a daemon that is not there.
    let garbled = call.run(&shim, None);
    let (code, msg) = cni_error(&garbled);
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.contains("answered, and its reply could not be read")
            && !msg.contains("does not answer"),
        "{msg}"
    );
    let seen = served.join().expect("server");
    let (head, body) = &seen[0];
    assert!(head.starts_with("POST /cni HTTP/1.1\r\n"), "{head}");
    let body: Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(body["env"]["CNI_COMMAND"], "ADD");
    assert_eq!(
        body["env"]["CNI_ARGS"],
        "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web"
    );
    use base64::Engine;
    let config = base64::engine::general_purpose::STANDARD
        .decode(body["config"].as_str().unwrap_or(""))
        .expect("base64");
    assert_eq!(config, conf.as_bytes());
    assert!(body["env"].get("PATH").is_none(), "only CNI_* is sent");
}

/// With the caches filled, ADD asks the API for nothing but the network-status PATCH (the
/// events follow the reply), and DEL asks for nothing.
#[test]
fn the_caches_leave_add_one_patch_and_del_none() {
    let t = Thick::new(json!({NETWORKS: "a,b"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.c.bridge_nad("default", "b", "10.21.0.0/24");
    let b = t.c.server.add_nad(
        "default",
        "b",
        json!({"config": t.c.sb.bridge("b", "brb", "10.21.0.0/24", "1.0.0").to_string()}),
    );
    t.nads_seen(&b["metadata"]["resourceVersion"]);
    assert_eq!(t.metric("multus_cache_objects{kind=\"pods\"}"), 1);
    let from = t.c.server.requests().len();
    t.shim("ADD").ok();
    assert_eq!(
        t.calls_since(from)
            .into_iter()
            .filter(|c| !c.contains("/events"))
            .collect::<Vec<_>>(),
        ["PATCH /api/v1/namespaces/default/pods/web/status"]
    );
    assert_eq!(t.events_soon("AddedInterface", 3).len(), 3);
    let from = t.c.server.requests().len();
    t.shim("DEL").ok();
    assert_eq!(t.calls_since(from), Vec::<String>::new());
    t.c.sb.assert_clean("after DEL");
}

/// A NAD changed between two pods: the second gets the new config. The cache lists again
/// after a 410 and watches again after the API server was away, and still follows.
#[test]
fn the_nad_cache_follows_changes_410_and_a_dropped_watch() {
    let t = Thick::new(json!({}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    let (_ns1, first) = t.pod("one", json!({NETWORKS: "a"}));
    let shim = t.links.path().join("multus-shim");
    let out = t.c.sb.run_in_node(&shim, &first).ok();
    assert_eq!(out["ips"][0]["address"], "10.88.0.2/24");
    let changed = t.c.server.add_nad(
        "default",
        "a",
        json!({"config": t.c.sb.bridge("a", "bra2", "10.30.0.0/24", "1.0.0").to_string()}),
    );
    t.nads_seen(&changed["metadata"]["resourceVersion"]);
    let (ns2, second) = t.pod("two", json!({NETWORKS: "a"}));
    t.c.sb.run_in_node(&shim, &second).ok();
    let addrs = ns2.ip_json(&["-4", "addr", "show", "dev", "net1"]);
    assert_eq!(addrs[0]["addr_info"][0]["local"], "10.30.0.2", "{addrs}");
    // The history is compacted (410), then the API server goes away and comes back: the
    // cache lists again and watches again, and a change made meanwhile reaches it.
    let lists = |t: &Thick| {
        t.c.server
            .requests()
            .iter()
            .filter(|r| {
                r.path.ends_with("/network-attachment-definitions") && r.query.contains("limit=")
            })
            .count()
    };
    let listed = lists(&t);
    t.c.server.compact();
    t.c.server.go_down();
    let moved = t.c.server.add_nad(
        "default",
        "a",
        json!({"config": t.c.sb.bridge("a", "bra3", "10.31.0.0/24", "1.0.0").to_string()}),
    );
    t.c.server.come_back().expect("the API server comes back");
    t.nads_seen(&moved["metadata"]["resourceVersion"]);
    assert!(lists(&t) > listed, "listed again after the 410");
    for call in [&first, &second] {
        let mut del = call.clone();
        del.command = "DEL".into();
        t.c.sb.run_in_node(&shim, &del).ok();
    }
    t.c.sb.assert_clean("after DEL");
}

/// 200 pods at once, then their DELs: every one attached, nothing left after.
#[test]
fn two_hundred_pods_at_once_then_deleted_leave_nothing() {
    let t = Thick::new(json!({}), json!({}));
    let pods: Vec<(testkit::Netns, CniCall)> = (0..200)
        .map(|i| t.pod(&format!("p{i:03}"), json!({})))
        .collect();
    let shim = t.links.path().join("multus-shim");
    let node = &t.c.sb.node;
    let run_all = |command: &str| -> Vec<CniOutput> {
        std::thread::scope(|s| {
            let runs: Vec<_> = pods
                .iter()
                .map(|(_, call)| {
                    let mut call = call.clone();
                    call.command = command.into();
                    let shim = &shim;
                    s.spawn(move || call.run(shim, Some(node)))
                })
                .collect();
            runs.into_iter().map(|r| r.join().expect("call")).collect()
        })
    };
    let added = run_all("ADD");
    let mut addresses: Vec<String> = added
        .iter()
        .map(|o| {
            o.ok()["ips"][0]["address"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 200);
    for out in run_all("DEL") {
        out.ok();
    }
    for (ns, _) in &pods {
        assert_eq!(ns.links(), ["lo"], "{}", ns.name());
    }
    t.c.sb.assert_clean("after 200 DELs");
    assert_eq!(t.metric("multus_requests_in_flight"), 0);
}

/// The daemon killed in the middle of a burst and started again: every DEL succeeds, through
/// the daemon or without it, and nothing is left.
#[test]
fn a_daemon_killed_during_a_burst_leaves_every_del_working() {
    let mut t = Thick::new(json!({}), json!({}));
    let pods: Vec<(testkit::Netns, CniCall)> = (0..40)
        .map(|i| t.pod(&format!("k{i:02}"), json!({})))
        .collect();
    let shim = t.links.path().join("multus-shim");
    let daemon = t.daemon.take().expect("a daemon");
    let node = &t.c.sb.node;
    std::thread::scope(|s| {
        for (_, call) in &pods {
            let shim = &shim;
            s.spawn(move || call.run(shim, Some(node)));
        }
        std::thread::sleep(Duration::from_millis(300));
        signal(daemon, libc::SIGKILL);
    });
    // Half the DELs before the daemon is back (the shim's own), half after.
    for (i, (_, call)) in pods.iter().enumerate() {
        if i == 20 {
            t.start();
        }
        let mut del = call.clone();
        del.command = "DEL".into();
        let out = del.run(&shim, Some(&t.c.sb.node));
        assert_eq!(out.code, 0, "DEL {}: {out:?}", call.container_id);
    }
    for (ns, _) in &pods {
        assert_eq!(ns.links(), ["lo"], "{}", ns.name());
    }
    t.c.sb.assert_clean("after every DEL");
}

/// The daemon's log file is rotated while it runs, as `logOptions` asks, and its lines go
/// on in the new file.
#[test]
fn the_daemons_log_file_is_rotated_while_it_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("multus.log");
    let t = Thick::new(
        json!({}),
        json!({"logFile": log, "logOptions": {"maxSize": 1, "maxBackups": 2, "compress": false}}),
    );
    assert!(std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("serving on"));
    // The file grows past 1 MB: within a second or two it is rotated.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("the log");
    file.write_all(&vec![b'x'; 1_100_000])
        .expect("grow the log");
    let rotated = dir.path().join("multus.log.1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rotated.exists() {
        assert!(Instant::now() < deadline, "not rotated");
        std::thread::sleep(Duration::from_millis(50));
    }
    t.shim("DEL").ok();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = std::fs::read_to_string(&log).unwrap_or_default();
        if fresh.contains("Del") || fresh.contains("DEL") {
            assert!(
                fresh.len() < 100_000,
                "the new file holds the new lines only"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no line after the rotation: {fresh:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `metricsPort`: the same text over TCP, as upstream serves it; anything but GET /metrics
/// gets 404.
#[test]
fn metrics_are_served_on_the_metrics_port_too() {
    let t = Thick::new(json!({}), json!({"metricsPort": 19091}));
    let node = netkit::NetNs::open(t.c.sb.node.path()).expect("the node");
    let get = |path: &str| -> String {
        let path = path.to_owned();
        node.run(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", 19091)).expect("connect");
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
            let mut reply = String::new();
            s.read_to_string(&mut reply).expect("read");
            reply
        })
        .expect("in the node")
    };
    let reply = get("/metrics");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains("multus_cache_objects{kind=\"pods\"} 1"),
        "{reply}"
    );
    assert!(get("/other").starts_with("HTTP/1.1 404"));
}

/// Pods of the node that run without networks they ask for (started while multus's config was
/// not in place) are found once the daemon is ready: a Warning event `MissingNetworks` naming
/// what is missing, a log line, and the gauge. So is one whose network-status is from an earlier
/// sandbox. A pod with its networks, one not running yet, one on another node and one in a
/// system namespace (whose status multus does not write) are not. Each is said once, however
/// many looks find it.
#[test]
fn pods_running_without_their_networks_are_reported_once() {
    let t = Thick::prepared(json!({}), None);
    let running = |name: &str, namespace: &str, node: &str, annotations: Value, ips: &[&str]| {
        let mut pod = testkit::kube_api::pod_manifest(namespace, name);
        pod["metadata"]["uid"] = json!(format!("uid-{name}"));
        pod["metadata"]["annotations"] = annotations;
        pod["spec"]["nodeName"] = json!(node);
        pod["status"]["phase"] = json!("Running");
        pod["status"]["podIPs"] = json!(ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>());
        t.c.server.add_pod(pod);
    };
    let status = r#"[{"name": "cluster", "interface": "eth0", "ips": ["10.88.0.7"], "default": true},
                     {"name": "default/a", "interface": "net1"}]"#;
    running(
        "stray",
        "default",
        "node-1",
        json!({NETWORKS: "a, b@data"}),
        &[],
    );
    running(
        "rebooted",
        "default",
        "node-1",
        json!({NETWORKS: "a", "k8s.v1.cni.cncf.io/network-status": status}),
        &["10.88.0.9"],
    );
    running(
        "fine",
        "default",
        "node-1",
        json!({NETWORKS: "a", "k8s.v1.cni.cncf.io/network-status": status}),
        &["10.88.0.7"],
    );
    running(
        "elsewhere",
        "default",
        "node-2",
        json!({NETWORKS: "a"}),
        &[],
    );
    running(
        "system",
        "kube-system",
        "node-1",
        json!({NETWORKS: "a"}),
        &[],
    );
    let mut pending = testkit::kube_api::pod_manifest("default", "starting");
    pending["metadata"]["annotations"] = json!({NETWORKS: "a"});
    t.c.server.add_pod(pending);
    let config = t.config(json!({"missingNetworksCheckSeconds": 1}));
    let t = t.started(&config);

    let deadline = Instant::now() + Duration::from_secs(20);
    while t.c.events("MissingNetworks").len() < 2 {
        assert!(Instant::now() < deadline, "no events: {}", t.daemon_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // More looks find the same pods, and say nothing more.
    std::thread::sleep(Duration::from_secs(4));
    let events = t.c.server.events();
    let said: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["reason"] == "MissingNetworks")
        .map(|e| {
            assert_eq!(e["type"], "Warning");
            (
                e["involvedObject"]["name"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(said.len(), 2, "{said:?}");
    let of = |pod: &str| {
        said.iter()
            .find(|(p, _)| *p == pod)
            .map(|(_, m)| *m)
            .unwrap_or_else(|| panic!("no event for {pod}: {said:?}"))
    };
    assert!(
        of("stray").starts_with(
            "the pod runs without default/a, default/b@data: its network-status does not show it"
        ),
        "{said:?}"
    );
    assert!(
        of("rebooted").starts_with(
            "the pod runs without default/a: its network-status is from an earlier sandbox"
        ),
        "{said:?}"
    );
    // Not asked to delete: it says what to do.
    assert!(
        of("stray").ends_with("delete it, so that its controller makes it again with its networks")
    );
    assert_eq!(t.metric("multus_pods_missing_networks "), 2);
    let log = t.daemon_log();
    assert!(
        log.contains("pod=default/stray") && log.contains("pod=default/rebooted"),
        "{log}"
    );
}

impl Thick {
    /// A `POST /delegate` in the shape multus-dynamic-networks-controller sends (upstream's
    /// `CreateDelegateRequest`: five variables, the NAD's config, `cni-args` always present),
    /// for this sandbox: the status and the reply as JSON (`null` when empty).
    fn delegate(
        &self,
        command: &str,
        ifname: &str,
        config: &Value,
        attributes: Value,
    ) -> (u16, Value) {
        use base64::Engine;
        let call = self.c.call("ADD");
        let mut attributes = attributes;
        if attributes.get("cni-args").is_none() {
            attributes["cni-args"] = Value::Null;
        }
        let body = json!({
            "env": {
                "CNI_COMMAND": command,
                "CNI_CONTAINERID": call.container_id,
                "CNI_NETNS": call.netns,
                "CNI_IFNAME": ifname,
                "CNI_ARGS": format!(
                    "K8S_POD_NAMESPACE=default;K8S_POD_NAME={POD_NAME};K8S_POD_UID={}",
                    self.c.uid
                ),
            },
            "config": base64::engine::general_purpose::STANDARD.encode(config.to_string()),
            "interfaceAttributes": attributes,
        });
        let (status, reply) = self
            .request("POST", "/delegate", body.to_string().as_bytes())
            .expect("an answer");
        let reply = if reply.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&reply).expect("a JSON reply")
        };
        (status, reply)
    }

    /// The interface names the sandbox's delegate cache records, in its order.
    fn cached_ifnames(&self) -> Vec<String> {
        let path = self.c.sb.cni_dir().join(CONTAINER_ID);
        let cache: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the delegate cache"))
                .expect("JSON");
        cache
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| d["ifnameRequest"].as_str().unwrap_or("").to_owned())
            .collect()
    }
}

/// Hot-plug through `/delegate` alone (built-in hot-plug off, as beside upstream's
/// controller by choice): networks added to and removed from a running pod, with the names,
/// checks and cache a pod's ADD gets; refusals leave the pod as it was; the sandbox's DEL then
/// removes everything, hot-plugged interfaces included.
#[test]
fn delegate_adds_and_removes_networks_of_a_running_pod() {
    let t = Thick::new(json!({NETWORKS: "a"}), json!({"hotPlug": false}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.shim("ADD").ok();
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);
    let b =
        t.c.sb
            .bridge("b", &t.c.bridge_name(), "10.21.0.0/24", "1.0.0");
    let c =
        t.c.sb
            .bridge("c", &t.c.bridge_name(), "10.22.0.0/24", "0.3.1");

    // Upstream's reply: the result in 1.1.0 under `Result`.
    let (status, reply) = t.delegate("ADD", "net2", &b, json!({}));
    assert_eq!(status, 200, "{reply}\n{}", t.daemon_log());
    assert_eq!(reply["Result"]["cniVersion"], "1.1.0", "{reply}");
    assert_eq!(
        reply["Result"]["ips"][0]["address"], "10.21.0.2/24",
        "{reply}"
    );
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1", "net2"]);
    // No name: the next by position, where upstream's daemon would take eth0.
    let (status, reply) = t.delegate("ADD", "", &c, json!({"cni-args": {"x": "y"}}));
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["Result"]["interfaces"][2]["name"], "net3", "{reply}");
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1", "net2", "net3"]);
    assert_eq!(t.cached_ifnames(), ["", "net1", "net2", "net3"]);

    // Refused as at ADD, each leaving the pod and its cache as they were.
    let mut runs_multus = b.clone();
    runs_multus["ipam"] = json!({"type": "multus"});
    let mut sets_runtime = b.clone();
    sets_runtime["runtimeConfig"] =
        json!({"portMappings": [{"hostPort": 22, "containerPort": 80}]});
    let missing_plugin = json!({"cniVersion": "1.0.0", "name": "gone", "type": "no-such-plugin"});
    // A tenant's network that would take an address of the cluster network.
    let captures = json!({"cniVersion": "1.0.0", "name": "capture", "type": "bridge",
        "bridge": t.c.bridge_name(),
        "ipam": {"type": "static", "addresses": [{"address": "10.88.0.50/24"}]}});
    for (ifname, config, attributes, code, want) in [
        (
            "net2",
            &c,
            json!({}),
            7,
            "network default/b has this interface already",
        ),
        (
            "eth0",
            &b,
            json!({}),
            7,
            "network cluster has this interface already",
        ),
        ("net9", &runs_multus, json!({}), 7, "runs multus itself"),
        ("net9", &sets_runtime, json!({}), 7, "only the runtime sets"),
        ("net9", &captures, json!({}), 7, "cluster"),
        ("net9", &missing_plugin, json!({}), 7, "no-such-plugin"),
        ("../x", &b, json!({}), 4, "interface name"),
    ] {
        let (status, reply) = t.delegate("ADD", ifname, config, attributes);
        assert_eq!(status, 400, "{ifname}: {reply}");
        assert_eq!(reply["code"], code, "{ifname}: {reply}");
        let msg = reply["msg"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{ifname}: {reply}");
        assert_eq!(
            t.c.sb.pod_links(),
            ["eth0", "net1", "net2", "net3"],
            "{ifname}"
        );
        assert_eq!(t.cached_ifnames(), ["", "net1", "net2", "net3"], "{ifname}");
    }

    // DEL by interface: the others keep their names; the cluster network stays.
    let a_conf = t.c.sb.bridge("a", "unused", "10.20.0.0/24", "1.0.0");
    let (status, reply) = t.delegate("DEL", "net1", &a_conf, json!({}));
    assert_eq!((status, &reply), (200, &Value::Null));
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net2", "net3"]);
    assert_eq!(t.cached_ifnames(), ["", "net2", "net3"]);
    let (status, reply) = t.delegate("DEL", "eth0", &a_conf, json!({}));
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["msg"]
            .as_str()
            .unwrap_or_default()
            .contains("goes only with its sandbox"),
        "{reply}"
    );
    let (status, reply) = t.delegate("CHECK", "net2", &b, json!({}));
    assert_eq!((status, &reply), (200, &Value::Null));
    // The next unnamed one takes the first free name by position.
    let d =
        t.c.sb
            .bridge("d", &t.c.bridge_name(), "10.23.0.0/24", "1.0.0");
    let (status, reply) = t.delegate("ADD", "", &d, json!({"ips": ["10.23.0.9/24"]}));
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["Result"]["ips"][0]["address"], "10.23.0.9/24",
        "{reply}"
    );
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1", "net2", "net3"]);

    let log = t.daemon_log();
    assert!(log.contains("Hot-plugged net2 from default/b"), "{log}");
    // The sandbox's DEL, by the shim alone with the daemon down, removes everything.
    let mut t = t;
    t.signal(libc::SIGKILL);
    t.shim("DEL").ok();
    t.c.sb
        .assert_clean("the sandbox's DEL after hot-plugs, without the daemon");
}

/// The sandbox's DEL with the daemon down removes hot-plugged interfaces too: the shim reads
/// the delegate cache the daemon kept.
#[test]
fn hot_plugged_interfaces_go_with_the_sandbox_without_the_daemon() {
    let mut t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.c.bridge_nad("default", "b", "10.21.0.0/24");
    t.shim("ADD").ok();
    t.annotate("a,b");
    t.links_become(&["eth0", "net1", "net2"]);
    t.signal(libc::SIGKILL);
    t.shim("DEL").ok();
    t.c.sb.assert_clean("the sandbox's DEL without the daemon");
}

impl Thick {
    /// The hot-plug syncs the daemon has made, whatever their result.
    fn syncs(&self) -> i64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with("multus_hot_plug_syncs_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
            .sum()
    }

    /// Waits until the daemon has made a hot-plug sync since it had made `before`.
    fn synced_since(&self, before: i64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.syncs() <= before {
            assert!(Instant::now() < deadline, "no sync\n{}", self.daemon_log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sets the pod's networks annotation, as `kubectl annotate --overwrite` does.
    fn annotate(&self, networks: &str) {
        let mut pod = self.c.server.pod("default", POD_NAME).expect("the pod");
        pod["metadata"]["annotations"][NETWORKS] = json!(networks);
        self.c.server.add_pod(pod);
    }

    /// Waits until the pod's interfaces are `want` (5 s at most); how long that took.
    fn links_become(&self, want: &[&str]) -> Duration {
        let started = Instant::now();
        while self.c.sb.pod_links() != want {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the pod has {:?}, not {want:?}\n{}",
                self.c.sb.pod_links(),
                self.daemon_log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        started.elapsed()
    }

    /// Waits until network-status shows exactly these names and interfaces (5 s at most).
    fn status_becomes(&self, want: &[(&str, &str)]) {
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, i)| (n.to_string(), i.to_string()))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let entries: Vec<(String, String)> = self
                .c
                .network_status()
                .and_then(|s| s.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|e| {
                    let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                    (text("name"), text("interface"))
                })
                .collect();
            if entries == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "network-status shows {entries:?}, not {want:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Built-in hot-plug: the daemon follows a running pod's networks annotation. An added network
/// gets its interface, a removed one loses it, one that stays keeps its name and address; a
/// network that cannot be added is said in an event and leaves the pod as it was;
/// network-status and events follow; the sandbox's DEL removes everything.
#[test]
fn a_running_pods_networks_follow_its_annotation() {
    let t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    for (name, subnet) in [
        ("a", "10.20.0.0/24"),
        ("b", "10.21.0.0/24"),
        ("c", "10.22.0.0/24"),
    ] {
        t.c.bridge_nad("default", name, subnet);
    }
    t.shim("ADD").ok();
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);
    let pod_ip = |ifname: &str| {
        t.c.sb.pod.ip_json(&["-4", "addr", "show", ifname])[0]["addr_info"][0]["local"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };

    // network-status is written once the interfaces are made, addresses and all.
    t.annotate("a,b");
    t.status_becomes(&[
        ("cluster", "eth0"),
        ("default/a", "net1"),
        ("default/b", "net2"),
    ]);
    t.links_become(&["eth0", "net1", "net2"]);
    assert_eq!(pod_ip("net2"), "10.21.0.2");
    assert!(
        t.events_soon("AddedInterface", 3)
            .contains(&"Add net2 [10.21.0.2/24] from default/b".to_owned()),
        "{:?}",
        t.c.events("AddedInterface")
    );

    // net1 goes; net2 keeps its name and address.
    t.annotate("b");
    t.status_becomes(&[("cluster", "eth0"), ("default/b", "net2")]);
    t.links_become(&["eth0", "net2"]);
    assert_eq!(pod_ip("net2"), "10.21.0.2");
    assert_eq!(
        t.events_soon("RemovedInterface", 1),
        ["Remove net1 from default/a"]
    );

    // A network that cannot be had: said in an event, and nothing else changes.
    t.annotate("b,nowhere");
    let why = t.events_soon("NoNetworkFound", 1);
    assert!(
        why.iter().any(|m| m.contains("nowhere")),
        "{why:?}\n{}",
        t.daemon_log()
    );
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net2"]);
    // An annotation that does not parse: said in an event; nothing changes.
    t.annotate("[{\"name\": ");
    let why = t.events_soon("AddInterfaceFailed", 1);
    assert!(
        why.iter().any(|m| m.contains(NETWORKS)),
        "{why:?}\n{}",
        t.daemon_log()
    );
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net2"]);
    // Whatever else the annotation asks is still added, named by its position.
    t.annotate("b,nowhere,c");
    t.status_becomes(&[
        ("cluster", "eth0"),
        ("default/b", "net2"),
        ("default/c", "net3"),
    ]);
    t.links_become(&["eth0", "net2", "net3"]);
    assert_eq!(pod_ip("net3"), "10.22.0.2");
    // Removed and added at once: the name freed is taken by position.
    t.annotate("c,a");
    t.status_becomes(&[
        ("cluster", "eth0"),
        ("default/c", "net3"),
        ("default/a", "net2"),
    ]);
    t.links_become(&["eth0", "net2", "net3"]);
    assert!(pod_ip("net2").starts_with("10.20.0."), "{}", pod_ip("net2"));
    assert_eq!(pod_ip("net3"), "10.22.0.2");
    // A name taken by position gives way to the first free one.
    t.annotate("c,a,b");
    t.status_becomes(&[
        ("cluster", "eth0"),
        ("default/c", "net3"),
        ("default/a", "net2"),
        ("default/b", "net1"),
    ]);
    t.links_become(&["eth0", "net1", "net2", "net3"]);
    assert!(pod_ip("net1").starts_with("10.21.0."), "{}", pod_ip("net1"));

    // The sandbox's DEL removes everything, hot-plugged interfaces included.
    t.shim("DEL").ok();
    t.c.sb.assert_clean("the sandbox's DEL after hot-plugs");
}

/// A pod whose annotation flips many times costs one cycle per settled state, not one per
/// change; and with `hotPlug: false` the daemon leaves a running pod's networks alone.
#[test]
fn annotation_flips_settle_and_hot_plug_can_be_turned_off() {
    let t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.c.bridge_nad("default", "b", "10.21.0.0/24");
    t.shim("ADD").ok();
    let started = Instant::now();
    for i in 0..100 {
        t.annotate(if i % 2 == 0 { "a,b" } else { "a" });
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The last state ("a") holds: net2 never stays.
    t.annotate("a,b");
    t.links_become(&["eth0", "net1", "net2"]);
    std::thread::sleep(Duration::from_millis(500));
    let cycles = t.c.events("AddedInterface").len() + t.c.events("RemovedInterface").len();
    // The ADD's two, then at most one add and one remove per MOST_WAIT (1 s) of flipping,
    // and the final add.
    assert!(cycles <= 2 + 2 * 2 + 1, "{cycles} events for 100 changes");
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
    drop(t);

    let t = Thick::new(json!({NETWORKS: "a"}), json!({"hotPlug": false}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    t.c.bridge_nad("default", "b", "10.21.0.0/24");
    t.shim("ADD").ok();
    t.annotate("a,b");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
}

/// A daemon killed in the middle of a hot-plug leaves nothing half-made for good: the next one
/// looks at every pod of the node when it starts, deletes what the cut-short ADD may have made,
/// and adds it again; network-status then shows it.
#[test]
fn a_daemon_killed_during_a_change_finishes_it_when_it_starts_again() {
    let mut t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    // A bridge network whose plugin takes a second and a half before it does its work.
    t.c.sb
        .script("slowbridge", r#"sleep 1.5; exec "$(dirname "$0")/bridge""#);
    let mut slow =
        t.c.sb
            .bridge("slow", &t.c.bridge_name(), "10.21.0.0/24", "1.0.0");
    slow["type"] = json!("slowbridge");
    t.c.nad("default", "slow", slow);
    t.shim("ADD").ok();
    t.annotate("a,slow");
    // The delegate cache has it before the plugin runs: kill the daemon then.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !t.cached_ifnames().contains(&"net2".to_owned()) {
        assert!(Instant::now() < deadline, "{}", t.daemon_log());
        std::thread::sleep(Duration::from_millis(10));
    }
    t.signal(libc::SIGKILL);
    // The plugin, left to itself, makes its interface; nothing records its result.
    std::thread::sleep(Duration::from_secs(2));
    t.start();
    t.status_becomes(&[
        ("cluster", "eth0"),
        ("default/a", "net1"),
        ("default/slow", "net2"),
    ]);
    t.links_become(&["eth0", "net1", "net2"]);
    let log = t.daemon_log();
    assert!(log.contains("Remove net2 from default/slow"), "{log}");
    assert!(
        log.contains("Add net2 [10.21.0.") && log.contains("from default/slow"),
        "{log}"
    );
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
}

/// Built-in hot-plug and a `/delegate` caller following the same annotation (upstream's
/// controller beside the daemon, as installed by default) make one interface per network
/// (the daemon's metrics say when its own sync of each change has run):
/// the second to come gets what the first made, whichever it is; a removal by both is done
/// once and answered twice.
#[test]
fn built_in_hot_plug_and_a_delegate_caller_agree() {
    let t = Thick::new(json!({NETWORKS: "a"}), json!({}));
    t.c.bridge_nad("default", "a", "10.20.0.0/24");
    // Its config names the network otherwise than the NAD: the controller's requests name it
    // by the config, the annotation by the NAD.
    let b =
        t.c.sb
            .bridge("b-net", &t.c.bridge_name(), "10.21.0.0/24", "1.0.0");
    t.c.nad("default", "b", b.clone());
    t.shim("ADD").ok();
    for round in 0..3 {
        // The controller calls as soon as it sees the change; the daemon settles first.
        let before = t.syncs();
        t.annotate("a,b");
        let (status, reply) = t.delegate("ADD", "", &b, json!({}));
        assert_eq!(status, 200, "round {round}: {reply}");
        let address = reply["Result"]["ips"][0]["address"].as_str().unwrap_or("");
        assert!(address.starts_with("10.21.0."), "{reply}");
        t.synced_since(before);
        assert_eq!(
            t.c.sb.pod_links(),
            ["eth0", "net1", "net2"],
            "round {round}"
        );
        assert_eq!(t.cached_ifnames(), ["", "net1", "net2"], "round {round}");
        let before = t.syncs();
        t.annotate("a");
        let (status, reply) = t.delegate("DEL", "net2", &b, json!({}));
        assert_eq!((status, &reply), (200, &Value::Null), "round {round}");
        t.synced_since(before);
        assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"], "round {round}");
        assert_eq!(t.cached_ifnames(), ["", "net1"], "round {round}");
    }
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
}

/// A network hot-plug would add meets the policies ADD applies: the admission policy (a
/// `NetworkRefused` event) and namespace isolation (an `AddInterfaceFailed` event); the pod
/// keeps what it had.
#[test]
fn hot_plug_applies_the_admission_policy_and_namespace_isolation() {
    let dir = tempfile::tempdir().expect("a directory");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "deniedSubnets: [10.77.0.0/16]\n").expect("the policy");
    let t = Thick::new(
        json!({NETWORKS: "fine"}),
        json!({"admissionPolicy": policy, "namespaceIsolation": true}),
    );
    t.c.bridge_nad("default", "fine", "10.78.1.0/24");
    t.c.bridge_nad("default", "denied", "10.77.1.0/24");
    t.c.bridge_nad("other", "elsewhere", "10.79.1.0/24");
    t.shim("ADD").ok();
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);

    t.annotate("fine,denied");
    let refused = t.events_soon("NetworkRefused", 1);
    let said = format!(
        "network default/denied on interface net2: refused by the admission policy {}",
        policy.display()
    );
    assert!(
        refused
            .iter()
            .any(|e| e.contains(&said) && e.contains("[reserved-overlap]")),
        "{refused:?}\n{}",
        t.daemon_log()
    );
    t.annotate("fine,other/elsewhere");
    let failed = t.events_soon("AddInterfaceFailed", 1);
    assert!(
        failed
            .iter()
            .any(|e| e.contains("namespace isolation") && e.contains("other/elsewhere")),
        "{failed:?}"
    );
    assert_eq!(t.c.sb.pod_links(), ["eth0", "net1"]);
    t.shim("DEL").ok();
    t.c.sb.assert_clean("after DEL");
}
