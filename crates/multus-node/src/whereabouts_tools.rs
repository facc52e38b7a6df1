//! `multus whereabouts reconcile|control` (also `whereabouts reconcile|control` through the
//! link): the whereabouts IPAM plugin's cluster tools, run by the reconciler CronJob and the
//! controller Deployment.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Tool {
    /// One reconciler pass: free the addresses whose pod is gone or does not show them in its
    /// network-status, delete their reservations, and exit.
    Reconcile {
        /// The kubeconfig; without one, the pod's service account.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Keep freeing: watch the cluster's pods and free a pod's addresses as soon as it is
    /// deleted, with a whole pass at the start and whenever the watch lists again. Runs until
    /// killed.
    Control {
        /// The kubeconfig; without one, the pod's service account.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
}

/// Why a tool could not do its job; the name says which.
#[derive(Debug, thiserror::Error)]
#[error("whereabouts {tool}: {source}")]
pub struct ToolError {
    tool: &'static str,
    #[source]
    source: whereabouts::Error,
}

pub fn run(tool: &Tool) -> Result<ExitCode, ToolError> {
    let (Tool::Reconcile { kubeconfig } | Tool::Control { kubeconfig }) = tool;
    let opts = k8s::ClientOptions {
        kubeconfig: kubeconfig.clone(),
        // Listing every pod of a cluster takes longer than a plugin's call.
        timeout: Duration::from_secs(30),
        keep_alive: k8s::KeepAlive::Process,
        ..k8s::ClientOptions::default()
    };
    let client = || k8s::KubeClient::new(&opts).map_err(whereabouts::Error::from);
    // Every line, the Kubernetes client's included, is one of the node's log lines.
    multus::log::init_with(&multus::config::LogSettings {
        level: multus::config::LogLevel::Verbose,
        file: None,
        to_stderr: true,
        options: multus::config::LogOptions::default(),
    });
    match tool {
        Tool::Control { .. } => {
            let failed = |source| ToolError {
                tool: "control",
                source,
            };
            let (pods, claims) = (client().map_err(failed)?, client().map_err(failed)?);
            let client = client().map_err(failed)?;
            let stop = AtomicBool::new(false);
            let watchers = whereabouts::Watchers {
                pods: &pods,
                claims: &claims,
            };
            whereabouts::control(watchers, &client, &stop);
        }
        Tool::Reconcile { .. } => {
            let s = client()
                .and_then(|client| whereabouts::reconcile(&client))
                .map_err(|source| ToolError {
                    tool: "reconcile",
                    source,
                })?;
            nodelog::info!(
                "reconciled: freed {} addresses, deleted {} reservations, freed {} node slices",
                s.freed,
                s.reservations_deleted,
                s.slices_freed
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
