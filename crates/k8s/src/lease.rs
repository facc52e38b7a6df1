//! `coordination.k8s.io/v1` Leases, held as client-go's leader election holds them, so that a
//! holder of ours and a holder running client-go exclude each other: the holder writes its
//! identity and renews the Lease while it works, a waiter takes it once it is released (no
//! holder) or once it has not changed for its duration as the waiter's own clock counts, and
//! every write is conditioned on the version read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use crate::objects::{Resource, Written};
use crate::{K8sError, KubeClient};

const LEASES: Resource = Resource {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
};

/// How often a holder renews, and a waiter looks again: client-go's retry period as
/// whereabouts configures it by default.
const RENEW_EVERY: Duration = Duration::from_millis(500);
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// A Lease unchanged for this long (or its own duration, if longer) is taken over: its
/// holder stopped renewing. whereabouts' default lease duration.
const EXPIRES_AFTER: Duration = Duration::from_millis(1500);
/// The duration a holder of ours writes, in whole seconds as the Lease keeps it. client-go's
/// waiters compare records at one-second resolution, so renewals every 500 ms show as changes
/// only about once a second: a few seconds leave room for a slow renewal.
const DURATION_SECONDS: u64 = 4;
/// The most of a holder's identity an error repeats.
const IDENTITY_SHOWN: usize = 256;

/// What [`KubeClient::with_lease`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Leased<T> {
    /// The Lease was held while the work ran.
    Held(T),
    /// There is no such Lease: the work ran without it.
    Absent(T),
    /// Another holder kept the Lease until the deadline: the work did not run.
    Busy { holder: String },
}

impl KubeClient {
    /// Runs `work` holding the Lease `namespace/name` as `identity`, when that Lease exists
    /// (one that does not is never created). The Lease is renewed while `work` runs and
    /// released after it. `work` is given a check that says whether the Lease is still held:
    /// false once another writer changed it (a renewal answered 409), and always true when
    /// there is no Lease. A renewal that fails otherwise is tried again at the next tick; a
    /// release that fails is left to expire.
    pub fn with_lease<T>(
        &self,
        namespace: &str,
        name: &str,
        identity: &str,
        deadline: Instant,
        work: impl FnOnce(&dyn Fn() -> bool) -> T,
    ) -> Result<Leased<T>, K8sError> {
        let taken = match self.take_lease(namespace, name, identity, deadline)? {
            Taken::Absent => return Ok(Leased::Absent(work(&|| true))),
            Taken::Busy(holder) => return Ok(Leased::Busy { holder }),
            Taken::Held(lease) => lease,
        };
        let lost = AtomicBool::new(false);
        let (stop, stopped) = mpsc::channel::<()>();
        let (out, last) = std::thread::scope(|scope| {
            let lost = &lost;
            let renewer =
                scope.spawn(move || self.renew_lease(namespace, name, taken, &stopped, lost));
            let out = work(&|| !lost.load(Ordering::SeqCst));
            drop(stop);
            (out, renewer.join().ok().flatten())
        });
        if let Some(mut lease) = last {
            let transitions = lease["spec"]["leaseTransitions"].clone();
            let now = now();
            lease["spec"] = json!({
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": transitions,
            });
            let _ = self.replace_object(LEASES, namespace, name, &lease);
        }
        Ok(Leased::Held(out))
    }

    fn take_lease(
        &self,
        namespace: &str,
        name: &str,
        identity: &str,
        deadline: Instant,
    ) -> Result<Taken, K8sError> {
        // The version last seen, and when this process first saw it.
        let mut seen: Option<(String, Instant)> = None;
        loop {
            let Some(mut lease) = self.get_object(LEASES, namespace, name)? else {
                return Ok(Taken::Absent);
            };
            let version = lease["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let since = match &seen {
                Some((v, at)) if *v == version => *at,
                _ => Instant::now(),
            };
            seen = Some((version, since));
            let spec = &lease["spec"];
            let holder: String = spec["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(IDENTITY_SHOWN)
                .collect();
            let lasts = spec["leaseDurationSeconds"]
                .as_u64()
                .map_or(Duration::ZERO, Duration::from_secs)
                .max(EXPIRES_AFTER);
            if lease.is_object() && (holder.is_empty() || since.elapsed() >= lasts) {
                let transitions = spec["leaseTransitions"]
                    .as_u64()
                    .unwrap_or(0)
                    .saturating_add(u64::from(holder != identity));
                let now = now();
                lease["spec"] = json!({
                    "holderIdentity": identity,
                    "leaseDurationSeconds": DURATION_SECONDS,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": transitions,
                });
                if let Written::Done(lease) =
                    self.replace_object(LEASES, namespace, name, &lease)?
                {
                    if lease.is_object() {
                        return Ok(Taken::Held(lease));
                    }
                }
                // Another writer was first: look again, within the deadline.
            }
            if Instant::now() + LOOK_EVERY > deadline {
                return Ok(Taken::Busy(holder));
            }
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// Renews the Lease every [`RENEW_EVERY`] until `stopped` hangs up; the Lease as last
    /// written, or `None` once another writer changed it (`lost` is set then: it is no
    /// longer ours, to use or to release).
    fn renew_lease(
        &self,
        namespace: &str,
        name: &str,
        mut lease: Value,
        stopped: &mpsc::Receiver<()>,
        lost: &AtomicBool,
    ) -> Option<Value> {
        while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(RENEW_EVERY) {
            let mut renewed = lease.clone();
            renewed["spec"]["renewTime"] = now();
            match self.replace_object(LEASES, namespace, name, &renewed) {
                Ok(Written::Done(written)) if written.is_object() => lease = written,
                Ok(Written::Stale) => {
                    lost.store(true, Ordering::SeqCst);
                    return None;
                }
                // The API did not answer (or not with a Lease): the next tick tries again with
                // the same version.
                Ok(Written::Done(_)) | Err(_) => {}
            }
        }
        Some(lease)
    }
}

enum Taken {
    Held(Value),
    Absent,
    Busy(String),
}

/// Now, as a Lease's times are written (RFC 3339, microseconds).
fn now() -> Value {
    serde_json::to_value(MicroTime(Timestamp::now())).unwrap_or(Value::Null)
}
