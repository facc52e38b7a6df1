//! The CNI commands. Kubernetes calls happen here and in [`crate::resolve`] only, through
//! [`Api`]; everything else works on plain data.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni::network::Attachment;
use cni::{CmdArgs, CniError, CniResult, GcAttachment};
use serde_json::Value;

use crate::api::{Api, EventKind, Events, Pod};
use crate::config::MultusConf;
use crate::container_lock::{self, ContainerLock};
use crate::delegate::{self, Delegate};
use crate::devinfo;
use crate::error::{Error, Result};
use crate::pod_devices::PodDevices;
use crate::resolve::Context;
use crate::route::{self, DefaultRouteChange, PodNetns};
use crate::status::{self, NetworkStatus};
use netkit::Family;

/// The reason of the event a device-info file that cannot be used leaves on the pod.
const DEVICE_INFO_EVENT: &str = "DeviceInfoUnusable";
/// The reason of the event a secondary network's default route, kept behind the pod's, leaves.
const SECONDARY_DEFAULT_ROUTE_EVENT: &str = "SecondaryDefaultRoute";

/// The pod, as the runtime names it in `CNI_ARGS`.
#[derive(Clone, Debug, Default)]
pub struct K8sArgs {
    pub namespace: String,
    pub name: String,
    pub infra_container_id: String,
    pub uid: String,
    /// Every `CNI_ARGS` pair, passed on to delegates.
    pub pairs: Vec<(String, String)>,
}

impl K8sArgs {
    pub fn parse(raw: &str) -> Result<K8sArgs> {
        let args = cni::args::CniArgs::parse(raw)?;
        let get = |k: &str| args.get(k).unwrap_or_default().to_owned();
        Ok(K8sArgs {
            namespace: get("K8S_POD_NAMESPACE"),
            name: get("K8S_POD_NAME"),
            infra_container_id: get("K8S_POD_INFRA_CONTAINER_ID"),
            uid: get("K8S_POD_UID"),
            pairs: args.pairs().to_vec(),
        })
    }

    /// `CNI_ARGS` for a delegate: the pod's identity first (as upstream orders it), then the
    /// runtime's other pairs, then the MAC and IPs the selection asked for.
    fn for_delegate(&self, d: &Delegate) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            ("IgnoreUnknown", "true"),
            ("K8S_POD_NAMESPACE", self.namespace.as_str()),
            ("K8S_POD_NAME", self.name.as_str()),
            (
                "K8S_POD_INFRA_CONTAINER_ID",
                self.infra_container_id.as_str(),
            ),
            ("K8S_POD_UID", self.uid.as_str()),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (k, v) in &self.pairs {
            match out.iter_mut().find(|(key, _)| key == k) {
                Some(slot) if slot.1.is_empty() => slot.1.clone_from(v),
                Some(_) => {}
                None => out.push((k.clone(), v.clone())),
            }
        }
        if let Some(mac) = &d.mac {
            out.push(("MAC".into(), mac.clone()));
        }
        if !d.ips.is_empty() {
            out.push(("IP".into(), d.ips.join(",")));
        }
        out
    }
}

/// One command's inputs.
pub struct Invocation<'a> {
    pub conf: MultusConf,
    pub k8s: K8sArgs,
    pub args: &'a CmdArgs,
    /// `binDir`, then `CNI_PATH`.
    pub path: Vec<PathBuf>,
    pub api: Option<&'a dyn Api>,
    /// The command's events, recorded together at its end.
    pub events: Events,
}

