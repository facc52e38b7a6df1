//! The socket: one acceptor thread reads each request and answers health, readiness and
//! metrics itself; CNI calls go into a bounded queue that a fixed number of workers
//! (`connectionLimit`) take from. A call that finds the queue full gets a CNI error that says
//! so (code 11); one still waiting at its deadline is answered then, by a thread of the queue's
//! own, even while every worker is busy, well before the runtime gives up. No call gets a
//! thread of its own.
//!
//! Stopping: the acceptor stops taking connections (so probes fail, and shims do DEL
//! themselves), the workers finish the calls they have and those queued, and
//! [`Server::stop`] returns once they are done or its deadline passes.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cni::{CniError, Code};

use super::error::StartError;
use super::handler::{Answer, Handler};
use super::metrics::Metrics;
use crate::wire;
use nodekit::http1;

/// How long a request may take to arrive whole, over all its reads.
const READ_WAIT: Duration = Duration::from_secs(5);
/// The pause after a failed accept (out of descriptors, say), so the loop does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// How long writing a reply may take.
const WRITE_WAIT: Duration = Duration::from_secs(10);
/// The bytes of the calls the daemon holds, queued or in hand, at most. The queue's length
/// alone would let it hold gigabytes: `maxQueuedRequests` calls of up to 4 MiB each.
const HELD_BYTES: i64 = 64 << 20;

/// What the acceptor and the workers share.
pub struct State {
    pub metrics: Arc<Metrics>,
    /// Ready to serve calls: the caches are filled and the readiness file, if any, exists.
    pub ready: AtomicBool,
    pub stopping: AtomicBool,
}

struct Job {
    stream: UnixStream,
    /// `/cni` or `/delegate`.
    path: &'static str,
    body: Vec<u8>,
    arrived: Instant,
    _held: Held,
}

/// The calls waiting for a worker, oldest first, `length` at most. Closed when the acceptor
/// stops: the workers and the deadline thread end once it is empty.
struct Queue {
    waiting: Mutex<(VecDeque<Job>, bool)>,
    /// Signalled for the workers when a call comes, and for all when closed.
    work: Condvar,
    /// Signalled for the deadline thread when a call comes into an empty queue, or it closes.
    deadline: Condvar,
    length: usize,
    wait: Duration,
}

