//! The CNI commands, each a one-way pipeline over [`Invocation`]: [`plan`] says what to run,
//! [`attach`] runs it (and undoes a failed ADD), [`report`] tells the pod. [`run`] is the
//! entry point: the `multus` binary calls it for the runtime, and `multus try` on its sandbox.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use cni::{CmdArgs, CniError, CniResult, GcAttachment};
use npwg::selection::Selection;

use crate::api::Api;
use crate::config::MultusConf;
use crate::container_lock;
use crate::delegate::Delegate;
use crate::error::{Error, Result};
use crate::invocation::Invocation;
use crate::{attach, cache, plan, report};

/// Runs `command` in-process with `conf` (the config from stdin) and `api`.
pub fn run<T>(
    args: &CmdArgs,
    conf: MultusConf,
    api: Option<&dyn Api>,
    command: impl FnOnce(&Invocation) -> Result<T>,
) -> Result<T> {
    command(&Invocation::new(args, conf, api)?)
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
/// success or not. It waits for the cluster network to be ready before it takes the lock, so a
/// DEL of the same container never waits behind that wait.
pub fn add(inv: &Invocation) -> Result<CniResult> {
    wait_ready(&inv.conf)?;
    let _no_gc = container_lock::gc_lock(&inv.conf.cni_dir, false, container_lock::WAIT)?;
    let lock = inv.lock()?;
    let added = add_locked(inv);
    // A failed ADD left nothing, so nothing is left for a DEL to find either.
    if added.is_err() && !cache::path(&inv.conf.cni_dir, &inv.args.container_id).exists() {
        lock.remove();
    } else {
        drop(lock);
    }
    inv.send_events();
    added
}

fn add_locked(inv: &Invocation) -> Result<CniResult> {
    let plan = plan::add(inv).inspect_err(|e| report::unresolved(inv, e))?;
    let (attached, cache_sync) =
        attach::add(inv, &plan).inspect_err(|e| report::add_failed(inv, &plan, e))?;
    let statuses = report::network_status(inv, &plan, &attached);
    // Success is reported only once the delegate cache is on disk.
    let reported =
        report::write_status(inv, plan.pod.as_ref(), &statuses).and_then(|()| cache_sync.wait());
    if let Err(e) = reported {
        attach::undo(inv, &plan.attachments);
        return Err(e);
    }
    report::added(inv, plan.pod.as_ref(), &plan.attachments, &attached);
    attached
        .into_iter()
        .next()
        .map(|first| first.result)
        .ok_or_else(|| Error::config("delegates", "no cluster network"))
}

/// DEL, alone on its container; its events (a missing NAD, when it has no cache) are
/// recorded at its end.
pub fn del(inv: &Invocation) -> Result<()> {
    let lock = inv.lock()?;
    let deleted = del_locked(inv);
    if deleted.is_ok() {
        lock.remove();
    } else {
        drop(lock);
    }
    inv.send_events();
    deleted
}

fn del_locked(inv: &Invocation) -> Result<()> {
    if let Some(file) = &inv.conf.readiness_indicator_file {
        if !file.exists() {
            tracing::info!(
                "readiness indicator file {} is missing on DEL",
                file.display()
            );
        }
    }
    let plan::DelPlan {
        plan,
        unreadable,
        unresolved,
    } = plan::del(inv)?;
    if let Some(e) = &unresolved {
        report::unresolved(inv, e);
    }
    let failures = attach::del(inv, &plan.attachments);
    if failures.is_empty() {
        tracing::info!("Del {}", summary(&plan.attachments));
    }
    // Also removes an empty cache, which the plan read as none.
    if failures.is_empty() || !inv.conf.retry_delete_on_error {
        cache::remove(&inv.conf.cni_dir, &inv.args.container_id)?;
    }
    one_or_many(unreadable.into_iter().chain(failures).collect())
}

/// The running sandbox of a hot-plug call, under its lock. A sandbox without a delegate
/// cache (its DEL came first) is left without a lock file too.
fn locked_sandbox(
    inv: &Invocation,
) -> Result<(container_lock::ContainerLock, plan::hotplug::Sandbox)> {
    let lock = inv.lock()?;
    match plan::hotplug::sandbox(inv) {
        Ok(sandbox) => Ok((lock, sandbox)),
        Err(e) => {
            if !cache::path(&inv.conf.cni_dir, &inv.args.container_id).exists() {
                lock.remove();
            }
            Err(e)
        }
    }
}

/// Hot-plug ADD: `config` (a NAD's config) added to the running sandbox with what
/// `selection` asks, alone on the sandbox as ADD and DEL are.
pub fn hot_add(inv: &Invocation, config: &str, selection: &Selection) -> Result<CniResult> {
    let _no_gc = container_lock::gc_lock(&inv.conf.cni_dir, false, container_lock::WAIT)?;
    let (_lock, mut sandbox) = locked_sandbox(inv)?;
    if let Some(result) = plan::hotplug::already(inv, &sandbox, config, selection)? {
        return Ok(result);
    }
    let a = plan::hotplug::add(inv, &sandbox, config, selection)?;
    let (ifname, network) = (a.ifname.clone(), a.delegate.name.clone());
    let added = attach::hot_add(inv, &mut sandbox, a)?;
    tracing::info!("Hot-plugged {ifname} from {network}");
    Ok(added.result)
}

/// Hot-plug by annotation: brings the running sandbox to the networks its pod's annotation
/// selects now, removals first, then additions in the annotation's order, and writes its
/// network-status from what the sandbox then has (with `always_status`, also when nothing
/// changed but it shows otherwise). A network that cannot be added or removed is said in an
/// event and leaves the rest alone; the errors are returned together. Whether anything
/// changed.
pub fn hot_sync(inv: &Invocation, always_status: bool) -> Result<bool> {
    let _no_gc = container_lock::gc_lock(&inv.conf.cni_dir, false, container_lock::WAIT)?;
    let (_lock, mut sandbox) = locked_sandbox(inv)?;
    let pod_ns = attach::route::PodNetns::open(&inv.args.netns)?;
    // Its interface, and the result its ADD cached once it succeeded.
    let present = |a: &plan::Attachment| {
        let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
        pod_ns.has_interface(&a.ifname).unwrap_or(true)
            && cni::cache::read(dir, &a.delegate.network.name, id, &a.ifname)
                .is_ok_and(|c| c.is_some_and(|c| c.result.is_some()))
    };
    let sync = match plan::hotplug::sync(inv, &sandbox, present) {
        Ok(Some(sync)) => sync,
        Ok(None) => return Ok(false),
        // An annotation that does not parse, a cluster network that cannot be read.
        Err(e) => {
            report::hot_add_failed(inv, inv.pod_read(), &e);
            inv.send_events();
            return Err(e);
        }
    };
    let pod = Some(&sync.pod);
    let mut changed = false;
    let mut failures = Vec::new();
    for index in sync.remove {
        match attach::hot_del(inv, &mut sandbox, plan::hotplug::Removal::Cached(index)) {
            Ok(a) => {
                changed = true;
                report::removed(inv, pod, &a);
            }
            Err(e) => {
                report::hot_remove_failed(inv, pod, &e);
                failures.push(e);
            }
        }
    }
    for wanted in sync.add {
        let added = wanted.and_then(|a| attach::hot_add(inv, &mut sandbox, a));
        match added {
            Ok(added) => {
                changed = true;
                // hot_add leaves the attachment last in the sandbox.
                let a = &sandbox.attachments[sandbox.attachments.len() - 1..];
                report::added(inv, pod, a, std::slice::from_ref(&added));
            }
            Err(e) => {
                report::hot_add_failed(inv, pod, &e);
                failures.push(e);
            }
        }
    }
    if changed || always_status {
        let statuses = report::sandbox_status(inv, &sync.pod, &sandbox);
        let shown = sync
            .pod
            .annotations
            .get(npwg::status::NETWORK_STATUS_ANNOTATION);
        if shown != Some(&npwg::status::annotation(&statuses)) {
            if let Err(e) = report::write_status(inv, pod, &statuses) {
                failures.push(e);
            }
        }
    }
    inv.send_events();
    one_or_many(failures).map(|()| changed)
}

/// Hot-plug DEL of the sandbox's interface `ifname`; `config` and `selection` are the
/// network's, used when the delegate cache does not record it.
pub fn hot_del(inv: &Invocation, ifname: &str, config: &str, selection: &Selection) -> Result<()> {
    let (_lock, mut sandbox) = locked_sandbox(inv)?;
    let removal = plan::hotplug::del(inv, &sandbox, ifname, config, selection)?;
    let removed = attach::hot_del(inv, &mut sandbox, removal)?;
    tracing::info!("Hot-unplugged {ifname} from {}", removed.delegate.name);
    Ok(())
}

/// Hot-plug CHECK of the sandbox's interface `ifname`.
pub fn hot_check(inv: &Invocation, ifname: &str) -> Result<()> {
    let (_lock, sandbox) = locked_sandbox(inv)?;
    let index = sandbox.position(ifname)?;
    one_or_many(attach::check(inv, &sandbox.attachments[index..=index]))
}

/// Hot-plug STATUS of the network `config`.
pub fn hot_status(inv: &Invocation, config: &str, selection: &Selection) -> Result<()> {
    let d = Delegate::for_selection(config, selection, None)?;
    d.refuse_this_binary(&inv.path)?;
    d.network
        .status(&inv.path)
        .map_err(|source| Error::Network {
            network: d.name.clone(),
            source: Box::new(source),
        })
}

pub fn check(inv: &Invocation) -> Result<()> {
    let _lock = inv.lock()?;
    let plan = plan::check(inv)?;
    one_or_many(attach::check(inv, &plan.attachments))?;
    tracing::info!("Check {}", summary(&plan.attachments));
    Ok(())
}

/// `eth0 from cluster, net1 from default/macvlan`: a call's interfaces and networks, for the
/// one line DEL and CHECK log (ADD logs one per interface, with its addresses).
fn summary(attachments: &[plan::Attachment]) -> String {
    if attachments.is_empty() {
        return "nothing: no attachment to act on".into();
    }
    attachments
        .iter()
        .map(|a| format!("{} from {}", a.ifname, a.delegate.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// No error, one, or all of them.
fn one_or_many(mut errors: Vec<Error>) -> Result<()> {
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
    // A cluster network whose config is not there yet (its pod still starting) is a node not
    // ready, not a broken config: the runtime holds pods until it is.
    let cluster = plan::cluster_networks(inv)
        .map_err(|e| Error::NotReady(format!("its config cannot be read: {e}")))?;
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
    // No ADD is under way while GC collects: one not yet in any cache would be collected.
    let _gc = container_lock::gc_lock(dir, true, container_lock::WAIT)?;
    let mut errors = Vec::new();
    let mut expanded: Vec<GcAttachment> = valid.clone();
    let mut networks: Vec<Delegate> = plan::cluster_networks(inv)?;
    let mut stale = Vec::new();
    for id in cache::containers(dir)? {
        let delegates = match cache::load(dir, &id, &inv.conf.cni_version) {
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
    // Each stale container is locked while it is collected. One that another call holds (a
    // DEL under way) is left for the next GC, its attachments kept.
    let mut locked = Vec::new();
    for id in stale {
        match container_lock::acquire(dir, &id, Duration::ZERO) {
            Ok(lock) => locked.push((id, lock)),
            Err(e) => {
                tracing::info!("GC leaves container {id}: {e}");
                expanded.extend(cached_attachments(dir, &id)?);
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
        // A network older than CNI 1.1.0 has no GC, but DEL: a stale container's attachments
        // on it are deleted, not left behind with the cache that records them.
        let collected = if d.network.version.has_status_and_gc() {
            d.network.gc(&inv.path, dir, &expanded)
        } else {
            d.network.del_stale(&inv.path, dir, &expanded)
        };
        if let Err(source) = collected {
            errors.push(Error::Network {
                network: d.name.clone(),
                source: Box::new(source),
            });
        }
    }
    if errors.is_empty() {
        for (id, lock) in locked {
            cache::remove(dir, &id)?;
            lock.remove();
        }
        return Ok(());
    }
    Err(Error::Many(errors))
}

/// The attachments of container `id` that the result cache records.
fn cached_attachments(dir: &std::path::Path, id: &str) -> Result<Vec<GcAttachment>> {
    Ok(cni::cache::list(dir)?
        .into_iter()
        .flatten()
        .filter(|a| a.container_id == id)
        .map(|a| GcAttachment {
            container_id: a.container_id,
            ifname: a.ifname,
        })
        .collect())
}

/// The `cni::Plugin` adapter: parses the config, sets up logging and the API, and maps
/// errors to CNI error objects.
pub struct Multus {
    /// The `type` a config must have for multus to act on it: the name it was run under
    /// (`multus`; thick mode's daemon takes the shim's calls, `multus-shim`).
    pub called_as: String,
    /// Connects to the Kubernetes API named by the configuration (`None`: no API).
    pub connect: crate::api::Connect,
    /// Whether each call sets up logging from its config, as a process per call does; a
    /// daemon sets it up once, from its own.
    pub log_per_call: bool,
    /// Where the node's root is seen, when not at `/` (thick mode's daemon: its `chrootDir`).
    pub node_root: Option<std::path::PathBuf>,
}

impl Multus {
    fn run<T>(
        &self,
        args: &CmdArgs,
        f: fn(&Invocation) -> Result<T>,
    ) -> std::result::Result<T, CniError> {
        crate::config::require_own_config(&args.stdin, &self.called_as, args.command)?;
        let mut conf = MultusConf::parse(&args.stdin).map_err(|e| e.to_cni())?;
        conf.node_root.clone_from(&self.node_root);
        if self.log_per_call {
            crate::log::init(&conf);
        }
        let k8s = crate::k8s_args::K8sArgs::parse(&args.args).map_err(|e| e.to_cni())?;
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
        run(args, conf, api.as_deref(), f).map_err(|e| {
            tracing::error!("{e}");
            e.to_cni()
        })
    }
}

impl cni::Plugin for Multus {
    fn add(&self, args: &CmdArgs) -> std::result::Result<CniResult, CniError> {
        self.run(args, add)
    }

    /// DEL; a config that is not multus's own made nothing at ADD, so there is nothing to
    /// delete, and nothing of it is read.
    fn del(&self, args: &CmdArgs) -> std::result::Result<(), CniError> {
        if let Err(e) =
            crate::config::require_own_config(&args.stdin, &self.called_as, args.command)
        {
            eprintln!("DEL does nothing: {}", e.msg);
            return Ok(());
        }
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
            .and_then(|conf| plan::inline_delegates(&conf))
            .map(drop)
            .map_err(|e| e.to_cni())
    }
}
