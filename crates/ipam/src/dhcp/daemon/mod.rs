//! `dhcp daemon`: holds every DHCP lease of the node's pods, one per (container, network,
//! interface). It acquires a lease on ADD, renews it at T1 and rebinds at T2, removes the
//! address when it expires, releases it on DEL, and keeps it on disk so that a restarted daemon
//! carries on. Every lease event is one log line on stderr naming the container, network and
//! interface.
//!
//! A single-threaded tokio runtime drives every exchange (tasks are local to it, as netlink
//! sockets are not shared between threads); a lease costs a small task and no thread. No lock
//! is held while a renewal is on the wire: DEL stops the renewal and releases the lease at once.

mod exchange;
mod flags;
#[cfg(test)]
mod fuzz;
mod listener;
mod schedule;
mod slots;
mod store;

use std::sync::Arc;
use std::time::Duration;

use cni::{CniError, CniResult, Code};
use ipnet::IpNet;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::AbortHandle;

use super::wire::{Op, Request, Response, MAX_LINE};
use exchange::{Failure, Iface, Timing};
pub use flags::{FlagError, Flags, USAGE};
pub use listener::SocketError;
use schedule::Step;
use slots::{Slot, SlotHandle, Table};
use store::{now_ms, who, Record, Store};

/// Why the daemon could not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}\n{USAGE}")]
    Flags(#[from] FlagError),
    #[error("creating the state directory {}: {source}", dir.display())]
    StateDir {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the pidfile {}: {source}", path.display())]
    Pidfile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("handling signals: {0}")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("listening on {place}: {source}")]
    Listening {
        place: String,
        #[source]
        source: std::io::Error,
    },
}

impl DaemonError {
    /// 2 for a command line it does not take, 1 for the rest.
    pub fn exit_code(&self) -> std::process::ExitCode {
        match self {
            DaemonError::Flags(_) => std::process::ExitCode::from(2),
            _ => std::process::ExitCode::FAILURE,
        }
    }
}

/// Runs the daemon with `args` (the words after `daemon`), until SIGTERM or SIGINT; `-h`
/// prints the usage.
pub fn run(args: &[String]) -> Result<(), DaemonError> {
    match Flags::parse(args) {
        Err(FlagError::Help) => {
            println!("{USAGE}");
            Ok(())
        }
        flags => serve_leases(flags?),
    }
}

