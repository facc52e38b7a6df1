//! The plugins the node's pods need, in the plugin directory: there, runnable, and speaking the
//! CNI version their config asks for.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use lint::{Place, Report, Severity};
use serde_json::json;

use crate::configs::Multus;
use crate::Node;

pub fn check(
    node: &Node,
    bin_dir: &Path,
    multus: &Multus,
    cluster: &[(String, String)],
    report: &mut Report,
) {
    let mut wanted = vec![(multus.plugin.clone(), multus.conf.cni_version.clone())];
    wanted.extend(cluster.iter().cloned());
    for (plugin, version) in wanted {
        check_one(node, bin_dir, &plugin, &version, report);
    }
}

fn check_one(node: &Node, bin_dir: &Path, plugin: &str, version: &str, report: &mut Report) {
    let file = bin_dir.join(plugin);
    let place = Place {
        file: Some(file.clone()),
        ..Place::default()
    };
    let seen = node.path(&file);
    let runnable = std::fs::metadata(&seen)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    if !runnable {
        report.add(
            Severity::Error,
            "binary",
            place,
            format!("{plugin} is not in the plugin directory as a runnable file: every pod's ADD fails"),
            "install it there (multus's DaemonSet installs multus and the reference plugins; the cluster network's own DaemonSet installs its plugin)",
        );
        return;
    }
    let config = json!({"cniVersion": version}).to_string();
    let supported: Vec<String> =
        match node.ask(bin_dir, plugin, cni::Command::Version, config.as_bytes()) {
            Ok(reply) => reply
                .and_then(|v| v.get("supportedVersions").cloned())
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            Err(e) => {
                report.add(
                    Severity::Warning,
                    "binary",
                    place,
                    format!(
                        "{plugin} did not answer VERSION as a CNI plugin does: {}",
                        e.msg
                    ),
                    "check that it is a CNI plugin, and that it runs on this machine",
                );
                return;
            }
        };
    if supported.iter().any(|v| v == version) {
        report.add(
            Severity::Info,
            "binary",
            place,
            format!(
                "{plugin}: speaks CNI {}",
                supported.last().map(String::as_str).unwrap_or_default()
            ),
            "",
        );
    } else {
        report.add(
            Severity::Error,
            "binary",
            place,
            format!(
                "{plugin} does not speak CNI {version}, which its config asks for (it speaks {})",
                supported.join(", ")
            ),
            "install a build that speaks it, or set the config's cniVersion to one it speaks",
        );
    }
}
