//! Pods of this node that run without networks they asked for: started while multus's config
//! was not in place (a reboot's race, a primary network's config picked first), so nothing
//! attached their networks and nothing said so. The node's pods are listed once the daemon is
//! ready and every [`EVERY`] after. Each such pod is said once, until it is fixed or gone: a
//! line in the log, a Warning event `MissingNetworks` on the pod, and the
//! `multus_pods_missing_networks` gauge. With `deletePodsMissingNetworks`, a pod that a
//! controller owns is deleted, so that the controller makes it again, with its networks.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s::{Deleted, EventType, KubeClient, ObjectMeta, PodEvent, Resource};
use serde_json::Value;

use super::metrics::Metrics;
use super::server::State;

/// How often the node's pods are looked at: a pod that started without its networks is
/// reported within this and one list.
pub const EVERY: Duration = Duration::from_secs(30);
/// How long recording the events of one look may take.
const EVENTS_DEADLINE: Duration = Duration::from_secs(10);

const PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
};

/// One pod found without networks it asked for.
struct Found {
    meta: ObjectMeta,
    missing: npwg::status::Missing,
    /// Owned by a controller, which makes it again once deleted.
    controlled: bool,
}

impl Found {
    fn of(pod: Value) -> Option<Found> {
        let missing = npwg::status::pod_missing(&pod).filter(|m| !m.networks.is_empty())?;
        let controlled = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|o| {
                o.iter()
                    .any(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            });
        let meta: ObjectMeta = serde_json::from_value(pod.get("metadata")?.clone()).ok()?;
        Some(Found {
            meta,
            missing,
            controlled,
        })
    }

    fn name(&self) -> String {
        format!(
            "{}/{}",
            self.meta.namespace.as_deref().unwrap_or_default(),
            self.meta.name.as_deref().unwrap_or_default()
        )
    }
}

pub struct Watchman {
    pub client: Arc<KubeClient>,
    pub node: String,
    pub delete: bool,
    pub metrics: Arc<Metrics>,
    pub state: Arc<State>,
    pub stop: Arc<AtomicBool>,
}

impl Watchman {
    /// Looks every [`EVERY`] while the daemon is ready, until told to stop.
    pub fn run(self) {
        // The pods already said, by UID.
        let mut said = HashSet::new();
        let mut next = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            if Instant::now() >= next && self.state.ready.load(Ordering::SeqCst) {
                self.look(&mut said);
                next = Instant::now() + EVERY;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn look(&self, said: &mut HashSet<String>) {
        let found = match self.client.list_node_pods(&self.node, &mut Found::of) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!("looking for pods without their networks: {e}");
                self.metrics.api_error("list pods");
                return;
            }
        };
        self.metrics.pods_missing_networks.store(
            i64::try_from(found.len()).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        let uid = |f: &Found| f.meta.uid.clone().unwrap_or_default();
        // A pod fixed or gone is forgotten; one made again under its name is a new UID.
        said.retain(|u| found.iter().any(|f| uid(f) == *u));
        let new: Vec<&Found> = found.iter().filter(|f| said.insert(uid(f))).collect();
        let messages: Vec<String> = new
            .iter()
            .map(|f| {
                let message = format!(
                    "the pod runs without {}: {}; {}",
                    f.missing.networks.join(", "),
                    if f.missing.stale {
                        "its network-status is from an earlier sandbox (its addresses are not \
                         the pod's), so the sandbox was made again without multus (its config \
                         was not in place)"
                    } else {
                        "its network-status does not show it, so it started without multus (its \
                         config was not in place) or multus could not write the status"
                    },
                    if self.delete && f.controlled {
                        "it is deleted, so that its controller makes it again with its networks"
                    } else {
                        "delete it, so that its controller makes it again with its networks"
                    }
                );
                tracing::warn!(pod = %f.name(), "{message}");
                message
            })
            .collect();
        let events: Vec<PodEvent> = new
            .iter()
            .zip(&messages)
            .enumerate()
            .map(|(seq, (f, message))| PodEvent {
                pod: &f.meta,
                event_type: EventType::Warning,
                reason: multus::api::Reason::MissingNetworks.as_str(),
                message,
                seq,
            })
            .collect();
        for result in self.client.record_events(&events, EVENTS_DEADLINE) {
            if let Err(e) = result {
                tracing::warn!("{e}");
                self.metrics.event_failed();
            }
        }
        if self.delete {
            for f in new.iter().filter(|f| f.controlled) {
                self.delete(f);
            }
        }
    }

    /// Deletes the pod as it was found: one made again under its name meanwhile is left alone.
    fn delete(&self, f: &Found) {
        let (Some(namespace), Some(name)) = (f.meta.namespace.as_deref(), f.meta.name.as_deref())
        else {
            return;
        };
        let version = f.meta.resource_version.as_deref();
        match self.client.delete_object(PODS, namespace, name, version) {
            Ok(Deleted::Deleted) => {
                tracing::info!(pod = %f.name(), "deleted: it ran without its networks")
            }
            Ok(Deleted::Absent | Deleted::Stale) => {}
            Err(e) => {
                tracing::warn!(pod = %f.name(), "could not delete the pod: {e}");
                self.metrics.api_error("delete pods");
            }
        }
    }
}
