//! The CNI config directory as the runtime reads it: which config it picks and why, multus's
//! config, and the cluster network that config names.

use std::path::{Path, PathBuf};

use lint::{Place, Report, Severity};
use multus::config::MultusConf;
use serde_json::Value;

use crate::Node;

/// deploy/own-conf-dir's directory for multus's config, the one the runtime reads alone.
const OWN_CONF_DIR: &str = "/run/multus/cni/net.d";

/// How multus runs on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The runtime runs `multus` itself.
    Thin,
    /// The runtime runs `multus-shim`, which hands each call to the node's daemon.
    Thick,
}

/// multus's config, as the runtime will use it.
pub struct Multus {
    /// Where it is, on the node.
    pub file: PathBuf,
    /// The file as a network (a config, or a list whose first plugin is multus).
    pub network: cni::network::Network,
    /// multus's own config, as the runtime hands it to multus.
    pub bytes: Vec<u8>,
    pub mode: Mode,
    /// The plugin the runtime runs: `multus` or `multus-shim`.
    pub plugin: String,
    pub conf: MultusConf,
    /// The raw JSON, for the shim's own keys (`daemonSocketDir`).
    pub json: Value,
}

/// The files a runtime considers, in its order: `.conf`, `.conflist` and `.json` files, by
/// name (libcni's rule, which CRI-O and containerd both follow).
fn candidates(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".conf") || n.ends_with(".conflist") || n.ends_with(".json"))
        .collect();
    names.sort();
    Ok(names)
}

/// Which config the runtime will pick, and multus's config when that is the one.
pub fn check(node: &Node, conf_dir: &Path, report: &mut Report) -> Option<Multus> {
    let seen = node.path(conf_dir);
    let place = Place {
        file: Some(conf_dir.to_owned()),
        ..Place::default()
    };
    let names = match candidates(&seen) {
        Ok(names) => names,
        Err(e) => {
            report.add(
                Severity::Error,
                "runtime-config",
                place,
                format!("the CNI config directory cannot be read: {e}"),
                "check --cni-conf-dir and --host-root: the runtime's config directory (containerd's `conf_dir`, CRI-O's `network_dir`)",
            );
            return None;
        }
    };
    check_exclusive_primary(&seen, conf_dir, report);
    let Some(first) = names.first() else {
        report.add(
            Severity::Error,
            "runtime-config",
            place,
            "no CNI config: the runtime reports its network not ready, and no pod starts",
            "start the cluster network's and multus's DaemonSets; multus writes 00-multus.conf once the cluster network's config is there",
        );
        return None;
    };
    let file = conf_dir.join(first);
    let place = Place {
        file: Some(file.clone()),
        ..Place::default()
    };
    let bytes = match cni::input::read_file(&node.path(&file)) {
        Ok(b) => b,
        Err(e) => {
            report.add(
                Severity::Error,
                "runtime-config",
                place,
                format!("the config the runtime picks first cannot be read: {e}"),
                "make it a readable regular file, or remove it",
            );
            return None;
        }
    };
    let network = match cni::network::Network::parse(&bytes) {
        Ok(n) => n,
        Err(e) => {
            report.add(
                Severity::Error,
                "runtime-config",
                place,
                format!(
                    "the config the runtime picks first does not read ({}): the runtime fails or skips it",
                    e.msg
                ),
                "fix or remove it",
            );
            return None;
        }
    };
    let plugin = network
        .plugins()
        .first()
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mode = match plugin.as_str() {
        "multus" => Mode::Thin,
        "multus-shim" => Mode::Thick,
        other => {
            const FIX: &str = "start multus (its DaemonSet writes 00-multus.conf), or rename the config that sorts first; pods started meanwhile need a restart (docs/troubleshooting.md)";
            let own = Path::new(OWN_CONF_DIR);
            let multus_file = names.iter().find(|n| n.starts_with("00-multus"));
            let (why, fix) = match multus_file {
                Some(m) => (
                    format!(
                        "{first} sorts before multus's {m}, and the runtime takes the first by name"
                    ),
                    FIX.to_owned(),
                ),
                None if conf_dir != own && node.path(&own.join("00-multus.conf")).is_file() => (
                    format!(
                        "multus's config is in {OWN_CONF_DIR} (deploy/own-conf-dir), not here"
                    ),
                    format!(
                        "set the runtime to read {OWN_CONF_DIR} (docs/install.md, \"A config directory of multus's own\"); if it does already, run the doctor with --cni-conf-dir {OWN_CONF_DIR}"
                    ),
                ),
                None => (
                    "multus's config (00-multus.conf) is not there".to_owned(),
                    FIX.to_owned(),
                ),
            };
            report.add(
                Severity::Error,
                "runtime-config",
                place,
                format!(
                    "the runtime picks {first} (type {}), not multus: {why}; pods started now get only that network, without the networks they ask for",
                    cni::quote::quote(other)
                ),
                fix,
            );
            return None;
        }
    };
    // multus's own config, as the runtime hands it over: a list's first plugin, with the
    // list's name and version.
    let bytes = match network.plugin_stdin(0) {
        Ok(b) => b,
        Err(e) => {
            report.add(
                Severity::Error,
                "runtime-config",
                place,
                e.msg,
                "fix or remove it",
            );
            return None;
        }
    };
    let json: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let conf = match MultusConf::parse(&bytes) {
        Ok(mut conf) => {
            conf.node_root = node.multus_root();
            conf
        }
        Err(e) => {
            report.add(
                Severity::Error,
                "runtime-config",
                place,
                format!("multus's config does not read: {e}"),
                "let `multus install` (or thick mode's daemon) write it again: remove the file and restart the multus DaemonSet's pod",
            );
            return None;
        }
    };
    let others = names.len() - 1;
    report.add(
        Severity::Info,
        "runtime-config",
        place,
        format!(
            "the runtime picks {first}: {plugin} ({} mode), CNI {}, first by name of {} config(s)",
            match mode {
                Mode::Thin => "thin",
                Mode::Thick => "thick",
            },
            conf.cni_version,
            others + 1
        ),
        "",
    );
    Some(Multus {
        file,
        network,
        bytes,
        mode,
        plugin,
        conf,
        json,
    })
}

