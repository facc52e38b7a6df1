//! multus's delegate results cache (`<cniDir>/results`): attachments whose sandbox is gone,
//! and network namespaces at paths this view of the node does not have.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lint::{Place, Report, Severity};

use crate::Node;

/// The most container IDs one finding lists.
const LISTED: usize = 5;

pub fn check(node: &Node, cni_dir: &Path, report: &mut Report) {
    let place = Place {
        file: Some(cni_dir.to_owned()),
        ..Place::default()
    };
    if !node.path(cni_dir).is_dir() {
        report.add(
            Severity::Note,
            "stale-cache",
            place,
            "the cache directory is not there as seen from here (thin mode's pod does not mount it)",
            "run the doctor on the node, or in thick mode's pod",
        );
        return;
    }
    let entries = match cni::cache::list(&node.path(cni_dir)) {
        Ok(entries) => entries,
        Err(e) => {
            report.add(
                Severity::Warning,
                "stale-cache",
                place,
                format!("the cache cannot be read: {}", e.msg),
                "check the directory's permissions",
            );
            return;
        }
    };
    // Each container's namespace: any of its attachments names it.
    let mut netns: BTreeMap<String, String> = BTreeMap::new();
    for attachment in entries.into_iter().flatten() {
        let entry = netns.entry(attachment.container_id).or_default();
        if entry.is_empty() {
            *entry = attachment.netns;
        }
    }
    let gone: Vec<(&String, &String)> = netns
        .iter()
        .filter(|(_, ns)| !ns.is_empty() && !node.path(Path::new(ns.as_str())).exists())
        .collect();
    if gone.is_empty() {
        report.add(
            Severity::Info,
            "stale-cache",
            place,
            format!(
                "{} container(s) cached, each with its network namespace",
                netns.len()
            ),
            "",
        );
        return;
    }
    let mut ids: Vec<&str> = gone
        .iter()
        .map(|(id, _)| id.as_str())
        .take(LISTED)
        .collect();
    if gone.len() > LISTED {
        ids.push("...");
    }
    report.add(
        Severity::Warning,
        "stale-cache",
        place.clone(),
        format!(
            "{} of {} cached container(s) have no network namespace any more: {}",
            gone.len(),
            netns.len(),
            ids.join(", ")
        ),
        "the runtime's GC (CNI 1.1.0) or its DEL removes them; until then their addresses stay taken. A runtime restart runs its GC",
    );
    // Every namespace gone, and their directory not there: this view of the node is not the
    // runtime's (thick mode's daemon without the runtime's netns directory mounted).
    if gone.len() == netns.len() {
        let dirs: Vec<PathBuf> = gone
            .iter()
            .filter_map(|(_, ns)| Path::new(ns.as_str()).parent().map(Path::to_owned))
            .collect();
        if let Some(dir) = dirs.first().filter(|d| dirs.iter().all(|x| x == *d)) {
            if !node.path(dir).is_dir() {
                report.add(
                    Severity::Warning,
                    "netns-path",
                    place,
                    format!(
                        "the runtime makes network namespaces under {}, which is not there as seen from here",
                        dir.display()
                    ),
                    "mount the runtime's netns directory into the pod that runs multus, at the path the runtime uses",
                );
            }
        }
    }
}
