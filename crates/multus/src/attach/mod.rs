//! Attach: runs a plan's delegates in order (ADD), in reverse (DEL), or each (CHECK). A failed
//! ADD deletes every delegate that ran and the delegate cache again, so DEL finds nothing.

mod cluster;
mod exec;
pub mod route;

use crate::cache::{self, CacheSync};
use crate::error::{Error, Result};
use crate::invocation::Invocation;
use crate::plan::hotplug::{Removal, Sandbox};
use crate::plan::{Attachment, Plan, Role};
use cluster::ClusterView;
pub use exec::Added;
use npwg::devinfo;
use route::PodNetns;

/// ADD of every attachment in order. The delegate cache is written before the first runs, so
/// a DEL after a crash finds them all; it is returned on its way to disk, with one [`Added`]
/// per attachment, in order.
pub fn add(inv: &Invocation, plan: &Plan) -> Result<(Vec<Added>, CacheSync)> {
    let pod_ns = PodNetns::open(&inv.args.netns)?;
    // A name the pod has already (a repeated ADD) is refused before the delegate cache is
    // written: the cache of the attachment that is there stays for its DEL.
    for a in &plan.attachments {
        free_ifname(&pod_ns, a)?;
    }
    let cache_sync = cache::save(
        &inv.conf.cni_dir,
        &inv.args.container_id,
        plan.attachments.iter().map(|a| &a.delegate),
    )?;
    let mut attached: Vec<Added> = Vec::with_capacity(plan.attachments.len());
    // What the cluster network holds, once it is attached: a secondary network must not take it.
    let mut cluster: Option<ClusterView> = None;
    for (index, a) in plan.attachments.iter().enumerate() {
        // A name taken since is refused before the delegate runs: its DEL would remove the
        // interface that was there.
        if let Err(e) = free_ifname(&pod_ns, a) {
            return Err(fail(inv, plan, index, e));
        }
        let secondary = cluster.as_ref().filter(|_| a.role == Role::Secondary);
        if let Some(Err(e)) = secondary.map(|c| c.check_interfaces(&inv.conf.policy, a)) {
            return Err(fail(inv, plan, index, e));
        }
        let device_info_unusable = copy_device_info(a);
        match exec::add(inv, &pod_ns, a, secondary) {
            Ok(mut added) => {
                added.device_info_unusable = device_info_unusable;
                if a.role == Role::Cluster {
                    cluster = Some(ClusterView::new(&inv.conf.policy, a, &added.result));
                }
                attached.push(added);
            }
            Err(e) => return Err(fail(inv, plan, index + 1, e)),
        }
    }
    Ok((attached, cache_sync))
}

/// Hot-plug ADD of `a` into `sandbox`, which has it once it is added: the delegate cache
/// records it before it runs, so that the sandbox's DEL finds it whatever happens next, and
/// forgets it again if it fails. It is checked against the cluster network as a secondary
/// network at ADD is.
pub fn hot_add(inv: &Invocation, sandbox: &mut Sandbox, a: Attachment) -> Result<Added> {
    let pod_ns = PodNetns::open(&inv.args.netns)?;
    free_ifname(&pod_ns, &a)?;
    // A delegate cache always has the cluster network first.
    let cluster = ClusterView::new(
        &inv.conf.policy,
        &sandbox.attachments[0],
        &sandbox.cluster_result,
    );
    cluster.check_interfaces(&inv.conf.policy, &a)?;
    let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
    let before = sandbox.attachments.iter().map(|a| &a.delegate);
    cache::save(dir, id, before.chain(std::iter::once(&a.delegate)))?.wait()?;
    let device_info_unusable = copy_device_info(&a);
    match exec::add(inv, &pod_ns, &a, Some(&cluster)) {
        Ok(mut added) => {
            added.device_info_unusable = device_info_unusable;
            sandbox.attachments.push(a);
            Ok(added)
        }
        Err(e) => {
            for e in del(inv, std::slice::from_ref(&a)) {
                tracing::error!("rollback: {e}");
            }
            let before = sandbox.attachments.iter().map(|a| &a.delegate);
            if let Err(e) = cache::save(dir, id, before).and_then(CacheSync::wait) {
                tracing::error!("rollback: {e}");
            }
            Err(e)
        }
    }
}

