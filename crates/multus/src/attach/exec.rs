//! One delegate's ADD, DEL and CHECK, exec'd through [`cni::network`] exactly as a runtime
//! would exec it, with the attachment's interface, `CNI_ARGS` and runtime config.

use cni::CniResult;

use super::cluster::ClusterView;
use super::route::{self, DefaultRouteChange, Demoted, Dropped, PodNetns};
use crate::error::{Error, Result};
use crate::invocation::Invocation;
use crate::plan::Attachment;

fn call<'a>(inv: &'a Invocation, a: &'a Attachment) -> cni::network::Attachment<'a> {
    cni::network::Attachment {
        container_id: &inv.args.container_id,
        netns: &inv.args.netns,
        ifname: &a.ifname,
        args: &a.cni_args,
        capability_args: &a.capability_args,
        path: &inv.path,
        cache_dir: &inv.conf.cni_dir,
    }
}

fn delegate_error(a: &Attachment, source: cni::CniError) -> Error {
    Error::Delegate {
        network: a.delegate.name.clone(),
        ifname: a.ifname.clone(),
        source: Box::new(source),
    }
}

/// What one delegate's ADD gave, and what multus took back from it.
pub struct Added {
    pub result: CniResult,
    /// Its default routes kept behind the pod's.
    pub demoted: Vec<Demoted>,
    /// Its routes into the cluster's networks, removed.
    pub dropped: Vec<Dropped>,
    /// Why the device plugin's device-info could not be handed to the delegate, if so.
    pub device_info_unusable: Option<String>,
}

/// ADD, with the pod's `default-route` applied and the default routes the attachment must
/// not lead put behind the pod's (see [`route::demote_defaults`]); a secondary network (one
/// with `cluster`, the cluster network's view) loses its routes into the cluster's networks,
/// and fails when it got an address there. The result is cached as libcni caches it.
pub fn add(
    inv: &Invocation,
    pod_ns: &PodNetns,
    a: &Attachment,
    cluster: Option<&ClusterView>,
) -> Result<Added> {
    let d = &a.delegate;
    tracing::debug!(network = %d.name, ifname = %a.ifname, "ADD");
    let (mut result, mut entry) = d
        .network
        .add_uncached(&call(inv, a))
        .map_err(|source| delegate_error(a, source))?;
    let mut dropped = Vec::new();
    if let Some(cluster) = cluster {
        cluster.check_addresses(&inv.conf.policy, &inv.node, a, &result)?;
        if !inv.conf.policy.allow_cluster_routes {
            dropped = route::drop_overlapping(
                pod_ns,
                &a.ifname,
                |dst| cluster.overlapped_by(dst),
                &mut result,
            )?;
        }
    }
    let change = DefaultRouteChange {
        remove_v4: d.filter_v4_gateway || d.default_route.iter().any(|g| g.is_ipv4()),
        remove_v6: d.filter_v6_gateway || d.default_route.iter().any(|g| g.is_ipv6()),
        add: &d.default_route,
    };
    if !change.is_empty() {
        route::apply(pod_ns, &a.ifname, &change, &mut result)?;
    }
    let demoted =
        route::demote_defaults(pod_ns, &a.ifname, &a.keep_defaults_behind(), &mut result)?;
    if !change.is_empty() || !demoted.is_empty() || !dropped.is_empty() {
        // The cache holds the routes the interface really has, for DEL and CHECK.
        entry.result = Some(result.to_value(d.network.version)?);
    }
    cni::cache::write(&inv.conf.cni_dir, &entry)?;
    Ok(Added {
        result,
        demoted,
        dropped,
        device_info_unusable: None,
    })
}

/// DEL; plugins that cannot be found made nothing, and are skipped with a warning.
pub fn del(inv: &Invocation, a: &Attachment) -> Result<()> {
    let (network, ifname) = (&a.delegate.name, &a.ifname);
    tracing::debug!(%network, %ifname, "DEL");
    let skipped = a
        .delegate
        .network
        .del(&call(inv, a))
        .map_err(|source| delegate_error(a, source))?;
    for why in skipped {
        tracing::warn!(%network, %ifname, "DEL skips a plugin that cannot be run, so it made nothing to delete: {why}");
    }
    Ok(())
}

pub fn check(inv: &Invocation, a: &Attachment) -> Result<()> {
    a.delegate
        .network
        .check(&call(inv, a))
        .map_err(|source| delegate_error(a, source))
}
