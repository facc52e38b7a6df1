//! Pods given alongside the NADs: what their networks annotation asks of each network.

use std::collections::BTreeMap;

use serde_json::Value;

use super::network::Network;
use super::report::{Place, Report, Severity};

pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

/// A pod's or a pod template's metadata, and the YAML key it sits under.
pub struct PodMeta<'a> {
    pub place: Place,
    /// `metadata` or `spec.template.metadata`.
    pub meta_path: &'static str,
    pub meta: &'a Value,
    pub namespace: String,
}

/// One element of the annotation's JSON form that asks for `ips` or `mac`.
struct Request {
    namespace: String,
    name: String,
    ips: bool,
    mac: bool,
}

/// The elements that ask for `ips` or `mac`. Only the JSON form can ask for them; the short
/// form (`ns/name@if, ...`) asks for nothing checked here.
fn requests(text: &str, namespace: &str) -> Result<Vec<(usize, Request)>, String> {
    if !text.trim_start().starts_with('[') {
        return Ok(Vec::new());
    }
    let elements: Vec<Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (i, e) in elements.iter().enumerate() {
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("element {i} has no \"name\""))?;
        let request = Request {
            namespace: e
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace)
                .to_owned(),
            name: name.to_owned(),
            ips: e
                .get("ips")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()),
            mac: e
                .get("mac")
                .and_then(Value::as_str)
                .is_some_and(|m| !m.is_empty()),
        };
        if request.ips || request.mac {
            out.push((i, request));
        }
    }
    Ok(out)
}

/// A pod asking for `ips` or `mac` on a network none of whose plugins declares the capability
/// is refused by multus: the request would be lost.
pub fn check(pod: &PodMeta, networks: &BTreeMap<(String, String), Network>, report: &mut Report) {
    let Some(text) = pod
        .meta
        .get("annotations")
        .and_then(|a| a.get(NETWORKS_ANNOTATION))
        .and_then(Value::as_str)
    else {
        return;
    };
    let key = format!("{}.annotations[\"{NETWORKS_ANNOTATION}\"]", pod.meta_path);
    let requests = match requests(text, &pod.namespace) {
        Ok(r) => r,
        Err(e) => {
            report.add(
                Severity::Error,
                "annotation",
                pod.place.at(key),
                format!("the networks annotation is not valid: {e}"),
                "write a JSON list of objects with at least \"name\" (and optionally \
                 \"namespace\", \"interface\", \"ips\", \"mac\"), or the short form \
                 \"ns/name@ifname, ...\"",
            );
            return;
        }
    };
    for (i, r) in requests {
        let nad = format!("{}/{}", r.namespace, r.name);
        let Some(network) = networks.get(&(r.namespace.clone(), r.name.clone())) else {
            report.add(
                Severity::Note,
                "not-checked",
                pod.place.at(format!("{key}[{i}]")),
                format!(
                    "the pod asks for ips or mac on {nad}, which is not among the files given \
                     (or its config could not be read): the capability was not checked"
                ),
                "",
            );
            continue;
        };
        for (asked, capability) in [(r.ips, "ips"), (r.mac, "mac")] {
            if asked && !network.capabilities.contains(capability) {
                report.add(
                    Severity::Error,
                    "capability",
                    pod.place.at(format!("{key}[{i}].{capability}")),
                    format!(
                        "the pod asks for {capability:?} on {nad}, but no plugin of that network \
                         declares \"capabilities\": {{\"{capability}\": true}}: multus refuses \
                         the pod's ADD, since the request would be lost"
                    ),
                    format!(
                        "add \"capabilities\": {{\"{capability}\": true}} to the plugin of {nad} \
                         that applies it, or remove {capability:?} from the annotation"
                    ),
                );
            }
        }
    }
}
