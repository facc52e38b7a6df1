//! The API as multus's credential sees it: reachable, the rights multus needs
//! (SelfSubjectRulesReview), and the node's pods that run without networks they asked for.

use k8s::{KubeClient, Resource};
use lint::{Place, Report, Severity};
use serde_json::{json, Value};

use crate::configs::Mode;
use crate::credential::Credential;

const RULES_REVIEW: Resource = Resource {
    group: "authorization.k8s.io",
    version: "v1",
    plural: "selfsubjectrulesreviews",
};

/// What multus does with the API: (API group, resource, verb). The node's pods are listed to
/// find those without their networks (thin mode's installer, thick mode's daemon); thick mode's
/// daemon also lists and watches pods and NADs, for its caches.
fn needed(mode: Option<Mode>) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut rights = vec![
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods/status", "patch"),
        ("k8s.cni.cncf.io", "network-attachment-definitions", "get"),
        ("", "events", "create"),
    ];
    if mode == Some(Mode::Thick) {
        rights.extend([
            ("", "pods", "watch"),
            ("k8s.cni.cncf.io", "network-attachment-definitions", "list"),
            ("k8s.cni.cncf.io", "network-attachment-definitions", "watch"),
        ]);
    }
    rights
}

pub fn connect(credential: &Credential, report: &mut Report) -> Option<KubeClient> {
    let options = credential.client.as_ref()?;
    match KubeClient::new(options) {
        Ok(client) => Some(client),
        Err(e) => {
            report.add(
                Severity::Error,
                "api",
                Place::default(),
                format!("the API client cannot be set up: {e}"),
                "check the kubeconfig",
            );
            None
        }
    }
}

/// Whether a rule of the review allows `verb` on `resource` of `group`.
fn allows(rule: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |key: &str, want: &str| {
        rule.get(key)
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|v| v == want || v == "*"))
    };
    has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
}

/// Whether the API server answers, when the credential is not multus's (`--kubeconfig`): its
/// rights say nothing of multus's.
pub fn check_reachable(client: &KubeClient, report: &mut Report) {
    if review(client, report).is_some() {
        report.add(
            Severity::Note,
            "rbac",
            Place::default(),
            "multus's rights are not checked: the API is reached with the --kubeconfig given, not multus's credential",
            "run the doctor without --kubeconfig to check multus's own",
        );
    }
}

/// A SelfSubjectRulesReview of the client's credential; `None`, said, when it cannot be had.
fn review(client: &KubeClient, report: &mut Report) -> Option<Value> {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "default"},
    });
    match client.create_cluster_object(RULES_REVIEW, &review) {
        Ok(answer) => {
            report.add(
                Severity::Info,
                "api",
                Place::default(),
                "the API server answers the credential",
                "",
            );
            Some(answer)
        }
        Err(e) => {
            report.add(
                Severity::Error,
                "api",
                Place::default(),
                format!("the API server cannot be reached with the credential: {e}"),
                "check the kubeconfig's server and credential; `kubectl --kubeconfig` with the same file shows the same",
            );
            None
        }
    }
}

pub fn check_rules(client: &KubeClient, mode: Option<Mode>, report: &mut Report) {
    let Some(answer) = review(client, report) else {
        return;
    };
    let rules: Vec<Value> = answer
        .pointer("/status/resourceRules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let missing: Vec<String> = needed(mode)
        .into_iter()
        .filter(|(g, r, v)| !rules.iter().any(|rule| allows(rule, g, r, v)))
        .map(|(g, r, v)| {
            if g.is_empty() {
                format!("{v} {r}")
            } else {
                format!("{v} {r}.{g}")
            }
        })
        .collect();
    if missing.is_empty() {
        report.add(
            Severity::Info,
            "rbac",
            Place::default(),
            "multus may do all it needs",
            "",
        );
    } else {
        report.add(
            Severity::Error,
            "rbac",
            Place::default(),
            format!("multus may not: {}", missing.join(", ")),
            "apply the ClusterRole and ClusterRoleBinding of deploy/ (`multus`), bound to the account multus uses",
        );
    }
}

pub fn check_pods(
    client: &KubeClient,
    node: &str,
    system_namespaces: &[String],
    report: &mut Report,
) {
    // Only what is said of each pod is kept.
    let keep = &mut |pod: Value| {
        let missing = npwg::status::pod_missing(&pod, system_namespaces)?;
        let text = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let name = format!("{}/{}", text("/metadata/namespace"), text("/metadata/name"));
        Some((name, missing))
    };
    let pods = match client.list_node_pods(node, keep) {
        Ok(pods) => pods,
        Err(e) => {
            report.add(
                Severity::Note,
                "missing-networks",
                Place::default(),
                format!("the node's pods cannot be listed: {e}"),
                "grant multus's account `list` on pods (deploy/base's ClusterRole has it), or run the doctor with --kubeconfig of an account that may",
            );
            return;
        }
    };
    let mut asking = 0usize;
    let mut lacking = 0usize;
    for (name, missing) in &pods {
        asking += 1;
        if missing.networks.is_empty() {
            continue;
        }
        lacking += 1;
        report.add(
            Severity::Error,
            "missing-networks",
            Place {
                kind: Some("Pod".into()),
                object: Some(name.clone()),
                ..Place::default()
            },
            format!(
                "runs without {}: {}",
                missing.networks.join(", "),
                if missing.stale {
                    "its network-status is from an earlier sandbox (its addresses are not the pod's): the sandbox was made again without multus"
                } else {
                    "its network-status does not show it; it started without multus, or multus could not write the status"
                }
            ),
            "delete the pod, so that its controller makes it again with its networks; then find why multus was not called (the checks above)",
        );
    }
    if lacking == 0 {
        report.add(
            Severity::Info,
            "missing-networks",
            Place::default(),
            format!("{asking} running pod(s) of node {node} ask for networks, and each has them"),
            "",
        );
    }
}
