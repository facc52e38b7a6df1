//! Pods given alongside the NADs: what their networks annotation asks of each network.

use std::collections::BTreeMap;

use serde_json::Value;

use super::network::Network;
use super::policy::Policy;
use super::report::{Place, Report, Severity};
use npwg::selection::{self, DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION};

/// A pod's or a pod template's metadata, and the YAML key it sits under.
pub struct PodMeta<'a> {
    pub place: Place,
    /// `metadata` or `spec.template.metadata`.
    pub meta_path: &'static str,
    pub meta: &'a Value,
    pub namespace: String,
}

/// Where multus looks for a default-network NAD named without a namespace: upstream's default
/// `multusNamespace`.
const MULTUS_NAMESPACE: &str = "kube-system";

/// A pod asking for `ips` or `mac` on a network none of whose plugins declares the capability
/// is refused by multus: the request would be lost. A pod referencing another namespace's NAD,
/// in either annotation, needs the policy's leave.
pub fn check(
    pod: &PodMeta,
    networks: &BTreeMap<(String, String), Network>,
    policy: &Policy,
    report: &mut Report,
) {
    check_default_network(pod, policy, report);
    let Some(text) = pod
        .meta
        .get("annotations")
        .and_then(|a| a.get(NETWORKS_ANNOTATION))
        .and_then(Value::as_str)
    else {
        return;
    };
    let key = format!("{}.annotations[\"{NETWORKS_ANNOTATION}\"]", pod.meta_path);
    // Read as multus reads it: what multus would refuse is reported here. An empty
    // annotation selects nothing.
    if text.is_empty() {
        return;
    }
    let selections = match selection::parse(NETWORKS_ANNOTATION, text, &pod.namespace) {
        Ok(selections) => selections,
        Err(e) => {
            report.add(
                Severity::Error,
                "annotation",
                pod.place.at(key),
                // The place names the annotation; the message says what is wrong with it.
                format!("multus refuses the networks annotation: {}", e.msg),
                "write a JSON list of objects with at least \"name\" (and optionally \
                 \"namespace\", \"interface\", \"ips\", \"mac\"), or the short form \
                 \"ns/name@ifname, ...\"",
            );
            return;
        }
    };
    if !policy.allows_cross_namespace_from(&pod.namespace) {
        for (i, s) in selections.iter().enumerate() {
            if s.namespace != pod.namespace {
                report.add(
                    Severity::Error,
                    "policy-cross-namespace",
                    pod.place.at(format!("{key}[{i}]")),
                    format!(
                        "the pod, in namespace {:?}, references {}/{}: the policy's \
                         crossNamespaceFrom does not list {:?}",
                        pod.namespace, s.namespace, s.name, pod.namespace
                    ),
                    format!(
                        "reference a NetworkAttachmentDefinition in {:?}, or ask the cluster's \
                         admin to add the namespace to crossNamespaceFrom",
                        pod.namespace
                    ),
                );
            }
        }
    }
    let requests = selections
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.ips.is_empty() || s.mac.is_some());
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
        for (asked, capability) in [(!r.ips.is_empty(), "ips"), (r.mac.is_some(), "mac")] {
            let received = capability == "ips" && network.reads_ip_arg;
            if asked && !received && !network.capabilities.contains(capability) {
                report.add(
                    Severity::Error,
                    "capability",
                    pod.place.at(format!("{key}[{i}].{capability}")),
                    format!(
                        "the pod asks for {capability:?} on {nad}, but no plugin of that network \
                         declares \"capabilities\": {{\"{capability}\": true}} (nor reads it \
                         from CNI_ARGS): multus refuses the pod's ADD, since the request would \
                         be lost"
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

/// The default-network annotation, which replaces the pod's cluster network: it parses as
/// multus reads it, and another namespace's NAD needs the policy's leave.
fn check_default_network(pod: &PodMeta, policy: &Policy, report: &mut Report) {
    let Some(text) = pod
        .meta
        .get("annotations")
        .and_then(|a| a.get(DEFAULT_NETWORK_ANNOTATION))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    else {
        return;
    };
    let key = format!(
        "{}.annotations[\"{DEFAULT_NETWORK_ANNOTATION}\"]",
        pod.meta_path
    );
    match selection::parse_default_network(text, MULTUS_NAMESPACE) {
        Err(e) => report.add(
            Severity::Error,
            "annotation",
            pod.place.at(key),
            format!("multus refuses the default-network annotation: {}", e.msg),
            "name exactly one NetworkAttachmentDefinition: \"ns/name\" or \"name\" (in \
             multus's namespace)",
        ),
        Ok(s)
            if s.namespace != pod.namespace
                && !policy.allows_cross_namespace_from(&pod.namespace) =>
        {
            report.add(
                Severity::Error,
                "policy-cross-namespace",
                pod.place.at(key),
                format!(
                    "the pod, in namespace {:?}, takes {}/{} as its cluster network: the \
                     policy's crossNamespaceFrom does not list {:?}",
                    pod.namespace, s.namespace, s.name, pod.namespace
                ),
                "remove the annotation, or ask the cluster's admin to add the namespace to \
                 crossNamespaceFrom",
            );
        }
        Ok(_) => {}
    }
}
