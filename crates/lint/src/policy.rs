//! The admin's policy: what a NetworkAttachmentDefinition may use and what a pod may reference,
//! beyond what lint finds harmful on its own. One YAML (or JSON) document, kept in the
//! `multus-admission-policy` ConfigMap under `policy.yaml` and read by the admission webhook
//! and by `multus lint --policy`. docs/admission.md describes every key.

use std::path::Path;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::report::Severity;

/// The ConfigMap key the policy is kept under.
pub const CONFIGMAP_KEY: &str = "policy.yaml";

/// Stands for each node's uplink (the interface of its default route) in `deniedMasters`.
pub const UPLINK: &str = "@uplink";

/// A policy as written; every key is optional.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Plugin types a NAD may use, in any position of a list; empty allows any.
    #[serde(default)]
    pub allowed_types: Vec<String>,
    /// IPAM types a NAD may use; empty allows any.
    #[serde(default)]
    pub allowed_ipam_types: Vec<String>,
    /// Masters and parents (`master`, host-device's `device`) a NAD may name; empty allows
    /// any. A trailing `*` matches a prefix: `eth1.*`.
    #[serde(default)]
    pub allowed_masters: Vec<String>,
    /// Masters and parents never allowed, in the same form; `@uplink` is each node's uplink,
    /// checked where the uplink is known. None by default: pods on the node's own LAN
    /// (macvlan on `eth0`) are what upstream's documentation shows.
    #[serde(default)]
    pub denied_masters: Vec<String>,
    /// The cluster's pod networks, when they cannot be found from the cluster.
    #[serde(default, rename = "podCIDRs")]
    pub pod_cidrs: Vec<IpNet>,
    /// The cluster's service networks, when they cannot be found from the cluster.
    #[serde(default, rename = "serviceCIDRs")]
    pub service_cidrs: Vec<IpNet>,
    /// More address space no range, address or route may overlap: the node subnets, a
    /// management network.
    #[serde(default)]
    pub denied_subnets: Vec<IpNet>,
    /// Whether an IPAM section may route the pod's default route (`0.0.0.0/0`, `::/0`).
    #[serde(default)]
    pub default_route: DefaultRoute,
    /// Namespaces whose pods may reference NADs of other namespaces; `*` is every namespace.
    #[serde(default = "every_namespace")]
    pub cross_namespace_from: Vec<String>,
}

/// What a default route in an IPAM section gets.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DefaultRoute {
    /// A warning: multus puts it behind the cluster network's.
    #[default]
    Allow,
    Deny,
}

fn every_namespace() -> Vec<String> {
    vec!["*".to_owned()]
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            allowed_types: Vec::new(),
            allowed_ipam_types: Vec::new(),
            allowed_masters: Vec::new(),
            denied_masters: Vec::new(),
            pod_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            denied_subnets: Vec::new(),
            default_route: DefaultRoute::Allow,
            cross_namespace_from: every_namespace(),
        }
    }
}

/// Why a policy could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read the policy {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the policy {origin} is not valid: {msg}")]
    Invalid { origin: String, msg: String },
}