fn serve_leases(flags: Flags) -> Result<(), DaemonError> {
    nodelog::init(nodelog::Settings {
        max: Some(flags.log_level),
        to_stderr: true,
    });
    let socket_path = std::path::PathBuf::from(format!(
        "{}{}",
        flags.host_prefix,
        flags.socket_path.display()
    ));
    let store = Store::open(&flags.state_dir).map_err(|source| DaemonError::StateDir {
        dir: flags.state_dir.clone(),
        source,
    })?;
    if let Some(p) = &flags.pidfile {
        cni::atomic_file::write(p, std::process::id().to_string().as_bytes(), 0o644).map_err(
            |source| DaemonError::Pidfile {
                path: p.clone(),
                source,
            },
        )?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let local = tokio::task::LocalSet::new();
    let outcome = local.block_on(&runtime, async {
        let daemon = Arc::new(Daemon {
            flags: flags.clone(),
            store,
            slots: Table::default(),
        });
        // Leases first: the socket appears once the daemon is ready.
        daemon.restore().await;
        // Signals before the socket: a client may stop the daemon as soon as it answers.
        let stops = [SignalKind::terminate(), SignalKind::interrupt()]
            .map(|kind| signal(kind).map_err(DaemonError::Signals));
        let [mut term, mut int] = match stops {
            [Ok(t), Ok(i)] => [t, i],
            [Err(e), _] | [_, Err(e)] => return Err(e),
        };
        let listener = listener::open(&socket_path)?;
        // Only now is this the one daemon: a temp file in the store is no other's write.
        daemon.store.remove_temp_files();
        let place = match &listener.made {
            Some(path) => path.display().to_string(),
            None => "the socket systemd passed".to_owned(),
        };
        let served = serve(daemon, listener.listener, &place, &mut term, &mut int).await;
        if let Some(made) = &listener.made {
            let _ = std::fs::remove_file(made);
        }
        served
    });
    if let Some(p) = &flags.pidfile {
        let _ = std::fs::remove_file(p);
    }
    outcome
}

async fn serve(
    daemon: Arc<Daemon>,
    listener: std::os::unix::net::UnixListener,
    place: &str,
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> Result<(), DaemonError> {
    let io = |source| DaemonError::Listening {
        place: place.to_owned(),
        source,
    };
    listener.set_nonblocking(true).map_err(io)?;
    let listener = tokio::net::UnixListener::from_std(listener).map_err(io)?;
    nodelog::info!(
        "dhcp daemon: listening on {place}, leases in {}",
        daemon.store.dir().display()
    );
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::task::spawn_local(Arc::clone(&daemon).serve_connection(stream));
                }
                Err(e) => nodelog::error!("dhcp daemon: accepting a connection: {e}"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    // Leases stay on disk, unreleased: the next daemon resumes them.
    nodelog::info!("dhcp daemon: stopping; leases are kept for the next start");
    Ok(())
}

struct Daemon {
    flags: Flags,
    store: Store,
    slots: Table,
}

/// One line per lease event; a failure is an error, the rest information.
fn log(event: &str, who: &str, detail: impl std::fmt::Display) {
    let level = if event == "failed" {
        nodelog::Level::Error
    } else {
        nodelog::Level::Info
    };
    nodelog::write(level, format_args!("dhcp: {event} {who} {detail}"));
}

impl Daemon {
    fn timing(&self) -> Timing {
        Timing {
            timeout: self.flags.timeout,
            resend_max: self.flags.resend_max,
        }
    }

    async fn serve_connection(self: Arc<Self>, stream: UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut line = Vec::new();
        let mut reader = BufReader::new(read.take(MAX_LINE as u64));
        let response = match reader.read_until(b'\n', &mut line).await {
            Ok(_) => match serde_json::from_slice::<Request>(&line) {
                Ok(request) => self.handle(request).await,
                Err(e) => Response::Error(CniError::decoding(format!(
                    "the dhcp daemon cannot read the plugin's request ({e}); are the plugin \
                     and the daemon the same version?"
                ))),
            },
            Err(e) => Response::Error(CniError::io(format!("reading the request: {e}"))),
        };
        let mut out = serde_json::to_vec(&response).unwrap_or_default();
        out.push(b'\n');
        // The plugin may have given up; nothing to do then.
        let _ = write.write_all(&out).await;
    }

    async fn handle(self: &Arc<Self>, mut request: Request) -> Response {
        if !request.netns.is_empty() {
            request.netns = format!("{}{}", self.flags.host_prefix, request.netns);
        }
        request.params.broadcast |= self.flags.broadcast;
        let outcome = match request.op {
            Op::Add => self.add(&request).await.map(Some),
            Op::Del => self.del(&request).await.map(|()| None),
            Op::Check => self.check(&request).await.map(|()| None),
            Op::Status => Ok(None),
            Op::Gc => {
                self.gc(&request).await;
                Ok(None)
            }
        };
        match outcome {
            Ok(result) => Response::Ok(result),
            Err(e) => Response::Error(e),
        }
    }

    async fn add(self: &Arc<Self>, req: &Request) -> Result<CniResult, CniError> {
        let who = who(&req.container_id, &req.network, &req.ifname);
        // Held until the lease is stored: a DEL of this attachment waits for the ADD.
        let mut held = self.slots.lock(&req.key()).await;
        if let Some(rec) = &held.record {
            if rec.netns == req.netns {
                return Ok(rec.lease.to_result(rec.params.priority));
            }
            // The same attachment in a new namespace: the old lease is stale.
            self.end(&mut held, "replaced").await;
        }
        let acquired = self.acquire(req).await;
        let (lease, server_mac) = match acquired {
            Ok(a) => a,
            Err(f) => {
                log("failed", &who, &f);
                return Err(failure_error(&f));
            }
        };
        let record = Record {
            container_id: req.container_id.clone(),
            network: req.network.clone(),
            ifname: req.ifname.clone(),
            netns: req.netns.clone(),
            params: req.params.clone(),
            lease,
            server_mac,
            bound_at_ms: now_ms(),
        };
        if let Err(e) = self.store.save(&record) {
            held.record = Some(record);
            self.end(&mut held, "released").await;
            return Err(CniError::io(format!(
                "cannot keep the lease in {}: {e}",
                self.store.dir().display()
            )));
        }
        log(
            "acquired",
            &who,
            format_args!(
                "address={} server={} lease={}s",
                record.lease.address, record.lease.server, record.lease.lease_secs
            ),
        );
        let result = record.lease.to_result(record.params.priority);
        held.record = Some(record);
        held.maintainer = Some(self.spawn_maintainer(held.handle()));
        Ok(result)
    }

    async fn acquire(&self, req: &Request) -> Result<(super::message::Lease, [u8; 6]), Failure> {
        if req.netns.is_empty() {
            return Err(Failure::NoNetns(
                "ADD needs the pod's network namespace (CNI_NETNS)".into(),
            ));
        }
        let iface = Iface::open(&req.netns, &req.ifname)?;
        iface.bring_up().await?;
        exchange::acquire(&iface, &req.params, self.timing()).await
    }

    /// Releases the attachment's lease, if any. A renewal under way holds no lock, so this
    /// never waits for one: `end` stops it.
    async fn del(self: &Arc<Self>, req: &Request) -> Result<(), CniError> {
        let mut held = self.slots.lock(&req.key()).await;
        self.end(&mut held, "released").await;
        Ok(())
    }

    /// Releases the leases of `req`'s network whose attachment is not in `req.valid`.
    async fn gc(&self, req: &Request) {
        let stale = self.slots.keys(|(container_id, network, ifname)| {
            *network == req.network
                && !req
                    .valid
                    .iter()
                    .any(|v| v.container_id == *container_id && v.ifname == *ifname)
        });
        for key in stale {
            let mut held = self.slots.lock(&key).await;
            self.end(&mut held, "released").await;
        }
    }

    async fn check(&self, req: &Request) -> Result<(), CniError> {
        let who = who(&req.container_id, &req.network, &req.ifname);
        let record = self.slots.lock(&req.key()).await.record.clone();
        let Some(rec) = record else {
            return Err(CniError::new(
                Code::UnknownContainer,
                format!("the dhcp daemon holds no lease for {who}"),
            ));
        };
        let iface = Iface::open(&rec.netns, &rec.ifname).map_err(|f| failure_error(&f))?;
        let addrs = iface
            .nl
            .addrs(Some(iface.index), Some(netkit::Family::V4))
            .map_err(|e| CniError::internal(e.to_string()))?;
        if !addrs.iter().any(|a| a.net == IpNet::V4(rec.lease.address)) {
            return Err(CniError::internal(format!(
                "the leased address {} is not on {}",
                rec.lease.address,
                iface.describe()
            )));
        }
        Ok(())
    }

    /// Stops renewing the slot's lease, sends DHCPRELEASE when its interface still exists, and
    /// forgets it. `event` names what happened, for the log.
    async fn end(&self, slot: &mut Slot, event: &str) {
        if let Some(task) = slot.maintainer.take() {
            // On this single-threaded runtime the task is dropped before it runs again, so a
            // renewal on the wire stops here.
            task.abort();
        }
        let Some(rec) = slot.record.take() else {
            return;
        };
        let sent = match Iface::open(&rec.netns, &rec.ifname) {
            Ok(iface) => exchange::release(&iface, &rec.params, &rec.lease, rec.server_mac).await,
            Err(f) => Err(f),
        };
        match sent {
            Ok(()) => log(
                event,
                &rec.who(),
                format_args!("address={}", rec.lease.address),
            ),
            Err(f) => log(
                "forgotten",
                &rec.who(),
                format_args!("address={} without DHCPRELEASE: {f}", rec.lease.address),
            ),
        }
        self.remove_file(&rec);
    }

    fn remove_file(&self, rec: &Record) {
        if let Err(e) = self.store.remove(rec) {
            log(
                "failed",
                &rec.who(),
                format_args!("removing the lease file: {e}"),
            );
        }
    }

    fn spawn_maintainer(self: &Arc<Self>, slot: SlotHandle) -> AbortHandle {
        tokio::task::spawn_local(Arc::clone(self).maintain(slot)).abort_handle()
    }

    /// Keeps one lease: renew from T1 (unicast to its server), rebind from T2 (broadcast),
    /// and at expiry remove the address. Ends when the lease ends. The slot is locked only
    /// between exchanges; DEL, or an ADD in another namespace, aborts this task instead.
    async fn maintain(self: Arc<Self>, slot: SlotHandle) {
        // After a failed attempt, no new one before this (ms since the epoch).
        let mut not_before = 0;
        loop {
            let Some(rec) = slot.lock().await.record.clone() else {
                return;
            };
            let now = now_ms();
            let step = schedule::next_step(&rec.times(), now, not_before);
            if step.at() > now {
                tokio::time::sleep(Duration::from_millis(step.at() - now)).await;
                continue;
            }
            let (until, rebinding) = match step {
                Step::Renew { until, .. } => (until, false),
                Step::Rebind { until, .. } => (until, true),
                Step::Expire { .. } => {
                    let mut held = slot.lock().await;
                    if held.record.as_ref() == Some(&rec) {
                        self.expire(&mut held, &rec);
                    }
                    return;
                }
            };
            let extended = self.extend(&rec, rebinding, until).await;
            let mut held = slot.lock().await;
            if held.record.as_ref() != Some(&rec) {
                // Ended meanwhile: what the exchange brought must not bring the lease back.
                return;
            }
            match extended {
                Ok(new) => {
                    let event = if rebinding { "rebound" } else { "renewed" };
                    if let Err(e) = self.store.save(&new) {
                        log("failed", &new.who(), format_args!("saving the lease: {e}"));
                    }
                    log(
                        event,
                        &new.who(),
                        format_args!(
                            "address={} lease={}s",
                            new.lease.address, new.lease.lease_secs
                        ),
                    );
                    held.record = Some(new);
                    not_before = 0;
                }
                Err(f @ (Failure::Gone(_) | Failure::NoNetns(_))) => {
                    log(
                        "forgotten",
                        &rec.who(),
                        format_args!("address={}: {f}", rec.lease.address),
                    );
                    self.remove_file(&rec);
                    held.clear();
                    return;
                }
                Err(f @ Failure::Refused(_)) => {
                    // The server took the address back: it may not stay on the interface.
                    self.expire(&mut held, &rec);
                    log("failed", &rec.who(), &f);
                    return;
                }
                Err(f) => {
                    let what = if rebinding { "rebinding" } else { "renewing" };
                    log("failed", &rec.who(), format_args!("{what}: {f}"));
                    not_before = schedule::retry_at(until, now_ms());
                }
            }
        }
    }

    /// One attempt to extend `rec`'s lease, given up at `until` (ms since the epoch) or after
    /// `-resendtimeout`: the lease as the server's ACK renewed it.
    async fn extend(&self, rec: &Record, rebinding: bool, until: u64) -> Result<Record, Failure> {
        let iface = Iface::open(&rec.netns, &rec.ifname)?;
        let left = Duration::from_millis(until.saturating_sub(now_ms()));
        let timeout = left.min(self.flags.resend_timeout);
        let timing = Timing {
            timeout,
            ..self.timing()
        };
        // Renewing asks the server that granted the lease; rebinding asks any.
        let server_mac = (!rebinding).then_some(rec.server_mac);
        let deadline = tokio::time::Instant::now() + timeout;
        let (lease, server_mac) = exchange::extend(
            &iface,
            &rec.params,
            &rec.lease,
            server_mac,
            deadline,
            timing,
        )
        .await?;
        Ok(Record {
            lease,
            server_mac,
            bound_at_ms: now_ms(),
            ..rec.clone()
        })
    }

    /// The lease is over: its address comes off the interface, and the record goes.
    fn expire(&self, slot: &mut Slot, rec: &Record) {
        let removed = Iface::open(&rec.netns, &rec.ifname).map(|iface| {
            iface
                .nl
                .del_addr(iface.index, IpNet::V4(rec.lease.address))
                .map_err(|e| e.to_string())
        });
        let detail = match removed {
            Ok(Ok(())) => "removed from the interface".to_owned(),
            Ok(Err(e)) => format!("could not be removed: {e}"),
            Err(f) => format!("interface gone: {f}"),
        };
        log(
            "expired",
            &rec.who(),
            format_args!("address={} {detail}", rec.lease.address),
        );
        self.remove_file(rec);
        slot.clear();
    }

    /// Picks up the leases a previous daemon kept: those whose interface still exists are
    /// renewed as due; the others are forgotten (their interface, and the address with it, is
    /// gone, so there is nothing to release from).
    async fn restore(self: &Arc<Self>) {
        let (records, unreadable) = self.store.load_all();
        for (path, why) in unreadable {
            nodelog::warn!(
                "dhcp daemon: ignoring the unreadable lease file {}: {why}",
                path.display()
            );
        }
        for rec in records {
            match Iface::open(&rec.netns, &rec.ifname) {
                Ok(_) => {
                    log(
                        "resumed",
                        &rec.who(),
                        format_args!("address={}", rec.lease.address),
                    );
                    let mut held = self.slots.lock(&rec.key()).await;
                    held.maintainer = Some(self.spawn_maintainer(held.handle()));
                    held.record = Some(rec);
                }
                Err(f) => {
                    log(
                        "forgotten",
                        &rec.who(),
                        format_args!("address={}: {f}", rec.lease.address),
                    );
                    self.remove_file(&rec);
                }
            }
        }
    }
}

fn failure_error(f: &Failure) -> CniError {
    let code = match f {
        Failure::NoNetns(_) => Code::InvalidNetns,
        Failure::Gone(_) => Code::InvalidEnvironment,
        Failure::NoAnswer(_) | Failure::Refused(_) => Code::TryAgainLater,
        Failure::System(_) => Code::Internal,
    };
    CniError::new(code, f.to_string())
}
