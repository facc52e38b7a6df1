//! Watches of pods, NetworkAttachmentDefinitions and IPAMClaims, as kube-apiserver serves them:
//! every write of one is kept in a history with its resourceVersion; `?watch=1` streams the
//! changes after the request's `resourceVersion` as JSON lines (`{"type": "ADDED" | "MODIFIED" |
//! "DELETED" | "BOOKMARK" | "ERROR", "object": ...}`), then new ones as they happen, with a
//! bookmark every [`super::KubeApiServer::set_bookmark_interval`] when the client allows them,
//! until `timeoutSeconds`. A `resourceVersion` older than the history
//! ([`super::KubeApiServer::compact`]) gets an ERROR event carrying a 410 `Expired` Status, as
//! a real server sends it. `fieldSelector` takes `spec.nodeName`, `metadata.name` and
//! `metadata.namespace`, in lists too. A watch-list (`sendInitialEvents=true`, as client-go's
//! informers ask since Kubernetes 1.35) gets the current objects as ADDED, then a bookmark
//! annotated `k8s.io/initial-events-end` when bookmarks are allowed, then the changes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http1::Request;
use super::objects::Resource;
use super::routes::{State, NAD_GROUP, NAD_RESOURCE};

/// The most changes kept; older ones are compacted away.
const HISTORY: usize = 100_000;
/// A watch without `timeoutSeconds` ends after this, as kube-apiserver's default range does.
const LONGEST: Duration = Duration::from_secs(1800);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Watched {
    Pods,
    Nads,
    /// IPAMClaims, the one watched resource of the generic store.
    Claims,
}

impl Watched {
    fn kind(self) -> (&'static str, String) {
        match self {
            Watched::Pods => ("Pod", "v1".to_owned()),
            Watched::Nads => ("NetworkAttachmentDefinition", format!("{NAD_GROUP}/v1")),
            Watched::Claims => ("IPAMClaim", Resource::IPAM_CLAIMS.api_version()),
        }
    }
}

pub(super) struct Change {
    rv: u64,
    what: Watched,
    event: &'static str,
    object: Value,
}

/// The changes kept, and the resourceVersion from which watches can still be served.
pub(super) struct History {
    changes: VecDeque<Change>,
    /// A watch from a resourceVersion below this gets 410.
    pub servable_from: u64,
    pub bookmark_every: Duration,
}

impl Default for History {
    fn default() -> History {
        History {
            changes: VecDeque::new(),
            servable_from: 0,
            bookmark_every: Duration::from_secs(1),
        }
    }
}

impl History {
    pub fn record(&mut self, what: Watched, event: &'static str, object: &Value) {
        let rv = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0);
        self.changes.push_back(Change {
            rv,
            what,
            event,
            object: object.clone(),
        });
        if self.changes.len() > HISTORY {
            if let Some(old) = self.changes.pop_front() {
                self.servable_from = self.servable_from.max(old.rv);
            }
        }
    }
}

/// What a watch request asks for.
pub(super) struct Watch {
    what: Watched,
    namespace: Option<String>,
    fields: Vec<(String, String)>,
    since: Option<u64>,
    bookmarks: bool,
    /// A watch-list whose initial-events-end bookmark is still to be sent.
    initial_events_end: bool,
    until: Instant,
}

/// The watched collection a path names, if it names one.
fn collection(path: &str) -> Option<(Watched, Option<String>)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v1", "pods"] => Some((Watched::Pods, None)),
        ["api", "v1", "namespaces", ns, "pods"] => Some((Watched::Pods, Some((*ns).to_owned()))),
        ["apis", NAD_GROUP, "v1", NAD_RESOURCE] => Some((Watched::Nads, None)),
        ["apis", NAD_GROUP, "v1", "namespaces", ns, NAD_RESOURCE] => {
            Some((Watched::Nads, Some((*ns).to_owned())))
        }
        ["apis", NAD_GROUP, "v1alpha1", "ipamclaims"] => Some((Watched::Claims, None)),
        ["apis", NAD_GROUP, "v1alpha1", "namespaces", ns, "ipamclaims"] => {
            Some((Watched::Claims, Some((*ns).to_owned())))
        }
        _ => None,
    }
}

