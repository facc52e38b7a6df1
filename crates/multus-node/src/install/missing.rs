//! Thin mode's watch for pods that started without multus (`multus::missing`): once the
//! installer has put multus's config in place, it looks at its node's pods as thick mode's
//! daemon does, with the DaemonSet pod's own service account. Thin mode's DaemonSet serves no
//! metrics: the findings are the pods' events and this log.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use k8s::{ClientOptions, KeepAlive, KubeClient};
use multus::missing::{Watchman, Witness};

use super::{log, Options};

/// The installer to the watchman: ready once it runs (it starts after the config is written),
/// and its findings in the DaemonSet's log.
struct Installer;

impl Witness for Installer {
    fn ready(&self) -> bool {
        true
    }

    fn found(&self, _pods: usize) {}

    fn api_error(&self, _call: &str) {}

    fn event_failed(&self) {}

    fn warn(&self, pod: Option<&str>, message: &str) {
        match pod {
            Some(pod) => nodelog::warn!("multus install: pod {pod}: {message}"),
            None => nodelog::warn!("multus install: {message}"),
        }
    }
}

/// Starts the watch when the node's name is given (`--node-name`); until `stop`.
pub fn spawn(opts: &Options, stop: Arc<AtomicBool>) {
    let Some(node) = opts.node_name.clone() else {
        return;
    };
    let client = match KubeClient::new(&ClientOptions {
        kubeconfig: None,
        keep_alive: KeepAlive::Process,
        ..ClientOptions::default()
    }) {
        Ok(client) => Arc::new(client),
        Err(e) => {
            nodelog::warn!(
                "multus install: not looking for pods without their networks: no API client: {e}"
            );
            return;
        }
    };
    let every = opts.missing_networks_check_seconds;
    let watchman = Watchman {
        client,
        node,
        system_namespaces: multus::config::DEFAULT_SYSTEM_NAMESPACES
            .map(str::to_owned)
            .to_vec(),
        every: Duration::from_secs(every),
        delete: opts.delete_pods_missing_networks,
        witness: Installer,
        stop,
    };
    let started = std::thread::Builder::new()
        .name("missing-networks".into())
        .spawn(move || watchman.run());
    match started {
        Ok(_) => log(&format!(
            "looking for this node's pods without their networks every {every} s"
        )),
        Err(e) => {
            nodelog::warn!("multus install: not looking for pods without their networks: {e}")
        }
    }
}
