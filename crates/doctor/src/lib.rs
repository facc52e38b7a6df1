//! `multus doctor`: a node's multus, checked where it runs. It says which CNI config the
//! runtime will pick and why, what the cluster network is, which plugins are there and which
//! CNI versions they speak, whether the node is ready for pods, what multus's credential is
//! and when it expires, what the API lets it do, which caches outlived their sandboxes, and
//! which of the node's pods run without networks they asked for.
//!
//! Every finding has a severity and, when something is wrong, a fix. The exit status is
//! `multus lint`'s: 0 when nothing is wrong, 1 for warnings, 2 for errors.

mod api;
mod binaries;
mod caches;
mod configs;
mod credential;
mod readiness;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use lint::{Report, Severity};

pub use configs::Mode;

#[derive(Args, Debug, Clone)]
pub struct Options {
    /// Where the node's root is seen: `/` on the node, `/host` in the multus DaemonSet's pod.
    #[arg(long, default_value = "/")]
    pub host_root: PathBuf,
    /// The CNI config directory the runtime reads (a path on the node).
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// The CNI plugin directory (a path on the node) [default: multus's `binDir`].
    #[arg(long)]
    pub cni_bin_dir: Option<PathBuf>,
    /// The kubeconfig to reach the API with [default: multus's own on the node; in a pod, its
    /// service account].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The node whose pods are checked [default: $NODE_NAME or $MULTUS_NODE_NAME, else the
    /// node the credential is bound to, else the host name].
    #[arg(long)]
    pub node: Option<String>,
    /// `text` for people, `json` for tools.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// The node as the doctor sees it: its paths under `root`.
pub struct Node {
    root: PathBuf,
}

impl Node {
    pub fn new(root: &Path) -> Node {
        Node {
            root: root.to_owned(),
        }
    }

    /// Where a path on the node is seen from here.
    pub fn path(&self, on_node: &Path) -> PathBuf {
        match on_node.strip_prefix("/") {
            Ok(rel) if self.root != Path::new("/") => self.root.join(rel),
            _ => on_node.to_owned(),
        }
    }

    /// A plugin run as the runtime runs it, for a command that needs no container (VERSION,
    /// STATUS), with `bin_dir` (a path on the node) as its `CNI_PATH`.
    fn ask(
        &self,
        bin_dir: &Path,
        plugin: &str,
        command: cni::Command,
        config: &[u8],
    ) -> Result<Option<serde_json::Value>, cni::CniError> {
        let path = [self.path(bin_dir)];
        let env = cni::invoke::DelegateEnv {
            container_id: "",
            netns: "",
            ifname: "",
            args: "",
            path: &path,
            addresses_in_use: "",
        };
        let bin = cni::invoke::find_in_path(plugin, &path)?;
        cni::invoke::exec_plugin(&bin, command, &env, config)
    }

    /// Whether the doctor runs on the node itself, where the node's paths are its own.
    pub fn is_local(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The node root handed to multus's config reader, when it is not `/`.
    fn multus_root(&self) -> Option<PathBuf> {
        (!self.is_local()).then(|| self.root.clone())
    }
}

pub fn run(opts: &Options) -> ExitCode {
    // A plugin that hangs must not hang the doctor.
    let _ = cni::invoke::limit_delegates_to(std::time::Duration::from_secs(10));
    let report = examine(opts);
    match opts.output {
        Output::Text => print!("{}", to_text(&report)),
        Output::Json => println!("{:#}", to_json(&report)),
    }
    ExitCode::from(report.exit_status())
}

/// Every check, in the order a node is set up: configs, plugins, readiness, credential, API,
/// caches, pods.
pub fn examine(opts: &Options) -> Report {
    let node = Node::new(&opts.host_root);
    let mut report = Report::default();
    let multus = configs::check(&node, &opts.cni_conf_dir, &mut report);
    let bin_dir = opts
        .cni_bin_dir
        .clone()
        .or_else(|| multus.as_ref().map(|m| m.conf.bin_dir.clone()))
        .unwrap_or_else(|| PathBuf::from("/opt/cni/bin"));
    if let Some(multus) = &multus {
        let types = configs::check_cluster_network(multus, &mut report);
        binaries::check(&node, &bin_dir, multus, &types, &mut report);
        readiness::check(&node, &bin_dir, multus, &mut report);
        caches::check(&node, &multus.conf.cni_dir, &mut report);
    }
    let credential = credential::check(&node, opts, multus.as_ref(), &mut report);
    if let Some(client) = api::connect(&credential, &mut report) {
        if credential.multus_own {
            api::check_rules(&client, multus.as_ref().map(|m| m.mode), &mut report);
        } else {
            api::check_reachable(&client, &mut report);
        }
        let node_name = opts
            .node
            .clone()
            .or_else(|| std::env::var("NODE_NAME").ok())
            .or_else(|| std::env::var("MULTUS_NODE_NAME").ok())
            .filter(|n| !n.is_empty())
            .or(credential.node_name.clone())
            .or_else(host_name);
        match node_name {
            Some(name) => {
                let system = multus.as_ref().map_or_else(
                    || {
                        multus::config::DEFAULT_SYSTEM_NAMESPACES
                            .map(str::to_owned)
                            .to_vec()
                    },
                    |m| m.conf.system_namespaces.clone(),
                );
                api::check_pods(&client, &name, &system, &mut report)
            }
            None => report.add(
                Severity::Note,
                "missing-networks",
                lint::Place::default(),
                "the node's name is not known, so its pods were not checked",
                "pass --node NAME",
            ),
        }
    }
    report
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

fn to_text(report: &Report) -> String {
    let mut out = report.findings_text();
    out.push_str(&format!(
        "{} error(s), {} warning(s), {} note(s), {} check(s) passed\n",
        report.count(Severity::Error),
        report.count(Severity::Warning),
        report.count(Severity::Note),
        report.count(Severity::Info),
    ));
    out
}

fn to_json(report: &Report) -> serde_json::Value {
    serde_json::json!({
        "findings": report.findings,
        "summary": {
            "errors": report.count(Severity::Error),
            "warnings": report.count(Severity::Warning),
            "notes": report.count(Severity::Note),
            "passed": report.count(Severity::Info),
            "exitStatus": report.exit_status(),
        },
    })
}
