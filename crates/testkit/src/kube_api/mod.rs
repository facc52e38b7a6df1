//! A Kubernetes API server for tests: the part of the API that multus uses, over HTTP or HTTPS
//! with a bearer token, on loopback.
//!
//! HTTPS offers HTTP/2 and HTTP/1.1 through ALPN, as kube-apiserver does, or HTTP/1.1 alone.
//!
//! It serves:
//! - pods: get, list (in a namespace or in all); merge and strategic merge PATCH of the object
//!   and of `pods/status`; delete with preconditions (gone at once: there is no kubelet);
//! - network-attachment-definitions: get, list;
//! - events: create, list;
//! - generically, the namespaced [`Resource`]s whereabouts uses (its `ippools`,
//!   `overlappingrangeipreservations` and `nodeslicepools`, and `coordination.k8s.io` Leases):
//!   create, get, list in a namespace or in all, PUT, JSON patch (RFC 6902, `test` included),
//!   merge patch, delete with preconditions;
//! - the discovery documents `kubectl` needs, for all of these.
//!
//! Failures are real `Status` objects (401, 404, 409 on a stale `metadata.resourceVersion` or
//! UID or an existing name, 422 on a failed JSON patch `test`, ...). Every write bumps the
//! server-wide resourceVersion and gives the object written that version.
//!
//! A test may opt in to RBAC ([`KubeApiServer::enforce_rbac`]): each ServiceAccount gets a
//! token of its own, and its requests are authorized by the Roles and bindings of rendered
//! manifests, with kube-apiserver's 403 for what they do not allow.
//!
//! Tests seed and read back what was stored (pods, NADs, events, [`Resource`] objects, the
//! request log) and inject faults, into every request or only into one method on one path or
//! the paths under it: latency, error replies, dropped connections, a request held until the
//! test lets it through, and the whole server going down and coming back.

mod gate;
mod http1;
mod http2;
mod in_cluster;
mod latency;
mod objects;
mod protobuf;
mod rbac;
mod routes;
mod tls;
mod watch;

pub use gate::Gate;
pub use in_cluster::InCluster;
pub use latency::Latency;
pub use objects::Resource;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use serde_json::{json, Value};

use crate::Netns;
use routes::State;

/// How the server is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    /// TLS offering `h2` and `http/1.1`.
    Https,
    /// TLS offering `http/1.1` only, as a proxy in front of the API server may.
    HttpsHttp1Only,
}

/// One injected fault, used up by the next authorized request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Reply with this HTTP status and a matching `Status` object instead of serving.
    Status(u16),
    /// Wait this long, then serve normally.
    Delay(Duration),
    /// Close the connection without serving or replying.
    Close,
    /// Serve the request (a write is stored), then close the connection without replying: a
    /// reply lost on the way.
    LoseReply,
    /// Stop reading and answering on the connection altogether, HTTP/2 pings included, for
    /// [`STALL`], then drop it: a server gone silent behind a load balancer.
    Stall,
    /// Answer a watch with 200 and end it at once, with no event: a proxy that cuts long
    /// requests short.
    EndWatch,
    /// Hold the request when it arrives until the test releases the gate, then serve it
    /// normally: other requests land meanwhile, in an order the test decides.
    Hold(Gate),
}

/// How long a [`Fault::Stall`] keeps its connection silent.
pub const STALL: Duration = Duration::from_secs(30);

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub body: String,
    /// The status served, or 0 when the request was not served ([`Fault::Close`]).
    pub status: u16,
    /// Whether the reply was sent ([`Fault::Close`] and [`Fault::LoseReply`] send none).
    pub replied: bool,
    /// `HTTP/1.1` or `HTTP/2`.
    pub version: ::http::Version,
    /// When the request had been read, and when it was served (its latency waited out).
    pub arrived: Instant,
    pub served: Instant,
}

impl LoggedRequest {
    /// Whether the two were being served at the same time.
    pub fn overlaps(&self, other: &LoggedRequest) -> bool {
        self.arrived < other.served && other.arrived < self.served
    }
}

