//! A collection kept in step with the API, as client-go's reflector keeps it: list it (in
//! pages), then watch from the list's resourceVersion with bookmarks; on `410 Gone` (the
//! version is compacted away) list again; on any other failure wait (back-off up to 30 s) and
//! watch again from the last version seen. Each watch ends after [`WATCH_SECONDS`] or at the
//! client's reply cap (4 MiB), and the next one carries on from the last version: no watch
//! holds more memory than one event.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::{header, Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::{Call, Cause, K8sError, KubeClient};

/// How long one watch request lasts before it is made again (kube-apiserver ends them
/// between 30 and 60 minutes; shorter keeps a silently broken connection from lasting).
const WATCH_SECONDS: u64 = 290;
/// How long one watch may last in all: a server that has not ended it by then (its
/// `timeoutSeconds` past) is cut off, and the watch made again.
const SILENCE: Duration = Duration::from_secs(WATCH_SECONDS + 30);
/// A watch that ends sooner than this having moved nothing on is not made again at once but
/// after the back-off: a proxy that cuts every watch short must not make every node spin.
const SHORT_WATCH: Duration = Duration::from_secs(5);
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What changed in the collection.
#[derive(Debug)]
pub enum Change {
    /// The whole collection, as a list gave it: the first time, and whenever a watch could not
    /// carry on from where it was.
    Listed(Vec<Value>),
    /// Added or modified.
    Applied(Value),
    Deleted(Value),
}

/// A collection to keep: its path (`/api/v1/pods`) and an optional field selector
/// (`spec.nodeName=node-1`).
#[derive(Clone, Debug)]
pub struct Collection {
    pub path: String,
    pub field_selector: Option<String>,
    /// Names the calls in errors (`pods`).
    pub resource: &'static str,
    /// What of each object is kept, applied as it arrives: a keeper that needs a few fields
    /// holds only those, even while a large list is read.
    pub trim: fn(Value) -> Value,
}

impl Collection {
    /// The pods of one node (`spec.nodeName`), or of the cluster.
    pub fn pods(node: Option<&str>) -> Collection {
        Collection {
            path: "/api/v1/pods".into(),
            field_selector: node.map(|n| format!("spec.nodeName={n}")),
            resource: "pods",
            trim: std::convert::identity,
        }
    }

    /// Every NetworkAttachmentDefinition of the cluster.
    pub fn nads() -> Collection {
        Collection {
            path: "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions".into(),
            field_selector: None,
            resource: "network-attachment-definitions",
            trim: std::convert::identity,
        }
    }
}

/// Why one watch request ended.
enum Ended {
    /// Its time was up, or it reached the reply cap: carry on from the last version.
    Carry,
    /// The version is gone (410): list again.
    Expired,
}

