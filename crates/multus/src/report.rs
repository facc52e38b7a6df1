//! Report: what ADD gave the pod, as its network-status annotation and its events.

use std::collections::BTreeMap;

use cni::CniResult;

use crate::api::{Pod, Reason};
use crate::attach::Added;
use crate::error::{Error, Result};
use crate::invocation::Invocation;
use crate::plan::hotplug::Sandbox;
use crate::plan::{Attachment, Plan, Role};
use npwg::devinfo;
use npwg::status::{self, NetworkStatus};

/// The network-status entries of every attachment, with the device-info each delegate left.
/// The auxiliary chain makes no interface of its own: an empty result of it shows nothing (as
/// upstream).
pub fn network_status(inv: &Invocation, plan: &Plan, attached: &[Added]) -> Vec<NetworkStatus> {
    let results = plan
        .attachments
        .iter()
        .zip(attached.iter().map(|a| &a.result));
    statuses(inv, plan.pod.as_ref(), results)
}

/// The network-status entries of a running sandbox (after hot-plug), from the results its
/// delegates' calls cached; an attachment without one is left out, said in the log.
pub fn sandbox_status(inv: &Invocation, pod: &Pod, sandbox: &Sandbox) -> Vec<NetworkStatus> {
    let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
    let mut results = Vec::new();
    for (index, a) in sandbox.attachments.iter().enumerate() {
        let cached = if index == 0 {
            Ok(sandbox.cluster_result.clone())
        } else {
            cni::cache::read(dir, &a.delegate.network.name, id, &a.ifname).and_then(|c| {
                c.and_then(|c| c.result)
                    .map(|r| CniResult::from_value(&r))
                    .unwrap_or_else(|| Ok(CniResult::default()))
            })
        };
        match cached {
            Ok(result) => results.push((a, result)),
            Err(e) => tracing::warn!(
                "network-status leaves out {} from {}: {e}",
                a.ifname,
                a.delegate.name
            ),
        }
    }
    statuses(inv, Some(pod), results.iter().map(|(a, r)| (*a, r)))
}

fn statuses<'a>(
    inv: &Invocation,
    pod: Option<&Pod>,
    results: impl Iterator<Item = (&'a Attachment, &'a CniResult)>,
) -> Vec<NetworkStatus> {
    let mut statuses = Vec::new();
    for (a, result) in results {
        if a.role == Role::Auxiliary && result.interfaces.is_empty() && result.ips.is_empty() {
            continue;
        }
        let device_info = device_info(inv, pod, a);
        let d = &a.delegate;
        let mut entries = status::entries(
            result,
            &d.name,
            &a.ifname,
            a.role == Role::Cluster,
            &d.default_route,
        );
        for entry in &mut entries {
            entry.device_info.clone_from(&device_info);
        }
        statuses.extend(entries);
    }
    statuses
}

/// The device-info attachment `a`'s delegate left, if any. A file that cannot be used is a
/// warning: the entry goes without it.
fn device_info(inv: &Invocation, pod: Option<&Pod>, a: &Attachment) -> Option<serde_json::Value> {
    let file = a.device_info_file.as_ref()?;
    devinfo::load(file).unwrap_or_else(|e| {
        inv.warn(
            pod,
            Reason::DeviceInfoUnusable,
            &format!(
                "network {} on interface {}: {e}; its network-status has no device-info",
                a.delegate.name, a.ifname
            ),
        );
        None
    })
}

/// Writes network-status on the pod, unless there is no pod or it is in a system namespace.
pub fn write_status(inv: &Invocation, pod: Option<&Pod>, statuses: &[NetworkStatus]) -> Result<()> {
    match (inv.api, pod) {
        (Some(api), Some(pod)) if !inv.is_system_namespace() => {
            let annotations = BTreeMap::from([(
                status::NETWORK_STATUS_ANNOTATION.to_owned(),
                status::annotation(statuses),
            )]);
            api.set_pod_annotations(pod, &annotations)
        }
        _ => Ok(()),
    }
}

/// The event of a plan that named a NAD which does not exist (ADD fails with it, DEL deletes
/// what it can know without it), or that the admission policy refused.
pub fn unresolved(inv: &Invocation, e: &Error) {
    match e {
        Error::NetworkNotFound(msg) => inv.event(inv.pod_read(), Reason::NoNetworkFound, msg),
        Error::Refused { .. } => {
            inv.event(inv.pod_read(), Reason::NetworkRefused, &e.to_string());
        }
        _ => {}
    }
}

/// The event of an ADD whose networks failed to attach, and were deleted again.
pub fn add_failed(inv: &Invocation, plan: &Plan, e: &Error) {
    inv.event(
        plan.pod.as_ref(),
        Reason::AddInterfaceFailed,
        &e.to_string(),
    );
}

/// The events of a successful ADD: one per interface added, then one per device-info the
/// delegate could not be given, one per secondary network whose default route was kept
/// behind the pod's, and one per route into the cluster's networks removed.
pub fn added(inv: &Invocation, pod: Option<&Pod>, attachments: &[Attachment], attached: &[Added]) {
    for (a, Added { result, .. }) in attachments.iter().zip(attached) {
        let ips: Vec<String> = result.ips.iter().map(|ip| ip.address.to_string()).collect();
        let msg = format!(
            "Add {} [{}] from {}",
            a.ifname,
            ips.join(" "),
            a.delegate.name
        );
        tracing::info!("{msg}");
        inv.event(pod, Reason::AddedInterface, &msg);
    }
    for unusable in attached
        .iter()
        .filter_map(|a| a.device_info_unusable.as_ref())
    {
        inv.warn(pod, Reason::DeviceInfoUnusable, unusable);
    }
    for (a, Added { demoted, .. }) in attachments.iter().zip(attached) {
        for moved in demoted {
            let msg = format!(
                "{} from {}: {moved}; name this network with \"default-route\" in the pod's \
                 networks annotation to route the pod through it",
                a.ifname, a.delegate.name
            );
            inv.warn(pod, Reason::SecondaryDefaultRoute, &msg);
        }
    }
    for (a, Added { dropped, .. }) in attachments.iter().zip(attached) {
        for route in dropped {
            let msg = format!(
                "{} from {}: {route} (allowClusterRoutes in the multus config keeps such routes)",
                a.ifname, a.delegate.name
            );
            inv.warn(pod, Reason::SecondaryRouteDropped, &msg);
        }
    }
}

/// The event of an interface hot-plug removed.
pub fn removed(inv: &Invocation, pod: Option<&Pod>, a: &Attachment) {
    let msg = format!("Remove {} from {}", a.ifname, a.delegate.name);
    tracing::info!("{msg}");
    inv.event(pod, Reason::RemovedInterface, &msg);
}

/// The event of a network hot-plug could not add: a NAD that is not there or a network the
/// admission policy denies as at ADD, any other failure as `AddInterfaceFailed`.
pub fn hot_add_failed(inv: &Invocation, pod: Option<&Pod>, e: &Error) {
    match e {
        Error::NetworkNotFound(_) | Error::Refused { .. } => unresolved(inv, e),
        _ => inv.warn(pod, Reason::AddInterfaceFailed, &e.to_string()),
    }
}

/// The event of an interface hot-plug could not remove.
pub fn hot_remove_failed(inv: &Invocation, pod: Option<&Pod>, e: &Error) {
    inv.warn(pod, Reason::RemoveInterfaceFailed, &e.to_string());
}