impl Invocation<'_> {
    /// What resolves the pod's delegates. With `devices_required`, a network whose NAD names
    /// a resource and that gets no device of it fails (ADD); without, it goes without (DEL).
    fn context<'b>(&'b self, pod: Option<&'b Pod>, devices_required: bool) -> Context<'b> {
        Context {
            conf: &self.conf,
            api: self.api,
            events: &self.events,
            pod,
            pod_namespace: &self.k8s.namespace,
            devices: pod.map(|pod| {
                // The kubelet's UID: a static pod's differs from its mirror's in the API.
                let uid = if self.k8s.uid.is_empty() {
                    &pod.uid
                } else {
                    &self.k8s.uid
                };
                PodDevices::new(&self.conf, pod, uid, devices_required)
            }),
        }
    }

    fn attachment<'b>(
        &'b self,
        ifname: &'b str,
        cni_args: &'b [(String, String)],
        capability_args: &'b serde_json::Map<String, serde_json::Value>,
    ) -> Attachment<'b> {
        Attachment {
            container_id: &self.args.container_id,
            netns: &self.args.netns,
            ifname,
            args: cni_args,
            capability_args,
            path: &self.path,
            cache_dir: &self.conf.cni_dir,
        }
    }

    /// The device-info file of delegate `d` on `ifname`, when it uses one.
    fn device_info_file(&self, d: &Delegate, ifname: &str) -> Option<PathBuf> {
        d.uses_device_info().then(|| {
            devinfo::cni_path(
                &self.conf.device_info_dir,
                &d.name,
                &self.args.container_id,
                ifname,
            )
        })
    }

    /// What delegate `d` (number `index`) is offered as runtime config on `ifname`: its
    /// selection's requests and its device-info file.
    fn capability_args(
        &self,
        d: &Delegate,
        index: usize,
        ifname: &str,
    ) -> serde_json::Map<String, Value> {
        let mut args = d.capability_args(index, &self.conf.runtime_config);
        if let Some(file) = self.device_info_file(d, ifname) {
            args.insert(
                devinfo::CAPABILITY.into(),
                file.to_string_lossy().into_owned().into(),
            );
        }
        args
    }

    /// A device-info file that cannot be used: said in the log and as a pod event. The pod
    /// still comes up.
    fn device_info_warning(&self, pod: Option<&Pod>, msg: &str) {
        tracing::warn!("{msg}");
        self.event(pod, EventKind::Warning, DEVICE_INFO_EVENT, msg);
    }

    /// Copies the device plugin's device-info file for delegate `d` to the file the delegate
    /// gets, when its NAD names a resource and the delegate has a device ID.
    fn copy_device_info(&self, pod: Option<&Pod>, d: &Delegate, ifname: &str) {
        let (Some(file), Some(resource), Some(device_id)) = (
            self.device_info_file(d, ifname),
            &d.resource_name,
            &d.device_id,
        ) else {
            return;
        };
        let from = devinfo::dp_path(&self.conf.device_info_dir, resource, device_id);
        match devinfo::copy(&from, &file) {
            Ok(true) => {
                tracing::debug!(network = %d.name, %ifname, "device-info copied from {}", from.display())
            }
            Ok(false) => {
                tracing::debug!(network = %d.name, %ifname, "no device-info from the device plugin at {}", from.display())
            }
            Err(e) => self.device_info_warning(
                pod,
                &format!(
                    "network {} on interface {ifname}: {e}; not copied to {}",
                    d.name,
                    file.display()
                ),
            ),
        }
    }

    /// The device-info delegate `d` left for `ifname`, if any.
    fn device_info(&self, pod: Option<&Pod>, d: &Delegate, ifname: &str) -> Option<Value> {
        let file = self.device_info_file(d, ifname)?;
        devinfo::load(&file).unwrap_or_else(|e| {
            self.device_info_warning(
                pod,
                &format!(
                    "network {} on interface {ifname}: {e}; its network-status has no device-info",
                    d.name
                ),
            );
            None
        })
    }

    fn is_system_namespace(&self) -> bool {
        self.conf.system_namespaces.contains(&self.k8s.namespace)
    }

    /// The pod from the API, checked against the runtime's UID. `None` without an API or
    /// without a pod name (a runtime other than the kubelet).
    fn pod(&self) -> Result<Option<Pod>> {
        let Some(api) = self.api else { return Ok(None) };
        if self.k8s.name.is_empty() {
            return Ok(None);
        }
        let pod_ref = format!("{}/{}", self.k8s.namespace, self.k8s.name);
        let pod = api
            .pod(&self.k8s.namespace, &self.k8s.name)?
            .ok_or_else(|| Error::Api(format!("pod {pod_ref} not found")))?;
        if !self.k8s.uid.is_empty() && pod.uid != self.k8s.uid && !pod.is_static() {
            return Err(Error::UidMismatch {
                pod: pod_ref,
                expected: self.k8s.uid.clone(),
                actual: pod.uid,
            });
        }
        Ok(Some(pod))
    }

    fn event(&self, pod: Option<&Pod>, kind: EventKind, reason: &str, message: &str) {
        if let (Some(_), Some(pod)) = (self.api, pod) {
            self.events.push(pod, kind, reason, message);
        }
    }

    /// The container's lock: one ADD, DEL or CHECK at a time.
    fn lock(&self) -> Result<ContainerLock> {
        container_lock::acquire(
            &self.conf.cni_dir,
            &self.args.container_id,
            container_lock::WAIT,
        )
    }

    /// Records the command's events, once its work is done.
    fn send_events(&self) {
        if let Some(api) = self.api {
            self.events.send(api);
        }
    }

    /// Runs `f` for every delegate in reverse order, collecting the errors.
    fn del_each(&self, delegates: &[Delegate]) -> Vec<Error> {
        let mut errors = Vec::new();
        for (index, d) in delegates.iter().enumerate().rev() {
            let ifname = d.ifname(&self.args.ifname, index);
            // Never run multus as a delegate, even from an old cache: it made nothing.
            if let Err(e) = d.refuse_this_binary(&self.path) {
                tracing::error!(network = %d.name, %ifname, "DEL skips it: {e}");
                continue;
            }
            let cni_args = self.k8s.for_delegate(d);
            let caps = self.capability_args(d, index, &ifname);
            let att = self.attachment(&ifname, &cni_args, &caps);
            tracing::debug!(network = %d.name, %ifname, "DEL");
            let deleted = d.network.del(&att).map(|skipped| {
                for why in skipped {
                    tracing::warn!(network = %d.name, %ifname, "DEL skips a plugin that cannot be run, so it made nothing to delete: {why}");
                }
            });
            if let Some(file) = self.device_info_file(d, &ifname) {
                if let Err(e) = devinfo::remove(&file) {
                    tracing::warn!(network = %d.name, %ifname, "{e}");
                }
            }
            if let Err(source) = deleted {
                tracing::error!(network = %d.name, %ifname, "DEL failed: {source}");
                errors.push(Error::Delegate {
                    network: d.name.clone(),
                    ifname,
                    source: Box::new(source),
                });
            }
        }
        errors
    }
}