/// The credentials a written kubeconfig carries.
#[derive(Clone, Debug)]
pub enum KubeconfigAuth {
    /// The server's current token inline (`token:`).
    Token,
    /// This ServiceAccount's token inline
    /// ([`KubeApiServer::service_account_token`]).
    ServiceAccount { namespace: String, name: String },
    /// A `tokenFile:` reference; the test writes the file.
    TokenFile(PathBuf),
    /// No credentials at all.
    None,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled after every write, for the watches waiting on `state`.
    changed: Condvar,
    up: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
    tls: Option<Arc<rustls::ServerConfig>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The server; it stops and closes every connection when dropped.
pub struct KubeApiServer {
    addr: SocketAddr,
    /// The network namespace the server listens in, when not the test's own.
    netns: Option<PathBuf>,
    scheme: Scheme,
    ca_pem: Option<String>,
    shared: Arc<Shared>,
    listeners: Option<mpsc::Sender<TcpListener>>,
    /// A handle on the listening socket, to wake the acceptor when going down.
    listening: Mutex<Option<TcpListener>>,
    stopped: mpsc::Receiver<()>,
    acceptor: Option<JoinHandle<()>>,
}

impl KubeApiServer {
    pub fn https() -> anyhow::Result<KubeApiServer> {
        KubeApiServer::start(Scheme::Https)
    }

    pub fn http() -> anyhow::Result<KubeApiServer> {
        KubeApiServer::start(Scheme::Http)
    }

    /// Starts serving on a free port of 127.0.0.1 (bringing loopback up if this network
    /// namespace has it down).
    pub fn start(scheme: Scheme) -> anyhow::Result<KubeApiServer> {
        ensure_loopback_up()?;
        KubeApiServer::serve(scheme, None)
    }

    /// Starts serving on 127.0.0.1 inside `netns` (a test's "node"), where a plugin process
    /// moved into that namespace reaches it; the test process itself does not.
    pub fn start_in(scheme: Scheme, netns: &Netns) -> anyhow::Result<KubeApiServer> {
        KubeApiServer::serve(scheme, Some(netns.path()))
    }

