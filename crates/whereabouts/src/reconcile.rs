//! The reconciler: one pass over every pool and reservation of the cluster, freeing what the
//! reference's reconciler frees. An allocation is orphaned unless its pod exists, is not being
//! deleted by the taint manager, and shows the address on a secondary network of its
//! network-status. A pod still Pending is read again, up to 3 times 250 ms apart, before its
//! addresses count as orphaned. In node-slice mode, it also frees the slices of nodes that are
//! gone, as the reference's node-slice controller does.
//!
//! Every allocation and reservation judged was there before the pods were listed: what an ADD
//! writes during the pass may be a pod's that the list does not hold, and is left alone.
//!
//! A hold on an address another host answered for is freed once its time is over, never
//! before, whatever the pods. An IPAMClaim's address is freed once the claim is gone, never
//! while it exists, whatever the pods.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use ipam::whereabouts::{
    claimed_by, held_until, statefulset_member, wants_ordinal, Member, NodeSlicePool, Pool, Range,
};
use k8s::{Deleted, KubeClient, Written};
use serde_json::Value;

use crate::error::Error;
use crate::store::{IPAM_CLAIMS, IPPOOLS, NODE_SLICE_POOLS, RESERVATIONS, STATEFULSETS};

const PENDING_READS: u32 = 3;
const PENDING_PAUSE: Duration = Duration::from_millis(250);
/// Rounds of reading a pool again when it changed between the list and our write.
const POOL_ROUNDS: u32 = 5;

/// What the pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub freed: usize,
    pub reservations_deleted: usize,
    pub slices_freed: usize,
}

/// What the pass knows of one pod.
#[derive(Clone, Debug)]
struct PodView {
    pending: bool,
    ips: Vec<IpAddr>,
}

fn view(pod: &Value) -> Option<PodView> {
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
    let tainted = conditions.is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "DisruptionTarget"
                && c["status"] == "True"
                && c["reason"] == "DeletionByTaintManager"
        })
    });
    if tainted {
        return None;
    }
    let status = pod
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(npwg::status::NETWORK_STATUS_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or("[]");
    Some(PodView {
        pending: pod.pointer("/status/phase").and_then(Value::as_str) == Some("Pending"),
        ips: npwg::status::secondary_ips(status),
    })
}

fn podref_of(pod: &Value) -> String {
    let text = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!("{}/{}", text("/metadata/namespace"), text("/metadata/name"))
}

/// Whose allocations a pass judges.
enum Judged {
    /// Every pod of the cluster, as listed, by podref: an allocation of any other pod is
    /// orphaned.
    Listed(HashMap<String, PodView>),
    /// Only these pods, which the API no longer has: every other allocation is left alone.
    Deleted(HashSet<String>),
}

struct Pods<'a> {
    client: &'a KubeClient,
    judged: Judged,
    claims: Claims,
}

/// Which IPAMClaims' allocations a pass judges, each claim as `namespace/name`.
enum Claims {
    /// Every claim of the cluster, as listed: an allocation of any other claim is orphaned.
    Listed(HashSet<String>),
    /// Only these claims, which the API no longer has.
    Deleted(HashSet<String>),
}

