//! `multus-daemon`: thick mode's node daemon. It reads upstream's daemon config, writes the
//! shim's `00-multus.conf`, and serves the shim's calls on its socket with the same multus
//! commands thin mode runs, on one Kubernetes client it keeps.
//!
//! On SIGTERM or SIGINT it stops taking calls, finishes those it has (and the events they
//! queued) within [`STOP_BUDGET`], removes its socket and exits 0. The shim's DEL does not need
//! it meanwhile. `00-multus.conf` stays: a runtime that adds a pod while the daemon restarts
//! gets an error and tries again, instead of a pod without its networks.

mod api;
mod cache;
mod config;
mod error;
mod handler;
mod hotplug;
mod metrics;
mod server;
mod shim_conf;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use k8s::{client_certificate, ClientOptions, KeepAlive, KubeClient};
use nodekit::signals::Stop;

pub use config::DaemonConfig;
pub use error::StartError;

/// How long a stop may take, within the kubelet's default grace period of 10 s for the pod.
const STOP_BUDGET: Duration = Duration::from_secs(9);
/// How often a daemon that is not ready says again what it waits for.
const SAY_AGAIN: Duration = Duration::from_secs(60);
/// How often the cluster network's config and the readiness file are looked at.
const LOOK: Duration = Duration::from_secs(1);

/// What the command line asks for, in upstream's flags (Go's: `-flag`, `--flag`, `=`).
enum Command {
    /// `-ready SOCKET_DIR`: whether the daemon listening there is ready.
    Probe(PathBuf),
    Version,
    /// `[-config PATH]`: serve.
    Serve(PathBuf),
}

impl Command {
    fn parse(args: &[String]) -> Result<Command, StartError> {
        if let [flag, dir] = args {
            if matches!(flag.as_str(), "-ready" | "--ready") {
                return Ok(Command::Probe(PathBuf::from(dir)));
            }
        }
        if args
            .iter()
            .any(|a| matches!(a.as_str(), "-version" | "--version" | "-v"))
        {
            return Ok(Command::Version);
        }
        let mut args = args.iter();
        let mut path = PathBuf::from(config::DEFAULT_PATH);
        while let Some(arg) = args.next() {
            let flag = arg.trim_start_matches('-');
            match flag.split_once('=') {
                Some(("config", value)) => path = PathBuf::from(value),
                None if flag == "config" => {
                    path = args
                        .next()
                        .map(PathBuf::from)
                        .ok_or_else(|| StartError::Usage("-config needs a path".into()))?;
                }
                _ => return Err(StartError::Usage(format!("unknown argument {arg:?}"))),
            }
        }
        Ok(Command::Serve(path))
    }
}