impl Policy {
    /// A policy document, or a ConfigMap holding one under [`CONFIGMAP_KEY`]; `origin` names
    /// it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let invalid = |msg: String| PolicyError::Invalid {
            origin: origin.to_owned(),
            msg,
        };
        let value: Value = serde_norway::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if value.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
            return Policy::from_configmap(&value, origin);
        }
        Policy::from_value(value, origin)
    }

    /// The policy in a ConfigMap object; a ConfigMap without the key holds the default.
    pub fn from_configmap(configmap: &Value, origin: &str) -> Result<Policy, PolicyError> {
        match configmap
            .get("data")
            .and_then(|d| d.get(CONFIGMAP_KEY))
            .and_then(Value::as_str)
        {
            Some(text) => {
                let origin = format!("{origin} (data.\"{CONFIGMAP_KEY}\")");
                let value: Value =
                    serde_norway::from_str(text).map_err(|e| PolicyError::Invalid {
                        origin: origin.clone(),
                        msg: e.to_string(),
                    })?;
                Policy::from_value(value, &origin)
            }
            None => Ok(Policy::default()),
        }
    }

    /// A file holding a policy or its ConfigMap.
    pub fn read(path: &Path) -> Result<Policy, PolicyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: origin.clone(),
            source,
        })?;
        Policy::parse(&text, &origin)
    }

    fn from_value(value: Value, origin: &str) -> Result<Policy, PolicyError> {
        // An empty document is the default policy.
        if value.is_null() {
            return Ok(Policy::default());
        }
        serde_json::from_value(value).map_err(|e| PolicyError::Invalid {
            origin: origin.to_owned(),
            msg: e.to_string(),
        })
    }

    pub fn allows_type(&self, plugin_type: &str) -> bool {
        self.allowed_types.is_empty() || self.allowed_types.iter().any(|t| t == plugin_type)
    }

    pub fn allows_ipam_type(&self, ipam_type: &str) -> bool {
        self.allowed_ipam_types.is_empty() || self.allowed_ipam_types.iter().any(|t| t == ipam_type)
    }

    /// Why a master is refused, when it is: the pattern that denies it, or the allowed list it
    /// is not on. `@uplink` is the caller's to check, since only it may know the uplink.
    pub fn refuses_master(&self, master: &str) -> Option<String> {
        if let Some(p) = self
            .denied_masters
            .iter()
            .find(|p| p.as_str() != UPLINK && matches_pattern(p, master))
        {
            return Some(format!("the policy's deniedMasters has {p:?}"));
        }
        if !self.allowed_masters.is_empty()
            && !self
                .allowed_masters
                .iter()
                .any(|p| matches_pattern(p, master))
        {
            return Some(format!(
                "it is not on the policy's allowedMasters ({})",
                self.allowed_masters.join(", ")
            ));
        }
        None
    }

    pub fn denies_uplink(&self) -> bool {
        self.denied_masters.iter().any(|p| p == UPLINK)
    }

    /// What a default route a NAD sets gets: its severity, and what the finding adds.
    pub fn default_route(&self) -> (Severity, &'static str) {
        match self.default_route {
            DefaultRoute::Allow => (Severity::Warning, ""),
            DefaultRoute::Deny => (
                Severity::Error,
                " The admin's policy denies it (defaultRoute: deny).",
            ),
        }
    }

    pub fn allows_cross_namespace_from(&self, namespace: &str) -> bool {
        self.cross_namespace_from
            .iter()
            .any(|n| n == "*" || n == namespace)
    }
}

fn matches_pattern(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_policy_is_the_default() {
        assert_eq!(Policy::parse("", "p").unwrap(), Policy::default());
        assert_eq!(Policy::parse("{}", "p").unwrap(), Policy::default());
        let cm = "kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n";
        assert_eq!(Policy::parse(cm, "p").unwrap(), Policy::default());
    }

    #[test]
    fn the_shipped_configmap_holds_the_default_policy() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/admission/component/policy.yaml"
        );
        assert_eq!(Policy::read(Path::new(path)).unwrap(), Policy::default());
    }

    #[test]
    fn a_configmap_carries_the_policy_under_its_key() {
        let cm = "kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\ndata:\n  policy.yaml: |\n    allowedTypes: [macvlan]\n    defaultRoute: deny\n";
        let p = Policy::parse(cm, "cm").unwrap();
        assert_eq!(p.allowed_types, ["macvlan"]);
        assert_eq!(p.default_route, DefaultRoute::Deny);
        assert!(p.allows_type("macvlan") && !p.allows_type("bridge"));
        assert_eq!(p.default_route().0, Severity::Error);
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_named() {
        let e = Policy::parse("allowedType: [macvlan]", "f.yaml").unwrap_err();
        assert!(
            e.to_string().contains("f.yaml") && e.to_string().contains("allowedType"),
            "{e}"
        );
        let e = Policy::parse("deniedSubnets: [10.0.0.0/33]", "f.yaml").unwrap_err();
        assert!(e.to_string().contains("f.yaml"), "{e}");
        let e = Policy::parse("defaultRoute: maybe", "f.yaml").unwrap_err();
        assert!(e.to_string().contains("maybe"), "{e}");
    }

    #[test]
    fn masters_match_exactly_or_by_prefix() {
        let p = Policy::parse(
            "allowedMasters: [\"eth1.*\", eth2]\ndeniedMasters: [\"@uplink\", eth1.666]",
            "p",
        )
        .unwrap();
        assert_eq!(p.refuses_master("eth1.100"), None);
        assert_eq!(p.refuses_master("eth2"), None);
        assert!(p
            .refuses_master("eth1.666")
            .unwrap()
            .contains("deniedMasters"));
        assert!(p.refuses_master("eth0").unwrap().contains("allowedMasters"));
        assert!(p.denies_uplink());
        assert!(!Policy::parse("deniedMasters: []", "p")
            .unwrap()
            .denies_uplink());
    }

    #[test]
    fn cross_namespace_references_are_every_namespace_s_unless_listed() {
        assert!(Policy::default().allows_cross_namespace_from("tenant"));
        let p = Policy::parse("crossNamespaceFrom: [infra]", "p").unwrap();
        assert!(p.allows_cross_namespace_from("infra"));
        assert!(!p.allows_cross_namespace_from("tenant"));
    }
}