/// Why a call was not queued.
enum Refused {
    Full(Job),
    Closed(Job),
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, job: Job) -> Result<(), Refused> {
        let mut q = self.lock();
        if q.1 {
            return Err(Refused::Closed(job));
        }
        if q.0.len() >= self.length {
            return Err(Refused::Full(job));
        }
        let was_empty = q.0.is_empty();
        q.0.push_back(job);
        drop(q);
        self.work.notify_one();
        if was_empty {
            self.deadline.notify_one();
        }
        Ok(())
    }

    /// The oldest call, waiting for one; `None` once closed and empty.
    fn pop(&self) -> Option<Job> {
        let mut q = self.lock();
        loop {
            if let Some(job) = q.0.pop_front() {
                return Some(job);
            }
            if q.1 {
                return None;
            }
            q = self.work.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn close(&self) {
        self.lock().1 = true;
        self.work.notify_all();
        self.deadline.notify_all();
    }

    /// The deadline thread: answers each call still queued at its deadline, then waits for
    /// the next one's, until the queue is closed and empty.
    fn expire(&self, metrics: &Metrics) {
        let mut q = self.lock();
        loop {
            let now = Instant::now();
            let mut expired = Vec::new();
            while q.0.front().is_some_and(|j| now >= j.arrived + self.wait) {
                expired.extend(q.0.pop_front());
            }
            if !expired.is_empty() {
                drop(q);
                for job in expired {
                    end_unrun(job, metrics);
                }
                q = self.lock();
                continue;
            }
            q = match q.0.front() {
                Some(oldest) => {
                    let due = (oldest.arrived + self.wait).saturating_duration_since(now);
                    self.deadline
                        .wait_timeout(q, due)
                        .map(|(q, _)| q)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
                None if q.1 => return,
                None => self
                    .deadline
                    .wait(q)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// A call's share of [`HELD_BYTES`], given back when its job is dropped.
struct Held {
    bytes: i64,
    metrics: Arc<Metrics>,
}

impl Held {
    /// `bytes` more held, or `None` when that would pass [`HELD_BYTES`].
    fn take(metrics: &Arc<Metrics>, bytes: usize) -> Option<Held> {
        let bytes = i64::try_from(bytes).ok()?;
        let before = metrics.held_bytes.fetch_add(bytes, Ordering::SeqCst);
        let held = Held {
            bytes,
            metrics: Arc::clone(metrics),
        };
        (before + bytes <= HELD_BYTES).then_some(held)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics
            .held_bytes
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

pub struct Server {
    pub socket: PathBuf,
    /// The socket's (device, inode): on stop it is removed only if it is still ours, not
    /// one a newer daemon has bound at the same path since.
    socket_id: (u64, u64),
    listener: UnixListener,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// Why the socket cannot be had: each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("socketDir {} is a symbolic link, which is never followed: remove it", .0.display())]
    DirIsSymlink(PathBuf),
    #[error("socketDir {} is not a directory", .0.display())]
    DirIsNotADirectory(PathBuf),
    #[error(
        "socketDir {} is owned by uid {owner} with mode {mode:o}: it must be the daemon's \
         (uid {me}) and writable by no one else, or another user could replace the socket",
        dir.display()
    )]
    DirIsOthers {
        dir: PathBuf,
        owner: u32,
        mode: u32,
        me: u32,
    },
    #[error("{} exists and is not a socket: remove it", .0.display())]
    NotASocket(PathBuf),
    #[error("{} went away", .0.display())]
    Vanished(PathBuf),
    #[error("{what} {}: {source}", dir.display())]
    Io {
        what: &'static str,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The socket's directory, made with mode 0700 when missing. An existing one is used as it
/// is: it must be root's (the daemon's user's) and writable by no one else, and a symlink in
/// its place is refused. The socket in it has mode 0600; one left by an earlier daemon is
/// replaced. Returns the socket's path, its (device, inode) and the listener.
fn listen(dir: &Path) -> Result<(PathBuf, (u64, u64), UnixListener), SocketError> {
    let at = |what: &'static str| {
        move |source| SocketError::Io {
            what,
            dir: dir.to_owned(),
            source,
        }
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(SocketError::DirIsSymlink(dir.to_owned()))
        }
        Ok(m) if !m.is_dir() => return Err(SocketError::DirIsNotADirectory(dir.to_owned())),
        Ok(m) => {
            // SAFETY: geteuid(2) only reads this process's credentials.
            let me = unsafe { libc::geteuid() };
            if m.uid() != me || m.mode() & 0o022 != 0 {
                return Err(SocketError::DirIsOthers {
                    dir: dir.to_owned(),
                    owner: m.uid(),
                    mode: m.mode() & 0o7777,
                    me,
                });
            }
        }
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(at("cannot create"))?,
    }
    let socket = wire::socket_path(dir);
    match std::fs::symlink_metadata(&socket) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(&socket).map_err(at("cannot replace the socket in"))?
        }
        Ok(_) => return Err(SocketError::NotASocket(socket)),
        Err(_) => {}
    }
    let listener = UnixListener::bind(&socket).map_err(at("cannot listen in"))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(at("cannot set the socket's mode in"))?;
    let id = identity(&socket).ok_or_else(|| SocketError::Vanished(socket.clone()))?;
    Ok((socket, id, listener))
}

/// A file's (device, inode), not following a symlink.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Server {
    pub fn start(
        dir: &Path,
        handler: Arc<Handler>,
        state: Arc<State>,
        in_flight: usize,
        queue_length: usize,
        queue_wait: Duration,
    ) -> Result<Server, StartError> {
        let (socket, socket_id, listener) = listen(dir)?;
        let queue = Arc::new(Queue {
            waiting: Mutex::new((VecDeque::new(), false)),
            work: Condvar::new(),
            deadline: Condvar::new(),
            length: queue_length,
            wait: queue_wait,
        });
        let mut workers = (0..in_flight)
            .map(|i| {
                let (queue, handler, state) =
                    (Arc::clone(&queue), Arc::clone(&handler), Arc::clone(&state));
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || work(&queue, &handler, &state))
                    .map_err(StartError::thread("worker"))
            })
            .collect::<Result<Vec<_>, StartError>>()?;
        let (expiring, metrics) = (Arc::clone(&queue), Arc::clone(&state.metrics));
        workers.push(
            std::thread::Builder::new()
                .name("queue-deadline".into())
                .spawn(move || expiring.expire(&metrics))
                .map_err(StartError::thread("queue's deadline"))?,
        );
        let accepting = listener.try_clone().map_err(|source| SocketError::Io {
            what: "cannot share the socket in",
            dir: dir.to_owned(),
            source,
        })?;
        let acceptor_state = Arc::clone(&state);
        let acceptor = std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || accept(&accepting, &queue, &acceptor_state))
            .map_err(StartError::thread("acceptor"))?;
        Ok(Server {
            socket,
            socket_id,
            listener,
            state,
            acceptor: Some(acceptor),
            workers,
        })
    }

    /// Stops taking connections, lets the workers finish what they have, and removes the
    /// socket. Returns whether every call finished before `deadline`.
    pub fn stop(mut self, deadline: Instant) -> bool {
        self.state.stopping.store(true, Ordering::SeqCst);
        // accept() fails on a socket shut down, and the acceptor, seeing `stopping`, ends and
        // closes the queue: the workers end once it is empty.
        // SAFETY: shutdown(2) on a socket this struct owns; no memory is involved.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if identity(&self.socket) == Some(self.socket_id) {
            let _ = std::fs::remove_file(&self.socket);
        }
        while Instant::now() < deadline {
            let acceptor_done = self.acceptor.as_ref().is_none_or(JoinHandle::is_finished);
            if acceptor_done && self.workers.iter().all(JoinHandle::is_finished) {
                if let Some(acceptor) = self.acceptor.take() {
                    let _ = acceptor.join();
                }
                for w in self.workers.drain(..) {
                    let _ = w.join();
                }
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// `/metrics` also on TCP `port` of every address, as upstream's `metricsPort`: one thread,
/// one request per connection, read within [`READ_WAIT`], and no body.
pub fn serve_metrics(port: u16, state: Arc<State>) -> Result<(), StartError> {
    let listener = std::net::TcpListener::bind(("0.0.0.0", port))
        .map_err(|source| StartError::MetricsPort { port, source })?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else {
                    std::thread::sleep(ACCEPT_PAUSE);
                    continue;
                };
                let _ = stream.set_write_timeout(Some(WRITE_WAIT));
                let Ok(reading) = stream.try_clone() else {
                    continue;
                };
                let (status, body) = match http1::read_request_within(reading, READ_WAIT, 0) {
                    Ok(r) if r.path == "/metrics" && r.method == "GET" => {
                        (200, state.metrics.text().into_bytes())
                    }
                    Ok(_) => (404, Vec::new()),
                    Err(_) => continue,
                };
                let _ = http1::write_response(
                    &mut stream,
                    status,
                    "text/plain; version=0.0.4; charset=utf-8",
                    &body,
                );
            }
        })
        .map_err(StartError::thread("metrics"))?;
    Ok(())
}

fn reply(stream: &mut UnixStream, status: u16, content_type: &str, body: &[u8]) {
    let _ = stream.set_write_timeout(Some(WRITE_WAIT));
    let _ = http1::write_response(stream, status, content_type, body);
}

fn reply_error(stream: &mut UnixStream, status: u16, e: &CniError) {
    let body = serde_json::to_vec(e).unwrap_or_default();
    reply(stream, status, "application/json", &body);
}

fn accept(listener: &UnixListener, queue: &Queue, state: &State) {
    serve_connections(listener, queue, state);
    queue.close();
}

fn serve_connections(listener: &UnixListener, queue: &Queue, state: &State) {
    for conn in listener.incoming() {
        if state.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = conn else {
            std::thread::sleep(ACCEPT_PAUSE);
            continue;
        };
        let Ok(reading) = stream.try_clone() else {
            continue;
        };
        let request = match http1::read_request_within(reading, READ_WAIT, http1::MAX_BODY) {
            Ok(r) => r,
            Err(http1::BadRequest::Gone(_)) => continue,
            Err(http1::BadRequest::Refused(status, why)) => {
                state.metrics.served("NotFound", status, "unknown");
                reply(
                    &mut stream,
                    status,
                    "text/plain; charset=utf-8",
                    why.as_bytes(),
                );
                continue;
            }
        };
        let label = ROUTES
            .into_iter()
            .find(|r| *r == request.path)
            .unwrap_or("NotFound");
        let method = request.method.clone();
        // A call the workers took is counted when they answer it.
        if let Some(status) = route(request, stream, queue, state) {
            state.metrics.served(label, status, &method);
        }
    }
}

/// The paths served; any other is counted as `NotFound`.
const ROUTES: [&str; 5] = ["/healthz", "/readyz", "/metrics", "/cni", "/delegate"];

/// Answers one request, and returns the status it was answered with; or hands a call to the
/// workers, which answer it.
fn route(
    request: http1::Request,
    mut stream: UnixStream,
    queue: &Queue,
    state: &State,
) -> Option<u16> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let status = match (request.path.as_str(), request.method.as_str()) {
        ("/healthz", "GET" | "POST") => {
            reply(&mut stream, 200, TEXT, b"");
            200
        }
        ("/readyz", "GET" | "POST") => {
            let (status, text) = if state.ready.load(Ordering::SeqCst) {
                (200, "")
            } else {
                (500, "not ready: the caches are filling")
            };
            reply(&mut stream, status, TEXT, text.as_bytes());
            status
        }
        ("/metrics", "GET") => {
            let text = state.metrics.text();
            reply(
                &mut stream,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                text.as_bytes(),
            );
            200
        }
        (path @ ("/cni" | "/delegate"), "POST") => {
            let path = if path == "/cni" { "/cni" } else { "/delegate" };
            let (mut stream, why) = admit(stream, path, request.body, queue, state).err()?;
            state.metrics.request("unknown", "rejected", Duration::ZERO);
            reply_error(&mut stream, 400, &CniError::new(Code::TryAgainLater, why));
            400
        }
        (path, _) if ROUTES.contains(&path) => {
            reply(&mut stream, 405, TEXT, b"Method not allowed\n");
            405
        }
        _ => {
            reply(&mut stream, 404, TEXT, b"");
            404
        }
    };
    Some(status)
}

