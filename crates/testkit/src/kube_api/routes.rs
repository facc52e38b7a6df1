//! The API routes the server answers, on its in-memory store, with real Kubernetes `Status`
//! objects for failures.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::{json, Map, Value};

use super::http1::Request;
use super::objects::{self, Resource};
use super::{Fault, LoggedRequest};

pub(super) const NAD_GROUP: &str = "k8s.cni.cncf.io";
pub(super) const NAD_RESOURCE: &str = "network-attachment-definitions";

/// Namespace and name.
pub(super) type Key = (String, String);

/// A fault waiting for a request: any request, or only those this aims at.
pub(super) struct PendingFault {
    pub only: Option<Aim>,
    pub fault: Fault,
}

/// The requests a fault is for: one method, and one path or every path under it, and
/// optionally only those that carry a query parameter.
#[derive(Clone)]
pub(super) struct Aim {
    method: String,
    path: String,
    under: bool,
    param: Option<String>,
}

impl Aim {
    pub fn exact(method: &str, path: &str) -> Aim {
        Aim {
            method: method.to_string(),
            path: path.to_string(),
            under: false,
            param: None,
        }
    }

    pub fn under(method: &str, prefix: &str) -> Aim {
        Aim {
            method: method.to_string(),
            path: prefix.trim_end_matches('/').to_string(),
            under: true,
            param: None,
        }
    }

    pub fn with_param(mut self, param: &str) -> Aim {
        self.param = Some(param.to_string());
        self
    }

