//! What multus needs from the Kubernetes API, as plain data. The commands talk to a `dyn Api`
//! only, so everything else works (and is tested) on pods and NAD configs as values.

pub mod kube;

use std::collections::BTreeMap;

use crate::error::Result;

/// The parts of a pod multus reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub annotations: BTreeMap<String, String>,
}

impl Pod {
    /// A static (mirror) pod: its UID in the API differs from the kubelet's.
    pub fn is_static(&self) -> bool {
        self.annotations
            .get("kubernetes.io/config.source")
            .is_some_and(|source| source != "api")
    }
}

/// The parts of a NetworkAttachmentDefinition multus reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nad {
    /// `spec.config` (empty when the spec has none).
    pub config: String,
    /// The device plugin resource its devices come from (`k8s.v1.cni.cncf.io/resourceName`).
    pub resource_name: Option<String>,
}

/// Every event multus records on a pod, with the reason `kubectl describe` shows and its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A network's interface is in the pod.
    AddedInterface,
    /// ADD failed; what it added is undone.
    AddInterfaceFailed,
    /// Hot-plug removed a network's interface.
    RemovedInterface,
    /// Hot-plug could not remove a network's interface: the sandbox's DEL tries again.
    RemoveInterfaceFailed,
    /// The pod names a NAD that does not exist.
    NoNetworkFound,
    /// The admission policy denies a network the pod names.
    NetworkRefused,
    /// A device-info file cannot be used: the network-status entry goes without it.
    DeviceInfoUnusable,
    /// A secondary network's default route is kept behind the pod's.
    SecondaryDefaultRoute,
    /// A secondary network's route into the cluster's networks is removed.
    SecondaryRouteDropped,
    /// A running pod's network-status lacks networks it asks for (thick mode's daemon looks).
    MissingNetworks,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::AddedInterface => "AddedInterface",
            Reason::AddInterfaceFailed => "AddInterfaceFailed",
            Reason::RemovedInterface => "RemovedInterface",
            Reason::RemoveInterfaceFailed => "RemoveInterfaceFailed",
            Reason::NoNetworkFound => "NoNetworkFound",
            Reason::NetworkRefused => "NetworkRefused",
            Reason::DeviceInfoUnusable => "DeviceInfoUnusable",
            Reason::SecondaryDefaultRoute => "SecondaryDefaultRoute",
            Reason::SecondaryRouteDropped => "SecondaryRouteDropped",
            Reason::MissingNetworks => "MissingNetworks",
        }
    }

    pub fn kind(self) -> EventKind {
        match self {
            Reason::AddedInterface | Reason::RemovedInterface => EventKind::Normal,
            _ => EventKind::Warning,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// An event multus records on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub pod: Pod,
    pub kind: EventKind,
    pub reason: String,
    pub message: String,
}

/// The events of one command, recorded together at its end (see [`Api::record_events`]).
#[derive(Default)]
pub struct Events(std::cell::RefCell<Vec<Event>>);

impl Events {
    pub fn push(&self, pod: &Pod, reason: Reason, message: &str) {
        self.0.borrow_mut().push(Event {
            pod: pod.clone(),
            kind: reason.kind(),
            reason: reason.as_str().to_owned(),
            message: message.to_owned(),
        });
    }

    /// Sends what was pushed, and logs what could not be recorded.
    pub fn send(&self, api: &dyn Api) {
        let events = self.0.take();
        if events.is_empty() {
            return;
        }
        for (event, e) in api.record_events(&events) {
            tracing::error!("cannot record event {} on the pod: {e}", event.reason);
        }
    }
}

pub trait Api {
    /// The pod, or `None` when the API says it does not exist. `uid` is the runtime's (empty
    /// when it gave none): an API that keeps copies of pods may answer from a copy of that UID,
    /// and asks the server otherwise.
    fn pod(&self, namespace: &str, name: &str, uid: &str) -> Result<Option<Pod>>;
    /// A NAD's config (empty when the spec has none) and resource name, or `None` when it does
    /// not exist.
    fn nad(&self, namespace: &str, name: &str) -> Result<Option<Nad>>;
    /// [`nad`](Api::nad) for each `(namespace, name)`, in order; an API reads them side by
    /// side where it can.
    fn nads(&self, names: &[(&str, &str)]) -> Vec<Result<Option<Nad>>> {
        names
            .iter()
            .map(|(namespace, name)| self.nad(namespace, name))
            .collect()
    }
    /// Merges `annotations` into the pod's annotations.
    fn set_pod_annotations(&self, pod: &Pod, annotations: &BTreeMap<String, String>) -> Result<()>;
    /// Records events, all at once and within a short deadline of their own: events are best
    /// effort, and must not hold up the CNI result. Returns those that were not recorded.
    fn record_events<'a>(&self, events: &'a [Event]) -> Vec<(&'a Event, crate::error::Error)>;
}

/// Opens the API for a configuration; `None` means multus runs without one.
pub type Connect =
    Box<dyn Fn(&crate::config::MultusConf) -> Result<Option<Box<dyn Api>>> + Send + Sync>;
