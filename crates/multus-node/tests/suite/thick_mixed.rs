//! Mixed versions in thick mode, as during a rolling upgrade: our `multus-shim` on the node
//! against upstream's real `multus-daemon` v4.3.0 (built from its module by scripts/peers.sh).
//! Upstream's daemon is a Go net/http server, which sends a reply of more than 2 KiB with
//! `Transfer-Encoding: chunked`: an ADD whose result is that large is read by our shim only if
//! it reads chunked replies.
//!
//! The daemon runs in the sandbox's node namespace as in a pod, with in-cluster credentials
//! for testkit's API server (testkit's in-cluster wrapper); its cluster network is bridge +
//! host-local from this workspace's `cni-plugins`, with enough routes to make a large result. A
//! relay between the shim and the daemon's socket passes every byte on unchanged and keeps the
//! daemon's replies, to show what the shim was sent.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{multus_bin, Sandbox, POD_NAME, POD_NS, POD_UID};
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, InCluster, KubeApiServer, Scheme};
use testkit::PluginDir;

/// Routes of the cluster network: each is about 40 bytes of the result.
const ROUTES: usize = 100;

/// Copies the bytes of each connection on `listener` to a new connection to `target`, and back;
/// keeps what `target` sent on each.
struct Relay {
    replies: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    fn new(listener: UnixListener, target: PathBuf) -> Relay {
        listener.set_nonblocking(true).expect("nonblocking");
        let replies = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (replies.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                client.set_nonblocking(false).expect("blocking");
                let reply = relay_one(client, &target);
                kept.lock().expect("replies").push(reply);
            }
        });
        Relay {
            replies,
            stop,
            thread: Some(thread),
        }
    }

    /// The replies relayed, once there are `n` of them (the relay keeps one when its client
    /// has closed, which may be after the shim has exited); fewer after 10 s.
    fn replies(&self, n: usize) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let replies = self.replies.lock().expect("replies").clone();
            if replies.len() >= n || Instant::now() > deadline {
                return replies;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection: the request to `target` as it comes, the reply back as it comes until
/// `target` closes (every reply of the daemon says `Connection: close`); the reply's bytes.
fn relay_one(mut client: UnixStream, target: &Path) -> Vec<u8> {
    let Ok(mut server) = UnixStream::connect(target) else {
        return Vec::new();
    };
    let (mut to_server, mut from_client) = (
        server.try_clone().expect("clone"),
        client.try_clone().expect("clone"),
    );
    // The request: until the client closes, which it does once it has the reply.
    let forward = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_server);
    });
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                if client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = server.shutdown(std::net::Shutdown::Both);
    let _ = forward.join();
    reply
}

/// Upstream's daemon, started as in a pod, with its API server and the relay to its socket.
struct Upstream {
    sb: Sandbox,
    server: KubeApiServer,
    _in_cluster: InCluster,
    daemon: Option<Child>,
    log: PathBuf,
    relay: Relay,
    relay_dir: PathBuf,
    shim: PluginDir,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// The raw status of `GET /healthz` on a socket, if anything answers.
fn healthz(socket: &Path) -> Option<u16> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: dummy\r\nContent-Length: 0\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply.split(' ').nth(1)?.parse().ok()
}