    fn matches(&self, req: &Request) -> bool {
        if self.method != req.method {
            return false;
        }
        if self.param.as_ref().is_some_and(|p| req.param(p).is_none()) {
            return false;
        }
        if !self.under {
            return self.path == req.path;
        }
        req.path
            .strip_prefix(&self.path)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

pub(super) struct State {
    /// The server's own token: a cluster admin's.
    pub token: String,
    /// Each ServiceAccount's token: its namespace and name.
    pub accounts: BTreeMap<String, Key>,
    /// The policy enforced on ServiceAccounts, once a test asks for it.
    pub rbac: Option<super::rbac::Rbac>,
    pub resource_version: u64,
    pub pods: BTreeMap<Key, Value>,
    /// Nodes by name (cluster-scoped).
    pub nodes: BTreeMap<String, Value>,
    pub nads: BTreeMap<Key, Value>,
    /// The generically stored resources' objects.
    pub objects: HashMap<Resource, BTreeMap<Key, Value>>,
    pub events: Vec<Value>,
    pub log: Vec<LoggedRequest>,
    pub faults: VecDeque<PendingFault>,
    pub latency: super::Latency,
    /// Pod and NAD changes, for watches.
    pub history: super::watch::History,
}

impl State {
    pub fn new(token: &str) -> State {
        State {
            token: token.to_string(),
            accounts: BTreeMap::new(),
            rbac: None,
            resource_version: 0,
            pods: BTreeMap::new(),
            nodes: BTreeMap::new(),
            nads: BTreeMap::new(),
            objects: HashMap::new(),
            events: Vec::new(),
            log: Vec::new(),
            faults: VecDeque::new(),
            latency: super::Latency::ZERO,
            history: super::watch::History::default(),
        }
    }

    pub fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// Takes the first pending fault that applies to this request.
    pub fn take_fault(&mut self, req: &Request) -> Option<Fault> {
        let at = self
            .faults
            .iter()
            .position(|p| p.only.as_ref().is_none_or(|aim| aim.matches(req)))?;
        self.faults.remove(at).map(|p| p.fault)
    }

    /// `None` when the request may be served; otherwise the reply: 401 for a token the
    /// server does not know, 403 for what the enforced RBAC does not allow its account.
    pub fn refusal(&self, req: &Request) -> Option<(u16, Value)> {
        let token = req
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match token {
            Some(t) if t == self.token => None,
            Some(t) => match self.accounts.get(t) {
                Some((ns, name)) => self
                    .rbac
                    .as_ref()?
                    .refuse(&super::rbac::User::service_account(ns, name), req),
                None => Some(unauthorized()),
            },
            None => Some(unauthorized()),
        }
    }

    /// Gives a stored object the server-owned metadata a real API server sets on create.
    pub fn admit(&mut self, obj: &mut Value, namespace: &str, name: &str) {
        let rv = self.next_resource_version();
        let meta = metadata_mut(obj);
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(namespace));
        meta.insert("resourceVersion".into(), json!(rv));
        meta.entry("uid").or_insert_with(|| json!(new_uid()));
        meta.entry("creationTimestamp")
            .or_insert_with(|| json!(now()));
    }
}

pub(super) fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

/// A random-enough RFC 4122 style UID (tests need uniqueness, not secrecy).
pub(super) fn new_uid() -> String {
    use std::hash::{BuildHasher, RandomState};
    let a = RandomState::new().hash_one(std::time::SystemTime::now());
    let b = RandomState::new().hash_one(a);
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

pub(super) fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let meta = &mut obj["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// A `Status` object as the API server sends for failures.
pub(super) fn status(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> (u16, Value) {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    // In kube-apiserver's order.
    if let Some(d) = details {
        s["details"] = d;
    }
    s["code"] = json!(code);
    (code, s)
}

pub(super) fn unauthorized() -> (u16, Value) {
    status(401, "Unauthorized", "Unauthorized", None)
}

/// The reply a real server would give for an injected status code.
pub(super) fn injected(code: u16) -> (u16, Value) {
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    status(
        code,
        reason,
        &format!("injected fault: {reason} ({code})"),
        None,
    )
}

pub(super) fn not_found(group: &str, resource: &str, name: &str) -> (u16, Value) {
    status(
        404,
        "NotFound",
        &format!("{} \"{name}\" not found", qualified(group, resource)),
        Some(json!({ "name": name, "group": group, "kind": resource })),
    )
}

pub(super) fn no_route() -> (u16, Value) {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

pub(super) fn method_not_allowed() -> (u16, Value) {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Some(json!({})),
    )
}

pub(super) fn bad_request(message: &str) -> (u16, Value) {
    status(400, "BadRequest", message, None)
}

/// Why an update with a stale `metadata.resourceVersion` conflicts, in upstream's words.
pub(super) const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

pub(super) fn conflict(group: &str, resource: &str, name: &str, why: &str) -> (u16, Value) {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            qualified(group, resource)
        ),
        Some(json!({ "name": name, "group": group, "kind": resource })),
    )
}

/// A failed UID or resourceVersion precondition, in the storage layer's words: `what` is
/// `UID` or `ResourceVersion`, `key` the object's etcd key.
pub(super) fn precondition_failed(
    group: &str,
    resource: &str,
    name: &str,
    key: &str,
    what: &str,
    wanted: &str,
    actual: &str,
) -> (u16, Value) {
    conflict(
        group,
        resource,
        name,
        &format!(
            "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"
        ),
    )
}

/// `resource.group`, or the bare resource of the core group, as messages name it.
pub(super) fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// The media type of the request body, without parameters.
pub(super) fn media_type(req: &Request) -> &str {
    let content_type = req.header("content-type").unwrap_or_default();
    content_type.split(';').next().unwrap_or_default().trim()
}

pub(super) fn handle(state: &mut State, req: &Request) -> (u16, Value) {
    // Served as the same request in JSON, as kube-apiserver decodes either into one object.
    if media_type(req) == super::protobuf::MEDIA_TYPE {
        return match super::protobuf::to_json(&req.body) {
            Ok(object) => handle(state, &req.with_json_body(&object)),
            Err(e) => bad_request(&format!("the protobuf body cannot be read: {e}")),
        };
    }
    if let Some(Err(reply)) = super::watch::Watch::of(req) {
        return reply;
    }
    let Some(fields) = super::watch::field_selector(req) else {
        return bad_request(
            "fieldSelector: this server takes spec.nodeName, metadata.name and metadata.namespace",
        );
    };
    let selected = |items: Vec<Value>| -> Vec<Value> {
        items
            .into_iter()
            .filter(|o| super::watch::selects(&fields, o))
            .collect()
    };
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let method = req.method.as_str();
    match segments.as_slice() {
        ["api"] => discovery_get(method, api_versions()),
        ["apis"] => discovery_get(method, api_groups()),
        ["api", "v1"] => discovery_get(method, core_resources()),
        ["apis", NAD_GROUP, "v1"] => discovery_get(method, nad_resources()),
        ["api", "v1", "pods"] => match method {
            "GET" => list(
                "PodList",
                "v1",
                state,
                req,
                selected(state.pods.values().cloned().collect()),
            ),
            _ => method_not_allowed(),
        },
        ["api", "v1", "nodes"] => match method {
            "GET" => list(
                "NodeList",
                "v1",
                state,
                req,
                state.nodes.values().cloned().collect(),
            ),
            _ => method_not_allowed(),
        },
        ["api", "v1", "nodes", name] => match (method, state.nodes.get(*name)) {
            ("GET", Some(node)) => (200, node.clone()),
            ("GET", None) => not_found("", "nodes", name),
            _ => method_not_allowed(),
        },
        ["api", "v1", "namespaces", ns, "pods"] => match method {
            "GET" => {
                let items = state
                    .pods
                    .iter()
                    .filter(|((n, _), _)| n == ns)
                    .map(|(_, p)| p.clone())
                    .collect();
                list("PodList", "v1", state, req, selected(items))
            }
            _ => method_not_allowed(),
        },
        ["api", "v1", "namespaces", ns, "pods", name] => pod(state, req, ns, name, false),
        ["api", "v1", "namespaces", ns, "pods", name, "status"] => pod(state, req, ns, name, true),
        ["api", "v1", "namespaces", ns, "events"] => match method {
            "POST" => create_event(state, req, ns),
            "GET" => list("EventList", "v1", state, req, events_in(state, ns)),
            _ => method_not_allowed(),
        },
        ["apis", NAD_GROUP, "v1", NAD_RESOURCE] => match method {
            "GET" => list(
                "NetworkAttachmentDefinitionList",
                &format!("{NAD_GROUP}/v1"),
                state,
                req,
                selected(state.nads.values().cloned().collect()),
            ),
            _ => method_not_allowed(),
        },
        ["apis", NAD_GROUP, "v1", "namespaces", ns, NAD_RESOURCE] => match method {
            "GET" => {
                let items = state
                    .nads
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect();
                list(
                    "NetworkAttachmentDefinitionList",
                    &format!("{NAD_GROUP}/v1"),
                    state,
                    req,
                    items,
                )
            }
            _ => method_not_allowed(),
        },
        ["apis", NAD_GROUP, "v1", "namespaces", ns, NAD_RESOURCE, name] => match method {
            "GET" => match state.nads.get(&(ns.to_string(), name.to_string())) {
                Some(nad) => (200, nad.clone()),
                None => not_found(NAD_GROUP, NAD_RESOURCE, name),
            },
            _ => method_not_allowed(),
        },
        _ => objects::handle(state, req, &segments).unwrap_or_else(no_route),
    }
}

fn events_in(state: &State, ns: &str) -> Vec<Value> {
    state
        .events
        .iter()
        .filter(|e| e["metadata"]["namespace"] == ns)
        .cloned()
        .collect()
}

/// A list reply, in pages when the request asks with `limit`: `continue` carries the key of
/// the last item served, and the next page starts after it.
pub(super) fn list(
    kind: &str,
    api_version: &str,
    state: &State,
    req: &Request,
    mut items: Vec<Value>,
) -> (u16, Value) {
    let key = |v: &Value| {
        let text = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        format!("{}/{}", text("/metadata/namespace"), text("/metadata/name"))
    };
    items.sort_by_key(|v| key(v));
    if let Some(after) = req.param("continue").filter(|c| !c.is_empty()) {
        items.retain(|v| key(v) > after);
    }
    let mut metadata = json!({ "resourceVersion": state.resource_version.to_string() });
    let limit = req.param("limit").and_then(|l| l.parse::<usize>().ok());
    if let Some(limit) = limit.filter(|&l| l > 0 && l < items.len()) {
        items.truncate(limit);
        metadata["continue"] = items.last().map(key).unwrap_or_default().into();
        metadata["remainingItemCount"] = 0.into();
    }
    (
        200,
        json!({
            "kind": kind,
            "apiVersion": api_version,
            "metadata": metadata,
            "items": items,
        }),
    )
}

fn pod(state: &mut State, req: &Request, ns: &str, name: &str, status_sub: bool) -> (u16, Value) {
    let key = (ns.to_string(), name.to_string());
    match req.method.as_str() {
        "GET" => match state.pods.get(&key) {
            Some(p) => (200, p.clone()),
            None => not_found("", "pods", name),
        },
        // A merge PATCH, or a PUT of the whole pod (client-go's UpdateStatus, in JSON or, read
        // before this, in protobuf).
        "PATCH" | "PUT" => {
            let content_type = media_type(req);
            let put = req.method == "PUT";
            let accepted = if put {
                "application/json, application/vnd.kubernetes.protobuf"
            } else {
                "application/merge-patch+json, application/strategic-merge-patch+json"
            };
            if !accepted.split(", ").any(|t| t == content_type) {
                return status(
                    415,
                    "UnsupportedMediaType",
                    &format!("the body of the request was in an unknown format - accepted media types include: {accepted} (this test server); got {content_type:?}"),
                    None,
                );
            }
            let patch: Value = match serde_json::from_slice(&req.body) {
                Ok(p @ Value::Object(_)) => p,
                Ok(_) => return bad_request("the body is not a JSON object"),
                Err(e) => return bad_request(&format!("error decoding the body: {e}")),
            };
            let Some(current) = state.pods.get(&key) else {
                return not_found("", "pods", name);
            };
            let current_meta = &current["metadata"];
            if let Some(rv) = patch["metadata"]
                .get("resourceVersion")
                .filter(|v| !v.is_null() && **v != "")
            {
                if *rv != current_meta["resourceVersion"] {
                    return conflict("", "pods", name, MODIFIED);
                }
            }
            if let Some(uid) = patch["metadata"].get("uid").filter(|v| !v.is_null()) {
                if *uid != current_meta["uid"] {
                    return precondition_failed(
                        "",
                        "pods",
                        name,
                        &format!("/registry/pods/{ns}/{name}"),
                        "UID",
                        uid.as_str().unwrap_or_default(),
                        current_meta["uid"].as_str().unwrap_or_default(),
                    );
                }
            }
            let mut updated = if put {
                patch.clone()
            } else {
                let mut merged = current.clone();
                merge_patch(&mut merged, &patch);
                merged
            };
            // The main resource cannot change status, the status subresource cannot change spec;
            // identity fields never change.
            let kept = if status_sub { "spec" } else { "status" };
            updated[kept] = current[kept].clone();
            for field in ["name", "namespace", "uid", "creationTimestamp"] {
                updated["metadata"][field] = current_meta[field].clone();
            }
            let rv = state.next_resource_version();
            updated["metadata"]["resourceVersion"] = json!(rv);
            state.pods.insert(key, updated.clone());
            state
                .history
                .record(super::watch::Watched::Pods, "MODIFIED", &updated);
            (200, updated)
        }
        "DELETE" if !status_sub => delete_pod(state, req, key),
        _ => method_not_allowed(),
    }
}

/// DELETE of a pod, with the DeleteOptions' preconditions (UID, resourceVersion), as the API
/// server answers it: 409 when one does not hold, else the pod, gone at once (no kubelet here
/// to hold it in Terminating), at the deletion's resourceVersion.
fn delete_pod(state: &mut State, req: &Request, key: Key) -> (u16, Value) {
    let Some(current) = state.pods.get(&key) else {
        return not_found("", "pods", &key.1);
    };
    let storage_key = format!("/registry/pods/{}/{}", key.0, key.1);
    if let Err(refused) =
        super::objects::delete_preconditions(req, current, "", "pods", &storage_key)
    {
        return refused;
    }
    let Some(mut gone) = state.pods.remove(&key) else {
        return not_found("", "pods", &key.1);
    };
    gone["metadata"]["resourceVersion"] = json!(state.next_resource_version());
    state
        .history
        .record(super::watch::Watched::Pods, "DELETED", &gone);
    (200, gone)
}

/// The name a create gives `obj` in namespace `ns`, as the API server picks it: its
/// `metadata.name`, else its `generateName` and five random characters. A namespace in the
/// body must be the request's. `kind` is how a refusal names the type.
pub(super) fn name_to_create(
    obj: &mut Value,
    ns: &str,
    kind: &str,
) -> Result<String, (u16, Value)> {
    let meta = metadata_mut(obj);
    match meta.get("namespace").and_then(Value::as_str) {
        None | Some("") => {}
        Some(other) if other == ns => {}
        Some(_) => return Err(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
    }
    match (
        meta.get("name").and_then(Value::as_str),
        meta.get("generateName").and_then(Value::as_str),
    ) {
        (Some(n), _) if !n.is_empty() => Ok(n.to_string()),
        (_, Some(prefix)) if !prefix.is_empty() => Ok(format!("{prefix}{}", &new_uid()[..5])),
        _ => Err(status(
            422,
            "Invalid",
            &format!("{kind} \"\" is invalid: metadata.name: Required value: name or generateName is required"),
            None,
        )),
    }
}

fn create_event(state: &mut State, req: &Request, ns: &str) -> (u16, Value) {
    let mut event: Value = match serde_json::from_slice(&req.body) {
        Ok(e @ Value::Object(_)) => e,
        Ok(_) => return bad_request("the event is not a JSON object"),
        Err(e) => return bad_request(&format!("error decoding event: {e}")),
    };
    let name = match name_to_create(&mut event, ns, "Event") {
        Ok(name) => name,
        Err(reply) => return reply,
    };
    if event["involvedObject"]["namespace"] != ns {
        return status(
            422,
            "Invalid",
            &format!("Event \"{name}\" is invalid: involvedObject.namespace: Invalid value: does not match event.namespace"),
            None,
        );
    }
    if state
        .events
        .iter()
        .any(|e| e["metadata"]["namespace"] == ns && e["metadata"]["name"] == name.as_str())
    {
        return status(
            409,
            "AlreadyExists",
            &format!("events \"{name}\" already exists"),
            Some(json!({ "name": name, "kind": "events" })),
        );
    }
    state.admit(&mut event, ns, &name);
    event["kind"] = json!("Event");
    event["apiVersion"] = json!("v1");
    state.events.push(event.clone());
    (201, event)
}

/// RFC 7386 JSON merge patch. Strategic merge patch is the same for maps, which is all this
/// server promises (metadata.annotations and labels).
pub(super) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in patch {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

pub(super) fn discovery_get(method: &str, body: Value) -> (u16, Value) {
    if method == "GET" {
        (200, body)
    } else {
        method_not_allowed()
    }
}

fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }],
    })
}

