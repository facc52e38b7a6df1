//! The Kubernetes API client of multus-rs: pods, NetworkAttachmentDefinitions, the pod's
//! annotations and events, with one error type ([`K8sError`]).
//!
//! multus is a short-lived synchronous CNI process, so the client is synchronous: a
//! current-thread tokio runtime lives inside it and each call blocks until it is done. Every
//! attempt has a timeout, and failed calls are retried a bounded number of times with backoff
//! (timeouts, transport errors, 5xx, 429; a conflict only where that is safe); 404, 401 and 403
//! are never retried, so a call takes at most about `(retries + 1) * timeout` plus a few
//! seconds of backoff. A bearer token file (in-cluster, or a
//! kubeconfig `tokenFile`) is read again before every attempt, so a rotated service-account
//! token is used at once. Calls share one HTTP/2 connection where the server offers it (see
//! `transport`), and [`KubeClient::get_nads`] sends its reads side by side.

pub mod client_certificate;
mod credentials;
mod error;
mod events;
mod lease;
mod nad;
mod objects;
mod transport;
mod watch;
pub mod x509;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};

use credentials::{load_config, TokenFile};
use nad::NAD_RESOURCE_NAME;

pub use credentials::{in_cluster_available, kubeconfig_user, UserCredential};
pub use error::{Call, Cause, K8sError};
pub use events::{EventType, PodEvent, EVENTS_IN_FLIGHT};
/// The pod identity an event names.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use lease::Leased;
pub use nad::{nad_resource, NadSpec, NetworkAttachmentDefinition};
pub use objects::{Created, Deleted, Resource, Written};
pub use watch::{Change, Collection};

/// The largest API reply read: an object is at most about 1.5 MB (etcd's limit).
pub const MAX_REPLY_BYTES: usize = 4 << 20;

/// How to reach the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// The kubeconfig to use; `None` means in-cluster credentials (service account).
    pub kubeconfig: Option<PathBuf>,
    /// The timeout of one attempt (connect, send, reply).
    pub timeout: Duration,
    /// How many times a failed call is tried again (timeouts, transport errors, 5xx, 429).
    pub retries: u32,
    /// When a silent HTTP/2 connection is pinged, and dropped.
    pub keep_alive: KeepAlive,
}

/// When a silent HTTP/2 connection is pinged, and how long an answer may take before the
/// connection is dropped: a policy per kind of process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// A CNI call lives tens of milliseconds: a connection that went silent (a server failing
    /// over behind a VIP) is pinged after 0.5 s and dropped 0.5 s later, so that the call's
    /// retry connects again rather than waiting on it.
    Call,
    /// A long-lived process (thick mode's daemon, the reconciler): client-go's 30 s and 15 s.
    /// A slow answer does not tear down its watches and the writes in flight, and a node does
    /// not ping the API server twice a second.
    Process,
}

impl KeepAlive {
    /// How long a connection may stay silent before a ping, and then wait for its answer.
    pub fn ping_after_and_timeout(self) -> (Duration, Duration) {
        match self {
            KeepAlive::Call => (Duration::from_millis(500), Duration::from_millis(500)),
            KeepAlive::Process => (Duration::from_secs(30), Duration::from_secs(15)),
        }
    }
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            kubeconfig: None,
            timeout: Duration::from_secs(5),
            retries: 3,
            keep_alive: KeepAlive::Call,
        }
    }
}

/// The most requests one batch keeps in flight: streams on one HTTP/2 connection, or HTTP/1.1
/// connections when the server offers no HTTP/2.
pub const CALLS_IN_FLIGHT: usize = 8;

