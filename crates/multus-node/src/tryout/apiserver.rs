//! The Kubernetes API as far as whereabouts uses it, for `multus try`: IPPools,
//! OverlappingRangeIPReservations and NodeSlicePools kept in memory, and served over HTTP/1.1
//! on the sandbox node's loopback, where the whereabouts plugin, run by an interface plugin as a
//! runtime runs it, reaches them through a kubeconfig. Creates, conditional JSON patches and
//! deletes behave as kube-apiserver's (409, 422, resourceVersion on every write), so the
//! plugin takes its normal path. One request per connection, framed as the thick daemon's
//! socket frames them (`thick::wire`): read whole within a deadline, with a size cap.

use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use netkit::NetNs;
use serde_json::{json, Value};

use super::Error;
use nodekit::http1;

const GROUP_VERSION: &str = "whereabouts.cni.cncf.io/v1alpha1";
/// Plural and kind of each resource served.
const RESOURCES: [(&str, &str); 3] = [
    ("ippools", "IPPool"),
    (
        "overlappingrangeipreservations",
        "OverlappingRangeIPReservation",
    ),
    ("nodeslicepools", "NodeSlicePool"),
];
/// How long a request may take to arrive, and its reply to be taken.
const WAIT: Duration = Duration::from_secs(5);

/// Objects by (plural, namespace, name), and the last resourceVersion given out.
#[derive(Default)]
struct Store {
    objects: BTreeMap<(String, String, String), Value>,
    version: u64,
}

