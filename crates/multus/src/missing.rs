//! Pods of a node that run without networks they asked for: started while multus's config was
//! not in place (a reboot's race, a primary network's config picked first), so nothing
//! attached their networks and nothing said so. Thick mode's daemon and thin mode's installer
//! each run a [`Watchman`]: the node's pods are listed once multus is ready on the node and
//! every `every` (30 s by default) after. A pod found so at two looks in a row, unchanged
//! between them, is said once, until it is fixed or gone: a line in the log, a Warning event
//! `MissingNetworks` on the pod, and, where the process has metrics, a gauge. (One look is not
//! enough: just after a sandbox is made again, the kubelet may not have reported the pod's new
//! address yet.) With `delete`, a pod a workload controller owns is deleted, so that the
//! controller makes it again with its networks; once per controller, so that a node whose
//! runtime still does not run multus does not delete its pods over and over.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s::{Deleted, EventType, KubeClient, ObjectMeta, PodEvent, Resource};
use serde_json::Value;

/// How long recording the events of one look may take.
const EVENTS_DEADLINE: Duration = Duration::from_secs(10);
/// The controllers that make a deleted pod again as it was: a pod another owner holds (a
/// KubeVirt VM's, a mirror pod's node) is reported, never deleted.
const WORKLOAD_CONTROLLERS: [&str; 5] = [
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "ReplicationController",
];

const PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
};

/// One pod found without networks it asked for.
struct Found {
    meta: ObjectMeta,
    missing: npwg::status::Missing,
    /// The UID of the workload controller that owns it, if one does.
    controller: Option<String>,
}

impl Found {
    fn of(pod: &Value, system_namespaces: &[String]) -> Option<Found> {
        let missing =
            npwg::status::pod_missing(pod, system_namespaces).filter(|m| !m.networks.is_empty())?;
        let meta: ObjectMeta = serde_json::from_value(pod.get("metadata")?.clone()).ok()?;
        let mirror = meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .filter(|o| !mirror && WORKLOAD_CONTROLLERS.contains(&o.kind.as_str()))
            .map(|o| o.uid.clone());
        Some(Found {
            meta,
            missing,
            controller,
        })
    }

    fn uid(&self) -> String {
        self.meta.uid.clone().unwrap_or_default()
    }

    fn version(&self) -> String {
        self.meta.resource_version.clone().unwrap_or_default()
    }

    fn name(&self) -> String {
        format!(
            "{}/{}",
            self.meta.namespace.as_deref().unwrap_or_default(),
            self.meta.name.as_deref().unwrap_or_default()
        )
    }
}

/// The process a [`Watchman`] runs in: whether multus is ready on the node, and where its
/// findings go besides the pods' events.
pub trait Witness {
    /// Nothing is looked at before multus is ready: until then every pod would miss its
    /// networks.
    fn ready(&self) -> bool;
    /// How many pods the last look found (a gauge, where the process has metrics).
    fn found(&self, pods: usize);
    /// An API call that failed, by what it did ("list pods").
    fn api_error(&self, call: &str);
    /// An event that could not be recorded.
    fn event_failed(&self);
    /// A line for the log, about `pod` (namespace/name) when there is one.
    fn warn(&self, pod: Option<&str>, message: &str);
}

pub struct Watchman<W: Witness> {
    pub client: Arc<KubeClient>,
    pub node: String,
    pub system_namespaces: Vec<String>,
    pub every: Duration,
    pub delete: bool,
    pub witness: W,
    pub stop: Arc<AtomicBool>,
}

/// What the looks remember.
#[derive(Default)]
struct Memory {
    /// The pods found at the last look, by UID, with their resourceVersion.
    last: HashMap<String, String>,
    /// The pods already said, by UID.
    said: HashSet<String>,
    /// The controllers one of whose pods was deleted.
    deleted_for: HashSet<String>,
}

impl<W: Witness> Watchman<W> {
    /// Looks every `every` while multus is ready, until told to stop.
    pub fn run(self) {
        let mut memory = Memory::default();
        let mut next = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            if Instant::now() >= next && self.witness.ready() {
                self.look(&mut memory);
                next = Instant::now() + self.every;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn look(&self, memory: &mut Memory) {
        let namespaces = &self.system_namespaces;
        let found = match self
            .client
            .list_node_pods(&self.node, &mut |pod| Found::of(&pod, namespaces))
        {
            Ok(found) => found,
            Err(e) => {
                self.witness.warn(
                    None,
                    &format!("looking for pods without their networks: {e}"),
                );
                self.witness.api_error("list pods");
                return;
            }
        };
        // Found at the look before too, unchanged since.
        let settled: Vec<&Found> = found
            .iter()
            .filter(|f| memory.last.get(&f.uid()) == Some(&f.version()))
            .collect();
        self.witness.found(settled.len());
        memory.last = found.iter().map(|f| (f.uid(), f.version())).collect();
        // A pod fixed or gone is forgotten; one made again under its name has a new UID.
        memory.said.retain(|u| memory.last.contains_key(u));
        let new: Vec<&Found> = settled
            .into_iter()
            .filter(|f| memory.said.insert(f.uid()))
            .collect();
        let messages: Vec<String> = new
            .iter()
            .map(|f| {
                let what = format!(
                    "the pod runs without {}: {}",
                    f.missing.networks.join(", "),
                    if f.missing.stale {
                        "its network-status is from an earlier sandbox (its addresses are not \
                         the pod's), so the sandbox was made again without multus (its config \
                         was not in place)"
                    } else {
                        "its network-status does not show it, so it started without multus (its \
                         config was not in place) or multus could not write the status"
                    }
                );
                let outcome = self.settle(f, memory);
                let message = format!("{what}; {outcome}");
                self.witness.warn(Some(&f.name()), &message);
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
                reason: crate::api::Reason::MissingNetworks.as_str(),
                message,
                seq,
            })
            .collect();
        for result in self.client.record_events(&events, EVENTS_DEADLINE) {
            if let Err(e) = result {
                self.witness.warn(None, &e.to_string());
                self.witness.event_failed();
            }
        }
    }

    /// Deletes the pod when asked to and it may be, and says what became of it.
    fn settle(&self, f: &Found, memory: &mut Memory) -> String {
        const ASK: &str = "delete it, so that its controller makes it again with its networks";
        if !self.delete {
            return ASK.to_owned();
        }
        let Some(controller) = &f.controller else {
            return "not deleted: no workload controller would make it again".to_owned();
        };
        if memory.deleted_for.contains(controller) {
            return "not deleted: a pod of its controller was deleted for this already, and \
                    came back without its networks too: check which CNI config the runtime \
                    uses (multus doctor)"
                .to_owned();
        }
        let (Some(namespace), Some(name)) = (f.meta.namespace.as_deref(), f.meta.name.as_deref())
        else {
            return ASK.to_owned();
        };
        // The pod as it was seen: one made again under its name meanwhile is left alone.
        match self
            .client
            .delete_object(PODS, namespace, name, Some(&f.version()))
        {
            Ok(Deleted::Deleted) => {
                memory.deleted_for.insert(controller.clone());
                "deleted, so that its controller makes it again with its networks".to_owned()
            }
            Ok(Deleted::Absent | Deleted::Stale) => {
                "not deleted: it changed or went away meanwhile".to_owned()
            }
            Err(e) => {
                self.witness.api_error("delete pods");
                format!("could not delete it: {e}")
            }
        }
    }
}
