//! The Kubernetes API client of multus-rs: pods, NetworkAttachmentDefinitions, the pod's
//! annotations and events, with one error type ([`K8sError`]).

#![cfg_attr(test, allow(clippy::unwrap_used))]
//!
//! multus is a short-lived synchronous CNI process, so the client is synchronous: a
//! current-thread tokio runtime lives inside it and each call blocks until it is done. Every
//! attempt has a timeout, and failed calls are retried a bounded number of times with backoff
//! (timeouts, transport errors, 5xx, 429; a conflict only where that is safe); 404, 401 and 403
//! are never retried, so a call takes at most about `(retries + 1) * timeout` plus a few
//! seconds of backoff. A bearer token file (in-cluster, or a
//! kubeconfig `tokenFile`) is read again before every attempt, so a rotated service-account
//! token is used at once.

mod error;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::HeaderValue;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, NotUsed, Object};
use serde::{Deserialize, Deserializer, Serialize};

pub use error::{Call, Cause, K8sError};
/// The pod identity an event names.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The largest API reply read: an object is at most about 1.5 MB (etcd's limit).
pub const MAX_REPLY_BYTES: usize = 4 << 20;

/// The `spec` of a NetworkAttachmentDefinition. `config` is empty when the NAD has no
/// `spec.config` (or no spec at all): the standard then says to look in the CNI conf dir.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NadSpec {
    pub config: String,
}

impl<'de> Deserialize<'de> for NadSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NadSpec, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            config: Option<String>,
        }
        // Through `Option`, a missing or null spec reads as an empty one.
        let raw = Option::<Raw>::deserialize(d)?;
        Ok(NadSpec {
            config: raw.and_then(|r| r.config).unwrap_or_default(),
        })
    }
}

/// A `k8s.cni.cncf.io/v1` NetworkAttachmentDefinition.
pub type NetworkAttachmentDefinition = Object<NadSpec, NotUsed>;

/// The API resource of NetworkAttachmentDefinitions.
pub fn nad_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition"),
        "network-attachment-definitions",
    )
}

const NAD_RESOURCE_NAME: &str = "network-attachment-definitions.k8s.cni.cncf.io";

/// How to reach the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// The kubeconfig to use; `None` means in-cluster credentials (service account).
    pub kubeconfig: Option<PathBuf>,
    /// The timeout of one attempt (connect, send, reply).
    pub timeout: Duration,
    /// How many times a failed call is tried again (timeouts, transport errors, 5xx, 429).
    pub retries: u32,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            kubeconfig: None,
            timeout: Duration::from_secs(5),
            retries: 3,
        }
    }
}

/// The type of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Event messages longer than this are cut (at a character boundary), as client-go's
/// recorder does, so that a long delegate error cannot get the event refused.
const EVENT_MESSAGE_MAX: usize = 1024;

/// The component events are reported by.
const EVENT_COMPONENT: &str = "multus";

const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A bearer token read from a file before every attempt.
struct TokenFile {
    path: PathBuf,
    header: Arc<Mutex<Option<HeaderValue>>>,
}

impl TokenFile {
    fn refresh(&self) -> Result<(), Cause> {
        let fail = |error: String| Cause::Token {
            path: self.path.clone(),
            error,
        };
        let token = cni::input::read_file_to_string(&self.path).map_err(|e| fail(e.to_string()))?;
        let token = token.trim();
        if token.is_empty() {
            return Err(fail("is empty".into()));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| fail("holds characters not allowed in an HTTP header".into()))?;
        value.set_sensitive(true);
        *self.header.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
        Ok(())
    }
}

