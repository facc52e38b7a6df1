//! `multus approve-certificates`: the approver of per-node certificates. It watches the
//! certificate signing requests for the API server's client signer and approves those of
//! multus's node-scoped subjects (`k8s::client_certificate::review`); the controller manager
//! then signs them. Requests for other subjects are left to their own approvers.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use k8s::client_certificate::{review, Review, CSR_RESOURCE, SIGNER_NAME};
use k8s::{Change, ClientOptions, Collection, K8sError, KeepAlive, KubeClient, Written};
use serde_json::Value;

const LOG: &str = "multus approve-certificates";

#[derive(clap::Args, Debug)]
pub struct Options {
    /// The kubeconfig to use; in-cluster credentials (the pod's service account) without it.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("cannot block SIGTERM and SIGINT: {0}")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Api(#[from] K8sError),
    #[error("cannot start the watch: {0}")]
    Thread(#[source] std::io::Error),
}

pub fn run(opts: &Options) -> Result<ExitCode, ApproverError> {
    let stop = nodekit::signals::Stop::block().map_err(ApproverError::Signals)?;
    let client = || {
        KubeClient::new(&ClientOptions {
            kubeconfig: opts.kubeconfig.clone(),
            keep_alive: KeepAlive::Process,
            ..ClientOptions::default()
        })
    };
    let (watcher, writer) = (client()?, client()?);
    let stopped = Arc::new(AtomicBool::new(false));
    let requests = Collection {
        path: format!(
            "/apis/{}/{}/{}",
            CSR_RESOURCE.group, CSR_RESOURCE.version, CSR_RESOURCE.plural
        ),
        field_selector: Some(format!("spec.signerName={SIGNER_NAME}")),
        resource: CSR_RESOURCE.plural,
        trim: std::convert::identity,
    };
    // The watch's callback runs inside its client's runtime, where no other call may block:
    // it hands each request to the thread that decides.
    let (send, requests_seen) = std::sync::mpsc::channel::<Value>();
    let watch_stopped = Arc::clone(&stopped);
    let watch = std::thread::Builder::new()
        .name("certificate-requests".into())
        .spawn(move || {
            eprintln!("{LOG}: approving multus's per-node certificate requests");
            watcher.reflect(&requests, &watch_stopped, &mut |change| match change {
                Change::Listed(all) => all.into_iter().for_each(|csr| {
                    let _ = send.send(csr);
                }),
                Change::Applied(csr) => {
                    let _ = send.send(csr);
                }
                Change::Deleted(_) => {}
            });
        })
        .map_err(ApproverError::Thread)?;
    std::thread::Builder::new()
        .name("decisions".into())
        .spawn(move || {
            for csr in requests_seen {
                decide(&writer, &csr);
            }
        })
        .map_err(ApproverError::Thread)?;
    while !stop.wait(std::time::Duration::from_secs(3600)) {}
    eprintln!("{LOG}: stopped by a signal");
    stopped.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = watch.join();
    Ok(ExitCode::SUCCESS)
}

/// Reviews one request and writes the decision; a request that changed meanwhile comes back
/// through the watch.
fn decide(client: &KubeClient, csr: &Value) {
    let name = csr
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (approve, reason, message) = match review(csr) {
        Review::NotOurs => return,
        Review::Approve { node } => (
            true,
            "MultusNodeCertificate",
            format!("node {node}'s multus, for itself"),
        ),
        Review::Deny { reason, message } => (false, reason, message),
    };
    match client.decide_certificate_request(csr, approve, reason, &message) {
        Ok(Written::Done(_)) if approve => eprintln!("{LOG}: approved {name}: {message}"),
        Ok(Written::Done(_)) => eprintln!("{LOG}: denied {name}: {reason}: {message}"),
        // It comes back through the watch as it is now.
        Ok(Written::Stale) => {}
        Err(e) => eprintln!("{LOG}: {name}: {e}"),
    }
}
