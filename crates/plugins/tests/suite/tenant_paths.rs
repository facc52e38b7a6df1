//! Paths a network's config names (a tenant's) are opened beneath the node's path roots, never
//! through a symlink: a link planted in a directory the tenant can write (another pod's
//! emptyDir) cannot send host-local's store, tuning's saved state or dhcp's socket anywhere
//! else, and a path outside the roots is refused. Each refusal is code 7, naming the key.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use testkit::{CniCall, CniOutput, Netns, PluginDir};

struct Node {
    plugins: PluginDir,
    tmp: tempfile::TempDir,
    roots_file: PathBuf,
}

impl Node {
    /// One root, `<tmp>/root`, holding a directory a tenant writes; outside it, a stand-in for
    /// the runtime's config directory.
    fn new() -> Node {
        let tmp = tempfile::tempdir().expect("tempdir");
        for dir in ["root/tenant", "netd", "elsewhere"] {
            std::fs::create_dir_all(tmp.path().join(dir)).expect("mkdir");
        }
        let roots_file = tmp.path().join("roots.json");
        std::fs::write(
            &roots_file,
            json!({"roots": [tmp.path().join("root")]}).to_string(),
        )
        .expect("roots file");
        Node {
            plugins: PluginDir::new(
                Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
                &["host-local", "tuning", "dhcp"],
            ),
            tmp,
            roots_file,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// What the tenant plants: `root/tenant/link`, pointing at `target`.
    fn plant(&self, target: &str) -> PathBuf {
        let link = self.path("root/tenant/link");
        let _ = std::fs::remove_file(&link);
        symlink(self.path(target), &link).expect("plant the link");
        link
    }

    fn run(&self, plugin: &str, command: &str, netns: &str, conf: &Value) -> CniOutput {
        let mut call = CniCall::new(command, &conf.to_string());
        call.container_id = "c1".into();
        call.netns = netns.into();
        call.path = self.plugins.path().display().to_string();
        call.env.push((
            "MULTUS_RS_PATH_ROOTS".into(),
            Some(self.roots_file.display().to_string()),
        ));
        call.run(&self.plugins.path().join(plugin), None)
    }

    fn assert_empty(&self, dir: &str) {
        let left: Vec<_> = std::fs::read_dir(self.path(dir))
            .expect("read dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{dir}: {left:?}");
    }
}

fn refused(out: &CniOutput, key: &str, words: &str) {
    assert_eq!(out.err_code(), 7, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(msg.starts_with(&format!("{key}: ")), "{msg}");
    assert!(msg.contains(words), "{msg}");
}

fn host_local(data_dir: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "net", "type": "bridge",
           "ipam": {"type": "host-local", "dataDir": data_dir,
                    "ranges": [[{"subnet": "10.9.0.0/29"}]]}})
}

#[test]
fn host_local_writes_its_store_only_beneath_the_roots() {
    let n = Node::new();
    let through = n.plant("elsewhere").join("ipam");
    let out = n.run(
        "host-local",
        "ADD",
        "/nonexistent/netns",
        &host_local(&through),
    );
    refused(
        &out,
        "dataDir",
        "tenant/link is a symbolic link on the way to",
    );
    n.assert_empty("elsewhere");
    n.run(
        "host-local",
        "DEL",
        "/nonexistent/netns",
        &host_local(&through),
    )
    .ok();

    let out = n.run(
        "host-local",
        "ADD",
        "/nonexistent/netns",
        &host_local(&n.path("netd")),
    );
    refused(
        &out,
        "dataDir",
        "is not beneath one of the node's path roots",
    );
    n.assert_empty("netd");

    // Beneath the root, as upstream's NADs have it: the store is made there.
    let inside = n.path("root/tenant/ipam");
    n.run(
        "host-local",
        "ADD",
        "/nonexistent/netns",
        &host_local(&inside),
    )
    .ok();
    assert!(inside.join("net/10.9.0.2").is_file());
    n.run(
        "host-local",
        "DEL",
        "/nonexistent/netns",
        &host_local(&inside),
    )
    .ok();
    assert!(!inside.join("net/10.9.0.2").exists());
}

#[test]
fn tuning_saves_its_state_only_beneath_the_roots() {
    let n = Node::new();
    let pod = Netns::new("tpod");
    pod.veth_pair("eth0", "eth1");
    let mac_before = pod.ip_json(&["link", "show", "eth0"])[0]["address"].clone();
    let tuning = |data_dir: &Path| {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "tuning", "mac": "02:00:00:00:00:42",
               "dataDir": data_dir,
               "prevResult": {"cniVersion": "1.0.0",
                              "interfaces": [{"name": "eth0", "sandbox": pod.path()}]}})
    };
    // Pointed at the runtime's config directory, the saved state would be read as a network.
    let netns = pod.path().display().to_string();
    let out = n.run("tuning", "ADD", &netns, &tuning(&n.plant("netd")));
    refused(
        &out,
        "dataDir",
        "tenant/link is a symbolic link on the way to",
    );
    n.assert_empty("netd");
    let out = n.run("tuning", "ADD", &netns, &tuning(&n.path("netd")));
    refused(
        &out,
        "dataDir",
        "is not beneath one of the node's path roots",
    );
    n.assert_empty("netd");
    // Nothing changed on the link either.
    assert_eq!(
        pod.ip_json(&["link", "show", "eth0"])[0]["address"],
        mac_before
    );
    n.run("tuning", "DEL", &netns, &tuning(&n.plant("netd")))
        .ok();

    let inside = n.path("root/tuning");
    n.run("tuning", "ADD", &netns, &tuning(&inside)).ok();
    assert!(inside.join("c1_eth0.json").is_file());
    n.run("tuning", "DEL", &netns, &tuning(&inside)).ok();
    assert!(!inside.join("c1_eth0.json").exists());
    assert_eq!(
        pod.ip_json(&["link", "show", "eth0"])[0]["address"],
        mac_before
    );
}

#[test]
fn dhcp_connects_only_to_a_socket_beneath_the_roots() {
    let n = Node::new();
    // Sockets the node has elsewhere: the plugin never connects to them.
    let outside = n.path("elsewhere/other.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&outside).expect("bind");
    let dhcp = |socket: &Path| {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "bridge",
               "ipam": {"type": "dhcp", "daemonSocketPath": socket}})
    };
    let out = n.run("dhcp", "ADD", "/nonexistent/netns", &dhcp(&outside));
    refused(
        &out,
        "ipam.daemonSocketPath",
        "is not beneath one of the node's path roots",
    );
    let through = n.plant("elsewhere").join("other.sock");
    let out = n.run("dhcp", "ADD", "/nonexistent/netns", &dhcp(&through));
    refused(
        &out,
        "ipam.daemonSocketPath",
        "tenant/link is a symbolic link",
    );
    // DEL of either asks no daemon anything, and succeeds.
    n.run("dhcp", "DEL", "/nonexistent/netns", &dhcp(&outside))
        .ok();
    n.run("dhcp", "DEL", "/nonexistent/netns", &dhcp(&through))
        .ok();
}