/// Queues a call for the workers, within the bytes held and the queue's length; a call that
/// does not fit comes back with the reason, for the caller to refuse.
fn admit(
    stream: UnixStream,
    path: &'static str,
    body: Vec<u8>,
    queue: &Queue,
    state: &State,
) -> Result<(), (UnixStream, String)> {
    let Some(held) = Held::take(&state.metrics, body.len()) else {
        return Err((
            stream,
            format!(
                "the multus daemon holds as many bytes of calls as it takes ({} MiB): try again",
                HELD_BYTES >> 20
            ),
        ));
    };
    let job = Job {
        stream,
        path,
        body,
        arrived: Instant::now(),
        _held: held,
    };
    state.metrics.queued.fetch_add(1, Ordering::Relaxed);
    let refused = match queue.push(job) {
        Ok(()) => return Ok(()),
        Err(Refused::Full(job)) => (
            job.stream,
            "the multus daemon has as many calls queued as it takes (maxQueuedRequests): try \
             again"
                .to_owned(),
        ),
        Err(Refused::Closed(job)) => (
            job.stream,
            "the multus daemon's workers have stopped: see its log".to_owned(),
        ),
    };
    state.metrics.queued.fetch_sub(1, Ordering::Relaxed);
    Err(refused)
}

/// Whether the client has closed its end: a peek that finds the end of the stream.
fn gone(stream: &UnixStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: recv(2) with MSG_PEEK | MSG_DONTWAIT on a socket this job owns, into one byte
    // of our own; it neither blocks nor consumes anything.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
}

