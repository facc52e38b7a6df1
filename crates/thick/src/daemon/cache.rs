//! The daemon's caches: this node's pods (`spec.nodeName`, from `MULTUS_NODE_NAME`; every pod
//! without it, as upstream) and every NetworkAttachmentDefinition, each kept in step by a
//! list and a watch on a thread and a client of its own. Only what multus reads is kept: a
//! pod's name, UID and annotations; a NAD's config and resource name.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use k8s::{Change, ClientOptions, Collection, KeepAlive, KubeClient};
use multus::api::{Nad, Pod};
use serde_json::Value;

use super::error::StartError;
use super::hotplug::HotPlug;
use super::metrics::Metrics;

type Key = (String, String);

/// A NAD config larger than this is not cached: it is read from the API when a pod names it.
const MAX_CACHED_CONFIG: usize = 64 * 1024;
/// The most config bytes the NAD cache holds: past it, NADs are read from the API. Tenants
/// decide how many NADs there are; the daemon's memory must not follow them without end.
const MAX_CACHED_BYTES: usize = 32 << 20;

/// An object as a cache reads it: its key, and what is kept of it (`None`: not kept).
type Read<T> = fn(&Value) -> Option<(Key, Option<T>)>;

/// One cached collection.
struct Store<T> {
    items: RwLock<HashMap<Key, T>>,
    synced: AtomicBool,
    /// The last resourceVersion seen, when it is a number (for `/metrics`).
    version: AtomicI64,
    /// What an item weighs, the most the store holds, and what it holds now (changed only
    /// under the `items` write lock).
    weight: fn(&T) -> usize,
    limit: usize,
    held: AtomicUsize,
    /// Set once the limit has refused an item, so the log says it once per listing.
    full: AtomicBool,
}

impl<T> Store<T> {
    fn new(weight: fn(&T) -> usize, limit: usize) -> Store<T> {
        Store {
            items: RwLock::new(HashMap::new()),
            synced: AtomicBool::new(false),
            version: AtomicI64::new(0),
            weight,
            limit,
            held: AtomicUsize::new(0),
            full: AtomicBool::new(false),
        }
    }

    fn remove(&self, items: &mut HashMap<Key, T>, key: &Key) {
        if let Some(old) = items.remove(key) {
            self.held.fetch_sub((self.weight)(&old), Ordering::SeqCst);
        }
    }

    /// Keeps `item` under `key` while the store stays under its limit; otherwise, and when
    /// `item` is `None`, the key is dropped and reads of it go to the API.
    fn put(&self, items: &mut HashMap<Key, T>, key: Key, item: Option<T>) {
        self.remove(items, &key);
        let Some(item) = item else { return };
        let weight = (self.weight)(&item);
        let held = self.held.load(Ordering::SeqCst);
        if held + weight <= self.limit {
            items.insert(key, item);
            self.held.fetch_add(weight, Ordering::SeqCst);
        } else if !self.full.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                "the cache is full at {held} bytes: {}/{} and what else does not fit is read from the API",
                key.0,
                key.1
            );
        }
    }

    fn get(&self, key: &Key) -> Option<T>
    where
        T: Clone,
    {
        self.items
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Applies a change; returns how many items the store holds.
    fn apply(&self, change: Change, read: Read<T>) -> usize {
        let mut items = self.items.write().unwrap_or_else(PoisonError::into_inner);
        let seen = |v: &Value| {
            v.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|rv| rv.parse::<i64>().ok())
        };
        let mut latest = None;
        match change {
            Change::Listed(list) => {
                items.clear();
                self.held.store(0, Ordering::SeqCst);
                self.full.store(false, Ordering::SeqCst);
                for v in &list {
                    latest = latest.max(seen(v));
                    if let Some((key, item)) = read(v) {
                        self.put(&mut items, key, item);
                    }
                }
                self.synced.store(true, Ordering::SeqCst);
            }
            Change::Applied(v) => {
                latest = seen(&v);
                if let Some((key, item)) = read(&v) {
                    self.put(&mut items, key, item);
                }
            }
            Change::Deleted(v) => {
                latest = seen(&v);
                if let Some((key, _)) = read(&v) {
                    self.remove(&mut items, &key);
                }
            }
        }
        if let Some(rv) = latest {
            self.version.fetch_max(rv, Ordering::SeqCst);
        }
        items.len()
    }
}

fn key(v: &Value) -> Option<Key> {
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Some((text("/metadata/namespace")?, text("/metadata/name")?))
}

