//! The place a test runs CNI calls as a runtime does: a node and a pod namespace, a scratch
//! directory, and a `CNI_PATH`; with what the suites read back and assert on.

use std::path::{Path, PathBuf};

use crate::{CniCall, CniOutput, Netns};

pub struct Sandbox {
    pub node: Netns,
    pub pod: Netns,
    pub dir: tempfile::TempDir,
    /// The `CNI_PATH` of every call.
    pub cni_path: PathBuf,
    container_id: &'static str,
}

impl Sandbox {
    pub fn new(cni_path: &Path, container_id: &'static str) -> Sandbox {
        Sandbox {
            node: Netns::new("node"),
            pod: Netns::new("pod"),
            dir: tempfile::tempdir().expect("tempdir"),
            cni_path: cni_path.to_owned(),
            container_id,
        }
    }

    /// A call for the pod's `eth0` with this sandbox's container ID, netns and `CNI_PATH`.
    pub fn call(&self, command: &str, conf: &str) -> CniCall {
        let mut call = CniCall::new(command, conf);
        call.container_id = self.container_id.into();
        call.netns = self.pod.path().display().to_string();
        call.path = self.cni_path.display().to_string();
        call
    }

    /// Runs `binary` for `call` in the node namespace.
    pub fn run_in_node(&self, binary: &Path, call: &CniCall) -> CniOutput {
        call.run(binary, Some(&self.node))
    }

    /// Links of the node besides lo.
    pub fn node_links(&self) -> Vec<String> {
        without_lo(self.node.links())
    }

    /// Interfaces in the pod besides lo, sorted.
    pub fn pod_links(&self) -> Vec<String> {
        let mut links = without_lo(self.pod.links());
        links.sort();
        links
    }

    /// Veth ends in the node namespace.
    pub fn node_veths(&self) -> Vec<String> {
        let v = self.node.ip_json(&["-d", "link", "show", "type", "veth"]);
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asserts that the pod has no interface besides lo; `what` names the case.
    pub fn assert_no_pod_links(&self, what: &str) {
        assert_eq!(self.pod_links(), Vec::<String>::new(), "{what}: pod links");
    }

    /// Asserts that no veth end is left in the node; `what` names the case. The kernel tears a
    /// deleted namespace down in the background, and a veth whose peer was there goes only
    /// then: a few seconds are allowed for that, never for a veth that stays.
    pub fn assert_no_node_veths(&self, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.node_veths().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(
            self.node_veths(),
            Vec::<String>::new(),
            "{what}: node veths"
        );
    }
}

fn without_lo(mut links: Vec<String>) -> Vec<String> {
    links.retain(|l| l != "lo");
    links
}
