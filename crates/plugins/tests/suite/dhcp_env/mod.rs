//! Shared by the dhcp tests: a DHCP server on a bridge in a node namespace, a pod, our plugins,
//! and our daemon run from the `cni-plugins` binary as `dhcp daemon`.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::dhcp::{DhcpDaemon, DhcpNet, Server};
use testkit::{CniCall, CniOutput, Netns, PluginDir};

pub const CONTAINER_ID: &str = "c0ffee";

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_cni-plugins"))
}

/// A DHCP network, a pod, our plugins and our daemon.
pub struct Setup {
    pub net: DhcpNet,
    pub pod: Netns,
    pub plugins: PluginDir,
    pub work: tempfile::TempDir,
    pub daemon: Option<DhcpDaemon>,
    /// The interface plugin, and its keys in the config besides `ipam`.
    plugin: &'static str,
    plugin_keys: String,
}

impl Setup {
    pub fn new(server: Server) -> Setup {
        Setup::with_daemon_args(server, &[])
    }

    /// bridge on the server's bridge, our daemon started with `daemon_args`.
    pub fn with_daemon_args(server: Server, daemon_args: &[&str]) -> Setup {
        let net = DhcpNet::new(server);
        let keys = format!(r#""bridge":"{}""#, net.bridge);
        Setup::build(net, "bridge", keys, daemon_args)
    }

    /// `plugin` (macvlan or ipvlan) on master `tup0`, a veth whose peer is a port of the server's
    /// bridge; `keys` adds config keys (`"mode":"l2"`).
    pub fn on_master(server: Server, plugin: &'static str, keys: &str) -> Setup {
        let net = DhcpNet::new(server);
        net.node.veth_pair("tup0", "tup1");
        net.node.ip(&["link", "set", "tup1", "master", &net.bridge]);
        Setup::build(net, plugin, format!(r#""master":"tup0"{keys}"#), &[])
    }

    fn build(
        net: DhcpNet,
        plugin: &'static str,
        plugin_keys: String,
        daemon_args: &[&str],
    ) -> Setup {
        let mut s = Setup {
            net,
            pod: Netns::new("pod"),
            plugins: PluginDir::new(bin(), &[plugin, "dhcp"]),
            work: tempfile::tempdir().expect("tempdir"),
            daemon: None,
            plugin,
            plugin_keys,
        };
        s.start_daemon(daemon_args);
        s
    }

    pub fn socket(&self) -> PathBuf {
        self.work.path().join("dhcp.sock")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.work.path().join("state")
    }

    /// `cni-plugins`' arguments for our daemon on the test's socket and state directory.
    pub fn daemon_args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["dhcp", "daemon", "-socketpath"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.push(self.socket().display().to_string());
        args.push("-statedir".into());
        args.push(self.state_dir().display().to_string());
        args
    }

    pub fn start_daemon(&mut self, extra: &[&str]) {
        let mut args = self.daemon_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        self.daemon = Some(DhcpDaemon::start(
            &self.net.node,
            bin(),
            &args,
            &self.socket(),
            &self.work.path().join("daemon.log"),
        ));
    }

    /// Stops our daemon, asserting that it exits cleanly.
    pub fn stop_daemon(&mut self) {
        assert!(
            self.daemon.take().expect("daemon").process.terminate(),
            "the daemon stops cleanly"
        );
    }

    /// Stops our daemon and starts the Go reference's on the same socket.
    pub fn swap_in_go_daemon(&mut self) -> DhcpDaemon {
        self.stop_daemon();
        DhcpDaemon::start(
            &self.net.node,
            &testkit::reference_dir().join("dhcp"),
            &[
                "daemon".to_owned(),
                "-socketpath".to_owned(),
                self.socket().display().to_string(),
            ],
            &self.socket(),
            &self.work.path().join("go-daemon.log"),
        )
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.work.path().join("daemon.log")).unwrap_or_default()
    }

    /// The network with dhcp IPAM; `ipam` adds keys there.
    pub fn conf(&self, ipam: &str) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"dnet","type":"{}",{},
                "ipam":{{"type":"dhcp","daemonSocketPath":"{}"{ipam}}}}}"#,
            self.plugin,
            self.plugin_keys,
            self.socket().display()
        )
    }

    pub fn call(&self, command: &str, conf: &str) -> CniCall {
        let mut c = CniCall::new(command, conf);
        c.container_id = CONTAINER_ID.into();
        c.netns = self.pod.path().display().to_string();
        c.path = self.plugins.path().display().to_string();
        c
    }

    /// A call for the pod `pod` of container `container_id`.
    pub fn call_for(&self, command: &str, conf: &str, container_id: &str, pod: &Netns) -> CniCall {
        let mut c = self.call(command, conf);
        c.container_id = container_id.into();
        c.netns = pod.path().display().to_string();
        c
    }

    /// The dhcp plugin, to call it without the interface plugin.
    pub fn dhcp_plugin(&self) -> PathBuf {
        self.plugins.path().join("dhcp")
    }

    pub fn run(&self, call: &CniCall) -> CniOutput {
        call.run(&self.plugins.path().join(self.plugin), Some(&self.net.node))
    }

    pub fn add(&self, conf: &str) -> CniOutput {
        self.run(&self.call("ADD", conf))
    }

    pub fn del(&self, conf: &str) -> CniOutput {
        self.run(&self.call("DEL", conf))
    }

    /// ADD, and the address leased.
    pub fn lease(&self, conf: &str) -> String {
        leased_ip(&self.add(conf).ok())
    }

    /// DEL; the server sees `ip` released, and the daemon keeps no lease file.
    pub fn release(&self, conf: &str, ip: &str) {
        self.del(conf).ok();
        self.assert_released(ip);
        assert!(self.lease_files().is_empty(), "{:?}", self.lease_files());
    }

    /// Waits until the server logs the release of `ip`.
    pub fn assert_released(&self, ip: &str) {
        assert!(
            self.net
                .wait_log(&format!("DHCPRELEASE(dbr0) {ip}"), Duration::from_secs(5)),
            "the server saw no release of {ip}: {}",
            self.net.log()
        );
    }

    /// Asserts whether the server logged sending a broadcast response.
    pub fn assert_broadcast(&self, sent: bool) {
        assert_eq!(
            self.net.log().contains("broadcast response"),
            sent,
            "{}",
            self.net.log()
        );
    }

    /// Waits until the daemon logs `event` for the test's attachment.
    pub fn wait_daemon_event(&self, event: &str, limit: Duration) {
        let needle = format!("{event} container={CONTAINER_ID} network=dnet interface=eth0");
        let deadline = Instant::now() + limit;
        while !self.daemon_log().contains(&needle) {
            assert!(
                Instant::now() < deadline,
                "no {event:?} in {}",
                self.daemon_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Packet sockets open in the pod's namespace: the daemon holds one only while a DHCP
    /// exchange on the pod's interface is under way.
    pub fn pod_packet_sockets(&self) -> usize {
        let out = self
            .pod
            .command("cat")
            .arg("/proc/net/packet")
            .output()
            .expect("read /proc/net/packet in the pod");
        // A header line, then one line per socket.
        String::from_utf8_lossy(&out.stdout).lines().skip(1).count()
    }

    pub fn lease_files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state_dir())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    pub fn node_links(&self) -> Vec<String> {
        self.net
            .node
            .links()
            .into_iter()
            .filter(|l| l != "lo")
            .collect()
    }

    /// IPv4 routes in the pod, as `dst via gw` (or `dst dev`).
    pub fn pod_routes(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .pod
            .ip_json(&["-4", "route", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| match r["gateway"].as_str() {
                Some(gw) => format!("{} via {gw}", r["dst"].as_str().unwrap_or_default()),
                None => format!("{} dev", r["dst"].as_str().unwrap_or_default()),
            })
            .collect();
        out.sort();
        out
    }
}

/// Waits until `done` holds, panicking with `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn leased_ip(result: &Value) -> String {
    let addr = result["ips"][0]["address"]
        .as_str()
        .expect("an address")
        .to_owned();
    addr.split('/').next().unwrap_or_default().to_owned()
}

/// busybox udhcpd handing out 4 s leases: T1 after 2 s, T2 after 3 s.
pub const UDHCPD_4S_LEASE: &str = "min_lease 4\noption lease 4\noption router 10.97.0.1";

pub const DNSMASQ_121: &[&str] = &[
    "--dhcp-option=option:router,10.97.0.1",
    "--dhcp-option=option:dns-server,10.97.0.53",
    "--dhcp-option=option:domain-name,example.test",
    "--dhcp-option=option:classless-static-route,192.0.2.0/24,10.97.0.254,0.0.0.0/0,10.97.0.1",
];