/// The daemon's entry: `version` is what `-version` prints after the name. A daemon that
/// served and stopped on a signal exits 0; a probe of a daemon that is not ready, 1.
pub fn run(args: &[String], version: &str) -> Result<ExitCode, StartError> {
    match Command::parse(args)? {
        Command::Probe(dir) => Ok(probe(&dir)),
        Command::Version => {
            println!("multus-daemon {version}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve(path) => {
            let daemon = Daemon::start(&path).inspect_err(|e| tracing::error!("{e}"))?;
            let unfinished = daemon.serve();
            daemon.stop(unfinished);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `-ready SOCKET_DIR`, for the pod's readiness probe: the socket is not reachable by an HTTP
/// probe.
fn probe(dir: &Path) -> ExitCode {
    let socket = crate::wire::socket_path(dir);
    match nodekit::http1::exchange(&socket, "GET", "/readyz", b"", Duration::from_secs(3)) {
        Ok((200, _)) => return ExitCode::SUCCESS,
        Ok((status, body)) => eprintln!(
            "multus-daemon on {}: {status} {}",
            socket.display(),
            String::from_utf8_lossy(&body).trim()
        ),
        Err(e) => eprintln!("multus-daemon on {}: {e}", socket.display()),
    }
    ExitCode::FAILURE
}

/// `perNodeCertificate`: the node's certificate, asked for before anything else talks to the
/// API server, then renewed on a thread of its own; the clients read it through the kubeconfig
/// returned, and move to each renewed certificate by themselves.
fn keep_certificate(
    keys: &config::PerNodeCertificateKeys,
    stop: Arc<AtomicBool>,
) -> Result<PathBuf, StartError> {
    let node = std::env::var("MULTUS_NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .ok_or(StartError::NoNodeName)?;
    let per_node = client_certificate::PerNode {
        node,
        bootstrap: keys.bootstrap_kubeconfig.clone(),
        dir: keys.cert_dir.clone(),
        lifetime: keys.lifetime,
    };
    let jitter = client_certificate::jitter();
    let mut due = per_node.keep(jitter)?.due;
    let kubeconfig = per_node.write_kubeconfig()?;
    tracing::info!(
        "talking to the API server as {} through {}",
        client_certificate::user_name(&per_node.node),
        kubeconfig.display()
    );
    std::thread::Builder::new()
        .name("certificate".into())
        .spawn(move || loop {
            while SystemTime::now() < due {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            due = match per_node.keep(jitter) {
                Ok(kept) => {
                    if kept.renewed {
                        tracing::info!(
                            "per-node certificate renewed in {}",
                            per_node.dir.display()
                        );
                    }
                    kept.due
                }
                Err(e) => {
                    tracing::warn!("perNodeCertificate: {e}; trying again in 10 s");
                    SystemTime::now() + Duration::from_secs(10)
                }
            };
        })
        .map_err(StartError::thread("certificate"))?;
    Ok(kubeconfig)
}

/// A daemon that serves: what its loop looks after, and what stopping waits for.
struct Daemon {
    config: Arc<DaemonConfig>,
    stop: Stop,
    caches: Arc<cache::Caches>,
    state: Arc<server::State>,
    server: server::Server,
    events: JoinHandle<()>,
    stop_watches: Arc<AtomicBool>,
}

impl Daemon {
    /// Reads the config, sets up logging, the client, the caches and the threads, and listens.
    fn start(path: &Path) -> Result<Daemon, StartError> {
        let config = Arc::new(
            DaemonConfig::read(path).map_err(|source| StartError::Config {
                path: path.to_owned(),
                source,
            })?,
        );
        multus::log::init_with(&config.log);
        for warning in &config.warnings {
            tracing::warn!("{}: {warning}", path.display());
        }
        // Before any thread starts, so that only the main thread takes the signals.
        let stop = Stop::block().map_err(StartError::Signals)?;
        if let Some(root) = &config.chroot_dir {
            cni::invoke::run_delegates_in(root).map_err(StartError::Delegates)?;
        }
        cni::invoke::limit_delegates_to(config.delegate_timeout).map_err(StartError::Delegates)?;
        let stop_watches = Arc::new(AtomicBool::new(false));
        let kubeconfig = match &config.per_node_certificate {
            Some(keys) => Some(keep_certificate(keys, Arc::clone(&stop_watches))?),
            None => config.kubeconfig.clone(),
        };
        let client = KubeClient::new(&ClientOptions {
            kubeconfig: kubeconfig.clone(),
            keep_alive: KeepAlive::Process,
            ..ClientOptions::default()
        })?;
        let metrics = Arc::new(metrics::Metrics::default());
        let node = std::env::var("MULTUS_NODE_NAME")
            .ok()
            .filter(|n| !n.is_empty());
        if node.is_none() {
            tracing::warn!(
                "MULTUS_NODE_NAME is not set: the pod cache holds every pod of the cluster"
            );
        }
        let hot_plug = config
            .hot_plug
            .then(|| Arc::new(hotplug::HotPlug::default()));
        let caches = cache::Caches::start(
            kubeconfig,
            node.clone(),
            Arc::clone(&metrics),
            Arc::clone(&stop_watches),
            hot_plug.clone(),
        )?;
        let (shared, queued_events) = api::Shared::new(
            Arc::new(client),
            ClientOptions::default().timeout,
            Arc::clone(&metrics),
            Arc::clone(&caches),
        );
        let (events_client, events_metrics) = (Arc::clone(&shared.client), Arc::clone(&metrics));
        let events = std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                api::send_events(
                    events_client,
                    ClientOptions::default().timeout,
                    &events_metrics,
                    queued_events,
                )
            })
            .map_err(StartError::thread("events"))?;
        // Compressing a rotated log can take seconds (100 MB by default): never on the loop
        // that answers SIGTERM. A compression cut short by the exit leaves the plain backup,
        // which the next rotation compresses.
        std::thread::Builder::new()
            .name("log-rotation".into())
            .spawn(|| loop {
                nodelog::maintain();
                std::thread::sleep(LOOK);
            })
            .map_err(StartError::thread("log rotation"))?;
        let state = Arc::new(server::State {
            metrics: Arc::clone(&metrics),
            ready: false.into(),
            stopping: false.into(),
        });
        if let Some(node) = node {
            let watchman = multus::missing::Watchman {
                client: Arc::clone(&shared.client),
                node,
                system_namespaces: config.system_namespaces.clone(),
                every: config.missing_networks_check,
                delete: config.delete_pods_missing_networks,
                witness: Witness(Arc::clone(&state)),
                stop: Arc::clone(&stop_watches),
            };
            std::thread::Builder::new()
                .name("missing-networks".into())
                .spawn(move || watchman.run())
                .map_err(StartError::thread("missing networks"))?;
        }
        if let Some(hot_plug) = &hot_plug {
            let (hot_plug, config, shared, stop, state) = (
                Arc::clone(hot_plug),
                Arc::clone(&config),
                Arc::clone(&shared),
                Arc::clone(&stop_watches),
                Arc::clone(&state),
            );
            std::thread::Builder::new()
                .name("hot-plug".into())
                .spawn(move || hot_plug.run(&config, &shared, &stop, &state.ready))
                .map_err(StartError::thread("hot-plug"))?;
        }
        let handler = Arc::new(handler::Handler {
            config: Arc::clone(&config),
            shared,
            hot_plug,
        });
        let server = server::Server::start(
            &config.socket_dir,
            handler,
            Arc::clone(&state),
            config.in_flight,
            config.queue_length,
            config.queue_wait,
        )?;
        if let Some(port) = config.metrics_port {
            server::serve_metrics(port, Arc::clone(&state))?;
        }
        tracing::info!(
            "serving on {} ({} calls at once, {} queued at most)",
            server.socket.display(),
            config.in_flight,
            config.queue_length
        );
        Ok(Daemon {
            config,
            stop,
            caches,
            state,
            server,
            events,
            stop_watches,
        })
    }

    /// Keeps the shim's config written and readiness current until SIGTERM or SIGINT.
    fn serve(&self) -> Instant {
        let mut shim_conf = shim_conf::ShimConf::new(&self.config);
        // What readiness waits for, and when that was last said.
        let mut waiting: Option<(String, Instant)> = None;
        loop {
            let ready = look(&self.config, &mut shim_conf).and_then(|()| {
                self.caches
                    .synced()
                    .then_some(())
                    .ok_or_else(|| "the pod and NAD caches to fill".to_owned())
            });
            match ready {
                Ok(()) => {
                    if !self.state.ready.swap(true, Ordering::SeqCst) {
                        tracing::info!(
                            "ready: the caches are filled and {} is written",
                            shim_conf.path().display()
                        );
                    }
                    waiting = None;
                }
                Err(what) => {
                    self.state.ready.store(false, Ordering::SeqCst);
                    let due = waiting
                        .as_ref()
                        .is_none_or(|(said, at)| *said != what || at.elapsed() >= SAY_AGAIN);
                    if due {
                        tracing::warn!("not ready: waiting for {what}");
                        waiting = Some((what, Instant::now()));
                    }
                }
            }
            if self.stop.wait(LOOK) {
                return Instant::now() + STOP_BUDGET;
            }
        }
    }

    /// Stops taking calls and finishes those in hand, and the events they queued, by
    /// `deadline`.
    fn stop(self, deadline: Instant) {
        tracing::info!("stopping: finishing the calls in hand");
        self.stop_watches.store(true, Ordering::SeqCst);
        let finished = self.server.stop(deadline);
        // The workers are gone: the events queue's last sender goes with the handler.
        let done = wait_for(&self.events, deadline);
        if !(finished && done) {
            tracing::warn!("stopped with calls or events unfinished after {STOP_BUDGET:?}");
        }
    }
}

/// The daemon to the pods' [`multus::missing::Watchman`]: its readiness, its metrics, its log.
struct Witness(Arc<server::State>);

impl multus::missing::Witness for Witness {
    fn ready(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
    }

    fn found(&self, pods: usize) {
        self.0
            .metrics
            .pods_missing_networks
            .store(i64::try_from(pods).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    fn api_error(&self, call: &str) {
        self.0.metrics.api_error(call);
    }

    fn event_failed(&self) {
        self.0.metrics.event_failed();
    }

    fn warn(&self, pod: Option<&str>, message: &str) {
        match pod {
            Some(pod) => tracing::warn!(pod = %pod, "{message}"),
            None => tracing::warn!("{message}"),
        }
    }
}

/// One look at what readiness depends on; writes `00-multus.conf` when it is due.
fn look(config: &DaemonConfig, shim_conf: &mut shim_conf::ShimConf) -> Result<(), String> {
    if let Some(file) = &config.readiness_file {
        if !file.exists() {
            return Err(format!("the readiness indicator file {}", file.display()));
        }
    }
    if shim_conf.refresh()? {
        tracing::info!("wrote {}", shim_conf.path().display());
    }
    Ok(())
}

fn wait_for(thread: &JoinHandle<()>, deadline: Instant) -> bool {
    while !thread.is_finished() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
