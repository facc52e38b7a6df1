//! The Kubernetes-backed [`Api`]: the one the `multus` binary runs with, through [`k8s`].

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s::ObjectMeta;

use crate::api::{Api, Event, EventKind, Nad, Pod};
use crate::config::MultusConf;
use crate::error::{Error, Result};
use k8s::client_certificate::PerNode;
use k8s::{ClientOptions, EventType, K8sError, KubeClient, PodEvent};

/// All the events of one command share this deadline (or the API timeout, when shorter).
const EVENTS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// The client is made on first use: a DEL that has its cache never needs one.
pub struct KubeApi {
    options: ClientOptions,
    /// Thin mode's per-node certificate: asked for before the client is made when none is
    /// valid.
    per_node: Option<PerNode>,
    client: OnceCell<Arc<KubeClient>>,
}

/// How long a call waits for its own certificate to be approved and signed.
const CERTIFICATE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

impl KubeApi {
    /// An API over a client that outlives the call (a daemon's, shared by its calls);
    /// `timeout` bounds the events' deadline, as the client's own does.
    pub fn shared(client: Arc<KubeClient>, timeout: std::time::Duration) -> KubeApi {
        KubeApi {
            options: ClientOptions {
                timeout,
                ..ClientOptions::default()
            },
            per_node: None,
            client: OnceCell::from(client),
        }
    }

    fn client(&self) -> std::result::Result<&KubeClient, K8sError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        if let Some(per_node) = &self.per_node {
            per_node
                .renew_if_ending(CERTIFICATE_WAIT)
                .map_err(|e| e.into_setup(&per_node.dir))?;
        }
        let client = KubeClient::new(&self.options)?;
        Ok(self.client.get_or_init(|| Arc::new(client)))
    }
}

/// The API the configuration's `kubeconfig` names; without one, the in-cluster credentials
/// when the environment names an API server (multus running in a pod), as upstream does;
/// `None` otherwise.
pub fn connect(conf: &MultusConf) -> Result<Option<Box<dyn Api>>> {
    let kubeconfig = match &conf.kubeconfig {
        Some(path) => Some(path.clone()),
        None if k8s::in_cluster_available() => None,
        None => return Ok(None),
    };
    Ok(Some(Box::new(KubeApi {
        options: ClientOptions {
            kubeconfig,
            timeout: conf.api_timeout,
            retries: conf.api_retries,
            keep_alive: k8s::KeepAlive::Call,
        },
        per_node: conf.per_node_certificate.clone(),
        client: OnceCell::new(),
    })))
}

/// What multus reads of a NAD; not found is `None`.
fn nad_of(
    got: std::result::Result<k8s::NetworkAttachmentDefinition, K8sError>,
) -> Result<Option<Nad>> {
    match got {
        Ok(nad) => Ok(Some(Nad {
            resource_name: nad
                .metadata
                .annotations
                .and_then(|mut a| a.remove(npwg::devinfo::RESOURCE_NAME_ANNOTATION))
                .filter(|r| !r.is_empty()),
            config: nad.spec.config,
        })),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(Error::from(e)),
    }
}

impl Api for KubeApi {
    fn pod(&self, namespace: &str, name: &str, _uid: &str) -> Result<Option<Pod>> {
        match self.client()?.get_pod(namespace, name) {
            Ok(pod) => Ok(Some(Pod {
                namespace: pod.metadata.namespace.unwrap_or_default(),
                name: pod.metadata.name.unwrap_or_default(),
                uid: pod.metadata.uid.unwrap_or_default(),
                annotations: pod.metadata.annotations.unwrap_or_default(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(Error::from(e)),
        }
    }

    fn nad(&self, namespace: &str, name: &str) -> Result<Option<Nad>> {
        nad_of(self.client()?.get_nad(namespace, name))
    }

    fn nads(&self, names: &[(&str, &str)]) -> Vec<Result<Option<Nad>>> {
        match self.client() {
            Ok(client) => client.get_nads(names).into_iter().map(nad_of).collect(),
            // Each gets the setup error of its own.
            Err(_) => names.iter().map(|(ns, name)| self.nad(ns, name)).collect(),
        }
    }

    fn set_pod_annotations(&self, pod: &Pod, annotations: &BTreeMap<String, String>) -> Result<()> {
        self.client()?
            .set_pod_annotations(&pod.namespace, &pod.name, annotations)
            .map_err(Error::from)
    }

    fn record_events<'a>(&self, events: &'a [Event]) -> Vec<(&'a Event, Error)> {
        let client = match self.client() {
            Ok(client) => client,
            Err(e) => {
                return events
                    .iter()
                    .map(|ev| (ev, Error::from(e.clone())))
                    .collect()
            }
        };
        let objects: Vec<ObjectMeta> = events
            .iter()
            .map(|e| ObjectMeta {
                namespace: Some(e.pod.namespace.clone()),
                name: Some(e.pod.name.clone()),
                uid: Some(e.pod.uid.clone()),
                ..ObjectMeta::default()
            })
            .collect();
        let sends: Vec<PodEvent> = events
            .iter()
            .zip(&objects)
            .enumerate()
            .map(|(seq, (e, pod))| PodEvent {
                pod,
                event_type: match e.kind {
                    EventKind::Normal => EventType::Normal,
                    EventKind::Warning => EventType::Warning,
                },
                reason: &e.reason,
                message: &e.message,
                seq,
            })
            .collect();
        let deadline = EVENTS_DEADLINE.min(self.options.timeout);
        client
            .record_events(&sends, deadline)
            .into_iter()
            .zip(events)
            .filter_map(|(sent, e)| sent.err().map(|err| (e, Error::from(err))))
            .collect()
    }
}