const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A synchronous Kubernetes client for the calls multus makes. It is `Send + Sync`; calls
/// from several threads share its connections. Its methods block, so they must not be called
/// from inside another tokio runtime's async code (use `spawn_blocking` there).
pub struct KubeClient {
    runtime: tokio::runtime::Runtime,
    client: Mutex<kube::Client>,
    renewed: Option<Renewed>,
    context_namespace: Option<String>,
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
        let (mut config, context_namespace) = runtime
            .block_on(load_config(opts.kubeconfig.as_deref()))
            .map_err(|e| K8sError::setup(&from, &*e))?;
        // Retries and deadlines are ours: every attempt has `timeout` as a whole.
        config.connect_timeout = Some(opts.timeout);
        // A token file is ours to read on every call (kube caches it for a minute); like
        // client-go, a token file wins over an inline token.
        let token_file = config.auth_info.token_file.take().map(|path| TokenFile {
            path: PathBuf::from(path),
            header: Arc::new(Mutex::new(None)),
        });
        if token_file.is_some() {
            config.auth_info.token = None;
        }
        let token_header = token_file.as_ref().map(|t| Arc::clone(&t.header));
        let client = {
            let _entered = runtime.enter();
            build_client(&config, opts.keep_alive, token_header.clone())
                .map_err(|e| K8sError::setup(&from, &*e))?
        };
        // A client certificate in a file may be renewed under the process (a per-node
        // certificate, a kubelet's rotated one): a change makes a new client, and so new
        // connections, since a connection keeps the certificate it was opened with.
        let renewed = config
            .auth_info
            .client_certificate
            .as_ref()
            .map(|path| Renewed {
                stamp: Mutex::new(FileStamp::of(Path::new(path))),
                certificate: PathBuf::from(path),
                config: config.clone(),
                keep_alive: opts.keep_alive,
                token_header,
            });
        Ok(KubeClient {
            runtime,
            client: Mutex::new(client),
            renewed,
            context_namespace,
            token_file,
            timeout: opts.timeout,
            retries: opts.retries,
        })
    }

    /// The client for the next call: made again first when the certificate file changed.
    fn client(&self) -> kube::Client {
        if let Some(renewed) = &self.renewed {
            let now = FileStamp::of(&renewed.certificate);
            let mut seen = renewed.stamp.lock().unwrap_or_else(PoisonError::into_inner);
            if now.is_some() && *seen != now {
                let _entered = self.runtime.enter();
                match build_client(
                    &renewed.config,
                    renewed.keep_alive,
                    renewed.token_header.clone(),
                ) {
                    Ok(client) => {
                        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = client;
                        *seen = now;
                        tracing::info!(
                            "client certificate {} renewed: new connections use it",
                            renewed.certificate.display()
                        );
                    }
                    // Half written, or not yet matching its key: the next call looks again.
                    Err(e) => tracing::warn!(
                        "client certificate {} changed but cannot be used yet: {e}",
                        renewed.certificate.display()
                    ),
                }
            }
        }
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The namespace the kubeconfig's current context names, if any.
    pub fn context_namespace(&self) -> Option<&str> {
        self.context_namespace.as_deref()
    }

    /// The pod: its metadata typed, the rest (`spec`, `status`) as JSON in `data`.
    pub fn get_pod(&self, namespace: &str, name: &str) -> Result<DynamicObject, K8sError> {
        let call = objects::checked_call("get", "pods", namespace, Some(name))?;
        let api = self.pods(namespace);
        self.run(call, false, || api.get(name))
    }

    /// Pods untyped: multus reads their metadata only, and typed pods would carry a decoder
    /// for every field of a pod's spec and status into the binary.
    fn pods(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), namespace, &ApiResource::erase::<Pod>(&()))
    }

    pub fn get_nad(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, K8sError> {
        self.runtime.block_on(self.nad(namespace, name))
    }

    /// The NADs named by `(namespace, name)`, fetched side by side, at most
    /// [`CALLS_IN_FLIGHT`] at a time: one result per name, in order.
    pub fn get_nads(
        &self,
        names: &[(&str, &str)],
    ) -> Vec<Result<NetworkAttachmentDefinition, K8sError>> {
        use futures_util::StreamExt;
        let gets = futures_util::stream::iter(names)
            .map(|(namespace, name)| self.nad(namespace, name))
            .buffered(CALLS_IN_FLIGHT);
        self.runtime.block_on(gets.collect())
    }

    async fn nad(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<NetworkAttachmentDefinition, K8sError> {
        let api: Api<NetworkAttachmentDefinition> =
            Api::namespaced_with(self.client(), namespace, &nad_resource());
        let call = call("get", NAD_RESOURCE_NAME, namespace, Some(name));
        self.attempts(call, false, || api.get(name)).await
    }

    pub fn list_nads(&self, namespace: &str) -> Result<Vec<NetworkAttachmentDefinition>, K8sError> {
        let api: Api<NetworkAttachmentDefinition> =
            Api::namespaced_with(self.client(), namespace, &nad_resource());
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

/// What makes the client again when its certificate file changes.
struct Renewed {
    certificate: PathBuf,
    stamp: Mutex<Option<FileStamp>>,
    config: kube::Config,
    keep_alive: KeepAlive,
    token_header: Option<Arc<Mutex<Option<http::HeaderValue>>>>,
}

/// Which file a path leads to, and when it was written: a link moved to a new file, or a file
/// written again, changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    device: u64,
    inode: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            device: meta.dev(),
            inode: meta.ino(),
            modified: meta.modified().ok(),
        })
    }
}

/// kube's client over our HTTP stack, with the reply cap, and the token file's header when
/// there is one. Must be called inside the tokio runtime the client will run on.
fn build_client(
    config: &kube::Config,
    keep_alive: KeepAlive,
    token_header: Option<Arc<Mutex<Option<http::HeaderValue>>>>,
) -> Result<kube::Client, Box<dyn std::error::Error + Send + Sync>> {
    let service = transport::service(config, keep_alive)?;
    // A reply is read whole: past the cap it is an error, not memory taken.
    let builder = kube::client::ClientBuilder::new(service, config.default_namespace.clone())
        .with_layer(&tower::util::MapResponseLayer::new(
            |reply: http::Response<_>| {
                reply.map(|body| http_body_util::Limited::new(body, MAX_REPLY_BYTES))
            },
        ));
    Ok(match token_header {
        Some(header) => builder
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
            .build(),
        None => builder.build(),
    })
}

fn call(verb: &'static str, resource: &'static str, namespace: &str, name: Option<&str>) -> Call {
    Call {
        verb,
        resource,
        namespace: namespace.to_string(),
        name: name.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<KubeClient>();
        shareable::<K8sError>();
    }
}