impl Pods<'_> {
    /// Why the allocation or reservation (`id`, `podref`) of `ips` is to be freed, or `None`:
    /// a hold by its time, a claim's by whether the claim exists, a pod's by the pod.
    fn judge(&mut self, id: &str, podref: &str, ips: &[IpAddr]) -> Option<String> {
        if let Some(until) = held_until(id, podref) {
            return hold_over(until, SystemTime::now());
        }
        if let Some(member) = statefulset_member(podref) {
            return self.statefulset_judge(&member);
        }
        if let Some((ns, name)) = claimed_by(podref) {
            let claim = format!("{ns}/{name}");
            let gone = match &self.claims {
                Claims::Listed(live) => !live.contains(&claim),
                Claims::Deleted(gone) => gone.contains(&claim),
            };
            return gone.then(|| format!("IPAMClaim {claim} is gone"));
        }
        self.orphaned(podref, ips)
    }

    /// Why a StatefulSet pod's kept address is to be freed: its pod is gone and its StatefulSet
    /// no longer wants that ordinal, or is gone. A read that fails keeps it.
    fn statefulset_judge(&self, m: &Member) -> Option<String> {
        let podref = format!("{}/{}", m.namespace, m.pod);
        let pod_gone = match &self.judged {
            Judged::Listed(live) => !live.contains_key(&podref),
            Judged::Deleted(gone) => gone.contains(&podref),
        };
        if !pod_gone {
            return None;
        }
        let sts = format!("{}/{}", m.namespace, m.statefulset);
        match self
            .client
            .get_object(STATEFULSETS, m.namespace, m.statefulset)
        {
            Ok(Some(obj)) if wants_ordinal(&obj, m.ordinal) => None,
            Ok(Some(_)) => Some(format!("StatefulSet {sts} no longer wants pod {}", m.pod)),
            Ok(None) => Some(format!("StatefulSet {sts} of pod {} is gone", m.pod)),
            Err(e) => {
                nodelog::warn!("kept the address of pod {podref}: {e}");
                None
            }
        }
    }

    /// Why `ip` of `podref` is orphaned, or `None` when the pod holds it.
    fn orphaned(&mut self, podref: &str, ips: &[IpAddr]) -> Option<String> {
        let live = match &mut self.judged {
            Judged::Deleted(gone) => {
                return gone
                    .contains(podref)
                    .then(|| format!("pod {podref} was deleted"));
            }
            Judged::Listed(live) => live,
        };
        let Some(pod) = live.get(podref).cloned() else {
            return Some(format!("pod {podref} is gone or being deleted"));
        };
        let shows = |p: &PodView| ips.iter().any(|ip| p.ips.contains(ip));
        if shows(&pod) {
            return None;
        }
        if pod.pending {
            for _ in 0..PENDING_READS {
                let (ns, name) = podref.split_once('/').unwrap_or(("", podref));
                // A read that fails keeps the address: only an answer frees it. (The
                // reference frees it on any error.)
                let fresh = match self.client.get_pod(ns, name).map(serde_json::to_value) {
                    Ok(Ok(pod)) => Some(pod),
                    Err(e) if e.is_not_found() => None,
                    _ => return None,
                };
                let Some(fresh) = fresh.as_ref().and_then(view) else {
                    live.remove(podref);
                    return Some(format!("pod {podref} is gone or being deleted"));
                };
                live.insert(podref.to_owned(), fresh.clone());
                if shows(&fresh) {
                    return None;
                }
                if !fresh.pending {
                    break;
                }
                std::thread::sleep(PENDING_PAUSE);
            }
        }
        Some(format!(
            "pod {podref} does not show it in its network-status"
        ))
    }
}

/// One pass: frees orphaned allocations and deletes orphaned reservations, logging a line
/// for each.
pub fn reconcile(client: &KubeClient) -> Result<Summary, Error> {
    // Pools and reservations before pods: an allocation made after the pods were listed
    // may be a pod's that the list does not hold.
    let pools = client.list_objects_everywhere(IPPOOLS)?;
    let reservations = client.list_objects_everywhere(RESERVATIONS)?;
    let claims = list_claims(client)?;
    // Each page of pods is cut down to its view as it comes: a large cluster is never held
    // whole.
    let live = client
        .list_pods_everywhere(&mut |p| Some((podref_of(&p), view(&p)?)))?
        .into_iter()
        .collect();
    let pods = Pods {
        client,
        judged: Judged::Listed(live),
        claims: Claims::Listed(claims),
    };
    let mut summary = free_orphans(client, &pools, &reservations, pods)?;
    summary.slices_freed = reconcile_slices(client)?;
    Ok(summary)
}

