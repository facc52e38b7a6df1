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
mod handler;
mod metrics;
mod server;
mod shim_conf;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s::{ClientOptions, KeepAlive, KubeClient};

pub use config::DaemonConfig;

/// How long a stop may take, within the kubelet's default grace period of 10 s for the pod.
const STOP_BUDGET: Duration = Duration::from_secs(9);
/// How often a daemon that is not ready says again what it waits for.
const SAY_AGAIN: Duration = Duration::from_secs(60);
/// How often the cluster network's config and the readiness file are looked at.
const LOOK: Duration = Duration::from_secs(1);

/// `-config PATH` as upstream takes it (Go's flags: `-config`, `--config`, `=`).
fn config_path(args: &[String]) -> Result<PathBuf, String> {
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
                    .ok_or("-config needs a path")?;
            }
            _ => return Err(format!("unknown argument {arg:?}: use -config PATH")),
        }
    }
    Ok(path)
}

/// `-ready SOCKET_DIR`: whether the daemon listening there is ready (`/readyz`), for the
/// pod's readiness probe: the socket is not reachable by an HTTP probe.
fn probe(dir: &str) -> i32 {
    let socket = super::wire::socket_path(std::path::Path::new(dir));
    match super::wire::exchange(&socket, "GET", "/readyz", b"", Duration::from_secs(3)) {
        Ok((200, _)) => 0,
        Ok((status, body)) => {
            eprintln!(
                "multus-daemon on {}: {status} {}",
                socket.display(),
                String::from_utf8_lossy(&body).trim()
            );
            1
        }
        Err(e) => {
            eprintln!("multus-daemon on {}: {e}", socket.display());
            1
        }
    }
}

/// The daemon's entry; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    if let [flag, dir] = args {
        if matches!(flag.as_str(), "-ready" | "--ready") {
            return probe(dir);
        }
    }
    if args
        .iter()
        .any(|a| matches!(a.as_str(), "-version" | "--version" | "-v"))
    {
        println!(
            "multus-daemon {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            env!("MULTUS_RS_COMMIT")
        );
        return 0;
    }
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("multus-daemon: {e}");
            tracing::error!("{e}");
            1
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let path = config_path(args)?;
    let config = Arc::new(DaemonConfig::read(&path)?);
    multus::log::init_with(
        config.log_level,
        config.log_file.as_deref(),
        &config.log_options,
        config.log_to_stderr,
    );
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", path.display());
    }
    // Before any thread starts, so that only the main thread takes the signals.
    let stop = crate::install::signals::Stop::block().map_err(|e| e.to_string())?;
    if let Some(root) = &config.chroot_dir {
        cni::invoke::run_delegates_in(root).map_err(|e| e.msg)?;
    }
    cni::invoke::limit_delegates_to(config.delegate_timeout).map_err(|e| e.msg)?;
    let client = KubeClient::new(&ClientOptions {
        kubeconfig: config.kubeconfig.clone(),
        keep_alive: KeepAlive::Process,
        ..ClientOptions::default()
    })
    .map_err(|e| e.to_string())?;
    let metrics = Arc::new(metrics::Metrics::default());
    let stop_watches = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let node = std::env::var("MULTUS_NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty());
    if node.is_none() {
        tracing::warn!("MULTUS_NODE_NAME is not set: the pod cache holds every pod of the cluster");
    }
    let caches = cache::Caches::start(
        config.kubeconfig.clone(),
        node,
        Arc::clone(&metrics),
        Arc::clone(&stop_watches),
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
        .map_err(|e| format!("cannot start the events thread: {e}"))?;
    // Compressing a rotated log can take seconds (100 MB by default): never on the loop that
    // answers SIGTERM. A compression cut short by the exit leaves the plain backup, which the
    // next rotation compresses.
    std::thread::Builder::new()
        .name("log-rotation".into())
        .spawn(|| loop {
            multus::log::maintain();
            std::thread::sleep(LOOK);
        })
        .map_err(|e| format!("cannot start the log rotation thread: {e}"))?;
    let state = Arc::new(server::State {
        metrics,
        ready: false.into(),
        stopping: false.into(),
    });
    let handler = Arc::new(handler::Handler {
        config: Arc::clone(&config),
        shared,
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
    let mut shim_conf = shim_conf::ShimConf::new(&config);
    // What readiness waits for, and when that was last said.
    let mut waiting: Option<(String, Instant)> = None;
    loop {
        let ready = look(&config, &mut shim_conf).and_then(|()| {
            caches
                .synced()
                .then_some(())
                .ok_or_else(|| "the pod and NAD caches to fill".to_owned())
        });
        match ready {
            Ok(()) => {
                if !state.ready.swap(true, Ordering::SeqCst) {
                    tracing::info!(
                        "ready: the caches are filled and {} is written",
                        shim_conf.path().display()
                    );
                }
                waiting = None;
            }
            Err(what) => {
                state.ready.store(false, Ordering::SeqCst);
                let due = waiting
                    .as_ref()
                    .is_none_or(|(said, at)| *said != what || at.elapsed() >= SAY_AGAIN);
                if due {
                    tracing::warn!("not ready: waiting for {what}");
                    waiting = Some((what, Instant::now()));
                }
            }
        }
        if stop.wait(LOOK) {
            break;
        }
    }
    tracing::info!("stopping: finishing the calls in hand");
    stop_watches.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + STOP_BUDGET;
    let finished = server.stop(deadline);
    // The workers are gone: the events queue's last sender goes with the handler.
    let done = wait_for(&events, deadline);
    if !(finished && done) {
        tracing::warn!("stopped with calls or events unfinished after {STOP_BUDGET:?}");
    }
    Ok(())
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

fn wait_for(thread: &std::thread::JoinHandle<()>, deadline: Instant) -> bool {
    while !thread.is_finished() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