fn annotations(v: &Value) -> std::collections::BTreeMap<String, String> {
    v.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn read_pod(v: &Value) -> Option<(Key, Option<Pod>)> {
    let (namespace, name) = key(v)?;
    let uid = v
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let pod = Pod {
        namespace: namespace.clone(),
        name: name.clone(),
        uid,
        annotations: annotations(v),
    };
    Some(((namespace, name), Some(pod)))
}

/// A NAD that cannot be read, or whose config is too large, is not kept: a pod that names it
/// reads it from the API, and gets the API's answer (or error), never an older copy.
fn read_nad(v: &Value) -> Option<(Key, Option<Nad>)> {
    let key = key(v)?;
    let nad = serde_json::from_value::<k8s::NetworkAttachmentDefinition>(v.clone())
        .ok()
        .filter(|n| n.spec.config.len() <= MAX_CACHED_CONFIG)
        .map(|n| Nad {
            config: n.spec.config,
            resource_name: annotations(v)
                .remove(npwg::devinfo::RESOURCE_NAME_ANNOTATION)
                .filter(|r| !r.is_empty()),
        });
    Some((key, nad))
}

pub struct Caches {
    pods: Store<Pod>,
    nads: Store<Nad>,
}

impl Caches {
    /// Starts filling the caches, each on a thread and a client of its own; the threads end
    /// soon after `stop` (see [`KubeClient::reflect`]).
    /// Pods whose networks annotation changes are told to `hot_plug`: every pod of a listing
    /// whose annotation differs from the cache's (at the first, every pod), and each pod the
    /// cache had whose annotation a watch event changes.
    pub fn start(
        kubeconfig: Option<PathBuf>,
        node: Option<String>,
        metrics: Arc<Metrics>,
        stop: Arc<AtomicBool>,
        hot_plug: Option<Arc<HotPlug>>,
    ) -> Result<Arc<Caches>, StartError> {
        let caches = Arc::new(Caches {
            pods: Store::new(|_| 0, usize::MAX),
            nads: Store::new(|n: &Nad| n.config.len(), MAX_CACHED_BYTES),
        });
        let pods = Collection::pods(node.as_deref());
        for (collection, is_pods) in [(pods, true), (Collection::nads(), false)] {
            let client = KubeClient::new(&ClientOptions {
                kubeconfig: kubeconfig.clone(),
                keep_alive: KeepAlive::Process,
                ..ClientOptions::default()
            })?;
            let (caches, metrics, stop, hot_plug) = (
                Arc::clone(&caches),
                Arc::clone(&metrics),
                Arc::clone(&stop),
                hot_plug.clone(),
            );
            std::thread::Builder::new()
                .name(format!("watch-{}", collection.resource))
                .spawn(move || {
                    client.reflect(&collection, &stop, &mut |change| {
                        let (n, version, count, seen) = if is_pods {
                            let changed = match &hot_plug {
                                Some(_) => caches.networks_changed(&change),
                                None => Vec::new(),
                            };
                            let n = caches.pods.apply(change, read_pod);
                            if let Some(hot_plug) = &hot_plug {
                                for (key, listed) in changed {
                                    match listed {
                                        true => hot_plug.listed(key),
                                        false => hot_plug.changed(key),
                                    }
                                }
                            }
                            (
                                n,
                                &caches.pods.version,
                                &metrics.cached_pods,
                                &metrics.pods_version,
                            )
                        } else {
                            let n = caches.nads.apply(change, read_nad);
                            (
                                n,
                                &caches.nads.version,
                                &metrics.cached_nads,
                                &metrics.nads_version,
                            )
                        };
                        count.store(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
                        seen.store(version.load(Ordering::SeqCst), Ordering::Relaxed);
                    });
                })
                .map_err(StartError::thread("watch"))?;
        }
        Ok(caches)
    }

    /// Both caches hold a whole list.
    pub fn synced(&self) -> bool {
        self.pods.synced.load(Ordering::SeqCst) && self.nads.synced.load(Ordering::SeqCst)
    }

    /// The pods whose networks annotation `change` changes (see [`Caches::start`]), each
    /// with whether a listing named it.
    fn networks_changed(&self, change: &Change) -> Vec<(Key, bool)> {
        let networks = |pod: &Pod| {
            pod.annotations
                .get(npwg::selection::NETWORKS_ANNOTATION)
                .cloned()
        };
        let differs = |v: &Value, listed: bool| {
            let ((namespace, name), Some(new)) = read_pod(v)? else {
                return None;
            };
            let old = self.pod(&namespace, &name);
            let changed = match old {
                Some(old) => networks(&old) != networks(&new),
                None => listed,
            };
            changed.then_some(((namespace, name), listed))
        };
        match change {
            Change::Listed(list) => list.iter().filter_map(|v| differs(v, true)).collect(),
            Change::Applied(v) => differs(v, false).into_iter().collect(),
            Change::Deleted(_) => Vec::new(),
        }
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.pods.get(&(namespace.to_owned(), name.to_owned()))
    }

    pub fn nad(&self, namespace: &str, name: &str) -> Option<Nad> {
        self.nads.get(&(namespace.to_owned(), name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_keep_only_what_multus_reads() {
        let store: Store<Nad> = Store::new(|n: &Nad| n.config.len(), 10);
        let nad = |name: &str, rv: &str, config: &str| {
            json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv,
                                "annotations": {"k8s.v1.cni.cncf.io/resourceName": "dev/x"}},
                   "spec": {"config": config}})
        };
        assert_eq!(
            store.apply(Change::Listed(vec![nad("a", "5", "{1}")]), read_nad),
            1
        );
        assert!(store.synced.load(Ordering::SeqCst));
        assert_eq!(
            store.apply(Change::Applied(nad("a", "7", "{2}")), read_nad),
            1
        );
        assert_eq!(
            store.apply(Change::Applied(nad("b", "8", "{3}")), read_nad),
            2
        );
        let a = store.get(&("ns".into(), "a".into())).unwrap();
        assert_eq!(a.config, "{2}");
        assert_eq!(a.resource_name.as_deref(), Some("dev/x"));
        assert_eq!(store.apply(Change::Deleted(nad("a", "9", "")), read_nad), 1);
        assert_eq!(store.version.load(Ordering::SeqCst), 9);
        // Past the store's 10 bytes: not kept, and an older copy goes.
        assert_eq!(
            store.apply(Change::Applied(nad("b", "10", "{123456789}")), read_nad),
            0
        );
        assert_eq!(
            store.apply(Change::Applied(nad("c", "11", "{4}")), read_nad),
            1
        );
        // A NAD that cannot be read drops the copy: the API answers for it.
        let broken = json!({"metadata": {"namespace": "ns", "name": "c"}, "spec": {"config": 5}});
        assert_eq!(store.apply(Change::Applied(broken), read_nad), 0);
        assert_eq!(store.apply(Change::Listed(vec![]), read_nad), 0);
    }
}