/// Ends a queued call that is not to run: its shim has gone (the runtime's timeout killed it:
/// the runtime tears the sandbox down without this call, which must not run after that), or
/// it waited for a worker past its deadline, which it is told.
fn end_unrun(mut job: Job, m: &Metrics) {
    m.queued.fetch_sub(1, Ordering::Relaxed);
    let waited = job.arrived.elapsed();
    if gone(&job.stream) {
        m.request("unknown", "abandoned", waited);
        return;
    }
    m.request("unknown", "expired", waited);
    m.served(job.path, 400, "post");
    let e = CniError::new(
        Code::TryAgainLater,
        format!(
            "the call waited {} s for one of the multus daemon's workers (its \
             connectionLimit) and gave up at its deadline (requestTimeoutSeconds): try again",
            waited.as_secs()
        ),
    );
    reply_error(&mut job.stream, 400, &e);
}

fn work(queue: &Queue, handler: &Handler, state: &State) {
    while let Some(mut job) = queue.pop() {
        let m = &state.metrics;
        // A deadline may also pass between the deadline thread's look and this worker's.
        if gone(&job.stream) || job.arrived.elapsed() >= queue.wait {
            end_unrun(job, m);
            continue;
        }
        m.queued.fetch_sub(1, Ordering::Relaxed);
        m.in_flight.fetch_add(1, Ordering::Relaxed);
        let answer: Answer = if job.path == "/delegate" {
            handler.delegate(&job.body)
        } else {
            handler.cni(&job.body)
        };
        m.in_flight.fetch_sub(1, Ordering::Relaxed);
        let content_type = if answer.ok {
            "text/plain; charset=utf-8"
        } else {
            "application/json"
        };
        // Counted before the reply: a shim that has its answer finds its call in /metrics.
        m.request(
            &answer.command,
            if answer.ok { "ok" } else { "error" },
            job.arrived.elapsed(),
        );
        m.served(job.path, answer.status, "post");
        reply(&mut job.stream, answer.status, content_type, &answer.body);
    }
}
