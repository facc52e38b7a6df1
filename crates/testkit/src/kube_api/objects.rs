//! Namespaced objects of the resources registered here (whereabouts' custom resources and
//! Leases), stored and served generically as kube-apiserver serves them: create, get, list (in
//! a namespace or in all), update, JSON and merge patch, delete, with optimistic concurrency on
//! `metadata.resourceVersion`.

use serde_json::{json, Value};

use super::http1::Request;
use super::routes::{
    self, bad_request, conflict, metadata_mut, method_not_allowed, not_found, precondition_failed,
    status, Key, State, MODIFIED,
};
use super::watch::Watched;

const WHEREABOUTS: &str = "whereabouts.cni.cncf.io";

/// What every registered resource allows (no watch: the server has none).
const VERBS: [&str; 6] = ["create", "delete", "get", "list", "patch", "update"];

/// A namespaced resource the server stores generically, named by API group, version and plural.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resource {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    /// Built into kube-apiserver rather than a custom resource: its etcd key has no group, it
    /// takes strategic merge patches, and (as the Lease strategy has it) a PUT creates it.
    builtin: bool,
    /// Has a status subresource (`subresources: status` in its CRD): writes to the object
    /// keep its status, and writes to `<object>/status` change only the status.
    status: bool,
}

impl Resource {
    /// whereabouts' address pools, one per range.
    pub const IP_POOLS: Resource = Resource::whereabouts("ippools", "IPPool");
    /// whereabouts' cluster-wide claims on addresses of overlapping ranges.
    pub const OVERLAPPING_RANGE_IP_RESERVATIONS: Resource = Resource::whereabouts(
        "overlappingrangeipreservations",
        "OverlappingRangeIPReservation",
    );
    /// whereabouts' division of a range into per-node slices.
    pub const NODE_SLICE_POOLS: Resource = Resource::whereabouts("nodeslicepools", "NodeSlicePool");
    /// `coordination.k8s.io/v1` Leases, for leader election.
    pub const LEASES: Resource = Resource {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        kind: "Lease",
        builtin: true,
        status: false,
    };
    /// `k8s.cni.cncf.io/v1alpha1` IPAMClaims, with a status subresource as their CRD has.
    pub const IPAM_CLAIMS: Resource = Resource {
        group: routes::NAD_GROUP,
        version: "v1alpha1",
        plural: "ipamclaims",
        kind: "IPAMClaim",
        builtin: false,
        status: true,
    };

    /// `apps/v1` StatefulSets, which whereabouts reads to keep their pods' addresses.
    pub const STATEFULSETS: Resource = Resource {
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        kind: "StatefulSet",
        builtin: true,
        status: false,
    };

    /// Every resource served.
    const ALL: [Resource; 6] = [
        Resource::IP_POOLS,
        Resource::OVERLAPPING_RANGE_IP_RESERVATIONS,
        Resource::NODE_SLICE_POOLS,
        Resource::LEASES,
        Resource::IPAM_CLAIMS,
        Resource::STATEFULSETS,
    ];

    const fn whereabouts(plural: &'static str, kind: &'static str) -> Resource {
        Resource {
            group: WHEREABOUTS,
            version: "v1alpha1",
            plural,
            kind,
            builtin: false,
            status: false,
        }
    }

    /// The objects' `apiVersion`: `group/version`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The collection's path in `namespace`, to send requests to or aim faults at
    /// ([`KubeApiServer::inject_under`](super::KubeApiServer::inject_under)).
    pub fn path(&self, namespace: &str) -> String {
        format!(
            "/apis/{}/{}/namespaces/{namespace}/{}",
            self.group, self.version, self.plural
        )
    }

    /// One object's path.
    pub fn object_path(&self, namespace: &str, name: &str) -> String {
        format!("{}/{name}", self.path(namespace))
    }