pub struct ApiServer {
    addr: SocketAddr,
    /// The listening socket, shut down to wake the acceptor when the server stops.
    listener: TcpListener,
    store: Arc<Mutex<Store>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Listens on a free port of `node`'s loopback.
    pub fn start(node: &NetNs) -> Result<ApiServer, Error> {
        let failed = |e: std::io::Error| Error::Sandbox(format!("whereabouts' API server: {e}"));
        let listener = node
            .run(|| TcpListener::bind("127.0.0.1:0"))
            .map_err(|e| Error::Sandbox(format!("entering the node: {e}")))?
            .map_err(failed)?;
        let addr = listener.local_addr().map_err(failed)?;
        let accepting = listener.try_clone().map_err(failed)?;
        let store = Arc::new(Mutex::new(Store::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (serving, stopping) = (Arc::clone(&store), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            for conn in accepting.incoming() {
                match conn {
                    _ if stopping.load(Ordering::SeqCst) => break,
                    Ok(conn) => serve(&serving, conn),
                    Err(_) => {}
                }
            }
        });
        Ok(ApiServer {
            addr,
            listener,
            store,
            stop,
            thread: Some(thread),
        })
    }

    /// The server's URL, from the node's namespace.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig that reaches this server (from the node's namespace).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: try\n  cluster:\n    server: \
             {}\ncontexts:\n- name: try\n  context:\n    cluster: try\n    user: try\n    \
             namespace: kube-system\ncurrent-context: try\nusers:\n- name: try\n  user: {{}}\n",
            self.url()
        );
        std::fs::write(path, text)
            .map_err(|e| Error::Sandbox(format!("writing {}: {e}", path.display())))
    }

    /// What the pools still hold, and the reservations left: one line each.
    pub fn held(&self) -> Vec<String> {
        let store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for ((plural, ns, name), obj) in &store.objects {
            match plural.as_str() {
                "ippools" => {
                    let allocations = obj.pointer("/spec/allocations").and_then(Value::as_object);
                    for (offset, a) in allocations.into_iter().flatten() {
                        out.push(format!(
                            "offset {offset} of IPPool {ns}/{name} ({} {})",
                            a["podref"].as_str().unwrap_or(""),
                            a["ifname"].as_str().unwrap_or("")
                        ));
                    }
                }
                "overlappingrangeipreservations" => {
                    out.push(format!("OverlappingRangeIPReservation {ns}/{name}"));
                }
                _ => {}
            }
        }
        out
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // accept() fails on a socket shut down, and the acceptor sees the flag. (A connection
        // from here would not reach it: it listens in the node's namespace.)
        // SAFETY: shutdown(2) on a socket this struct owns; no memory is involved.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One request, one reply; a request that cannot be read whole in time is dropped.
fn serve(store: &Mutex<Store>, mut conn: TcpStream) {
    let _ = conn.set_write_timeout(Some(WAIT));
    let Ok(reading) = conn.try_clone() else {
        return;
    };
    let Ok(request) = http1::read_request_within(reading, WAIT, http1::MAX_BODY) else {
        return;
    };
    let (code, reply) = {
        let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
        route(&mut store, &request.method, &request.path, &request.body)
    };
    let _ = http1::write_response(
        &mut conn,
        code,
        "application/json",
        reply.to_string().as_bytes(),
    );
    let _ = conn.shutdown(Shutdown::Both);
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn route(store: &mut Store, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (plural, ns, name) = match segments.as_slice() {
        ["apis", "whereabouts.cni.cncf.io", "v1alpha1", "namespaces", ns, plural] => {
            (*plural, *ns, None)
        }
        ["apis", "whereabouts.cni.cncf.io", "v1alpha1", "namespaces", ns, plural, name] => {
            (*plural, *ns, Some(*name))
        }
        _ => {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    };
    let Some((_, kind)) = RESOURCES.iter().find(|(p, _)| *p == plural) else {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let key = |name: &str| (plural.to_owned(), ns.to_owned(), name.to_owned());
    let missing = |name: &str| {
        status(
            404,
            "NotFound",
            &format!("{plural}.whereabouts.cni.cncf.io \"{name}\" not found"),
        )
    };
    let parsed = || serde_json::from_slice::<Value>(body).ok();
    match (method, name) {
        ("GET", None) => {
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|((p, n, _), _)| p == plural && n == ns)
                .map(|(_, v)| v.clone())
                .collect();
            (
                200,
                json!({"apiVersion": GROUP_VERSION, "kind": format!("{kind}List"),
                       "metadata": {"resourceVersion": store.version.to_string()},
                       "items": items}),
            )
        }
        ("GET", Some(name)) => match store.objects.get(&key(name)) {
            Some(obj) => (200, obj.clone()),
            None => missing(name),
        },
        ("POST", None) => {
            let Some(mut obj) = parsed().filter(Value::is_object) else {
                return status(400, "BadRequest", "the body is not a JSON object");
            };
            let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
                return status(422, "Invalid", "metadata.name: Required value");
            };
            let name = name.to_owned();
            if store.objects.contains_key(&key(&name)) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{plural}.whereabouts.cni.cncf.io \"{name}\" already exists"),
                );
            }
            store.version += 1;
            obj["metadata"]["namespace"] = json!(ns);
            obj["metadata"]["resourceVersion"] = json!(store.version.to_string());
            store.objects.insert(key(&name), obj.clone());
            (201, obj)
        }
        ("PATCH", Some(name)) => {
            let Some(current) = store.objects.get(&key(name)) else {
                return missing(name);
            };
            let Some(Value::Array(ops)) = parsed() else {
                return status(400, "BadRequest", "a JSON patch is an array of operations");
            };
            let mut patched = current.clone();
            if let Err(why) = jsonpatch::apply(&mut patched, &ops) {
                return status(422, "Invalid", &why.to_string());
            }
            store.version += 1;
            patched["metadata"]["resourceVersion"] = json!(store.version.to_string());
            store.objects.insert(key(name), patched.clone());
            (200, patched)
        }
        ("DELETE", Some(name)) => {
            let Some(current) = store.objects.get(&key(name)) else {
                return missing(name);
            };
            let wanted = parsed()
                .and_then(|o| o.pointer("/preconditions/resourceVersion").cloned())
                .filter(|v| !v.is_null());
            if wanted.is_some_and(|rv| Some(&rv) != current.pointer("/metadata/resourceVersion")) {
                return status(409, "Conflict", "the resourceVersion precondition failed");
            }
            store.objects.remove(&key(name));
            (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Success"}),
            )
        }
        _ => status(405, "MethodNotAllowed", "the method is not allowed here"),
    }
}