impl Upstream {
    fn start() -> Upstream {
        let peers = testkit::peers::build("multus").expect("upstream multus v4.3.0");
        let sb = Sandbox::new();
        let server =
            KubeApiServer::start_in(Scheme::Https, &sb.node).expect("start the API server");
        let mut pod = pod_manifest(POD_NS, POD_NAME);
        pod["metadata"]["uid"] = json!(POD_UID);
        server.add_pod(pod);
        // The cluster network, for the daemon's 00-multus.conf: a result of about 4 KiB.
        let mut cluster = sb.cluster("cluster", "cni0", "10.88.0.0/24", "1.0.0");
        cluster["ipam"]["routes"] = (0..ROUTES)
            .map(|i| json!({"dst": format!("10.100.{i}.0/24"), "gw": "10.88.0.1"}))
            .collect();
        sb.write_conf("10-cluster.conf", &cluster);
        let socket_dir = sb.dir.path().join("run/multus");
        // Upstream's client writes the pod's status with a PUT in protobuf, which testkit's
        // API server reads as kube-apiserver does.
        let config = json!({
            "cniVersion": "1.0.0",
            "cniConfigDir": sb.conf_dir(),
            "multusAutoconfigDir": sb.conf_dir(),
            "multusConfigFile": "auto",
            "socketDir": socket_dir,
            "daemonSocketDir": socket_dir,
            "binDir": sb.plugins.path(),
            "cniDir": sb.cni_dir(),
            "logLevel": "verbose",
            "logToStderr": true,
        });
        let config_path = sb.dir.path().join("daemon-config.json");
        std::fs::write(&config_path, config.to_string()).expect("daemon config");
        let in_cluster = InCluster::new(&server, "kube-system").expect("in-cluster credentials");
        let daemon = in_cluster
            .wrap(&peers.join("multus-daemon"))
            .expect("the daemon as in a pod");
        let log = sb.dir.path().join("daemon.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = sb
            .node
            .command(&daemon)
            .args(["-config".as_ref(), config_path.as_os_str()])
            .env("MULTUS_NODE_NAME", "node-1")
            .env(cni::path_roots::ROOTS_FILE_ENV, testkit::test_path_roots())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start upstream's daemon");
        let relay_dir = sb.dir.path().join("relay");
        std::fs::create_dir(&relay_dir).expect("relay dir");
        let listener = UnixListener::bind(relay_dir.join("multus.sock")).expect("relay socket");
        let mut up = Upstream {
            relay: Relay::new(listener, socket_dir.join("multus.sock")),
            relay_dir,
            shim: PluginDir::new(&multus_bin(), &["multus-shim"]),
            server,
            _in_cluster: in_cluster,
            daemon: Some(child),
            log,
            sb,
        };
        // Serving once its caches have synced, with 00-multus.conf written.
        let deadline = Instant::now() + Duration::from_secs(90);
        while healthz(&socket_dir.join("multus.sock")) != Some(200)
            || !up.sb.conf_dir().join("00-multus.conf").exists()
        {
            if let Some(Ok(Some(status))) = up.daemon.as_mut().map(Child::try_wait) {
                panic!("upstream's daemon exited {status}: {}", up.daemon_log());
            }
            assert!(
                Instant::now() < deadline,
                "upstream's daemon is not serving: {}",
                up.daemon_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        up
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Our shim as the runtime runs it, with the config upstream's daemon wrote for it; its
    /// socket directory is the relay's.
    fn shim(&self, command: &str) -> testkit::CniOutput {
        let written = std::fs::read_to_string(self.sb.conf_dir().join("00-multus.conf"))
            .expect("00-multus.conf");
        let mut conf: Value = serde_json::from_str(&written).expect("00-multus.conf is JSON");
        assert_eq!(conf["type"], "multus-shim", "{conf}");
        conf["daemonSocketDir"] = json!(self.relay_dir);
        let call = self.sb.call(command, &conf.to_string());
        self.sb
            .run_in_node(&self.shim.path().join("multus-shim"), &call)
    }
}

/// A reply's head, lower-cased, and its body's bytes as sent.
fn split_reply(reply: &[u8]) -> (String, usize) {
    let text = String::from_utf8_lossy(reply);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_ascii_lowercase(), body.len())
}

#[test]
fn our_shim_reads_upstreams_chunked_add_reply_and_deletes_through_it() {
    let up = Upstream::start();
    let out = up.shim("ADD");
    assert_eq!(out.code, 0, "ADD: {out:?}\n{}", up.daemon_log());
    let result = out.ok();
    // What the daemon sent: 200, chunked, more than 2 KiB.
    let replies = up.relay.replies(1);
    assert_eq!(replies.len(), 1, "{replies:?}");
    let (head, sent) = split_reply(&replies[0]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(sent > 4096, "{sent} bytes");
    // The whole result, in the version of the shim's config.
    assert_eq!(result["cniVersion"], "1.0.0", "{result}");
    assert_eq!(result["ips"][0]["address"], "10.88.0.2/24", "{result}");
    let routes: Vec<String> = result["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or("").to_owned();
            format!("{} via {}", field("dst"), field("gw"))
        })
        .collect();
    let want: Vec<String> = (0..ROUTES)
        .map(|i| format!("10.100.{i}.0/24 via 10.88.0.1"))
        .collect();
    assert_eq!(routes, want);
    let interfaces = result["interfaces"].as_array().expect("interfaces");
    assert!(
        interfaces.iter().any(|i| i["name"] == "eth0"
            && i["sandbox"] == json!(up.sb.pod.path().display().to_string())),
        "{result}"
    );
    // The daemon wrote the pod's network-status with a PUT of the pod's status in protobuf,
    // as it does against kube-apiserver.
    let put: Vec<_> = up
        .server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with(&format!("/pods/{POD_NAME}/status")))
        .collect();
    assert!(
        put.iter().any(|r| r.status == 200
            && r.content_type.as_deref() == Some("application/vnd.kubernetes.protobuf")),
        "{put:?}"
    );
    let pod = up.server.pod(POD_NS, POD_NAME).expect("the pod");
    let status: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
            .as_str()
            .expect("network-status"),
    )
    .expect("network-status is JSON");
    assert_eq!(status[0]["interface"], "eth0", "{status}");
    assert_eq!(status[0]["ips"], json!(["10.88.0.2"]), "{status}");
    assert_eq!(pod["metadata"]["uid"], POD_UID, "{pod}");
    // The pod has them.
    assert_eq!(up.sb.pod_links(), ["eth0"]);
    assert_eq!(up.sb.pod_addrs("eth0"), ["10.88.0.2"]);
    let in_pod = up
        .sb
        .pod
        .ip_json(&["-4", "route", "show", "via", "10.88.0.1"]);
    assert_eq!(in_pod.as_array().map(Vec::len), Some(ROUTES), "{in_pod}");

    // DEL goes to the daemon, which answers 200 with nothing, and leaves nothing.
    let out = up.shim("DEL");
    assert_eq!(out.code, 0, "DEL: {out:?}\n{}", up.daemon_log());
    let replies = up.relay.replies(2);
    assert_eq!(replies.len(), 2, "{replies:?}");
    let (head, sent) = split_reply(&replies[1]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(sent, 0, "{head}");
    up.sb.assert_clean("after DEL through upstream's daemon");
    let log = up.daemon_log();
    assert!(
        log.lines().any(
            |l| l.contains("DEL finished CNI request ContainerID:\"c0ffee01\"")
                && l.ends_with("err: <nil>")
        ),
        "{log}"
    );
}