    fn find(group: &str, version: &str, plural: &str) -> Option<Resource> {
        Resource::ALL
            .into_iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// `ippools.whereabouts.cni.cncf.io`, as messages name it.
    fn qualified(&self) -> String {
        routes::qualified(self.group, self.plural)
    }

    /// The object's etcd key, which failed storage preconditions name.
    fn storage_key(&self, (ns, name): &Key) -> String {
        if self.builtin {
            format!("/registry/{}/{ns}/{name}", self.plural)
        } else {
            format!("/registry/{}/{}/{ns}/{name}", self.group, self.plural)
        }
    }
}

/// Serves the registered resources and their discovery documents; `None` for other paths.
pub(super) fn handle(state: &mut State, req: &Request, segments: &[&str]) -> Option<(u16, Value)> {
    let method = req.method.as_str();
    let reply = match *segments {
        ["apis", group, version] => routes::discovery_get(method, resource_list(group, version)?),
        ["apis", group, version, plural] => {
            let r = Resource::find(group, version, plural)?;
            match method {
                "GET" => list(state, req, r, None),
                _ => method_not_allowed(),
            }
        }
        ["apis", group, version, "namespaces", ns, plural] => {
            let r = Resource::find(group, version, plural)?;
            match method {
                "GET" => list(state, req, r, Some(ns)),
                "POST" => create(state, req, r, ns),
                _ => method_not_allowed(),
            }
        }
        ["apis", group, version, "namespaces", ns, plural, name, ref sub @ ..] => {
            let r = Resource::find(group, version, plural)?;
            let part = match sub {
                [] => Part::Object,
                ["status"] if r.status => Part::Status,
                _ => return None,
            };
            let key = (ns.to_string(), name.to_string());
            match method {
                "GET" => match stored(state, r, &key) {
                    Some(obj) => (200, obj.clone()),
                    None => not_found(r.group, r.plural, name),
                },
                "PUT" => update(state, req, r, key, part),
                "PATCH" => patch(state, req, r, key, part),
                "DELETE" if part == Part::Object => delete(state, req, r, &key),
                _ => method_not_allowed(),
            }
        }
        _ => return None,
    };
    Some(reply)
}

/// The `/apis` entries of the registered resources' groups (each has one version here).
pub(super) fn api_groups() -> Vec<Value> {
    let mut groups: Vec<Value> = Vec::new();
    for r in Resource::ALL {
        if groups.iter().all(|g| g["name"] != r.group) {
            let version = json!({ "groupVersion": r.api_version(), "version": r.version });
            groups.push(
                json!({ "name": r.group, "versions": [version], "preferredVersion": version }),
            );
        }
    }
    groups
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = Resource::ALL
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| {
            let status = format!("{}/status", r.plural);
            let sub = r
                .status
                .then(|| routes::resource(&status, r.kind, &["get", "patch", "update"], &[]));
            std::iter::once(routes::resource(r.plural, r.kind, &VERBS, &[])).chain(sub)
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": resources,
    }))
}

fn stored<'a>(state: &'a State, r: Resource, key: &Key) -> Option<&'a Value> {
    state.objects.get(&r)?.get(key)
}

fn list(state: &State, req: &Request, r: Resource, namespace: Option<&str>) -> (u16, Value) {
    let items = state
        .objects
        .get(&r)
        .into_iter()
        .flatten()
        .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
        .map(|(_, obj)| obj.clone())
        .collect();
    routes::list(
        &format!("{}List", r.kind),
        &r.api_version(),
        state,
        req,
        items,
    )
}

fn create(state: &mut State, req: &Request, r: Resource, ns: &str) -> (u16, Value) {
    let mut obj = match decode(r, &req.body) {
        Ok(obj) => obj,
        Err(reply) => return reply,
    };
    let name = match routes::name_to_create(&mut obj, ns, &routes::qualified(r.group, r.kind)) {
        Ok(name) => name,
        Err(reply) => return reply,
    };
    if r.status {
        // Only the status subresource writes a status: a create's is dropped.
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
    insert_new(state, r, (ns.to_string(), name), obj)
}

/// Stores a new object with fresh server-owned metadata: 201, or 409 when the name is taken.
fn insert_new(state: &mut State, r: Resource, key: Key, mut obj: Value) -> (u16, Value) {
    if stored(state, r, &key).is_some() {
        return status(
            409,
            "AlreadyExists",
            &format!("{} \"{}\" already exists", r.qualified(), key.1),
            Some(json!({ "name": key.1, "group": r.group, "kind": r.plural })),
        );
    }
    let meta = metadata_mut(&mut obj);
    meta.shift_remove("uid");
    meta.shift_remove("creationTimestamp");
    state.admit(&mut obj, &key.0, &key.1);
    state.objects.entry(r).or_default().insert(key, obj.clone());
    record(state, r, "ADDED", &obj);
    (201, obj)
}

/// Keeps a change of a watched resource (IPAMClaims) for its watches.
pub(super) fn record(state: &mut State, r: Resource, event: &'static str, obj: &Value) {
    if r == Resource::IPAM_CLAIMS {
        state.history.record(Watched::Claims, event, obj);
    }
}

/// Which part of an object a write is to: for a resource with a status subresource, the
/// object's writes keep the stored status, and the subresource's keep all but the status.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Object,
    Status,
}

