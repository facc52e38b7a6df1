//! bridge + dhcp against real DHCP servers (dnsmasq, busybox udhcpd) in a node namespace, with
//! our daemon run from the `cni-plugins` binary as `dhcp daemon`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::dhcp::{DhcpDaemon, DhcpNet, Server};
use testkit::{CniCall, CniOutput, Netns, PluginDir};

const CONTAINER_ID: &str = "c0ffee";

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_cni-plugins"))
}

/// A DHCP network, a pod, our plugins and our daemon.
struct Setup {
    net: DhcpNet,
    pod: Netns,
    plugins: PluginDir,
    work: tempfile::TempDir,
    daemon: Option<DhcpDaemon>,
}

impl Setup {
    fn new(server: Server) -> Setup {
        Setup::with_daemon_args(server, &[])
    }

    fn with_daemon_args(server: Server, daemon_args: &[&str]) -> Setup {
        let mut s = Setup {
            net: DhcpNet::new(server),
            pod: Netns::new("pod"),
            plugins: PluginDir::new(bin(), &["bridge", "dhcp"]),
            work: tempfile::tempdir().expect("tempdir"),
            daemon: None,
        };
        s.start_daemon(daemon_args);
        s
    }

    fn socket(&self) -> PathBuf {
        self.work.path().join("dhcp.sock")
    }

    fn state_dir(&self) -> PathBuf {
        self.work.path().join("state")
    }

    fn start_daemon(&mut self, extra: &[&str]) {
        let mut args: Vec<String> = ["dhcp", "daemon", "-socketpath"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.push(self.socket().display().to_string());
        args.push("-statedir".into());
        args.push(self.state_dir().display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        self.daemon = Some(DhcpDaemon::start(
            &self.net.node,
            bin(),
            &args,
            &self.socket(),
            &self.work.path().join("daemon.log"),
        ));
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.work.path().join("daemon.log")).unwrap_or_default()
    }

    /// A bridge network on the server's bridge with dhcp IPAM; `ipam` adds keys.
    fn conf(&self, ipam: &str) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"dnet","type":"bridge","bridge":"{}",
                "ipam":{{"type":"dhcp","daemonSocketPath":"{}"{ipam}}}}}"#,
            self.net.bridge,
            self.socket().display()
        )
    }

    fn call(&self, command: &str, conf: &str) -> CniCall {
        let mut c = CniCall::new(command, conf);
        c.container_id = CONTAINER_ID.into();
        c.netns = self.pod.path().display().to_string();
        c.path = self.plugins.path().display().to_string();
        c
    }

    fn run(&self, call: &CniCall) -> CniOutput {
        call.run(&self.plugins.path().join("bridge"), Some(&self.net.node))
    }

    fn add(&self, conf: &str) -> CniOutput {
        self.run(&self.call("ADD", conf))
    }

    fn del(&self, conf: &str) -> CniOutput {
        self.run(&self.call("DEL", conf))
    }

    fn lease_files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state_dir())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    fn node_links(&self) -> Vec<String> {
        self.net
            .node
            .links()
            .into_iter()
            .filter(|l| l != "lo")
            .collect()
    }

    /// IPv4 routes in the pod, as `dst via gw` (or `dst dev`).
    fn pod_routes(&self) -> Vec<String> {
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

/// The config as a runtime passes it to CHECK.
fn with_prev_result(conf: &str, result: &Value) -> String {
    let mut v: Value = serde_json::from_str(conf).expect("config is JSON");
    v["prevResult"] = result.clone();
    v.to_string()
}

fn leased_ip(result: &Value) -> String {
    let addr = result["ips"][0]["address"]
        .as_str()
        .expect("an address")
        .to_owned();
    addr.split('/').next().unwrap_or_default().to_owned()
}

const DNSMASQ_121: &[&str] = &[
    "--dhcp-option=option:router,10.97.0.1",
    "--dhcp-option=option:dns-server,10.97.0.53",
    "--dhcp-option=option:domain-name,example.test",
    "--dhcp-option=option:classless-static-route,192.0.2.0/24,10.97.0.254,0.0.0.0/0,10.97.0.1",
];

#[test]
fn lease_with_classless_routes_dns_check_and_release() {
    let s = Setup::new(Server::Dnsmasq(DNSMASQ_121));
    let conf = s.conf("");
    let result = s.add(&conf).ok();
    let ip = leased_ip(&result);
    assert!(ip.starts_with("10.97.0.1"), "{result}");
    assert_eq!(result["ips"][0]["gateway"], "10.97.0.1");
    // 121 present: its routes only, the router option gives no extra default route.
    assert_eq!(
        result["routes"],
        json!([
            {"dst": "192.0.2.0/24", "gw": "10.97.0.254"},
            {"dst": "0.0.0.0/0", "gw": "10.97.0.1"}
        ])
    );
    assert_eq!(
        result["dns"],
        json!({"nameservers": ["10.97.0.53"], "domain": "example.test"})
    );
    assert_eq!(
        s.pod_routes(),
        [
            "10.97.0.0/24 dev",
            "192.0.2.0/24 via 10.97.0.254",
            "default via 10.97.0.1"
        ]
    );
    assert!(
        s.net.log().contains(&format!("DHCPACK(dbr0) {ip}")),
        "{}",
        s.net.log()
    );
    // The reference's client identifier: type 0, then container/network/ifname.
    let leases = std::fs::read_to_string(s.net.dir.path().join("leases")).unwrap();
    let id: Vec<String> = b"\0c0ffee/dnet/eth0"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(leases.contains(&id.join(":")), "{leases}");
    assert_eq!(s.lease_files().len(), 1);
    assert!(s
        .daemon_log()
        .contains("acquired container=c0ffee network=dnet interface=eth0"));

    s.run(&s.call("CHECK", &with_prev_result(&conf, &result)))
        .ok();
    // The dhcp plugin called again for the same attachment gets the same lease back.
    let again = s
        .call("ADD", &conf)
        .run(&s.plugins.path().join("dhcp"), Some(&s.net.node));
    assert_eq!(leased_ip(&again.ok()), ip);
    let pod_if_before = s.pod.links();
    assert!(pod_if_before.contains(&"eth0".to_owned()));

    s.del(&conf).ok();
    assert!(
        s.net
            .wait_log(&format!("DHCPRELEASE(dbr0) {ip}"), Duration::from_secs(5)),
        "the server saw no release: {}",
        s.net.log()
    );
    assert!(s.lease_files().is_empty(), "{:?}", s.lease_files());
    assert_eq!(s.node_links(), ["dbr0"]);
    assert!(s
        .daemon_log()
        .contains("released container=c0ffee network=dnet interface=eth0"));
    // DEL again: nothing left to do, still success.
    s.del(&conf).ok();
}