    fn serve(scheme: Scheme, netns: Option<PathBuf>) -> anyhow::Result<KubeApiServer> {
        let (ca_pem, tls) = match scheme {
            Scheme::Https | Scheme::HttpsHttp1Only => {
                let t = tls::make(scheme == Scheme::Https)?;
                (Some(t.ca_pem), Some(t.config))
            }
            Scheme::Http => (None, None),
        };
        let listener = bind(netns.as_deref(), SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        let addr = listener.local_addr()?;
        let token = format!("testkit-{}", routes::new_uid());
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(&token)),
            changed: Condvar::new(),
            up: AtomicBool::new(true),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
            tls,
        });
        let (listeners, listener_rx) = mpsc::channel::<TcpListener>();
        let (stopped_tx, stopped) = mpsc::channel();
        let listening = Mutex::new(Some(listener.try_clone()?));
        listeners.send(listener)?;
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("kube-api-accept".into())
                .spawn(move || accept_loop(&shared, &listener_rx, &stopped_tx))?
        };
        Ok(KubeApiServer {
            addr,
            netns,
            scheme,
            ca_pem,
            shared,
            listeners: Some(listeners),
            listening,
            stopped,
            acceptor: Some(acceptor),
        })
    }

    /// `https://127.0.0.1:<port>` or `http://...`.
    pub fn url(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https | Scheme::HttpsHttp1Only => "https",
        };
        format!("{scheme}://{}", self.addr)
    }

    /// How many connections clients have opened (each HTTPS one is a TLS handshake).
    pub fn connections(&self) -> u64 {
        self.shared.next_conn.load(Ordering::Relaxed)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The PEM of the CA that signed the server certificate (HTTPS only).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The bearer token the server accepts now.
    pub fn token(&self) -> String {
        lock(&self.shared.state).token.clone()
    }

    /// Accepts only `token` from now on (a rotation: the old token gets 401).
    pub fn set_token(&self, token: &str) {
        lock(&self.shared.state).token = token.to_string();
    }

    /// The bearer token of a ServiceAccount, made on first use. Without
    /// [`enforce_rbac`](Self::enforce_rbac), it may do anything the server's own token may.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let mut state = lock(&self.shared.state);
        let account = (namespace.to_string(), name.to_string());
        if let Some((token, _)) = state.accounts.iter().find(|(_, a)| **a == account) {
            return token.clone();
        }
        let token = format!("testkit-sa-{}", routes::new_uid());
        state.accounts.insert(token.clone(), account);
        token
    }

    /// From now on, authorizes the requests of ServiceAccounts (their tokens) by the RBAC
    /// objects among `manifests` (e.g. [`crate::manifests::objects`] of a rendered deploy/
    /// tree), as kube-apiserver does: what no rule allows gets its 403. Replaces any policy
    /// given before. The server's own token stays a cluster admin's.
    pub fn enforce_rbac(&self, manifests: &[Value]) -> anyhow::Result<()> {
        let policy = rbac::Rbac::new(manifests)?;
        lock(&self.shared.state).rbac = Some(policy);
        Ok(())
    }

    /// Writes a kubeconfig (JSON, which is valid YAML) for this server with the CA inline.
    pub fn write_kubeconfig(&self, path: &Path, auth: KubeconfigAuth) -> anyhow::Result<()> {
        let mut cluster = json!({ "server": self.url() });
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] =
                json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        let user = match auth {
            KubeconfigAuth::Token => json!({ "token": self.token() }),
            KubeconfigAuth::ServiceAccount { namespace, name } => {
                json!({ "token": self.service_account_token(&namespace, &name) })
            }
            KubeconfigAuth::TokenFile(file) => json!({ "tokenFile": file }),
            KubeconfigAuth::None => json!({}),
        };
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "testkit", "cluster": cluster }],
            "users": [{ "name": "testkit", "user": user }],
            "contexts": [{ "name": "testkit", "context": { "cluster": "testkit", "user": "testkit" } }],
            "current-context": "testkit",
        });
        std::fs::write(path, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("write {}", path.display()))
    }

    /// Stores a pod; namespace and name come from its metadata. Returns it as stored (with
    /// uid, resourceVersion and creationTimestamp filled in).
    pub fn add_pod(&self, mut pod: Value) -> Value {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        pod["kind"] = json!("Pod");
        pod["apiVersion"] = json!("v1");
        let mut state = lock(&self.shared.state);
        state.admit(&mut pod, &ns, &name);
        let event = match state.pods.insert((ns, name), pod.clone()) {
            Some(_) => "MODIFIED",
            None => "ADDED",
        };
        state.history.record(watch::Watched::Pods, event, &pod);
        drop(state);
        self.shared.changed.notify_all();
        pod
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.shared.state)
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    pub fn delete_pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.delete(watch::Watched::Pods, namespace, name)
    }

    pub fn delete_nad(&self, namespace: &str, name: &str) -> Option<Value> {
        self.delete(watch::Watched::Nads, namespace, name)
    }

    /// Removes a pod or NAD; its watchers get DELETED with a new resourceVersion.
    fn delete(&self, what: watch::Watched, namespace: &str, name: &str) -> Option<Value> {
        let mut state = lock(&self.shared.state);
        let key = (namespace.to_string(), name.to_string());
        let mut gone = match what {
            watch::Watched::Pods => state.pods.remove(&key),
            watch::Watched::Nads => state.nads.remove(&key),
            watch::Watched::Claims => state
                .objects
                .get_mut(&Resource::IPAM_CLAIMS)
                .and_then(|o| o.remove(&key)),
        }?;
        gone["metadata"]["resourceVersion"] = json!(state.next_resource_version());
        state.history.record(what, "DELETED", &gone);
        drop(state);
        self.shared.changed.notify_all();
        Some(gone)
    }

    /// Forgets the change history: a watch from any resourceVersion written so far gets 410
    /// Gone (an `Expired` ERROR event), as after etcd compacts.
    pub fn compact(&self) {
        let mut state = lock(&self.shared.state);
        let now = state.next_resource_version();
        state.history.servable_from = now.parse().unwrap_or(u64::MAX);
        drop(state);
        self.shared.changed.notify_all();
    }

    /// How often watches that allow bookmarks get one (1 s unless set).
    pub fn set_bookmark_interval(&self, every: Duration) {
        lock(&self.shared.state).history.bookmark_every = every;
        self.shared.changed.notify_all();
    }

    /// Stores a node of this name; returns it as stored.
    pub fn add_node(&self, name: &str) -> Value {
        let mut node = json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}});
        let mut state = lock(&self.shared.state);
        state.admit(&mut node, "", name);
        if let Some(meta) = node["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        state.nodes.insert(name.to_string(), node.clone());
        node
    }

    pub fn delete_node(&self, name: &str) -> Option<Value> {
        lock(&self.shared.state).nodes.remove(name)
    }

    /// Stores a NetworkAttachmentDefinition with this spec (e.g. `{"config": "..."}` or `{}`).
    pub fn add_nad(&self, namespace: &str, name: &str, spec: Value) -> Value {
        self.add_annotated_nad(namespace, name, json!({}), spec)
    }

    /// [`add_nad`](Self::add_nad) with these `metadata.annotations`.
    pub fn add_annotated_nad(
        &self,
        namespace: &str,
        name: &str,
        annotations: Value,
        spec: Value,
    ) -> Value {
        let mut nad = json!({
            "apiVersion": format!("{}/v1", routes::NAD_GROUP),
            "kind": "NetworkAttachmentDefinition",
            "metadata": {},
            "spec": spec,
        });
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            nad["metadata"]["annotations"] = annotations;
        }
        let mut state = lock(&self.shared.state);
        state.admit(&mut nad, namespace, name);
        let event = match state
            .nads
            .insert((namespace.to_string(), name.to_string()), nad.clone())
        {
            Some(_) => "MODIFIED",
            None => "ADDED",
        };
        state.history.record(watch::Watched::Nads, event, &nad);
        drop(state);
        self.shared.changed.notify_all();
        nad
    }

    /// Stores an object of `resource`; namespace and name come from its metadata. Returns it as
    /// stored (with apiVersion, kind, uid, resourceVersion and creationTimestamp filled in).
    pub fn add_object(&self, resource: Resource, mut object: Value) -> Value {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut state = lock(&self.shared.state);
        state.admit(&mut object, &ns, &name);
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind());
        state
            .objects
            .entry(resource)
            .or_default()
            .insert((ns, name), object.clone());
        objects::record(&mut state, resource, "ADDED", &object);
        drop(state);
        self.shared.changed.notify_all();
        object
    }

    pub fn object(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.shared.state)
            .objects
            .get(&resource)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every stored object of `resource`, by namespace and name.
    pub fn objects(&self, resource: Resource) -> Vec<Value> {
        lock(&self.shared.state)
            .objects
            .get(&resource)
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn delete_object(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        let mut state = lock(&self.shared.state);
        let mut gone = state
            .objects
            .get_mut(&resource)?
            .remove(&(namespace.to_string(), name.to_string()))?;
        gone["metadata"]["resourceVersion"] = json!(state.next_resource_version());
        objects::record(&mut state, resource, "DELETED", &gone);
        drop(state);
        self.shared.changed.notify_all();
        Some(gone)
    }

    /// Every event created so far, in order.
    pub fn events(&self) -> Vec<Value> {
        lock(&self.shared.state).events.clone()
    }

    /// Every request answered so far (including 401s and injected faults), in order.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        lock(&self.shared.state).log.clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.state).log.clear();
    }

    /// Queues `fault` for the next `times` authorized requests.
    pub fn inject(&self, fault: Fault, times: usize) {
        self.queue(None, fault, times);
    }

    /// Queues `fault` for the next `times` authorized requests with this method and path
    /// (e.g. `"PATCH"`, `"/api/v1/namespaces/ns1/pods/web/status"`); others pass.
    pub fn inject_on(&self, method: &str, path: &str, fault: Fault, times: usize) {
        self.queue(Some(routes::Aim::exact(method, path)), fault, times);
    }

    /// Queues `fault` for the next `times` authorized requests with this method on `prefix` or
    /// a path under it (e.g. `"PATCH"`, [`Resource::IP_POOLS`]`.path("kube-system")`: a
    /// conflict storm on every pool there); others pass.
    pub fn inject_under(&self, method: &str, prefix: &str, fault: Fault, times: usize) {
        self.queue(Some(routes::Aim::under(method, prefix)), fault, times);
    }

    /// Like [`inject_on`](Self::inject_on), for requests that carry the query parameter
    /// `param` only (e.g. `"continue"`: the later pages of a list; `"watch"`).
    pub fn inject_with_param(
        &self,
        method: &str,
        path: &str,
        param: &str,
        fault: Fault,
        times: usize,
    ) {
        self.queue(
            Some(routes::Aim::exact(method, path).with_param(param)),
            fault,
            times,
        );
    }

    fn queue(&self, only: Option<routes::Aim>, fault: Fault, times: usize) {
        let mut state = lock(&self.shared.state);
        for _ in 0..times {
            state.faults.push_back(routes::PendingFault {
                only: only.clone(),
                fault: fault.clone(),
            });
        }
    }

    /// Delays every reply as `latency` says (`Latency::ZERO` to stop).
    pub fn set_latency(&self, latency: Latency) {
        lock(&self.shared.state).latency = latency;
    }

    /// Stops listening and closes every open connection: clients get "connection refused"
    /// until [`come_back`](Self::come_back).
    pub fn go_down(&self) {
        if !self.shared.up.swap(false, Ordering::SeqCst) {
            return;
        }
        // Shutting the listening socket down wakes the acceptor (accept fails); wait until it
        // has dropped its handle, so the port refuses connections when this returns.
        if let Some(listening) = lock(&self.listening).take() {
            // SAFETY: shutdown(2) on a socket descriptor we own; no memory is involved.
            unsafe { libc::shutdown(listening.as_raw_fd(), libc::SHUT_RDWR) };
            let _ = self.stopped.recv();
        }
        for (_, conn) in lock(&self.shared.conns).drain() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on the same address.
    pub fn come_back(&self) -> anyhow::Result<()> {
        if self.shared.up.load(Ordering::SeqCst) {
            return Ok(());
        }
        let listener = bind(self.netns.as_deref(), self.addr)?;
        *lock(&self.listening) = Some(listener.try_clone()?);
        self.shared.up.store(true, Ordering::SeqCst);
        self.listeners
            .as_ref()
            .context("server stopped")?
            .send(listener)?;
        Ok(())
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        self.go_down();
        self.listeners = None;
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(
    shared: &Arc<Shared>,
    listeners: &mpsc::Receiver<TcpListener>,
    stopped: &mpsc::Sender<()>,
) {
    while let Ok(listener) = listeners.recv() {
        for conn in listener.incoming() {
            // Going down shuts the socket down, which fails the pending accept.
            if !shared.up.load(Ordering::SeqCst) {
                break;
            }
            let Ok(tcp) = conn else { continue };
            let _ = tcp.set_nodelay(true);
            let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
            if let Ok(clone) = tcp.try_clone() {
                lock(&shared.conns).insert(id, clone);
            }
            let conn_shared = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name("kube-api-conn".into())
                .spawn(move || {
                    let shared = conn_shared;
                    match shared.tls.clone() {
                        Some(config) => serve_tls(&shared, tcp, config),
                        None => drop(serve(&shared, tcp)),
                    }
                    lock(&shared.conns).remove(&id);
                });
            if spawned.is_err() {
                lock(&shared.conns).remove(&id);
            }
        }
        drop(listener);
        let _ = stopped.send(());
    }
}

/// What the server does with one request, decided when it arrives.
struct Ticket {
    /// The 401 or 403 it gets instead of being served.
    refusal: Option<(u16, Value)>,
    fault: Option<Fault>,
    /// The latency model's delay, and an injected one.
    delay: Duration,
    arrived: Instant,
}

fn ticket(shared: &Shared, req: &http1::Request) -> Ticket {
    let mut state = lock(&shared.state);
    let refusal = state.refusal(req);
    let fault = if refusal.is_none() {
        state.take_fault(req)
    } else {
        None
    };
    let mut delay = state.latency.of(&req.method);
    if let Some(Fault::Delay(d)) = fault {
        delay += d;
    }
    Ticket {
        refusal,
        fault,
        delay,
        arrived: Instant::now(),
    }
}

/// Serves and logs a request whose delay is over: the reply's status and JSON body, or `None`
/// when the connection is to be dropped without one.
fn answer(
    shared: &Shared,
    req: &http1::Request,
    ticket: Ticket,
    version: ::http::Version,
) -> Option<(u16, Vec<u8>)> {
    if !shared.up.load(Ordering::SeqCst) {
        return None;
    }
    let mut state = lock(&shared.state);
    let reply = match ticket.fault {
        _ if ticket.refusal.is_some() => ticket.refusal.clone(),
        Some(Fault::Status(code)) => Some(routes::injected(code)),
        Some(Fault::Close | Fault::Stall) => None,
        Some(Fault::Delay(_) | Fault::LoseReply | Fault::EndWatch | Fault::Hold(_)) | None => {
            Some(routes::handle(&mut state, req))
        }
    };
    let replied = reply.is_some() && !matches!(ticket.fault, Some(Fault::LoseReply));
    shared.changed.notify_all();
    state.log.push(LoggedRequest {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.query.clone(),
        content_type: req.header("content-type").map(str::to_string),
        body: String::from_utf8_lossy(&req.body).into_owned(),
        status: reply.as_ref().map_or(0, |(code, _)| *code),
        replied,
        version,
        arrived: ticket.arrived,
        served: Instant::now(),
    });
    let (code, body) = reply.filter(|_| replied)?;
    Some((code, serde_json::to_vec(&body).unwrap_or_default()))
}

/// The watch a request asks for, when its ticket lets it be served (no fault but a delay):
/// logged as served with 200 when it starts.
fn start_watch(
    shared: &Shared,
    req: &http1::Request,
    ticket: &Ticket,
    version: ::http::Version,
) -> Option<watch::Watch> {
    let ends = matches!(ticket.fault, Some(Fault::EndWatch));
    let served = matches!(ticket.fault, None | Some(Fault::Delay(_) | Fault::Hold(_)));
    if ticket.refusal.is_some() || !(ends || served) {
        return None;
    }
    let Some(Ok(mut w)) = watch::Watch::of(req) else {
        return None;
    };
    if ends {
        w.end();
    }
    lock(&shared.state).log.push(LoggedRequest {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.query.clone(),
        content_type: req.header("content-type").map(str::to_string),
        body: String::new(),
        status: 200,
        replied: true,
        version,
        arrived: ticket.arrived,
        served: Instant::now(),
    });
    Some(w)
}

/// Streams a watch's lines to `send` until the watch ends, the server goes down, or `send`
/// fails (the client went away).
fn run_watch(shared: &Shared, mut w: watch::Watch, mut send: impl FnMut(&[u8]) -> bool) {
    let mut last_bookmark = Instant::now();
    loop {
        let mut state = lock(&shared.state);
        let (lines, end) = loop {
            let (lines, end) = w.due(&state, &mut last_bookmark);
            if !lines.is_empty() || end || w.expired() || !shared.up.load(Ordering::SeqCst) {
                break (lines, end);
            }
            let pause = w.pause(&state, last_bookmark);
            state = shared
                .changed
                .wait_timeout(state, pause)
                .map(|(s, _)| s)
                .unwrap_or_else(|e| e.into_inner().0);
        };
        drop(state);
        for line in &lines {
            if !send(line) {
                return;
            }
        }
        if end || w.expired() || !shared.up.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// A TLS connection: HTTP/2 when the client and the server agreed on `h2`, HTTP/1.1 otherwise.
fn serve_tls(shared: &Arc<Shared>, tcp: TcpStream, config: Arc<rustls::ServerConfig>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let http1 = runtime.block_on(async {
        tcp.set_nonblocking(true).ok()?;
        let tcp = tokio::net::TcpStream::from_std(tcp).ok()?;
        let tls = tokio_rustls::TlsAcceptor::from(config)
            .accept(tcp)
            .await
            .ok()?;
        if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
            http2::serve(Arc::clone(shared), tls).await;
            return None;
        }
        let (tcp, conn) = tls.into_inner();
        Some((tcp.into_std().ok()?, conn))
    });
    if let Some((tcp, conn)) = http1 {
        if tcp.set_nonblocking(false).is_ok() {
            let mut tls = serve(shared, rustls::StreamOwned::new(conn, tcp));
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    }
}

/// Serves HTTP/1.1 requests on one connection until the client closes it, or the server goes
/// down; gives the stream back for a TLS close.
fn serve<S: Read + Write>(shared: &Shared, stream: S) -> S {
    let mut conn = BufReader::new(stream);
    while let Ok(Some(req)) = http1::read_request(&mut conn) {
        let ticket = ticket(shared, &req);
        std::thread::sleep(ticket.delay);
        if let Some(Fault::Hold(gate)) = &ticket.fault {
            gate.hold();
        }
        if let Some(w) = start_watch(shared, &req, &ticket, ::http::Version::HTTP_11) {
            // One watch, then the connection closes, so it needs no framing of its own end.
            let out = conn.get_mut();
            if http1::write_stream_head(out).is_ok() {
                run_watch(shared, w, |line| http1::write_chunk(out, line).is_ok());
                let _ = http1::write_chunk(out, b"");
            }
            break;
        }
        let stall = matches!(ticket.fault, Some(Fault::Stall));
        let Some((code, body)) = answer(shared, &req, ticket, ::http::Version::HTTP_11) else {
            if stall {
                std::thread::sleep(STALL);
            }
            break;
        };
        if http1::write_json(conn.get_mut(), code, &body, req.wants_close()).is_err()
            || req.wants_close()
        {
            break;
        }
    }
    conn.into_inner()
}

/// Binds a listening socket, inside the network namespace at `netns` when given: a socket
/// stays in the namespace it was made in, so only the short-lived binding thread enters it.
fn bind(netns: Option<&Path>, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let Some(path) = netns else {
        return TcpListener::bind(addr).with_context(|| format!("bind {addr}"));
    };
    let ns = File::open(path).with_context(|| format!("open {}", path.display()))?;
    let binder = std::thread::spawn(move || -> anyhow::Result<TcpListener> {
        // SAFETY: setns(2) with a namespace descriptor we own, on this thread only, which
        // ends right after binding.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("setns");
        }
        TcpListener::bind(addr).with_context(|| format!("bind {addr}"))
    });
    binder
        .join()
        .map_err(|_| anyhow::anyhow!("the binding thread panicked"))?
        .with_context(|| format!("in network namespace {}", path.display()))
}

/// A fresh network namespace (as the test runner gives each test binary) has loopback down.
/// (`/sys/class/net` may show another namespace's links, so ask `ip`.)
fn ensure_loopback_up() -> anyhow::Result<()> {
    let ip = |args: &[&str]| -> anyhow::Result<String> {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .with_context(|| format!("run ip {}", args.join(" ")))?;
        anyhow::ensure!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let links: Value = serde_json::from_str(&ip(&["-j", "link", "show", "lo"])?)?;
    let up = links[0]["flags"]
        .as_array()
        .is_some_and(|flags| flags.iter().any(|f| f == "UP"));
    if !up {
        ip(&["link", "set", "lo", "up"])?;
    }
    Ok(())
}

/// A minimal pod manifest for [`KubeApiServer::add_pod`].
pub fn pod_manifest(namespace: &str, name: &str) -> Value {
    json!({
        "metadata": { "namespace": namespace, "name": name, "annotations": {} },
        "spec": { "nodeName": "node-1", "containers": [{ "name": "c", "image": "busybox" }] },
        "status": { "phase": "Pending" },
    })
}