/// `written` as stored, keeping what `part` may not change of `current`.
fn only_part(r: Resource, part: Part, current: &Value, mut written: Value) -> Value {
    if !r.status {
        return written;
    }
    match part {
        Part::Object => {
            match current.get("status") {
                Some(status) => written["status"] = status.clone(),
                None => {
                    if let Some(o) = written.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            written
        }
        Part::Status => {
            let mut kept = current.clone();
            kept["status"] = written.get("status").cloned().unwrap_or(Value::Null);
            // The write's preconditions still apply; its other metadata does not.
            for field in ["resourceVersion", "uid"] {
                kept["metadata"][field] = written["metadata"][field].clone();
            }
            kept
        }
    }
}

/// PUT: the body replaces the object, which it must name with its current resourceVersion
/// (none of these resources allows an unconditional update).
fn update(state: &mut State, req: &Request, r: Resource, key: Key, part: Part) -> (u16, Value) {
    let obj = match decode(r, &req.body).and_then(|obj| check_name(&obj, &key).map(|()| obj)) {
        Ok(obj) => obj,
        Err(reply) => return reply,
    };
    let Some(current) = stored(state, r, &key).cloned() else {
        return if r.builtin {
            insert_new(state, r, key, obj)
        } else {
            not_found(r.group, r.plural, &key.1)
        };
    };
    if obj["metadata"]["resourceVersion"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        // Upstream names the resource where the kind would go here.
        return invalid(
            r.group,
            r.plural,
            &key.1,
            "metadata.resourceVersion",
            "FieldValueInvalid",
            "Invalid value: 0x0: must be specified for an update",
        );
    }
    let obj = only_part(r, part, &current, obj);
    replace(state, r, key, &current, obj)
}

fn patch(state: &mut State, req: &Request, r: Resource, key: Key, part: Part) -> (u16, Value) {
    let media_type = routes::media_type(req);
    let json_patch = media_type == "application/json-patch+json";
    let merge = media_type == "application/merge-patch+json"
        || (r.builtin && media_type == "application/strategic-merge-patch+json");
    if !json_patch && !merge {
        let accepted = if r.builtin {
            "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
        } else {
            "application/json-patch+json, application/merge-patch+json"
        };
        return status(
            415,
            "UnsupportedMediaType",
            &format!("the body of the request was in an unknown format - accepted media types include: {accepted} (this test server); got {media_type:?}"),
            None,
        );
    }
    let Some(current) = stored(state, r, &key).cloned() else {
        return not_found(r.group, r.plural, &key.1);
    };
    let patched = if json_patch {
        apply_json_patch(&current, &req.body)
    } else {
        apply_merge_patch(&current, &req.body)
    };
    match patched
        .and_then(|obj| typed(r, obj))
        .and_then(|obj| check_name(&obj, &key).map(|()| obj))
    {
        Ok(obj) => {
            let obj = only_part(r, part, &current, obj);
            replace(state, r, key, &current, obj)
        }
        Err(reply) => reply,
    }
}

fn apply_json_patch(current: &Value, body: &[u8]) -> Result<Value, (u16, Value)> {
    let ops = match serde_json::from_slice(body) {
        Ok(Value::Array(ops)) if ops.iter().all(Value::is_object) => ops,
        Ok(_) => return Err(bad_request("a JSON patch is an array of operation objects")),
        Err(e) => return Err(bad_request(&format!("error decoding patch: {e}"))),
    };
    let mut patched = current.clone();
    jsonpatch::apply(&mut patched, &ops).map_err(|why| {
        // Upstream's words; the cause, which upstream leaves out, says which operation failed.
        status(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
            Some(json!({ "causes": [{ "message": why.to_string() }] })),
        )
    })?;
    Ok(patched)
}

fn apply_merge_patch(current: &Value, body: &[u8]) -> Result<Value, (u16, Value)> {
    let patch = match serde_json::from_slice(body) {
        Ok(p @ Value::Object(_)) => p,
        Ok(_) => return Err(bad_request("the patch is not a JSON object")),
        Err(e) => return Err(bad_request(&format!("error decoding patch: {e}"))),
    };
    let mut patched = current.clone();
    routes::merge_patch(&mut patched, &patch);
    Ok(patched)
}

/// Stores `obj` over `current` as an update does: a UID or a resourceVersion in it are
/// preconditions (a patch that leaves the resourceVersion out is unconditional); the UID and
/// creationTimestamp stay; the resourceVersion is new.
fn replace(
    state: &mut State,
    r: Resource,
    key: Key,
    current: &Value,
    mut obj: Value,
) -> (u16, Value) {
    let was = &current["metadata"];
    let given = |field: &str| {
        obj["metadata"][field]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    if let Some(uid) = given("uid") {
        let actual = was["uid"].as_str().unwrap_or_default();
        if uid != actual {
            return precondition_failed(
                r.group,
                r.plural,
                &key.1,
                &r.storage_key(&key),
                "UID",
                &uid,
                actual,
            );
        }
    }
    if given("resourceVersion").is_some_and(|rv| was["resourceVersion"] != rv.as_str()) {
        return conflict(r.group, r.plural, &key.1, MODIFIED);
    }
    let rv = state.next_resource_version();
    let meta = metadata_mut(&mut obj);
    meta.insert("namespace".into(), json!(key.0));
    for field in ["uid", "creationTimestamp"] {
        meta.insert(field.into(), was[field].clone());
    }
    meta.insert("resourceVersion".into(), json!(rv));
    state.objects.entry(r).or_default().insert(key, obj.clone());
    record(state, r, "MODIFIED", &obj);
    (200, obj)
}

/// DELETE, with the DeleteOptions body's preconditions (UID, resourceVersion) if it has any;
/// answers the object as deleted, at the deletion's resourceVersion.
fn delete(state: &mut State, req: &Request, r: Resource, key: &Key) -> (u16, Value) {
    let Some(mut obj) = stored(state, r, key).cloned() else {
        return not_found(r.group, r.plural, &key.1);
    };
    if let Err(refused) = delete_preconditions(req, &obj, r.group, r.plural, &r.storage_key(key)) {
        return refused;
    }
    let rv = state.next_resource_version();
    metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
    if let Some(objects) = state.objects.get_mut(&r) {
        objects.remove(key);
    }
    record(state, r, "DELETED", &obj);
    (200, obj)
}

/// A DELETE's DeleteOptions body checked against `obj`, the object it deletes: its
/// preconditions (UID, resourceVersion) must hold, as the API server checks them.
pub(super) fn delete_preconditions(
    req: &Request,
    obj: &Value,
    group: &str,
    plural: &str,
    storage_key: &str,
) -> Result<(), (u16, Value)> {
    let options = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&req.body) {
            Ok(o @ Value::Object(_)) => o,
            Ok(_) => return Err(bad_request("the DeleteOptions are not a JSON object")),
            Err(e) => return Err(bad_request(&format!("error decoding DeleteOptions: {e}"))),
        }
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    for (field, what) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(wanted) = options["preconditions"][field].as_str() {
            let actual = obj["metadata"][field].as_str().unwrap_or_default();
            if wanted != actual {
                return Err(precondition_failed(
                    group,
                    plural,
                    name,
                    storage_key,
                    what,
                    wanted,
                    actual,
                ));
            }
        }
    }
    Ok(())
}

/// The request body as an object of `r`.
fn decode(r: Resource, body: &[u8]) -> Result<Value, (u16, Value)> {
    match serde_json::from_slice(body) {
        Ok(obj) => typed(r, obj),
        Err(e) => Err(bad_request(&format!("error decoding the object: {e}"))),
    }
}

/// `obj`, a JSON object, with `r`'s apiVersion and kind, which it may leave out but not
/// contradict.
fn typed(r: Resource, mut obj: Value) -> Result<Value, (u16, Value)> {
    if !obj.is_object() {
        return Err(bad_request("the object is not a JSON object"));
    }
    let api_version = r.api_version();
    for (field, expected, what) in [
        ("apiVersion", api_version.as_str(), "API version"),
        ("kind", r.kind, "kind"),
    ] {
        match obj[field].as_str() {
            Some(given) if !given.is_empty() && given != expected => {
                return Err(bad_request(&format!(
                    "the {what} in the data ({given}) does not match the expected {what} ({expected})"
                )))
            }
            _ => obj[field] = json!(expected),
        }
    }
    Ok(obj)
}

/// The object names the one on the URL (upstream's checkName): the same name, and the same
/// namespace or none.
fn check_name(obj: &Value, (ns, name): &Key) -> Result<(), (u16, Value)> {
    let meta = &obj["metadata"];
    let given = meta["name"].as_str().unwrap_or_default();
    if given != name {
        return Err(bad_request(&format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    match meta["namespace"].as_str() {
        Some(other) if !other.is_empty() && other != ns => Err(bad_request(&format!(
            "the namespace of the object ({other}) does not match the namespace on the request ({ns})"
        ))),
        _ => Ok(()),
    }
}

/// A 422 for one invalid field, in the words of upstream's `NewInvalid`; `kind` names the
/// object's type in the message.
fn invalid(
    group: &str,
    kind: &str,
    name: &str,
    field: &str,
    reason: &str,
    detail: &str,
) -> (u16, Value) {
    status(
        422,
        "Invalid",
        &format!(
            "{} \"{name}\" is invalid: {field}: {detail}",
            routes::qualified(group, kind)
        ),
        Some(json!({
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{ "reason": reason, "message": detail, "field": field }],
        })),
    )
}