/// Frees the allocations and deletes the reservations of these pods and IPAMClaims (each
/// `namespace/name`) if the API no longer has them. A pod of the same name that exists again
/// (a StatefulSet's) is left to the next whole pass, which judges it by its network-status;
/// a claim made again under its name keeps its address.
pub fn free_deleted(
    client: &KubeClient,
    podrefs: &[String],
    claims: &[String],
) -> Result<Summary, Error> {
    // Pools and reservations before the pods are read, for the reason `reconcile` gives.
    let pools = client.list_objects_everywhere(IPPOOLS)?;
    let reservations = client.list_objects_everywhere(RESERVATIONS)?;
    // Which of `names` the API no longer has, as `exists` reads each.
    let gone = |names: &[String], exists: &dyn Fn(&str, &str) -> Result<bool, k8s::K8sError>| {
        let mut gone = HashSet::new();
        for name in names {
            let (ns, object) = name.split_once('/').unwrap_or(("", name));
            if !exists(ns, object)? {
                gone.insert(name.clone());
            }
        }
        Ok::<_, Error>(gone)
    };
    let gone_pods = gone(podrefs, &|ns, name| match client.get_pod(ns, name) {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    })?;
    let gone_claims = gone(claims, &|ns, name| {
        Ok(client.get_object(IPAM_CLAIMS, ns, name)?.is_some())
    })?;
    if gone_pods.is_empty() && gone_claims.is_empty() {
        return Ok(Summary::default());
    }
    let pods = Pods {
        client,
        judged: Judged::Deleted(gone_pods),
        claims: Claims::Deleted(gone_claims),
    };
    free_orphans(client, &pools, &reservations, pods)
}

/// Frees the orphaned allocations of `pools` and deletes the orphaned `reservations`, as
/// `pods` judges them.
fn free_orphans(
    client: &KubeClient,
    pools: &[Value],
    reservations: &[Value],
    mut pods: Pods,
) -> Result<Summary, Error> {
    let mut summary = Summary::default();
    for obj in pools {
        summary.freed += reconcile_pool(client, &mut pods, obj)?;
    }
    for obj in reservations {
        let text = |p: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let (ns, name, podref) = (
            text("/metadata/namespace"),
            text("/metadata/name"),
            text("/spec/podref"),
        );
        if podref.is_empty() {
            continue;
        }
        let id = text("/spec/containerid");
        let Some(why) = pods.judge(&id, &podref, &addresses_named(&name)) else {
            continue;
        };
        let rv = text("/metadata/resourceVersion");
        let deleted = client.delete_object(
            RESERVATIONS,
            &ns,
            &name,
            (!rv.is_empty()).then_some(rv.as_str()),
        )?;
        if deleted == Deleted::Deleted {
            summary.reservations_deleted += 1;
            nodelog::info!("deleted OverlappingRangeIPReservation {ns}/{name}: {why}");
        }
    }
    Ok(summary)
}

