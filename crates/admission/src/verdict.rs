//! What the webhook says about one request: lint's checks and the admin's policy on a
//! NetworkAttachmentDefinition, or on a pod's networks annotation.

use std::path::PathBuf;

use lint::{Finding, Linter, Report, Severity};
use nodekit::documents::Document;
use serde_json::Value;

use super::review::{Request, Verdict};

const NAD_GROUP: &str = "k8s.cni.cncf.io";

/// The largest `spec.config` checked. Real networks are a few hundred bytes; checking costs
/// memory in proportion, so a larger one is refused before it is parsed.
pub const MAX_CONFIG: usize = 64 << 10;

/// The verdict on `request`. Anything this webhook does not check is admitted.
pub fn judge(linter: &Linter, request: &Request) -> Verdict {
    let checked = match (request.kind.group.as_str(), request.kind.kind.as_str()) {
        (NAD_GROUP, "NetworkAttachmentDefinition") => {
            matches!(request.operation.as_str(), "CREATE" | "UPDATE")
        }
        ("", "Pod") => request.operation == "CREATE",
        _ => false,
    };
    if !checked || !request.object.is_object() {
        return Verdict::default();
    }
    let config_len = request
        .object
        .pointer("/spec/config")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    if config_len > MAX_CONFIG {
        return Verdict {
            denied: Some(format!(
                "multus-rs admission: {} {}/{} is refused: spec.config [config]: {config_len} \
                 bytes, at most {MAX_CONFIG} (fix: a network's config is a few hundred bytes; \
                 remove what the plugins do not read)",
                request.kind.kind, request.namespace, request.name
            )),
            warnings: Vec::new(),
        };
    }
    let mut object = request.object.clone();
    // The object's namespace is the request's, whether or not the object says it yet.
    if !request.namespace.is_empty() {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("namespace".into(), request.namespace.clone().into());
        }
    }
    let doc = Document {
        file: PathBuf::new(),
        index: 1,
        value: object,
    };
    let mut report = Report::default();
    linter.check(std::slice::from_ref(&doc), &mut report);
    verdict(
        &request.kind.kind,
        &request.namespace,
        &request.name,
        &report,
    )
}

/// Errors deny, each with its key and fix; warnings go back as warnings. Notes (what could
/// not be checked) stay in the webhook's log.
fn verdict(kind: &str, namespace: &str, name: &str, report: &Report) -> Verdict {
    let errors: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    let warnings = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .map(line)
        .collect();
    let denied = (!errors.is_empty()).then(|| {
        let object = match (namespace.is_empty(), name.is_empty()) {
            (_, true) => String::new(),
            (true, false) => format!(" {name}"),
            (false, false) => format!(" {namespace}/{name}"),
        };
        let lines: Vec<String> = errors.iter().map(|f| format!("- {}", line(f))).collect();
        format!(
            "multus-rs admission: {kind}{object} is refused ({} error{}; docs/lint.md names \
             each check):\n{}",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            lines.join("\n")
        )
    });
    Verdict { denied, warnings }
}