/// A primary network that claims the directory for itself (Cilium's `cni.exclusive`) moves
/// every other config aside, multus's included, as `<name>.cilium_bak`.
fn check_exclusive_primary(seen: &Path, conf_dir: &Path, report: &mut Report) {
    let Ok(entries) = std::fs::read_dir(seen) else {
        return;
    };
    let moved: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cilium_bak"))
        .collect();
    if moved.is_empty() {
        return;
    }
    report.add(
        Severity::Error,
        "exclusive-primary",
        Place {
            file: Some(conf_dir.to_owned()),
            ..Place::default()
        },
        format!(
            "the cluster network claims the config directory for itself and moved other configs aside: {}",
            moved.join(", ")
        ),
        "set Cilium's `cni.exclusive` to false (Helm: --set cni.exclusive=false), then restart multus",
    );
}

/// The cluster network multus's config names: found, read, and its version. Returns the
/// plugins it runs (each plugin's `type`, and its IPAM's), each with the CNI version it is
/// asked to speak.
pub fn check_cluster_network(multus: &Multus, report: &mut Report) -> Vec<(String, String)> {
    let args = cni::CmdArgs {
        command: cni::Command::Status,
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        args: String::new(),
        path: Vec::new(),
        stdin: multus.bytes.clone(),
        path_roots_file: None,
    };
    let place = Place {
        file: Some(multus.file.clone()),
        path: if multus.conf.cluster_network.is_empty() {
            "delegates".into()
        } else {
            "clusterNetwork".into()
        },
        ..Place::default()
    };
    let networks = multus::invocation::Invocation::new(&args, multus.conf.clone(), None)
        .and_then(|inv| multus::plan::cluster_networks(&inv));
    let delegates = match networks {
        Ok(d) => d,
        Err(e) => {
            report.add(
                Severity::Error,
                "cluster-network",
                place,
                format!("the cluster network cannot be read: {e}; every pod's ADD fails"),
                "start the cluster network's DaemonSet, which writes its config; in thin mode `multus install` then writes multus's config again",
            );
            return Vec::new();
        }
    };
    let mut types = Vec::new();
    for d in &delegates {
        let mut own = Vec::new();
        for plugin in d.network.plugins() {
            own.extend(
                plugin
                    .get("type")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            );
            own.extend(
                plugin
                    .get("ipam")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned),
            );
        }
        let version = d.network.version.as_str();
        report.add(
            Severity::Info,
            "cluster-network",
            place.clone(),
            format!(
                "{} (CNI {version}): {}",
                d.name,
                if own.is_empty() {
                    "no plugin".to_owned()
                } else {
                    own.join(", ")
                }
            ),
            "",
        );
        let own_version = cni::Version::from_config(&multus.conf.cni_version).ok();
        if own_version.is_some_and(|v| d.network.version > v) {
            report.add(
                Severity::Warning,
                "cluster-network",
                place.clone(),
                format!(
                    "{} is CNI {version}, newer than multus's config ({}): what the newer version adds (STATUS, GC) is not asked of it",
                    d.name, multus.conf.cni_version
                ),
                "let multus's config take the cluster network's version (`multus install --cni-version`)",
            );
        }
        types.extend(own.into_iter().map(|t| (t, version.to_owned())));
    }
    types.sort();
    types.dedup();
    types
}