/// The IPAMClaims of the cluster, as `namespace/name`. Where the API has no IPAMClaims
/// (their CRD is not installed), there is none.
fn list_claims(client: &KubeClient) -> Result<HashSet<String>, Error> {
    let claims = match client.list_objects_everywhere(IPAM_CLAIMS) {
        Ok(claims) => claims,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(claims
        .iter()
        .map(|c| {
            let text = |p: &str| c.pointer(p).and_then(Value::as_str).unwrap_or("");
            format!("{}/{}", text("/metadata/namespace"), text("/metadata/name"))
        })
        .collect())
}

/// Why a hold ([`ipam::whereabouts::hold`]) ending at `until` is freed by `now`; `None` while
/// it lasts. The reconciler never judges a hold by pods: it names none.
fn hold_over(until: SystemTime, now: SystemTime) -> Option<String> {
    (until <= now).then(|| "the hold on an address another host answered for is over".to_owned())
}

/// Frees the node slices of nodes that left the cluster. Nodes are listed only when some
/// NodeSlicePool exists, so a cluster without node slices needs no right to list them.
fn reconcile_slices(client: &KubeClient) -> Result<usize, Error> {
    let pools = client.list_objects_everywhere(NODE_SLICE_POOLS)?;
    if pools.is_empty() {
        return Ok(0);
    }
    let nodes: HashSet<String> = client.list_node_names()?.into_iter().collect();
    if nodes.is_empty() {
        // This runs on a node: an empty list is a server or RBAC quirk, not a cluster without
        // nodes, and freeing every slice on its word would hand out live addresses.
        nodelog::warn!("skipped node slices: the API lists no nodes");
        return Ok(0);
    }
    let live = |node: &str| nodes.contains(node);
    let mut freed = 0;
    for listed in &pools {
        freed += free_slices_of_gone_nodes(client, listed, &live)?;
    }
    Ok(freed)
}

/// Frees the pool's slices whose node is not `live` and whose IPPool holds no address any
/// more (the pods of a gone node are freed first, by the pass over the IPPools), in one
/// conditional write, reading the pool again if it changed meanwhile; then deletes those
/// empty IPPools. A node that comes back under its name before its pods are gone keeps its
/// slice and its addresses. Returns how many slices were freed.
fn free_slices_of_gone_nodes(
    client: &KubeClient,
    listed: &Value,
    live: &dyn Fn(&str) -> bool,
) -> Result<usize, Error> {
    let text = |p: &str| {
        listed
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (ns, name) = (text("/metadata/namespace"), text("/metadata/name"));
    let mut obj = listed.clone();
    for _ in 0..POOL_ROUNDS {
        let pool = NodeSlicePool::from_object(&obj).map_err(|source| Error::Object {
            object: format!("NodeSlicePool {ns}/{name}"),
            source,
        })?;
        let mut empty = HashMap::new();
        for (node, slice) in &pool.slices {
            if node.is_empty() || live(node) {
                continue;
            }
            match slice_pools(client, &ns, &name, node, slice)? {
                SlicePools::Empty(pools) => {
                    empty.insert(node.as_str(), pools);
                }
                SlicePools::Holding(pool_name, n) => {
                    nodelog::info!(
                        "kept slice {slice} in NodeSlicePool {ns}/{name}: node {node} is gone, \
                         but IPPool {ns}/{pool_name} still holds {n} addresses"
                    );
                }
            }
        }
        let Some((gone, patch)) = pool.release_patch(&|node| !empty.contains_key(node)) else {
            return Ok(0);
        };
        match client.json_patch_object(NODE_SLICE_POOLS, &ns, &name, &patch)? {
            Written::Done(_) => {
                for (node, slice) in &gone {
                    nodelog::info!(
                        "freed slice {slice} in NodeSlicePool {ns}/{name}: node {node} is gone"
                    );
                    for (pool_name, rv) in empty.get(node.as_str()).into_iter().flatten() {
                        // Conditional: a pool written since it was read is left for next time.
                        if client.delete_object(IPPOOLS, &ns, pool_name, Some(rv))?
                            == Deleted::Deleted
                        {
                            nodelog::info!("deleted IPPool {ns}/{pool_name}: empty");
                        }
                    }
                }
                return Ok(gone.len());
            }
            Written::Stale => match client.get_object(NODE_SLICE_POOLS, &ns, &name)? {
                Some(fresh) => obj = fresh,
                None => return Ok(0),
            },
        }
    }
    Err(Error::Contention {
        object: format!("NodeSlicePool {ns}/{name}"),
        rounds: POOL_ROUNDS,
    })
}

/// What a node's slice's IPPool holds.
enum SlicePools {
    /// No address: the pools there are, by name and resourceVersion.
    Empty(Vec<(String, String)>),
    /// This pool holds this many addresses.
    Holding(String, usize),
}

/// The IPPools a node's slice can have: `<pool>-<node>-<slice>` when the network names its
/// `network_name` (the NodeSlicePool's name), `<node>-<slice>` when it does not.
fn slice_pools(
    client: &KubeClient,
    ns: &str,
    slice_pool: &str,
    node: &str,
    slice: &str,
) -> Result<SlicePools, Error> {
    let Ok(slice) = slice.parse::<ipnet::IpNet>() else {
        return Ok(SlicePools::Empty(Vec::new()));
    };
    let mut found = Vec::new();
    for network_name in [slice_pool, ""] {
        let pool_name = ipam::whereabouts::pool_name(network_name, Some(node), &slice);
        let Some(obj) = client.get_object(IPPOOLS, ns, &pool_name)? else {
            continue;
        };
        let (pool, unreadable) = Pool::from_object(&obj).map_err(|source| Error::Object {
            object: format!("IPPool {ns}/{pool_name}"),
            source,
        })?;
        // An allocation under a key that is not an offset still holds its address.
        let held = pool.allocations.len() + unreadable;
        if held > 0 {
            return Ok(SlicePools::Holding(pool_name, held));
        }
        found.push((pool_name, pool.resource_version));
    }
    Ok(SlicePools::Empty(found))
}

/// The addresses a reservation's name can stand for: `[<network_name>-]<ip>` with `:` made
/// `-`, where the network name may itself hold `-`. The reference reads the whole name as the
/// address, so a reservation with a network name never matches its pod and is deleted on every
/// pass while the pod lives.
fn addresses_named(name: &str) -> Vec<IpAddr> {
    std::iter::once(name)
        .chain(name.match_indices('-').map(|(i, _)| &name[i + 1..]))
        .filter_map(|rest| rest.replace('-', ":").parse().ok())
        .collect()
}

/// Frees the pool's orphaned allocations in one conditional write. When the pool changed
/// meanwhile, it is read again and only the allocations judged orphaned in the first read and
/// still as they were are freed: one written since may be a pod's that the list of pods
/// predates. Returns how many were freed.
fn reconcile_pool(client: &KubeClient, pods: &mut Pods, listed: &Value) -> Result<usize, Error> {
    let text = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (ns, name) = (
        text(listed, "/metadata/namespace"),
        text(listed, "/metadata/name"),
    );
    let Some(range) = text(listed, "/spec/range")
        .parse()
        .ok()
        .and_then(|net| Range::new(net, None, None, Vec::new()).ok())
    else {
        nodelog::warn!("skipped IPPool {ns}/{name}: its spec.range is not a range");
        return Ok(0);
    };
    let read = |obj: &Value| {
        Pool::from_object(obj)
            .map(|(pool, _)| pool)
            .map_err(|source| Error::Object {
                object: format!("IPPool {ns}/{name}"),
                source,
            })
    };
    let mut pool = read(listed)?;
    let mut orphans = Vec::new();
    for (&offset, a) in &pool.allocations {
        let (Some(ip), false) = (range.ip_at(offset), a.podref.is_empty()) else {
            continue;
        };
        if let Some(why) = pods.judge(&a.id, &a.podref, &[ip]) {
            orphans.push((offset, a.clone(), ip, why));
        }
    }
    for _ in 0..POOL_ROUNDS {
        if orphans.is_empty() {
            return Ok(0);
        }
        let offsets: Vec<u128> = orphans.iter().map(|o| o.0).collect();
        match client.json_patch_object(IPPOOLS, &ns, &name, &pool.release_all_patch(&offsets))? {
            Written::Done(_) => {
                for (_, _, ip, why) in &orphans {
                    nodelog::info!("freed {ip} in IPPool {ns}/{name}: {why}");
                }
                return Ok(orphans.len());
            }
            Written::Stale => match client.get_object(IPPOOLS, &ns, &name)? {
                Some(fresh) => {
                    pool = read(&fresh)?;
                    orphans.retain(|(offset, a, ..)| pool.allocations.get(offset) == Some(a));
                }
                None => return Ok(0),
            },
        }
    }
    Err(Error::Contention {
        object: format!("IPPool {ns}/{name}"),
        rounds: POOL_ROUNDS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_name_stands_for_its_address_with_or_without_a_network_name() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(addresses_named("10.77.0.5"), [ip("10.77.0.5")]);
        assert!(addresses_named("blue-net-10.77.0.5").contains(&ip("10.77.0.5")));
        assert!(addresses_named("fd77-3--1").contains(&ip("fd77:3::1")));
        assert!(addresses_named("blue-fd77-3--1").contains(&ip("fd77:3::1")));
        assert!(addresses_named("not-an-address").is_empty());
    }
}
