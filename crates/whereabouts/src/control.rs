//! The controller: frees a pod's addresses as soon as the API deletes the pod, as the
//! reference's ip-control-loop does, but from one place for the whole cluster, so that the
//! pods of a node that died (whose DEL never comes) are freed too, not only at the daily pass.
//! An IPAMClaim's addresses are freed as soon as the API deletes the claim.
//!
//! It watches every pod but keeps only names: what it holds does not grow with the pods' size,
//! and a list of the whole cluster is cut down page by page. A deletion it cannot have seen (at
//! its start, and whenever its watch has to list again) is caught by a whole reconciler pass.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s::{Change, Collection, KubeClient};
use serde_json::{json, Value};

use crate::reconcile::{free_deleted, reconcile, Summary};
use crate::store::IPAM_CLAIMS;

/// More pods deleted at once than this (a namespace going) make one whole pass, cheaper than
/// reading each pod again.
const WHOLE_PASS_OVER: usize = 100;
/// How long a failed pass or batch waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long deletions gather before their batch is freed: a burst becomes one batch.
const GATHER: Duration = Duration::from_millis(200);
/// The least time from one pass's start to the next's: every pass lists every pool and
/// reservation, so pods deleted and made again in a loop must not have it list without pause.
const BETWEEN_PASSES: Duration = Duration::from_secs(2);

/// What the watches saw.
enum Seen {
    /// A whole collection was listed: deletions may have been missed.
    Listed,
    /// A pod deleted, as `namespace/name`.
    Deleted(String),
    /// An IPAMClaim deleted, as `namespace/name`.
    ClaimDeleted(String),
}

/// Of a pod or claim, only what names it.
fn names_only(pod: Value) -> Value {
    let text = |p: &str| pod.pointer(p).cloned().unwrap_or(Value::Null);
    json!({"metadata": {"namespace": text("/metadata/namespace"), "name": text("/metadata/name")}})
}

fn podref(pod: &Value) -> Option<String> {
    let text = |p: &str| pod.pointer(p).and_then(Value::as_str);
    Some(format!(
        "{}/{}",
        text("/metadata/namespace")?,
        text("/metadata/name")?
    ))
}

/// The clients of [`control`]'s watches, one each: a watch holds its client.
pub struct Watchers<'a> {
    pub pods: &'a KubeClient,
    pub claims: &'a KubeClient,
}

/// Runs until `stop` is set: `watchers` follow the cluster's pods and IPAMClaims, and `client`
/// frees what their deletion orphaned. Logs a line for each address freed and each failure.
pub fn control(watchers: Watchers, client: &KubeClient, stop: &AtomicBool) {
    let (seen, events) = mpsc::channel();
    std::thread::scope(|s| {
        let pods = Collection {
            trim: names_only,
            ..Collection::pods(None)
        };
        let claims = Collection {
            path: format!(
                "/apis/{}/{}/ipamclaims",
                IPAM_CLAIMS.group, IPAM_CLAIMS.version
            ),
            field_selector: None,
            resource: IPAM_CLAIMS.plural,
            trim: names_only,
        };
        let deleted_pod: fn(String) -> Seen = Seen::Deleted;
        let watches = [
            (watchers.pods, pods, deleted_pod),
            (watchers.claims, claims, Seen::ClaimDeleted),
        ];
        for (watcher, collection, deleted) in watches {
            let seen = seen.clone();
            s.spawn(move || {
                watcher.reflect(&collection, stop, &mut |change| {
                    let event = match change {
                        Change::Listed(_) => Some(Seen::Listed),
                        Change::Deleted(object) => podref(&object).map(deleted),
                        Change::Applied(_) => None,
                    };
                    if let Some(event) = event {
                        // The receiver goes only once `stop` is set.
                        let _ = seen.send(event);
                    }
                });
            });
        }
        drop(seen);
        follow(&events, client, stop);
    });
}

/// Frees what the watch's events orphan, until `stop` is set.
fn follow(events: &mpsc::Receiver<Seen>, client: &KubeClient, stop: &AtomicBool) {
    let mut whole_pass = false;
    let mut deleted = BTreeSet::new();
    let mut claims_deleted = BTreeSet::new();
    let mut not_before = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let mut take = |event| match event {
            Seen::Listed => whole_pass = true,
            Seen::Deleted(podref) => {
                deleted.insert(podref);
            }
            Seen::ClaimDeleted(claim) => {
                claims_deleted.insert(claim);
            }
        };
        match events.recv_timeout(Duration::from_millis(500)) {
            Ok(event) => take(event),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        let gathered = Instant::now() + GATHER;
        while let Ok(event) =
            events.recv_timeout(gathered.saturating_duration_since(Instant::now()))
        {
            take(event);
        }
        let nothing = deleted.is_empty() && claims_deleted.is_empty();
        if Instant::now() < not_before || (!whole_pass && nothing) {
            continue;
        }
        // A whole pass covers every deletion seen before it lists the pods and claims.
        let whole = whole_pass || deleted.len() + claims_deleted.len() > WHOLE_PASS_OVER;
        let started = Instant::now();
        let done = if whole {
            reconcile(client).map(|summary| ("a whole pass", summary))
        } else {
            let pods: Vec<String> = deleted.iter().cloned().collect();
            let claims: Vec<String> = claims_deleted.iter().cloned().collect();
            let what = match (pods.is_empty(), claims.is_empty()) {
                (false, true) => "deleted pods",
                (true, false) => "deleted claims",
                _ => "deleted pods and claims",
            };
            free_deleted(client, &pods, &claims).map(|summary| (what, summary))
        };
        match done {
            Ok((what, summary)) => {
                whole_pass = false;
                deleted.clear();
                claims_deleted.clear();
                not_before = started + BETWEEN_PASSES;
                // Most deleted pods had no address here: only a batch that freed one is told.
                if whole || summary != Summary::default() {
                    nodelog::info!(
                        "{what}: freed {} addresses, deleted {} reservations, freed {} node slices",
                        summary.freed,
                        summary.reservations_deleted,
                        summary.slices_freed
                    );
                }
            }
            Err(e) => {
                nodelog::error!("{e}; trying again in {RETRY_AFTER:?}");
                not_before = Instant::now() + RETRY_AFTER;
            }
        }
    }
}