fn api_groups() -> Value {
    let version = json!({ "groupVersion": format!("{NAD_GROUP}/v1"), "version": "v1" });
    let mut groups =
        vec![json!({ "name": NAD_GROUP, "versions": [version], "preferredVersion": version })];
    for group in objects::api_groups() {
        // IPAMClaims' v1alpha1 is a second version of the NADs' group, listed under it.
        match (group["name"] == NAD_GROUP, group["versions"].as_array()) {
            (true, Some(versions)) => {
                if let Some(listed) = groups[0]["versions"].as_array_mut() {
                    listed.extend(versions.iter().cloned());
                }
            }
            _ => groups.push(group),
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups,
    })
}

/// A resource's entry in an `APIResourceList`.
pub(super) fn resource(name: &str, kind: &str, verbs: &[&str], short: &[&str]) -> Value {
    json!({
        "name": name,
        "singularName": if name.contains('/') { String::new() } else { kind_singular(kind) },
        "namespaced": true,
        "kind": kind,
        "verbs": verbs,
        "shortNames": short,
    })
}

fn kind_singular(kind: &str) -> String {
    match kind {
        "NetworkAttachmentDefinition" => "network-attachment-definition".to_string(),
        _ => kind.to_ascii_lowercase(),
    }
}

fn core_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            resource("pods", "Pod", &["get", "list", "watch", "patch", "delete"], &["po"]),
            resource("pods/status", "Pod", &["get", "patch"], &[]),
            resource("nodes", "Node", &["get", "list"], &["no"]),
            resource("events", "Event", &["create", "list"], &["ev"]),
        ],
    })
}

fn nad_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{NAD_GROUP}/v1"),
        "resources": [resource(
            NAD_RESOURCE,
            "NetworkAttachmentDefinition",
            &["get", "list", "watch"],
            &["net-attach-def"],
        )],
    })
}