/// Waits for the readiness indicator file, polling, for at most `readinessTimeoutSeconds`.
fn wait_ready(conf: &MultusConf) -> Result<()> {
    let Some(file) = &conf.readiness_indicator_file else {
        return Ok(());
    };
    let deadline = Instant::now() + conf.readiness_timeout;
    loop {
        if file.exists() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::NotReady(format!(
                "readiness indicator file {} did not appear within {} s",
                file.display(),
                conf.readiness_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// ADD, alone on its container; its events are recorded once everything else is done,
/// success or not.
pub fn add(inv: &Invocation) -> Result<CniResult> {
    let lock = inv.lock()?;
    let added = attach_all(inv);
    // A failed ADD left nothing, so nothing is left for a DEL to find either.
    if added.is_err() && !delegate::cache_path(&inv.conf.cni_dir, &inv.args.container_id).exists() {
        lock.remove();
    } else {
        drop(lock);
    }
    inv.send_events();
    added
}

fn attach_all(inv: &Invocation) -> Result<CniResult> {
    wait_ready(&inv.conf)?;
    let pod = inv.pod()?;
    let ctx = inv.context(pod.as_ref(), true);
    let mut delegates = ctx.delegates()?;
    // The auxiliary chain runs last. It makes no interface of its own: an empty result of it
    // shows nothing in network-status (as upstream).
    let auxiliary = delegates.len();
    delegates.extend(ctx.auxiliary_chain()?);
    // Everything that can be refused is refused before anything runs.
    let mut ifnames: Vec<String> = Vec::with_capacity(delegates.len());
    for (index, d) in delegates.iter().enumerate() {
        let ifname = d.ifname(&inv.args.ifname, index);
        d.refuse_this_binary(&inv.path)?;
        d.check_capabilities(&ifname)?;
        if let Some(other) = ifnames.iter().position(|i| *i == ifname) {
            return Err(Error::Request {
                network: d.name.clone(),
                ifname,
                msg: format!(
                    "network {} gets this interface name too",
                    delegates[other].name
                ),
            });
        }
        ifnames.push(ifname);
    }
    let pod_ns = PodNetns::open(&inv.args.netns)?;
    // A name the pod has already (a repeated ADD) is refused before the delegate cache is
    // written: the cache of the attachment that is there stays for its DEL.
    for (d, ifname) in delegates.iter().zip(&ifnames) {
        free_ifname(&pod_ns, d, ifname)?;
    }
    let cache_sync = delegate::save_cache(&inv.conf.cni_dir, &inv.args.container_id, &delegates)?;

    let mut results: Vec<CniResult> = Vec::with_capacity(delegates.len());
    let mut statuses: Vec<NetworkStatus> = Vec::new();
    // Default routes of secondary networks kept behind the pod's own, told once all attached.
    let mut notes: Vec<String> = Vec::new();
    // On a failure: every delegate that ran is deleted again, and the pod gets a warning.
    let fail = |ran: &[Delegate], e: Error| {
        undo(inv, ran);
        inv.event(
            pod.as_ref(),
            EventKind::Warning,
            "AddInterfaceFailed",
            &e.to_string(),
        );
        Err(e)
    };
    for (index, (d, ifname)) in delegates.iter().zip(&ifnames).enumerate() {
        // A name already taken is refused before the delegate runs: its DEL would remove the
        // interface that was there.
        if let Err(e) = free_ifname(&pod_ns, d, ifname) {
            return fail(&delegates[..index], e);
        }
        inv.copy_device_info(pod.as_ref(), d, ifname);
        let demote = if index == 0 || index >= auxiliary {
            Vec::new()
        } else {
            families_to_keep_behind(d)
        };
        match attach(inv, &pod_ns, d, index, ifname, &demote) {
            Ok((result, demoted)) => {
                for moved in demoted {
                    let msg = format!(
                        "{ifname} from {}: {moved}; name this network with \"default-route\" \
                         in the pod's networks annotation to route the pod through it",
                        d.name
                    );
                    tracing::warn!("{msg}");
                    notes.push(msg);
                }
                if index < auxiliary || !(result.interfaces.is_empty() && result.ips.is_empty()) {
                    let device_info = inv.device_info(pod.as_ref(), d, ifname);
                    let mut entries =
                        status::entries(&result, &d.name, ifname, index == 0, &d.default_route);
                    for status_entry in &mut entries {
                        status_entry.device_info.clone_from(&device_info);
                    }
                    statuses.extend(entries);
                }
                results.push(result);
            }
            Err(e) => return fail(&delegates[..=index], e),
        }
    }
    let written = match (inv.api, pod.as_ref()) {
        (Some(api), Some(pod)) if !inv.is_system_namespace() => {
            let annotations = BTreeMap::from([(
                status::NETWORK_STATUS_ANNOTATION.to_owned(),
                status::annotation(&statuses),
            )]);
            api.set_pod_annotations(pod, &annotations)
        }
        _ => Ok(()),
    };
    // Success is reported only once the delegate cache is on disk.
    if let Err(e) = written.and_then(|()| cache_sync.wait()) {
        undo(inv, &delegates);
        return Err(e);
    }
    for ((d, ifname), result) in delegates.iter().zip(&ifnames).zip(&results) {
        let ips: Vec<String> = result.ips.iter().map(|ip| ip.address.to_string()).collect();
        let msg = format!("Add {ifname} [{}] from {}", ips.join(" "), d.name);
        tracing::info!("{msg}");
        inv.event(pod.as_ref(), EventKind::Normal, "AddedInterface", &msg);
    }
    for msg in &notes {
        inv.event(
            pod.as_ref(),
            EventKind::Warning,
            SECONDARY_DEFAULT_ROUTE_EVENT,
            msg,
        );
    }
    results
        .into_iter()
        .next()
        .ok_or_else(|| Error::config("delegates", "no cluster network"))
}

/// Refuses an interface name the pod already has.
fn free_ifname(pod_ns: &PodNetns, d: &Delegate, ifname: &str) -> Result<()> {
    if pod_ns.has_interface(ifname)? {
        return Err(Error::Request {
            network: d.name.clone(),
            ifname: ifname.to_owned(),
            msg: "the pod already has an interface of this name".to_owned(),
        });
    }
    Ok(())
}

/// The families whose default route secondary network `d` must not lead: those it does not ask
/// `default-route` for. (When another network asks, `filter_v4_gateway`/`filter_v6_gateway`
/// remove them, as upstream does.)
fn families_to_keep_behind(d: &Delegate) -> Vec<Family> {
    [Family::V4, Family::V6]
        .into_iter()
        .filter(|&f| !d.default_route.iter().any(|gw| Family::of(gw) == f))
        .collect()
}

/// ADD of one delegate, with its `default-route` applied and the default routes of `demote`
/// put behind the pod's (see [`route::demote_defaults`]); the result is cached as libcni
/// caches it.
fn attach(
    inv: &Invocation,
    pod_ns: &PodNetns,
    d: &Delegate,
    index: usize,
    ifname: &str,
    demote: &[Family],
) -> Result<(CniResult, Vec<route::Demoted>)> {
    let cni_args = inv.k8s.for_delegate(d);
    let caps = inv.capability_args(d, index, ifname);
    let att = inv.attachment(ifname, &cni_args, &caps);
    tracing::debug!(network = %d.name, %ifname, "ADD");
    let (mut result, mut entry) =
        d.network
            .add_uncached(&att)
            .map_err(|source| Error::Delegate {
                network: d.name.clone(),
                ifname: ifname.to_owned(),
                source: Box::new(source),
            })?;
    let change = DefaultRouteChange {
        remove_v4: d.filter_v4_gateway || d.default_route.iter().any(|g| g.is_ipv4()),
        remove_v6: d.filter_v6_gateway || d.default_route.iter().any(|g| g.is_ipv6()),
        add: &d.default_route,
    };
    if !change.is_empty() {
        route::apply(pod_ns, ifname, &change, &mut result)?;
    }
    let demoted = route::demote_defaults(pod_ns, ifname, demote, &mut result)?;
    if !change.is_empty() || !demoted.is_empty() {
        // The cache holds the routes the interface really has, for DEL and CHECK.
        entry.result = Some(result.to_value(d.network.version)?);
    }
    cni::cache::write(&inv.conf.cni_dir, &entry)?;
    Ok((result, demoted))
}

/// Rolls back a failed ADD: DEL of `delegates` in reverse order, then the delegate cache.
fn undo(inv: &Invocation, delegates: &[Delegate]) {
    for e in inv.del_each(delegates) {
        tracing::error!("rollback: {e}");
    }
    if let Err(e) = delegate::remove_cache(&inv.conf.cni_dir, &inv.args.container_id) {
        tracing::error!("rollback: {e}");
    }
}

/// DEL, alone on its container; its events (a missing NAD, when it has no cache) are
/// recorded at its end.
pub fn del(inv: &Invocation) -> Result<()> {
    let lock = inv.lock()?;
    let deleted = detach_all(inv);
    if deleted.is_ok() {
        lock.remove();
    } else {
        drop(lock);
    }
    inv.send_events();
    deleted
}

fn detach_all(inv: &Invocation) -> Result<()> {
    if let Some(file) = &inv.conf.readiness_indicator_file {
        if !file.exists() {
            tracing::info!(
                "readiness indicator file {} is missing on DEL",
                file.display()
            );
        }
    }
    let dir = &inv.conf.cni_dir;
    let id = &inv.args.container_id;
    let mut errors = Vec::new();
    let delegates = match delegate::load_cache(dir, id, &inv.conf.cni_version) {
        Ok(Some(delegates)) => delegates,
        Ok(None) => rebuild(inv)?,
        Err(e) => {
            tracing::error!("{e}; deleting what can be known without it");
            errors.push(match (delegate::quarantine_cache(dir, id), e) {
                (Ok(aside), Error::Cache { path, msg }) => Error::Cache {
                    path,
                    msg: format!(
                        "{msg}; moved to {} and deleted what could be known without it",
                        aside.display()
                    ),
                },
                (_, e) => e,
            });
            rebuild(inv)?
        }
    };
    let failures = inv.del_each(&delegates);
    // Also removes an empty cache, which load_cache reads as none.
    if failures.is_empty() || !inv.conf.retry_delete_on_error {
        delegate::remove_cache(dir, id)?;
    }
    errors.extend(failures);
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(Error::Many(errors)),
    }
}

/// The delegates of an attachment without a cache: from the API when the pod is there,
/// otherwise only what the configuration alone names, said in the log.
fn rebuild(inv: &Invocation) -> Result<Vec<Delegate>> {
    // Only here does DEL need the pod: with a cache, DEL never waits for the API.
    let pod = match inv.pod() {
        Ok(pod) => pod,
        Err(e) => {
            tracing::info!("DEL continues without the pod: {e}");
            None
        }
    };
    let pod = pod.as_ref();
    let ctx = inv.context(pod, false);
    if pod.is_some() {
        match ctx.delegates() {
            Ok(mut delegates) => {
                match ctx.auxiliary_chain() {
                    Ok(chain) => delegates.extend(chain),
                    Err(e) => tracing::error!(
                        "no delegate cache, and the auxiliary chain cannot be loaded ({e}): it is not deleted"
                    ),
                }
                return Ok(delegates);
            }
            Err(e) => tracing::error!(
                "no delegate cache, and the pod's networks cannot be resolved ({e}): only the cluster network and defaultNetworks are deleted"
            ),
        }
    } else {
        tracing::error!(
            "no delegate cache in {} and no pod from the API: only the cluster network and defaultNetworks are deleted; networks from the pod's annotation cannot be known",
            inv.conf.cni_dir.display()
        );
    }
    ctx.cluster_networks()
}

pub fn check(inv: &Invocation) -> Result<()> {
    let _lock = inv.lock()?;
    let delegates = delegate::load_cache(
        &inv.conf.cni_dir,
        &inv.args.container_id,
        &inv.conf.cni_version,
    )?
    .ok_or_else(|| Error::Cache {
        path: delegate::cache_path(&inv.conf.cni_dir, &inv.args.container_id)
            .display()
            .to_string(),
        msg: "no delegate cache: this container was not added by multus".to_owned(),
    })?;
    let mut errors = Vec::new();
    for (index, d) in delegates.iter().enumerate() {
        let ifname = d.ifname(&inv.args.ifname, index);
        if let Err(e) = d.refuse_this_binary(&inv.path) {
            errors.push(e);
            continue;
        }
        if !d.network.version.has_check() {
            tracing::info!(network = %d.name, "CHECK skipped: version {}", d.network.version);
            continue;
        }
        let cni_args = inv.k8s.for_delegate(d);
        let caps = inv.capability_args(d, index, &ifname);
        if let Err(source) = d.network.check(&inv.attachment(&ifname, &cni_args, &caps)) {
            errors.push(Error::Delegate {
                network: d.name.clone(),
                ifname,
                source: Box::new(source),
            });
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(Error::Many(errors)),
    }
}

pub fn status(inv: &Invocation) -> Result<()> {
    if let Some(file) = &inv.conf.readiness_indicator_file {
        if !file.exists() {
            return Err(Error::NotReady(format!(
                "readiness indicator file {} does not exist",
                file.display()
            )));
        }
    }
    let cluster = inv.context(None, false).cluster_networks()?;
    let d = cluster
        .first()
        .ok_or_else(|| Error::config("delegates", "no cluster network"))?;
    d.network
        .status(&inv.path)
        .map_err(|source| Error::Network {
            network: d.name.clone(),
            source: Box::new(source),
        })
}

/// GC: the runtime's valid attachments are multus's own (one per container); each valid
/// container's delegates are valid too. Every network known from the caches is collected.
pub fn gc(inv: &Invocation) -> Result<()> {
    let valid = inv.conf.valid_attachments.clone().ok_or_else(|| {
        Error::config(
            "cni.dev/valid-attachments",
            "GC needs the runtime's list of valid attachments",
        )
    })?;
    let dir = &inv.conf.cni_dir;
    let mut errors = Vec::new();
    let mut expanded: Vec<GcAttachment> = valid.clone();
    let mut networks: Vec<Delegate> = inv.context(None, false).cluster_networks()?;
    let mut stale = Vec::new();
    for id in delegate::cached_containers(dir)? {
        let delegates = match delegate::load_cache(dir, &id, &inv.conf.cni_version) {
            Ok(Some(d)) => d,
            // Files a killed ADD left (a lock, a temp file): stale too unless valid.
            Ok(None) => Vec::new(),
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        match valid.iter().find(|v| v.container_id == id) {
            Some(v) => expanded.extend(delegates.iter().enumerate().map(|(i, d)| GcAttachment {
                container_id: id.clone(),
                ifname: d.ifname(&v.ifname, i),
            })),
            None => stale.push(id),
        }
        for d in delegates {
            if !networks.iter().any(|n| n.network.name == d.network.name) {
                networks.push(d);
            }
        }
    }
    let mut seen = HashSet::new();
    for d in networks
        .iter()
        .filter(|d| seen.insert(d.network.name.clone()))
    {
        if let Err(e) = d.refuse_this_binary(&inv.path) {
            tracing::error!(network = %d.name, "GC skips it: {e}");
            continue;
        }
        if let Err(source) = d.network.gc(&inv.path, dir, &expanded) {
            errors.push(Error::Network {
                network: d.name.clone(),
                source: Box::new(source),
            });
        }
    }
    if errors.is_empty() {
        for id in stale {
            // A container some call is busy with is left for the next GC.
            match container_lock::acquire(dir, &id, Duration::ZERO) {
                Ok(lock) => {
                    delegate::remove_cache(dir, &id)?;
                    lock.remove();
                }
                Err(e) => tracing::info!("GC leaves container {id}: {e}"),
            }
        }
        return Ok(());
    }
    Err(Error::Many(errors))
}

/// The `cni::Plugin` adapter: parses the config, sets up logging and the API, and maps
/// errors to CNI error objects.
pub struct Multus {
    /// Connects to the Kubernetes API named by the configuration (`None`: no API).
    pub connect: crate::api::Connect,
}

impl Multus {
    fn run<T>(
        &self,
        args: &CmdArgs,
        f: fn(&Invocation) -> Result<T>,
    ) -> std::result::Result<T, CniError> {
        let conf = MultusConf::parse(&args.stdin).map_err(|e| e.to_cni())?;
        crate::log::init(&conf);
        let k8s = K8sArgs::parse(&args.args).map_err(|e| e.to_cni())?;
        let span = tracing::error_span!(
            "multus",
            command = args.command.as_str(),
            pod = %format!("{}/{}", k8s.namespace, k8s.name),
            container = %args.container_id,
            ifname = %args.ifname,
        );
        let _guard = span.enter();
        let api = (self.connect)(&conf).map_err(|e| {
            tracing::error!("{e}");
            e.to_cni()
        })?;
        let inv = Invocation {
            path: conf.plugin_path(&args.path),
            conf,
            k8s,
            args,
            api: api.as_deref(),
            events: Events::default(),
        };
        f(&inv).map_err(|e| {
            tracing::error!("{e}");
            e.to_cni()
        })
    }
}

impl cni::Plugin for Multus {
    fn add(&self, args: &CmdArgs) -> std::result::Result<CniResult, CniError> {
        self.run(args, add)
    }

    fn del(&self, args: &CmdArgs) -> std::result::Result<(), CniError> {
        self.run(args, del)
    }

    fn check(&self, args: &CmdArgs) -> std::result::Result<(), CniError> {
        self.run(args, check)
    }

    fn status(&self, args: &CmdArgs) -> std::result::Result<(), CniError> {
        self.run(args, status)
    }

    fn gc(&self, args: &CmdArgs) -> std::result::Result<(), CniError> {
        self.run(args, gc)
    }

    /// The multus config's own keys and its inline delegates; networks named by
    /// `clusterNetwork` or `defaultNetworks` live on the node and are not read.
    fn validate(&self, config: &[u8]) -> std::result::Result<(), CniError> {
        MultusConf::parse(config)
            .and_then(|conf| crate::resolve::inline_delegates(&conf))
            .map(drop)
            .map_err(|e| e.to_cni())
    }
}
