use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A named network namespace (`/run/netns/<name>`) that is deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a fresh namespace named `mrs-<pid>-<n>-<tag>`, with loopback up.
    pub fn new(tag: &str) -> Netns {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("mrs{}-{}-{}", std::process::id(), n, tag);
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("run ip netns add");
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// Runs `ip -n <ns> args...` and panics on failure; returns stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        let out = self.try_ip(args);
        assert!(
            out.status.success(),
            "ip -n {} {}: {}",
            self.name,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A veth pair in this namespace, `name` and its `peer`, both up: the stand-in for a
    /// node's uplink or a device to hand to a pod.
    pub fn veth_pair(&self, name: &str, peer: &str) {
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
        self.ip(&["link", "set", name, "up"]);
        self.ip(&["link", "set", peer, "up"]);
    }

    /// A veth pair: `name` in this namespace, `peer` in `other`, both down, as an interface
    /// plugin's pair before it sets them up.
    pub fn veth_to(&self, name: &str, other: &Netns, peer: &str) {
        self.ip(&[
            "link",
            "add",
            name,
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            &other.name,
        ]);
    }

    pub fn try_ip(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()
            .expect("run ip")
    }

    /// `ip -j -n <ns> args...` parsed as JSON (an empty output is `[]`).
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["-j"];
        full.extend_from_slice(args);
        let text = self.ip(&full);
        if text.trim().is_empty() {
            return serde_json::Value::Array(vec![]);
        }
        serde_json::from_str(&text).expect("ip -j prints JSON")
    }

    /// Names of the links in this namespace.
    pub fn links(&self) -> Vec<String> {
        self.ip_json(&["link", "show"])
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `nat` and `filter` rules of iptables and ip6tables (`-S`) and the whole nft ruleset,
    /// in one text.
    pub fn firewall(&self) -> String {
        let mut out = String::new();
        for (tool, args) in [
            ("iptables", &["-t", "nat", "-S"][..]),
            ("ip6tables", &["-t", "nat", "-S"][..]),
            ("iptables", &["-t", "filter", "-S"][..]),
            ("ip6tables", &["-t", "filter", "-S"][..]),
            ("nft", &["list", "ruleset"][..]),
        ] {
            let o = self
                .command(tool)
                .args(args)
                .output()
                .expect("run firewall tool");
            out.push_str(&String::from_utf8_lossy(&o.stdout));
        }
        out
    }

    /// A command whose process runs inside this namespace (setns before exec).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.enter_on_exec(&mut cmd);
        cmd
    }

    /// Makes `cmd` join this namespace between fork and exec.
    pub fn enter_on_exec(&self, cmd: &mut Command) {
        netkit::NetNs::open(self.path())
            .and_then(|ns| ns.enter_on_exec(cmd))
            .expect("open netns");
    }
}

/// Deletes every namespace this process created and still holds. For a panic hook: with
/// `panic = "abort"` no destructor runs.
pub fn delete_all_of_this_process() {
    let prefix = format!("mrs{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) {
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
