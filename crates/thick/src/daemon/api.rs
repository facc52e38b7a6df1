//! The Kubernetes API as the daemon's calls see it: reads and the network-status write on the
//! daemon's one client (one connection for every call, no handshake per call), and events
//! handed to a thread of their own, so that a reply never waits for them. The events queue is
//! bounded: a call that finds it full waits for room, for [`QUEUE_FULL_WAIT`] at most (the
//! API is then taking no events: the batch is dropped and counted, rather than stall every
//! call of the node).

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use k8s::KubeClient;
use multus::api::kube::KubeApi;
use multus::api::{Api, Event, Nad, Pod};
use multus::Result;

use super::cache::Caches;
use super::metrics::Metrics;

/// Commands' event batches waiting to be sent, at most.
const EVENT_BATCHES: usize = 256;
/// How long a call waits for room in a full events queue.
const QUEUE_FULL_WAIT: Duration = Duration::from_secs(2);
/// Tries per event batch before its failures are logged and counted.
const EVENT_TRIES: u32 = 3;
const EVENT_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// What every call's API shares.
pub struct Shared {
    pub client: Arc<KubeClient>,
    pub timeout: Duration,
    pub metrics: Arc<Metrics>,
    pub caches: Arc<Caches>,
    events: SyncSender<Vec<Event>>,
}

impl Shared {
    /// The shared parts and the events thread's end of the queue.
    pub fn new(
        client: Arc<KubeClient>,
        timeout: Duration,
        metrics: Arc<Metrics>,
        caches: Arc<Caches>,
    ) -> (Arc<Shared>, Receiver<Vec<Event>>) {
        let (events, queued) = sync_channel(EVENT_BATCHES);
        (
            Arc::new(Shared {
                client,
                timeout,
                metrics,
                caches,
                events,
            }),
            queued,
        )
    }

    pub fn api(self: &Arc<Self>) -> DaemonApi {
        DaemonApi {
            inner: KubeApi::shared(Arc::clone(&self.client), self.timeout),
            shared: Arc::clone(self),
        }
    }
}

/// Sends the queued events until the queue's senders are gone (the calls' APIs, which the
/// workers hold); each batch is tried up to [`EVENT_TRIES`] times.
pub fn send_events(
    client: Arc<KubeClient>,
    timeout: Duration,
    metrics: &Metrics,
    queued: Receiver<Vec<Event>>,
) {
    let api = KubeApi::shared(client, timeout);
    for mut batch in queued {
        metrics.events_queued.fetch_sub(
            i64::try_from(batch.len()).unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
        for attempt in 1..=EVENT_TRIES {
            let failed: Vec<Event> = api
                .record_events(&batch)
                .into_iter()
                .map(|(event, e)| {
                    if attempt == EVENT_TRIES {
                        tracing::error!(
                            pod = %format!("{}/{}", event.pod.namespace, event.pod.name),
                            "cannot record event {}: {e}",
                            event.reason
                        );
                        metrics.event_failed();
                    }
                    event.clone()
                })
                .collect();
            if failed.is_empty() || attempt == EVENT_TRIES {
                break;
            }
            batch = failed;
            std::thread::sleep(EVENT_RETRY_PAUSE);
        }
    }
}

pub struct DaemonApi {
    inner: KubeApi,
    shared: Arc<Shared>,
}

impl DaemonApi {
    fn counted<T>(&self, call: &str, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.shared.metrics.api_error(call);
        }
        r
    }
}

/// Reads come from the caches when they hold the object (a pod only with the runtime's
/// UID), and from the API otherwise: a pod or NAD made a moment ago may not have reached the
/// cache yet.
impl Api for DaemonApi {
    fn pod(&self, namespace: &str, name: &str, uid: &str) -> Result<Option<Pod>> {
        let cached = self.shared.caches.pod(namespace, name);
        if let Some(pod) = cached.filter(|p| uid.is_empty() || p.uid == uid) {
            return Ok(Some(pod));
        }
        self.counted("get pods", self.inner.pod(namespace, name, uid))
    }

    fn nad(&self, namespace: &str, name: &str) -> Result<Option<Nad>> {
        if let Some(nad) = self.shared.caches.nad(namespace, name) {
            return Ok(Some(nad));
        }
        self.counted(
            "get network-attachment-definitions",
            self.inner.nad(namespace, name),
        )
    }

    fn nads(&self, names: &[(&str, &str)]) -> Vec<Result<Option<Nad>>> {
        let cached: Vec<Option<Nad>> = names
            .iter()
            .map(|(ns, name)| self.shared.caches.nad(ns, name))
            .collect();
        let missing: Vec<(&str, &str)> = names
            .iter()
            .zip(&cached)
            .filter(|(_, c)| c.is_none())
            .map(|(n, _)| *n)
            .collect();
        let mut fetched = self
            .inner
            .nads(&missing)
            .into_iter()
            .map(|r| self.counted("get network-attachment-definitions", r));
        cached
            .into_iter()
            .map(|c| match c {
                Some(nad) => Ok(Some(nad)),
                None => fetched.next().unwrap_or(Ok(None)),
            })
            .collect()
    }

    fn set_pod_annotations(&self, pod: &Pod, annotations: &BTreeMap<String, String>) -> Result<()> {
        self.counted(
            "patch pods/status",
            self.inner.set_pod_annotations(pod, annotations),
        )
    }

    /// Queued for the events thread: none fails here.
    fn record_events<'a>(&self, events: &'a [Event]) -> Vec<(&'a Event, multus::Error)> {
        let n = i64::try_from(events.len()).unwrap_or(0);
        self.shared
            .metrics
            .events_queued
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let mut batch = events.to_vec();
        let until = std::time::Instant::now() + QUEUE_FULL_WAIT;
        loop {
            match self.shared.events.try_send(batch) {
                Ok(()) => return Vec::new(),
                Err(std::sync::mpsc::TrySendError::Full(back))
                    if std::time::Instant::now() < until =>
                {
                    batch = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    let why = match e {
                        std::sync::mpsc::TrySendError::Full(_) => "the events queue stayed full",
                        std::sync::mpsc::TrySendError::Disconnected(_) => "the daemon is stopping",
                    };
                    tracing::warn!("{why}: {} events not sent", events.len());
                    self.shared
                        .metrics
                        .events_queued
                        .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
                    for _ in events {
                        self.shared.metrics.event_failed();
                    }
                    return Vec::new();
                }
            }
        }
    }
}