/// `a=b,c=d` as pairs; `None` for a selector this server cannot apply.
pub(super) fn field_selector(req: &Request) -> Option<Vec<(String, String)>> {
    let Some(text) = req.param("fieldSelector").filter(|s| !s.is_empty()) else {
        return Some(Vec::new());
    };
    text.split(',')
        .map(|term| {
            let (field, value) = term.split_once('=')?;
            let field = field.trim_end_matches('=');
            ["spec.nodeName", "metadata.name", "metadata.namespace"]
                .contains(&field)
                .then(|| (field.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Whether `obj` has every field of the selector.
pub(super) fn selects(fields: &[(String, String)], obj: &Value) -> bool {
    fields.iter().all(|(field, value)| {
        let path = format!("/{}", field.replace('.', "/"));
        obj.pointer(&path).and_then(Value::as_str).unwrap_or("") == value
    })
}

impl Watch {
    /// The watch a request asks for: `None` when it is not a watch of pods or NADs; `Err`
    /// with a reply when it cannot be served.
    pub fn of(req: &Request) -> Option<Result<Watch, (u16, Value)>> {
        if req.method != "GET" || !matches!(req.param("watch").as_deref(), Some("1" | "true")) {
            return None;
        }
        let (what, namespace) = collection(&req.path)?;
        let Some(fields) = field_selector(req) else {
            return Some(Err(super::routes::bad_request(
                "fieldSelector: this server takes spec.nodeName, metadata.name and \
                 metadata.namespace",
            )));
        };
        let send_initial = req.param("sendInitialEvents");
        let matching = req.param("resourceVersionMatch");
        if let Some(problem) = match (send_initial.as_deref(), matching.as_deref()) {
            (Some(_), Some("NotOlderThan")) | (None, None) => None,
            (Some(_), _) => Some(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting \
                 resourceVersionMatch to NotOlderThan",
            ),
            (None, Some(_)) => Some(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch \
                 unless sendInitialEvents is provided",
            ),
        } {
            return Some(Err(super::routes::status(
                422,
                "Invalid",
                &format!("ListOptions.meta.k8s.io \"\" is invalid: {problem}"),
                None,
            )));
        }
        let send_initial = matches!(send_initial.as_deref(), Some("true" | "1"));
        let since = match req.param("resourceVersion").as_deref() {
            // The state now is at least as new as any version asked for.
            _ if send_initial => None,
            None | Some("" | "0") => None,
            Some(rv) => match rv.parse() {
                Ok(rv) => Some(rv),
                Err(_) => {
                    return Some(Err(super::routes::bad_request(
                        "resourceVersion: not a resource version",
                    )))
                }
            },
        };
        let timeout = req
            .param("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .map_or(LONGEST, Duration::from_secs);
        let bookmarks = matches!(
            req.param("allowWatchBookmarks").as_deref(),
            Some("true" | "1")
        );
        Some(Ok(Watch {
            what,
            namespace,
            fields,
            since,
            bookmarks,
            initial_events_end: send_initial && bookmarks,
            until: Instant::now() + timeout.min(LONGEST),
        }))
    }

    fn line(event: &str, object: &Value) -> Vec<u8> {
        let mut line =
            serde_json::to_vec(&json!({"type": event, "object": object})).unwrap_or_default();
        line.push(b'\n');
        line
    }

    fn wanted(&self, what: Watched, obj: &Value) -> bool {
        what == self.what
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| obj.pointer("/metadata/namespace") == Some(&json!(ns)))
            && selects(&self.fields, obj)
    }

    /// The lines due now, and the resourceVersion they bring the watch to. Where the watch
    /// starts without a version, every object it selects comes first as ADDED.
    pub fn due(&mut self, state: &State, last_bookmark: &mut Instant) -> (Vec<Vec<u8>>, bool) {
        let mut lines = Vec::new();
        let since = match self.since {
            Some(rv) if rv < state.history.servable_from => {
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {rv} ({})", state.history.servable_from),
                    "reason": "Expired", "code": 410,
                });
                lines.push(Watch::line("ERROR", &status));
                return (lines, true);
            }
            Some(rv) => rv,
            None => {
                let objects: Vec<&Value> = match self.what {
                    Watched::Pods => state.pods.values().collect(),
                    Watched::Nads => state.nads.values().collect(),
                    Watched::Claims => state
                        .objects
                        .get(&Resource::IPAM_CLAIMS)
                        .into_iter()
                        .flat_map(|o| o.values())
                        .collect(),
                };
                for obj in objects.into_iter().filter(|o| self.wanted(self.what, o)) {
                    lines.push(Watch::line("ADDED", obj));
                }
                if std::mem::take(&mut self.initial_events_end) {
                    let (kind, api_version) = self.what.kind();
                    lines.push(Watch::line(
                        "BOOKMARK",
                        &json!({"kind": kind, "apiVersion": api_version, "metadata": {
                            "resourceVersion": state.resource_version.to_string(),
                            "annotations": {"k8s.io/initial-events-end": "true"}}}),
                    ));
                    *last_bookmark = Instant::now();
                }
                state.resource_version
            }
        };
        let mut at = since;
        for change in state.history.changes.iter().filter(|c| c.rv > since) {
            if self.wanted(change.what, &change.object) {
                lines.push(Watch::line(change.event, &change.object));
            }
            at = change.rv;
        }
        self.since = Some(at.max(since));
        if self.bookmarks && last_bookmark.elapsed() >= state.history.bookmark_every {
            let (kind, api_version) = self.what.kind();
            let rv = state.resource_version.max(at);
            self.since = Some(rv);
            lines.push(Watch::line(
                "BOOKMARK",
                &json!({"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": rv.to_string()}}),
            ));
            *last_bookmark = Instant::now();
        }
        (lines, false)
    }

    /// Ends the watch at once: nothing more is sent on it.
    pub fn end(&mut self) {
        self.until = Instant::now();
    }

    pub fn expired(&self) -> bool {
        Instant::now() >= self.until
    }

    /// How long to wait for a change before looking again.
    pub fn pause(&self, state: &State, last_bookmark: Instant) -> Duration {
        let to_bookmark = state
            .history
            .bookmark_every
            .saturating_sub(last_bookmark.elapsed());
        let to_end = self.until.saturating_duration_since(Instant::now());
        to_bookmark
            .min(to_end)
            .clamp(Duration::from_millis(1), Duration::from_millis(200))
    }
}