impl KubeClient {
    /// Keeps `collection` in step, calling `on` with each change, until `stop` is set: seen
    /// within a second while watching or pausing, and once a list or a watch's first reply in
    /// flight is over (the client's timeout at most). Blocks: run it on a thread of its own,
    /// with a client of its own.
    pub fn reflect(&self, collection: &Collection, stop: &AtomicBool, on: &mut dyn FnMut(Change)) {
        self.runtime.block_on(async {
            let mut backoff = BACKOFF_FIRST;
            'list: while !stop.load(Ordering::SeqCst) {
                let (items, mut since) = match self.list_collection(collection).await {
                    Ok(listed) => listed,
                    Err(e) => {
                        tracing::warn!("{e}; listing again in {backoff:?}");
                        pause(stop, &mut backoff).await;
                        continue;
                    }
                };
                on(Change::Listed(items));
                while !stop.load(Ordering::SeqCst) {
                    let (from, began) = (since.clone(), Instant::now());
                    match self.watch_once(collection, &mut since, stop, on).await {
                        Ok(Ended::Carry) if since == from && began.elapsed() < SHORT_WATCH => {
                            tracing::debug!(
                                "watch of {} ended at once; watching again in {backoff:?}",
                                collection.resource
                            );
                            pause(stop, &mut backoff).await;
                        }
                        Ok(Ended::Carry) => backoff = BACKOFF_FIRST,
                        Ok(Ended::Expired) => {
                            tracing::info!(
                                "watch of {} from version {since}: expired, listing again",
                                collection.resource
                            );
                            // A server that keeps answering 410 is not listed in a loop.
                            pause(stop, &mut backoff).await;
                            continue 'list;
                        }
                        Err(e) => {
                            tracing::warn!("{e}; watching again in {backoff:?}");
                            pause(stop, &mut backoff).await;
                        }
                    }
                }
            }
        });
    }

    fn watch_call(&self, collection: &Collection, verb: &'static str) -> Call {
        crate::call(verb, collection.resource, "(all namespaces)", None)
    }

    /// The whole collection and its resourceVersion.
    async fn list_collection(
        &self,
        collection: &Collection,
    ) -> Result<(Vec<Value>, String), K8sError> {
        let call = self.watch_call(collection, "list");
        let mut extra = Vec::new();
        if let Some(selector) = &collection.field_selector {
            extra.push(("fieldSelector", selector.as_str()));
        }
        let trim = collection.trim;
        self.list_pages_async(call, &collection.path, &extra, &mut |v| Some(trim(v)))
            .await
    }

    /// One watch request, from `since`, moving `since` on with every event and bookmark.
    async fn watch_once(
        &self,
        collection: &Collection,
        since: &mut String,
        stop: &AtomicBool,
        on: &mut dyn FnMut(Change),
    ) -> Result<Ended, K8sError> {
        let call = self.watch_call(collection, "watch");
        let fail = |cause: Cause| K8sError::Request {
            call: Box::new(call.clone()),
            attempts: 1,
            cause,
        };
        if let Some(Err(cause)) = self
            .token_file
            .as_ref()
            .map(crate::credentials::TokenFile::refresh)
        {
            return Err(fail(cause));
        }
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("watch", "1")
            .append_pair("resourceVersion", since)
            .append_pair("allowWatchBookmarks", "true")
            .append_pair("timeoutSeconds", &WATCH_SECONDS.to_string());
        if let Some(selector) = &collection.field_selector {
            query.append_pair("fieldSelector", selector);
        }
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!("{}?{}", collection.path, query.finish()))
            .header(header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .map_err(|e| fail(Cause::transport(e)))?;
        let reply = tokio::time::timeout(self.timeout, self.client().send(request))
            .await
            .map_err(|_| fail(Cause::Timeout(self.timeout)))?
            .map_err(|e| fail(Cause::from_kube(e)))?;
        let status = reply.status().as_u16();
        let mut body = reply.into_body();
        if status != 200 {
            let text = tokio::time::timeout(self.timeout, body.collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            if status == 410 {
                return Ok(Ended::Expired);
            }
            return Err(fail(status_cause(status, &text)));
        }
        let mut pending: Vec<u8> = Vec::new();
        let deadline = Instant::now() + SILENCE;
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(Ended::Carry);
            }
            let wait =
                Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now()));
            let frame = match tokio::time::timeout(wait, body.frame()).await {
                Err(_) if Instant::now() >= deadline => {
                    return Err(fail(Cause::Timeout(SILENCE)));
                }
                Err(_) => continue,
                Ok(None) => return Ok(Ended::Carry),
                Ok(Some(Err(e))) => {
                    let cause = Cause::from_kube(e);
                    // The reply cap ends a long watch: the next one carries on.
                    return match cause {
                        Cause::ReplyTooLarge => Ok(Ended::Carry),
                        other => Err(fail(other)),
                    };
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let event: Value = serde_json::from_slice(&line).map_err(|e| {
                    fail(Cause::unparsed(
                        format!("a watch event is not JSON: {e}"),
                        e,
                    ))
                })?;
                let object = event.get("object").cloned().unwrap_or(Value::Null);
                let version = object
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match event.get("type").and_then(Value::as_str) {
                    Some("ADDED" | "MODIFIED") => on(Change::Applied((collection.trim)(object))),
                    Some("DELETED") => on(Change::Deleted((collection.trim)(object))),
                    Some("BOOKMARK") => {}
                    Some("ERROR") => {
                        let code = object.get("code").and_then(Value::as_u64);
                        if code == Some(410) {
                            return Ok(Ended::Expired);
                        }
                        return Err(fail(status_cause(
                            u16::try_from(code.unwrap_or(500)).unwrap_or(500),
                            &object.to_string(),
                        )));
                    }
                    other => {
                        return Err(fail(Cause::decode(format!(
                            "a watch event of type {other:?}"
                        ))))
                    }
                }
                if let Some(v) = version {
                    *since = v;
                }
            }
        }
    }
}

/// What a failed reply's body (a `Status`, or plain text) says.
fn status_cause(code: u16, text: &str) -> Cause {
    let status: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let field = |k: &str| status.get(k).and_then(Value::as_str).map(str::to_owned);
    let message = field("message").unwrap_or_else(|| cni::quote::shorten(text.trim()));
    Cause::from_status(code, field("reason").unwrap_or_default(), message)
}

/// Waits out the back-off (doubling it for next time), checking `stop` every 100 ms.
async fn pause(stop: &AtomicBool, backoff: &mut Duration) {
    let until = Instant::now() + *backoff;
    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
}
