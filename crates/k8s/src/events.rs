//! Events on pods: what multus tells the pod's owner, recorded best effort within a deadline.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};

use crate::{call, Call, Cause, K8sError, KubeClient};

/// The type of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Event messages longer than this are cut (at a character boundary), as client-go's
/// recorder does, so that a long delegate error cannot get the event refused.
const EVENT_MESSAGE_MAX: usize = 1024;

/// The most events one command has in flight: a pod's events are a few lines of its story,
/// and over HTTP/1.1 each one in flight is a connection (and a TLS handshake) of its own.
pub const EVENTS_IN_FLIGHT: usize = 4;

/// The component events are reported by.
const EVENT_COMPONENT: &str = "multus";

/// One event to record on a pod.
pub struct PodEvent<'a> {
    pub pod: &'a ObjectMeta,
    pub event_type: EventType,
    pub reason: &'a str,
    pub message: &'a str,
    /// Its place among the events sent together (part of its name).
    pub seq: usize,
}

fn event_call(e: &PodEvent<'_>) -> Call {
    call(
        "create",
        "events",
        e.pod.namespace.as_deref().unwrap_or_default(),
        None,
    )
}

impl KubeClient {
    /// Records events on pods, [`EVENTS_IN_FLIGHT`] at a time and all within `deadline`:
    /// each is tried (and retried) like any call, but one that has not reached the API server
    /// by then is given up. Events are best effort, and a hanging API must not hold up the CNI
    /// result. One result per event, in order.
    pub fn record_events(
        &self,
        events: &[PodEvent<'_>],
        deadline: Duration,
    ) -> Vec<Result<(), K8sError>> {
        use futures_util::StreamExt;
        let sends = events.iter().map(|e| self.record_event(e));
        self.runtime.block_on(async {
            let all = futures_util::stream::iter(sends)
                .buffered(EVENTS_IN_FLIGHT)
                .collect::<Vec<_>>();
            match tokio::time::timeout(deadline, all).await {
                Ok(results) => results,
                Err(_) => events
                    .iter()
                    .map(|e| {
                        Err(K8sError::Request {
                            call: Box::new(event_call(e)),
                            attempts: 1,
                            cause: Cause::Timeout(deadline),
                        })
                    })
                    .collect(),
            }
        })
    }

    async fn record_event(&self, e: &PodEvent<'_>) -> Result<(), K8sError> {
        let pod = e.pod;
        let namespace = pod.namespace.clone().unwrap_or_default();
        let pod_name = pod.name.clone().unwrap_or_default();
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                // client-go's naming: unique per pod and moment; events sent together differ
                // in their reason.
                name: Some(format!("{pod_name}.{:x}{:x}", now.as_nanosecond(), e.seq)),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.clone()),
                name: Some(pod_name),
                uid: pod.uid.clone(),
                resource_version: pod.resource_version.clone(),
                field_path: None,
            },
            reason: Some(e.reason.to_string()),
            message: Some(truncate(e.message, EVENT_MESSAGE_MAX).to_string()),
            type_: Some(e.event_type.as_str().to_string()),
            source: Some(EventSource {
                component: Some(EVENT_COMPONENT.into()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client(), &namespace);
        let params = PostParams::default();
        self.attempts(event_call(e), false, || async {
            match api.create(&params, &event).await {
                // Our own earlier attempt got through but its reply was lost.
                Err(kube::Error::Api(status))
                    if status.code == 409 && status.reason == "AlreadyExists" =>
                {
                    Ok(())
                }
                other => other.map(drop),
            }
        })
        .await
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("abcdef", 3), "abc");
    }
}