/// Hot-plug DEL of what `removal` names; the removed attachment. The delegate cache (and
/// `sandbox`) forget a cached attachment only once its DEL succeeded, so that a failed one is
/// tried again by the sandbox's DEL.
pub fn hot_del(inv: &Invocation, sandbox: &mut Sandbox, removal: Removal) -> Result<Attachment> {
    let a = match &removal {
        Removal::Cached(index) => &sandbox.attachments[*index],
        Removal::Uncached(a) => a,
    };
    if let Some(e) = del(inv, std::slice::from_ref(a)).pop() {
        return Err(e);
    }
    match removal {
        Removal::Cached(index) => {
            let rest = sandbox
                .attachments
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != index)
                .map(|(_, a)| &a.delegate);
            cache::save(&inv.conf.cni_dir, &inv.args.container_id, rest)?.wait()?;
            Ok(sandbox.attachments.remove(index))
        }
        Removal::Uncached(a) => Ok(*a),
    }
}

/// A failed ADD: the first `ran` attachments are deleted again.
fn fail(inv: &Invocation, plan: &Plan, ran: usize, e: Error) -> Error {
    undo(inv, &plan.attachments[..ran]);
    e
}

/// Refuses an interface name the pod already has.
fn free_ifname(pod_ns: &PodNetns, a: &Attachment) -> Result<()> {
    if pod_ns.has_interface(&a.ifname)? {
        return Err(Error::Request {
            network: a.delegate.name.clone(),
            ifname: a.ifname.clone(),
            msg: "the pod already has an interface of this name".to_owned(),
        });
    }
    Ok(())
}

/// Copies the device plugin's device-info file to the one the delegate gets. A file that
/// cannot be copied is a warning, returned for the report: the pod comes up without it.
fn copy_device_info(a: &Attachment) -> Option<String> {
    let (Some(from), Some(file)) = (&a.device_plugin_file, &a.device_info_file) else {
        return None;
    };
    let (network, ifname) = (&a.delegate.name, &a.ifname);
    match devinfo::copy(from, file) {
        Ok(true) => {
            tracing::debug!(%network, %ifname, "device-info copied from {}", from.display());
            None
        }
        Ok(false) => {
            tracing::debug!(%network, %ifname, "no device-info from the device plugin at {}", from.display());
            None
        }
        Err(e) => Some(format!(
            "network {network} on interface {ifname}: {e}; not copied to {}",
            file.display()
        )),
    }
}

/// Rolls back a failed ADD: DEL of `attachments` in reverse order, then the delegate cache.
pub fn undo(inv: &Invocation, attachments: &[Attachment]) {
    for e in del(inv, attachments) {
        tracing::error!("rollback: {e}");
    }
    if let Err(e) = cache::remove(&inv.conf.cni_dir, &inv.args.container_id) {
        tracing::error!("rollback: {e}");
    }
}

/// DEL of every attachment in reverse order, each whatever the others did; the errors.
pub fn del(inv: &Invocation, attachments: &[Attachment]) -> Vec<Error> {
    let mut errors = Vec::new();
    for a in attachments.iter().rev() {
        let (network, ifname) = (&a.delegate.name, &a.ifname);
        // Never run multus as a delegate, even from an old cache: it made nothing.
        if let Err(e) = a.delegate.refuse_this_binary(&inv.path) {
            tracing::error!(%network, %ifname, "DEL skips it: {e}");
            continue;
        }
        let deleted = exec::del(inv, a);
        if let Some(file) = &a.device_info_file {
            if let Err(e) = devinfo::remove(file) {
                tracing::warn!(%network, %ifname, "{e}");
            }
        }
        if let Err(e) = deleted {
            tracing::error!(%network, %ifname, "DEL failed: {e}");
            errors.push(e);
        }
    }
    errors
}

/// CHECK of every attachment; the errors.
pub fn check(inv: &Invocation, attachments: &[Attachment]) -> Vec<Error> {
    let mut errors = Vec::new();
    for a in attachments {
        if let Err(e) = a.delegate.refuse_this_binary(&inv.path) {
            errors.push(e);
            continue;
        }
        if !a.delegate.network.version.has_check() {
            tracing::info!(network = %a.delegate.name, "CHECK skipped: version {}", a.delegate.network.version);
            continue;
        }
        if let Err(e) = exec::check(inv, a) {
            errors.push(e);
        }
    }
    errors
}
