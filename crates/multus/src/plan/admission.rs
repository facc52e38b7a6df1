//! The admission webhook's policy, applied again at ADD to every network the pod's NADs
//! bring: a NAD created before the webhook existed, or while it was down and its failure
//! policy let it through, still cannot do on the node what the policy forbids.

use std::path::Path;

use lint::{Linter, Policy, Report, Severity};

use super::{Attachment, Role};
use crate::config::TenantPolicy;
use crate::error::{Error, Result};

/// Refuses the first network a NAD brings that the policy at `policy.admission_policy` denies
/// (none without a policy file): the secondary ones, and the cluster network when the pod
/// chose it (the default-network annotation). An unreadable policy refuses too: the node never
/// runs a network unchecked because the admin's policy is broken.
pub fn check(
    policy: &TenantPolicy,
    pod_namespace: &str,
    attachments: &[Attachment],
    pod_chose_cluster: bool,
) -> Result<()> {
    let Some(path) = &policy.admission_policy else {
        return Ok(());
    };
    let tenants = || {
        attachments.iter().filter(|a| match a.role {
            Role::Secondary => true,
            Role::Cluster => pod_chose_cluster,
            Role::Auxiliary => false,
        })
    };
    let Some(first) = tenants().next() else {
        return Ok(());
    };
    let admission = read(path).map_err(|msg| refused(first, path, msg))?;
    let linter = Linter::policy_only(admission, policy.cluster_cidrs.clone());
    for a in tenants() {
        let namespace = a.delegate.name.split_once('/').map(|(ns, _)| ns);
        if let Some(ns) = namespace.filter(|ns| *ns != pod_namespace) {
            if !linter.policy().allows_cross_namespace_from(pod_namespace) {
                return Err(refused(
                    a,
                    path,
                    format!(
                        "[policy-cross-namespace]: a pod in namespace {pod_namespace:?} may not use \
                         a NetworkAttachmentDefinition of namespace {ns:?} (crossNamespaceFrom)"
                    ),
                ));
            }
        }
        let mut report = Report::default();
        let config = String::from_utf8_lossy(a.delegate.network.bytes());
        linter.check_config(&a.delegate.name, &config, &mut report);
        let errors: Vec<String> = report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| {
                format!(
                    "{} [{}]: {} (fix: {})",
                    f.place.path, f.check, f.problem, f.fix
                )
            })
            .collect();
        if !errors.is_empty() {
            return Err(refused(a, path, errors.join("; ")));
        }
    }
    Ok(())
}

fn read(path: &Path) -> std::result::Result<Policy, String> {
    Policy::read(path).map_err(|e| e.to_string())
}

fn refused(a: &Attachment, path: &Path, msg: String) -> Error {
    Error::Refused {
        network: a.delegate.name.clone(),
        ifname: a.ifname.clone(),
        policy: path.to_owned(),
        msg,
    }
}
