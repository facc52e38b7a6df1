//! IPAMClaims (`k8s.cni.cncf.io/v1alpha1`, the NPWG specification v1.3): an object in the pod's
//! namespace that owns an interface's addresses beyond the pod, so that a VM's next pod, on
//! any node, comes back on the same addresses. multus hands the pod's claim to whereabouts in
//! `CNI_ARGS` ([`cni::args::IPAM_CLAIM_REFERENCE`]).
//!
//! A claimed allocation is stored in the reference's fields, with `podref`
//! `ipamclaim:<namespace>/<claim>`: no pod's namespace holds a `:`, so no pod owns it, and a
//! pod of the claim finds it as a pod finds its own. The claim's `status.ips` lists the
//! addresses (`address/prefix`), and `status.ownerPod` the pod that last took them.

use ipnet::IpNet;
use serde_json::{json, Value};

const PODREF_PREFIX: &str = "ipamclaim:";

/// The `podref` of claim `name`'s allocations, in `namespace`.
pub fn claim_podref(namespace: &str, name: &str) -> String {
    format!("{PODREF_PREFIX}{namespace}/{name}")
}

/// The claim (`namespace`, `name`) an allocation's `podref` names; `None` for a pod's.
pub fn claimed_by(podref: &str) -> Option<(&str, &str)> {
    podref.strip_prefix(PODREF_PREFIX)?.split_once('/')
}

/// The merge patch of the claim's status for `ips` held by `pod`; `None` when the status
/// shows them already, so that an unchanged claim is not written.
pub fn status_patch(claim: &Value, ips: &[IpNet], pod: &str) -> Option<Value> {
    let ips: Vec<String> = ips.iter().map(IpNet::to_string).collect();
    let shown: Vec<&str> = claim
        .pointer("/status/ips")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let owner = claim
        .pointer("/status/ownerPod/name")
        .and_then(Value::as_str);
    if shown == ips && owner == Some(pod) {
        return None;
    }
    Some(json!({"status": {"ips": ips, "ownerPod": {"name": pod}}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_name_no_pod_and_write_only_changes() {
        let podref = claim_podref("vms", "vm1.net1");
        assert_eq!(podref, "ipamclaim:vms/vm1.net1");
        assert_eq!(claimed_by(&podref), Some(("vms", "vm1.net1")));
        assert_eq!(claimed_by("vms/vm1"), None);
        let ips: Vec<IpNet> = vec!["10.77.0.1/24".parse().unwrap()];
        let fresh = json!({"metadata": {"name": "vm1.net1"}, "spec": {"network": "n", "interface": "net1"}});
        let patch = status_patch(&fresh, &ips, "virt-launcher-a").unwrap();
        assert_eq!(
            patch,
            json!({"status": {"ips": ["10.77.0.1/24"], "ownerPod": {"name": "virt-launcher-a"}}})
        );
        let written = json!({"status": patch["status"]});
        assert_eq!(status_patch(&written, &ips, "virt-launcher-a"), None);
        assert!(status_patch(&written, &ips, "virt-launcher-b").is_some());
    }
}
