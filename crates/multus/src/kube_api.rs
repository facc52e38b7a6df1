//! The Kubernetes API through [`crate::k8s`]: the [`Api`] that multus's commands use.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{Api, EventKind, Nad, Pod};
use crate::config::MultusConf;
use crate::error::{Error, Result};
use crate::k8s::{ClientOptions, EventType, K8sError, KubeClient};

/// The client is made on first use: a DEL that has its cache never needs one.
struct KubeApi {
    options: ClientOptions,
    client: OnceCell<KubeClient>,
}

impl KubeApi {
    fn client(&self) -> Result<&KubeClient> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = KubeClient::new(&self.options).map_err(api_error)?;
        Ok(self.client.get_or_init(|| client))
    }
}

/// The API the configuration's `kubeconfig` names; without one, the in-cluster credentials
/// when the environment names an API server (multus running in a pod), as upstream does;
/// `None` otherwise.
pub fn connect(conf: &MultusConf) -> Result<Option<Box<dyn Api>>> {
    let kubeconfig = match &conf.kubeconfig {
        Some(path) => Some(path.clone()),
        None if crate::k8s::in_cluster_available() => None,
        None => return Ok(None),
    };
    Ok(Some(Box::new(KubeApi {
        options: ClientOptions {
            kubeconfig,
            timeout: conf.api_timeout,
            retries: conf.api_retries,
        },
        client: OnceCell::new(),
    })))
}

fn api_error(e: K8sError) -> Error {
    Error::Api(e.to_string())
}

impl Api for KubeApi {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>> {
        match self.client()?.get_pod(namespace, name) {
            Ok(pod) => Ok(Some(Pod {
                namespace: pod.metadata.namespace.unwrap_or_default(),
                name: pod.metadata.name.unwrap_or_default(),
                uid: pod.metadata.uid.unwrap_or_default(),
                annotations: pod.metadata.annotations.unwrap_or_default(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(api_error(e)),
        }
    }

    fn nad(&self, namespace: &str, name: &str) -> Result<Option<Nad>> {
        match self.client()?.get_nad(namespace, name) {
            Ok(nad) => Ok(Some(Nad {
                resource_name: nad
                    .metadata
                    .annotations
                    .and_then(|mut a| a.remove(crate::devinfo::RESOURCE_NAME_ANNOTATION))
                    .filter(|r| !r.is_empty()),
                config: nad.spec.config,
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(api_error(e)),
        }
    }

    fn set_pod_annotations(&self, pod: &Pod, annotations: &BTreeMap<String, String>) -> Result<()> {
        self.client()?
            .set_pod_annotations(&pod.namespace, &pod.name, annotations)
            .map_err(api_error)
    }

    fn event(&self, pod: &Pod, kind: EventKind, reason: &str, message: &str) -> Result<()> {
        let object = ObjectMeta {
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectMeta::default()
        };
        let kind = match kind {
            EventKind::Normal => EventType::Normal,
            EventKind::Warning => EventType::Warning,
        };
        self.client()?
            .record_event(&object, kind, reason, message)
            .map_err(api_error)
    }
}