/// Whether in-cluster credentials can be tried: the API server's address is in the
/// environment, as Kubernetes sets it in every pod. Without a kubeconfig and without this,
/// multus does not talk to Kubernetes at all (as the reference does).
pub fn in_cluster_available() -> bool {
    ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"]
        .iter()
        .all(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

/// A synchronous Kubernetes client for the calls multus makes. It is `Send + Sync`; calls
/// from several threads share its connections. Its methods block, so they must not be called
/// from inside another tokio runtime's async code (use `spawn_blocking` there).
pub struct KubeClient {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
    token_file: Option<TokenFile>,
    timeout: Duration,
    retries: u32,
}

impl KubeClient {
    pub fn new(opts: &ClientOptions) -> Result<KubeClient, K8sError> {
        let from = match &opts.kubeconfig {
            Some(path) => format!("kubeconfig {}", path.display()),
            None => "in-cluster credentials".to_string(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| K8sError::setup(&from, &e))?;
        let mut config = runtime
            .block_on(load_config(opts.kubeconfig.as_deref()))
            .map_err(|e| K8sError::setup(&from, &*e))?;
        // Retries and deadlines are ours (kube's default retry waits up to minutes).
        config.default_retry = false;
        config.connect_timeout = Some(opts.timeout);
        config.read_timeout = Some(opts.timeout);
        config.write_timeout = Some(opts.timeout);
        // A token file is ours to read on every call (kube caches it for a minute); like
        // client-go, a token file wins over an inline token.
        let token_file = config.auth_info.token_file.take().map(|path| TokenFile {
            path: PathBuf::from(path),
            header: Arc::new(Mutex::new(None)),
        });
        if token_file.is_some() {
            config.auth_info.token = None;
        }
        let _entered = runtime.enter();
        // A reply is read whole: past the cap it is an error, not memory taken.
        let builder = kube::client::ClientBuilder::try_from(config)
            .map_err(|e| K8sError::setup(&from, &e))?
            .with_layer(&tower::util::MapResponseLayer::new(
                |reply: http::Response<_>| {
                    reply.map(|body| http_body_util::Limited::new(body, MAX_REPLY_BYTES))
                },
            ));
        let client = match &token_file {
            Some(token) => {
                let header = Arc::clone(&token.header);
                builder
                    .with_layer(&tower::util::MapRequestLayer::new(
                        move |mut req: http::Request<kube::client::Body>| {
                            let value = header
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .clone();
                            if let Some(value) = value {
                                req.headers_mut().insert(http::header::AUTHORIZATION, value);
                            }
                            req
                        },
                    ))
                    .build()
            }
            None => builder.build(),
        };
        Ok(KubeClient {
            runtime,
            client,
            token_file,
            timeout: opts.timeout,
            retries: opts.retries,
        })
    }

    /// The pod: its metadata typed, the rest (`spec`, `status`) as JSON in `data`.
    pub fn get_pod(&self, namespace: &str, name: &str) -> Result<DynamicObject, K8sError> {
        let api = self.pods(namespace);
        self.run(call("get", "pods", namespace, Some(name)), false, || {
            api.get(name)
        })
    }

    /// Pods untyped: multus reads their metadata only, and typed pods would carry a decoder
    /// for every field of a pod's spec and status into the binary.
    fn pods(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::erase::<Pod>(&()),
        )
    }

    pub fn get_nad(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, K8sError> {
        let api: Api<NetworkAttachmentDefinition> =
            Api::namespaced_with(self.client.clone(), namespace, &nad_resource());
        self.run(
            call("get", NAD_RESOURCE_NAME, namespace, Some(name)),
            false,
            || api.get(name),
        )
    }

    pub fn list_nads(&self, namespace: &str) -> Result<Vec<NetworkAttachmentDefinition>, K8sError> {
        let api: Api<NetworkAttachmentDefinition> =
            Api::namespaced_with(self.client.clone(), namespace, &nad_resource());
        let params = ListParams::default();
        self.run(
            call("list", NAD_RESOURCE_NAME, namespace, None),
            false,
            || async { api.list(&params).await.map(|list| list.items) },
        )
    }

    /// Sets these annotations on the pod and leaves every other field alone: a JSON merge PATCH
    /// of `metadata.annotations` on the `pods/status` subresource (which the multus RBAC role
    /// grants), retried on 409 Conflict within the call's bounds.
    pub fn set_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), K8sError> {
        self.patch_pod_annotations(namespace, name, None, annotations)
    }

    /// Like [`set_pod_annotations`](Self::set_pod_annotations), but only if the pod still has
    /// this UID: a pod deleted and re-created under the same name (a StatefulSet's) is left
    /// alone, and the call fails without retrying (a 409 whose message says "Precondition
    /// failed", or a 422 where a server treats the UID as an immutable field).
    pub fn set_pod_annotations_for_uid(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), K8sError> {
        self.patch_pod_annotations(namespace, name, Some(uid), annotations)
    }

    fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), K8sError> {
        let api = self.pods(namespace);
        let mut metadata = serde_json::json!({ "annotations": annotations });
        if let Some(uid) = uid {
            // The API server takes a UID in a patch as a precondition.
            metadata["uid"] = uid.into();
        }
        let patch = Patch::Merge(serde_json::json!({ "metadata": metadata }));
        let params = PatchParams::default();
        self.run(
            call("patch", "pods/status", namespace, Some(name)),
            true,
            || async { api.patch_status(name, &params, &patch).await.map(drop) },
        )
    }

    /// Records events on pods, all at once and all within `deadline`: each is tried (and
    /// retried) like any call, but one that has not reached the API server by then is given
    /// up. Events are best effort, and a hanging API must not hold up the CNI result. One
    /// result per event, in order.
    pub fn record_events(
        &self,
        events: &[PodEvent<'_>],
        deadline: Duration,
    ) -> Vec<Result<(), K8sError>> {
        let sends = events.iter().map(|e| self.record_event(e));
        self.runtime.block_on(async {
            let all = futures_util::future::join_all(sends);
            match tokio::time::timeout(deadline, all).await {
                Ok(results) => results,
                Err(_) => events
                    .iter()
                    .map(|e| {
                        Err(K8sError::Request {
                            call: Box::new(event_call(e)),
                            attempts: 1,
                            cause: Cause::Timeout(deadline),
                        })
                    })
                    .collect(),
            }
        })
    }

    async fn record_event(&self, e: &PodEvent<'_>) -> Result<(), K8sError> {
        let pod = e.pod;
        let namespace = pod.namespace.clone().unwrap_or_default();
        let pod_name = pod.name.clone().unwrap_or_default();
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                // client-go's naming: unique per pod and moment; events sent together differ
                // in their reason.
                name: Some(format!("{pod_name}.{:x}{:x}", now.as_nanosecond(), e.seq)),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.clone()),
                name: Some(pod_name),
                uid: pod.uid.clone(),
                resource_version: pod.resource_version.clone(),
                field_path: None,
            },
            reason: Some(e.reason.to_string()),
            message: Some(truncate(e.message, EVENT_MESSAGE_MAX).to_string()),
            type_: Some(e.event_type.as_str().to_string()),
            source: Some(EventSource {
                component: Some(EVENT_COMPONENT.into()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let params = PostParams::default();
        self.attempts(event_call(e), false, || async {
            match api.create(&params, &event).await {
                // Our own earlier attempt got through but its reply was lost.
                Err(kube::Error::Api(status))
                    if status.code == 409 && status.reason == "AlreadyExists" =>
                {
                    Ok(())
                }
                other => other.map(drop),
            }
        })
        .await
    }

    /// Runs one call to the end (see [`KubeClient::attempts`]).
    fn run<T, F, Fut>(&self, call: Call, retry_conflict: bool, attempt: F) -> Result<T, K8sError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.runtime
            .block_on(self.attempts(call, retry_conflict, attempt))
    }

    /// Attempts (each within `timeout`) until success, a final error, or `retries` retries,
    /// with exponential backoff between attempts.
    async fn attempts<T, F, Fut>(
        &self,
        call: Call,
        retry_conflict: bool,
        attempt: F,
    ) -> Result<T, K8sError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut backoff = BACKOFF_FIRST;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let cause = match self.token_file.as_ref().map(TokenFile::refresh) {
                Some(Err(cause)) => cause,
                _ => match tokio::time::timeout(self.timeout, attempt()).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(err)) => Cause::from_kube(err),
                    Err(_) => Cause::Timeout(self.timeout),
                },
            };
            if !cause.retryable(retry_conflict) || attempts > self.retries {
                return Err(K8sError::Request {
                    call: Box::new(call),
                    attempts,
                    cause,
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// One event to record on a pod.
pub struct PodEvent<'a> {
    pub pod: &'a ObjectMeta,
    pub event_type: EventType,
    pub reason: &'a str,
    pub message: &'a str,
    /// Its place among the events sent together (part of its name).
    pub seq: usize,
}

fn event_call(e: &PodEvent<'_>) -> Call {
    call(
        "create",
        "events",
        e.pod.namespace.as_deref().unwrap_or_default(),
        None,
    )
}

fn call(verb: &'static str, resource: &'static str, namespace: &str, name: Option<&str>) -> Call {
    Call {
        verb,
        resource,
        namespace: namespace.to_string(),
        name: name.map(str::to_string),
    }
}

async fn load_config(
    kubeconfig: Option<&Path>,
) -> Result<kube::Config, Box<dyn std::error::Error + Send + Sync>> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = read_kubeconfig(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::incluster()?,
    })
}

/// Reads a kubeconfig file: its YAML documents merged, and the files it names by relative
/// paths taken relative to its directory, as client-go does. (Parsed here with the YAML
/// library multus already carries, rather than kube's own, which would double the YAML code
/// in the binary.)
fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, Box<dyn std::error::Error + Send + Sync>> {
    let text = cni::input::read_file_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let absolute = |file: &mut Option<String>| {
        if let Some(file) = file
            .as_mut()
            .filter(|f| Path::new(f.as_str()).is_relative())
        {
            *file = dir.join(file.as_str()).display().to_string();
        }
    };
    let mut merged: Option<Kubeconfig> = None;
    for document in serde_norway::Deserializer::from_str(&text) {
        let mut config = Kubeconfig::deserialize(document)
            .map_err(|e| format!("{} is not a kubeconfig: {e}", path.display()))?;
        for cluster in config
            .clusters
            .iter_mut()
            .filter_map(|c| c.cluster.as_mut())
        {
            absolute(&mut cluster.certificate_authority);
        }
        for auth in config
            .auth_infos
            .iter_mut()
            .filter_map(|a| a.auth_info.as_mut())
        {
            absolute(&mut auth.client_certificate);
            absolute(&mut auth.client_key);
            absolute(&mut auth.token_file);
            // A bare command name is looked up in PATH.
            if let Some(exec) = auth.exec.as_mut() {
                if exec.command.as_ref().is_some_and(|c| c.contains('/')) {
                    absolute(&mut exec.command);
                }
            }
        }
        merged = Some(match merged {
            Some(earlier) => earlier.merge(config)?,
            None => config,
        });
    }
    Ok(merged.unwrap_or_default())
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nad_spec_may_be_missing_null_or_without_config() {
        for doc in [
            r#"{"metadata":{"name":"a"}}"#,
            r#"{"metadata":{"name":"a"},"spec":null}"#,
            r#"{"metadata":{"name":"a"},"spec":{}}"#,
        ] {
            let nad: NetworkAttachmentDefinition = serde_json::from_str(doc).unwrap();
            assert_eq!(nad.spec.config, "", "{doc}");
        }
        let nad: NetworkAttachmentDefinition =
            serde_json::from_str(r#"{"metadata":{"name":"a"},"spec":{"config":"{}"}}"#).unwrap();
        assert_eq!(nad.spec.config, "{}");
    }

    #[test]
    fn client_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<KubeClient>();
        shareable::<K8sError>();
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("abcdef", 3), "abc");
    }
}
