//! What multus needs from the Kubernetes API, as plain data. The commands talk to a `dyn Api`
//! only, so everything else works (and is tested) on pods and NAD configs as values.

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

pub trait Api {
    /// The pod, or `None` when the API says it does not exist.
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>>;
    /// A NAD's config (empty when the spec has none) and resource name, or `None` when it does
    /// not exist.
    fn nad(&self, namespace: &str, name: &str) -> Result<Option<Nad>>;
    /// Merges `annotations` into the pod's annotations.
    fn set_pod_annotations(&self, pod: &Pod, annotations: &BTreeMap<String, String>) -> Result<()>;
    /// Records an event on the pod; returns once the API has it.
    fn event(&self, pod: &Pod, kind: EventKind, reason: &str, message: &str) -> Result<()>;
}

/// Opens the API for a configuration; `None` means multus runs without one.
pub type Connect = fn(&crate::config::MultusConf) -> Result<Option<Box<dyn Api>>>;
