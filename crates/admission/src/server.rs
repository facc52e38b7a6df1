//! HTTPS for the API server's admission calls: one thread per connection, at most
//! `max_connections` at once, one request each, read whole within [`REQUEST_WAIT`].

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use lint::Linter;
use nodekit::http1::{self, BadRequest, TimedRead};
use rustls::{ServerConnection, StreamOwned};

use super::review;
use super::verdict::judge;

/// The API server gives a webhook 10 s by default; a request that takes longer to arrive is
/// not one to answer.
const REQUEST_WAIT: Duration = Duration::from_secs(10);
/// A connection's thread: enough for a review's JSON (serde_json stops at 128 levels of
/// nesting) and the checks, small enough that a flood of connections stays within the pod's
/// memory limit.
const STACK: usize = 256 << 10;
/// A review carries the object (and for UPDATE the old one too). NADs and pods are a few KiB;
/// the cap keeps what one request can make the webhook hold (its JSON parsed, several times
/// its size) within the pod's memory limit, as anyone who reaches the Service may send one.
const MAX_BODY: usize = 3 << 20;
/// A log line quotes this much of a denial at most: requests need no credentials, so what
/// they make the webhook log must stay small.
const MAX_LOGGED: usize = 512;

/// What the connections share.
pub struct Shared {
    pub tls: Arc<rustls::ServerConfig>,
    /// Replaced when the policy or the cluster's networks change.
    pub linter: RwLock<Arc<Linter>>,
    /// Beyond this many open connections, new ones are closed at once: a flood costs
    /// threads up to a bound, not the pod's memory.
    max_connections: usize,
    open: AtomicUsize,
}

impl Shared {
    pub fn new(tls: Arc<rustls::ServerConfig>, linter: Linter, max_connections: usize) -> Shared {
        Shared {
            tls,
            linter: RwLock::new(Arc::new(linter)),
            max_connections,
            open: AtomicUsize::new(0),
        }
    }

    fn linter(&self) -> Option<Arc<Linter>> {
        self.linter.read().ok().map(|l| Arc::clone(&l))
    }
}

/// Accepts connections until the listener fails.
pub fn serve(listener: &TcpListener, shared: &Arc<Shared>) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept()?;
        if shared.open.fetch_add(1, Ordering::SeqCst) >= shared.max_connections {
            shared.open.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("admission".into())
            .stack_size(STACK)
            .spawn(move || {
                // The slot is given back before the socket closes, so a peer that sees the
                // close and connects again at once finds it free.
                let socket = stream.try_clone();
                handle(stream, &shared);
                shared.open.fetch_sub(1, Ordering::SeqCst);
                drop(socket);
            });
        if let Err(e) = spawned {
            eprintln!("multus webhook: cannot start a connection's thread: {e}");
        }
    }
}

/// A TLS connection whose reads the request's deadline bounds.
struct Tls(StreamOwned<ServerConnection, TcpStream>);

impl Read for Tls {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl TimedRead for &mut Tls {
    fn read_timeout(&self, left: Duration) -> io::Result<()> {
        self.0.sock.set_read_timeout(Some(left))
    }
}

fn handle(stream: TcpStream, shared: &Shared) {
    let started = Instant::now();
    if stream.set_write_timeout(Some(REQUEST_WAIT)).is_err() {
        return;
    }
    let Ok(conn) = ServerConnection::new(Arc::clone(&shared.tls)) else {
        return;
    };
    let mut tls = Tls(StreamOwned::new(conn, stream));
    let (status, body) = match http1::read_request_within(&mut tls, REQUEST_WAIT, MAX_BODY) {
        Ok(request) => route(&request, shared),
        // A failed handshake or a silent peer: nothing to answer.
        Err(BadRequest::Gone(_)) => return,
        Err(BadRequest::Refused(status, text)) => (status, text.into_bytes()),
    };
    let content_type = if status == 200 {
        "application/json"
    } else {
        "text/plain"
    };
    let _ = http1::write_response(&mut tls.0, status, content_type, &body);
    tls.0.conn.send_close_notify();
    let _ = tls.0.flush();
    if status != 200 {
        eprintln!(
            "multus webhook: answered {status} in {:?}: {}",
            started.elapsed(),
            String::from_utf8_lossy(&body)
        );
    }
}

fn route(request: &http1::Request, shared: &Shared) -> (u16, Vec<u8>) {
    match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/validate") => {}
        ("GET", "/healthz") => return (200, b"{\"status\":\"ok\"}".to_vec()),
        ("GET" | "POST", _) => return (404, b"not found: POST /validate".to_vec()),
        _ => return (405, b"method not allowed".to_vec()),
    }
    let review = match review::parse(&request.body) {
        Ok(r) => r,
        Err(e) => return (400, e.to_string().into_bytes()),
    };
    let Some(linter) = shared.linter() else {
        return (500, b"the webhook's checks are unavailable".to_vec());
    };
    let verdict = judge(&linter, &review);
    if let Some(why) = &verdict.denied {
        let line = format!(
            "{} {} {}/{} denied{}: {why}",
            review.operation,
            review.kind.kind,
            review.namespace,
            review.name,
            if review.dry_run { " (dry run)" } else { "" }
        );
        let mut end = line.len().min(MAX_LOGGED);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        let cut = if end < line.len() { "..." } else { "" };
        eprintln!("multus webhook: {}{cut}", &line[..end]);
    }
    let answer = review::answer(&review.uid, &verdict);
    (200, answer.to_string().into_bytes())
}
