//! Hot-plug by annotation: when the networks annotation of a running pod of this node changes,
//! its sandbox is brought to it ([`multus::command::hot_sync`]).
//!
//! - Changes are queued by pod, each pod once however often it changed, and applied by one
//!   worker: one pod at a time, in the order they came, each once its annotation has held still
//!   for [`SETTLE`] (or has waited [`MOST_WAIT`]), from the annotation as it is then.
//! - A pod's sandbox (its container ID, netns and the runtime's interface) is known from the
//!   daemon's own ADDs, and from the result cache once at start for the sandboxes added before.
//! - At start every pod of the node is looked at once: a change the last daemon did not
//!   finish is finished.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cni::{CmdArgs, Command};
use multus::command;
use multus::config::MultusConf;

use super::api::Shared;
use super::config::DaemonConfig;
use super::handler::multus_conf;

/// How long a pod's annotation must hold still before it is applied.
pub const SETTLE: Duration = Duration::from_millis(100);
/// How long a pod that keeps changing waits at most.
pub const MOST_WAIT: Duration = Duration::from_secs(1);

type Key = (String, String);

/// A pod's running sandbox.
#[derive(Clone, Debug)]
struct SandboxRef {
    container_id: String,
    netns: String,
    /// The runtime's interface: the cluster network's.
    ifname: String,
}

#[derive(Default)]
struct Pending {
    /// Pods in the order they first changed.
    order: VecDeque<Key>,
    /// When each pod queued first changed, and last.
    times: HashMap<Key, (Instant, Instant)>,
    /// Pods a listing named (see [`HotPlug::listed`]).
    listed: std::collections::HashSet<Key>,
}

/// The pods whose annotation changed, and the sandboxes of this node's pods by pod UID.
#[derive(Default)]
pub struct HotPlug {
    pending: Mutex<Pending>,
    wake: Condvar,
    sandboxes: Mutex<HashMap<String, SandboxRef>>,
    /// Whether the result cache has been read for the sandboxes of an earlier daemon.
    found_earlier: AtomicBool,
}

impl HotPlug {
    /// Pod `key`'s networks annotation changed.
    pub fn changed(&self, key: Key) {
        self.queue(key, false);
    }

    /// A listing of the pods (the daemon's first, or one after its watch broke) found pod
    /// `key` changed: what the pod got is written to its network-status even when nothing is
    /// to change, since an earlier daemon may have stopped before it wrote it.
    pub fn listed(&self, key: Key) {
        self.queue(key, true);
    }

    fn queue(&self, key: Key, listed: bool) {
        let now = Instant::now();
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if listed {
            p.listed.insert(key.clone());
        }
        match p.times.get_mut(&key) {
            Some((_, last)) => *last = now,
            None => {
                p.times.insert(key.clone(), (now, now));
                p.order.push_back(key);
            }
        }
        self.wake.notify_one();
    }

    /// The daemon added a sandbox for the pod `uid`: it is known, and looked at once, in case
    /// the annotation changed while it was being added.
    pub fn added(&self, key: Key, uid: &str, container_id: &str, netns: &str, ifname: &str) {
        if !uid.is_empty() {
            let sandbox = SandboxRef {
                container_id: container_id.to_owned(),
                netns: netns.to_owned(),
                ifname: ifname.to_owned(),
            };
            self.lock_sandboxes().insert(uid.to_owned(), sandbox);
        }
        self.changed(key);
    }

    /// The sandbox `container_id` was deleted.
    pub fn deleted(&self, container_id: &str) {
        self.lock_sandboxes()
            .retain(|_, s| s.container_id != container_id);
    }