/// `key [check]: problem (fix: ...)`.
fn line(f: &Finding) -> String {
    let key = if f.place.path.is_empty() {
        String::new()
    } else {
        format!("{} ", f.place.path)
    };
    let fix = if f.fix.is_empty() {
        String::new()
    } else {
        format!(" (fix: {})", f.fix)
    };
    format!("{key}[{}]: {}{fix}", f.check, f.problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review;
    use lint::{Policy, Setting, Uplink};
    use serde_json::json;

    fn linter(policy: Policy) -> Linter {
        Linter::new(Setting {
            pod_cidrs: vec!["10.42.0.0/16".parse().unwrap()],
            service_cidrs: vec!["10.43.0.0/16".parse().unwrap()],
            uplink: Uplink::Unknown,
            dhcp_broadcast: false,
            cni_bin_dir: "/nonexistent".into(),
            namespace: "default".into(),
            policy,
        })
    }

    fn request(kind: (&str, &str), operation: &str, object: Value) -> review::Request {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": kind.0, "version": "v1", "kind": kind.1},
                        "operation": operation, "namespace": "tenant", "name": "n",
                        "object": object}});
        review::parse(body.to_string().as_bytes()).unwrap()
    }

    fn nad(config: Value) -> Value {
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": "n"}, "spec": {"config": config.to_string()}})
    }

    const NAD: (&str, &str) = ("k8s.cni.cncf.io", "NetworkAttachmentDefinition");

    #[test]
    fn the_troublemaker_is_denied_naming_the_key_and_the_fix() {
        let config = json!({"cniVersion": "0.3.1", "type": "macvlan", "master": "enp1s0",
            "ipam": {"type": "host-local", "subnet": "10.42.0.0/24",
                     "routes": [{"dst": "0.0.0.0/0", "gw": "10.42.0.100"}]}});
        let verdict = judge(
            &linter(Policy::default()),
            &request(NAD, "CREATE", nad(config)),
        );
        let denied = verdict.denied.expect("denied");
        assert!(
            denied.contains("NetworkAttachmentDefinition tenant/n is refused"),
            "{denied}"
        );
        assert!(
            denied.contains("spec.config.ipam.subnet [reserved-overlap]"),
            "{denied}"
        );
        assert!(
            denied.contains("(fix: use a range outside 10.42.0.0/16"),
            "{denied}"
        );
        // The default route is allowed with a warning by the default policy.
        assert_eq!(verdict.warnings.len(), 1, "{:?}", verdict.warnings);
        assert!(
            verdict.warnings[0].starts_with("spec.config.ipam.routes[0].dst [ipam-default-route]")
        );
    }

    #[test]
    fn the_policy_turns_what_it_denies_into_errors() {
        let policy = Policy::parse(
            "allowedTypes: [bridge]\ndefaultRoute: deny\ndeniedSubnets: [192.168.0.0/16]",
            "p",
        )
        .unwrap();
        let config = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1",
            "ipam": {"type": "static", "addresses": [{"address": "192.168.5.2/24"}],
                     "routes": [{"dst": "::/0"}]}});
        let verdict = judge(&linter(policy), &request(NAD, "UPDATE", nad(config)));
        let denied = verdict.denied.expect("denied");
        for check in [
            "[policy-type]",
            "[ipam-default-route]",
            "[reserved-overlap]",
        ] {
            assert!(denied.contains(check), "{check}: {denied}");
        }
        assert!(denied.contains("(3 errors"), "{denied}");
    }

    #[test]
    fn a_config_too_large_to_check_is_refused_unread() {
        let config = format!("{{\"pad\": \"{}\"}}", "x".repeat(MAX_CONFIG));
        let object = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                            "metadata": {"name": "n"}, "spec": {"config": config}});
        let verdict = judge(&linter(Policy::default()), &request(NAD, "CREATE", object));
        let denied = verdict.denied.expect("denied");
        assert!(
            denied.contains("spec.config [config]") && denied.contains("at most 65536"),
            "{denied}"
        );
    }

    #[test]
    fn a_clean_nad_is_admitted_without_warnings() {
        let config = json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "br1",
            "ipam": {"type": "host-local", "subnet": "192.168.100.0/24"}});
        let verdict = judge(
            &linter(Policy::default()),
            &request(NAD, "CREATE", nad(config)),
        );
        assert_eq!(verdict, Verdict::default());
    }

    #[test]
    fn pods_are_checked_at_create_for_their_annotation_and_the_policy() {
        let pod = |networks: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "annotations": {"k8s.v1.cni.cncf.io/networks": networks}}})
        };
        let policy = Policy::parse("crossNamespaceFrom: [infra]", "p").unwrap();
        let linter = linter(policy);
        let verdict = judge(&linter, &request(("", "Pod"), "CREATE", pod("other/net1")));
        let denied = verdict.denied.expect("denied");
        assert!(
            denied.contains("[policy-cross-namespace]") && denied.contains("other/net1"),
            "{denied}"
        );
        let verdict = judge(
            &linter,
            &request(("", "Pod"), "CREATE", pod("net1@Bad/Name")),
        );
        assert!(verdict.denied.expect("denied").contains("[annotation]"));
        let same = judge(
            &linter,
            &request(("", "Pod"), "CREATE", pod("net1, net2@net9")),
        );
        assert_eq!(same, Verdict::default());
        // An update or a delete is not this webhook's to judge.
        let update = judge(&linter, &request(("", "Pod"), "UPDATE", pod("other/net1")));
        assert_eq!(update, Verdict::default());
    }
}