    fn lock_sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, SandboxRef>> {
        self.sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The pods due now, in order, each with whether a listing named it; waits until one
    /// is, or `stop`.
    fn due(&self, stop: &AtomicBool) -> Vec<(Key, bool)> {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if stop.load(Ordering::SeqCst) {
                return Vec::new();
            }
            let now = Instant::now();
            let is_due = |(first, last): (Instant, Instant)| {
                now.duration_since(last) >= SETTLE || now.duration_since(first) >= MOST_WAIT
            };
            let due: Vec<Key> = p
                .order
                .iter()
                .filter(|k| p.times.get(*k).is_some_and(|t| is_due(*t)))
                .cloned()
                .collect();
            if !due.is_empty() {
                p.order.retain(|k| !due.contains(k));
                for k in &due {
                    p.times.remove(k);
                }
                return due
                    .into_iter()
                    .map(|k| {
                        let listed = p.listed.remove(&k);
                        (k, listed)
                    })
                    .collect();
            }
            let wait = if p.order.is_empty() {
                Duration::from_secs(1)
            } else {
                SETTLE
            };
            p = self
                .wake
                .wait_timeout(p, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Applies the changes until `stop`, each once the daemon is `ready` (its caches filled,
    /// `00-multus.conf` written): a change found at start waits for the cluster network.
    pub fn run(
        &self,
        config: &DaemonConfig,
        shared: &Arc<Shared>,
        stop: &AtomicBool,
        ready: &AtomicBool,
    ) {
        loop {
            let due = self.due(stop);
            if due.is_empty() {
                return;
            }
            while !ready.load(Ordering::SeqCst) {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(SETTLE);
            }
            for (key, listed) in due {
                self.sync(config, shared, &key, listed);
            }
        }
    }

    /// Brings pod `key`'s sandbox to its annotation, if the pod runs here.
    fn sync(&self, config: &DaemonConfig, shared: &Arc<Shared>, key: &Key, listed: bool) {
        let (namespace, name) = key;
        let Some(pod) = shared.caches.pod(namespace, name) else {
            return;
        };
        let (stdin, conf) = match multus_conf(config) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), "hot-plug waits: {}", e.msg);
                return;
            }
        };
        if !self.found_earlier.swap(true, Ordering::SeqCst) {
            self.find_earlier(&conf);
        }
        let Some(sandbox) = self.lock_sandboxes().get(&pod.uid).cloned() else {
            return;
        };
        if !multus::cache::path(&conf.cni_dir, &sandbox.container_id).exists() {
            self.deleted(&sandbox.container_id);
            return;
        }
        let args = CmdArgs {
            command: Command::Add,
            container_id: sandbox.container_id.clone(),
            netns: sandbox.netns.clone(),
            ifname: sandbox.ifname.clone(),
            args: format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};\
                 K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
                sandbox.container_id, pod.uid
            ),
            path: Vec::new(),
            stdin,
            path_roots_file: None,
        };
        let span = tracing::error_span!(
            "hot-plug",
            pod = %format!("{namespace}/{name}"),
            container = %sandbox.container_id,
        );
        let _guard = span.enter();
        let api = shared.api();
        let synced = command::run(&args, conf, Some(&api), |inv| {
            command::hot_sync(inv, listed)
        });
        let result = match synced {
            Ok(true) => "changed",
            Ok(false) => "unchanged",
            Err(e) => {
                tracing::warn!("{e}");
                "failed"
            }
        };
        shared.metrics.hot_plug_sync(result);
    }

    /// The sandboxes an earlier daemon added, from the result cache: each pod's cluster
    /// network entry names its sandbox, netns and interface.
    fn find_earlier(&self, conf: &MultusConf) {
        let cni_dir = &conf.cni_dir;
        let listed = match cni::cache::list(cni_dir) {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!("hot-plug cannot read the result cache: {e}");
                return;
            }
        };
        let mut sandboxes = self.lock_sandboxes();
        // Each sandbox's cluster network: the first delegate of its delegate cache.
        let mut clusters: HashMap<String, Option<String>> = HashMap::new();
        for entry in listed.into_iter().flatten() {
            let uid = entry
                .cni_args
                .iter()
                .find(|(k, _)| k == "K8S_POD_UID")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            if uid.is_empty() || entry.netns.is_empty() || sandboxes.contains_key(&uid) {
                continue;
            }
            let cluster = clusters
                .entry(entry.container_id.clone())
                .or_insert_with(|| {
                    multus::cache::load(cni_dir, &entry.container_id, &conf.cni_version)
                        .ok()
                        .flatten()
                        .and_then(|d| d.into_iter().next())
                        .map(|d| d.network.name)
                });
            if cluster.as_deref() == Some(entry.network_name.as_str()) {
                sandboxes.insert(
                    uid,
                    SandboxRef {
                        container_id: entry.container_id,
                        netns: entry.netns,
                        ifname: entry.ifname,
                    },
                );
            }
        }
    }
}
