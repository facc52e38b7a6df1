//! The test API server's generic store: whereabouts' custom resources and Leases, created,
//! read, listed, updated, patched (JSON patch with `test`, merge patch) and deleted with the
//! replies and optimistic concurrency of kube-apiserver, plus faults aimed at one resource.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use serde_json::{json, Value};
use testkit::kube_api::{Fault, KubeApiServer, KubeconfigAuth, Resource};

use crate::common;
use common::Conn;

const WHEREABOUTS: &str = "whereabouts.cni.cncf.io";

/// A server and one keep-alive HTTP/1.1 connection to it that reads `(status, json)` replies.
struct Api {
    server: KubeApiServer,
    conn: Conn,
}

impl Api {
    fn new() -> Result<Api> {
        let server = KubeApiServer::http()?;
        let conn = Conn::open(&server)?;
        Ok(Api { server, conn })
    }

    fn call(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> Result<(u16, Value)> {
        let raw = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
            self.server.addr(),
            self.server.token(),
            body.len()
        );
        self.conn.send(&raw)
    }

    fn get(&mut self, path: &str) -> Result<(u16, Value)> {
        self.call("GET", path, "application/json", "")
    }

    fn post(&mut self, path: &str, obj: &Value) -> Result<(u16, Value)> {
        self.call("POST", path, "application/json", &obj.to_string())
    }

    fn put(&mut self, path: &str, obj: &Value) -> Result<(u16, Value)> {
        self.call("PUT", path, "application/json", &obj.to_string())
    }

    fn json_patch(&mut self, path: &str, ops: &Value) -> Result<(u16, Value)> {
        self.call(
            "PATCH",
            path,
            "application/json-patch+json",
            &ops.to_string(),
        )
    }

    fn merge_patch(&mut self, path: &str, patch: &Value) -> Result<(u16, Value)> {
        self.call(
            "PATCH",
            path,
            "application/merge-patch+json",
            &patch.to_string(),
        )
    }

    fn delete(&mut self, path: &str, options: &str) -> Result<(u16, Value)> {
        self.call("DELETE", path, "application/json", options)
    }

    fn pool(&self, name: &str) -> Option<Value> {
        self.server.object(Resource::IP_POOLS, "ns1", name)
    }
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {obj}"))
}

/// An IPPool as whereabouts writes it: allocations keyed by offset in the range.
fn pool(name: &str, allocations: Value) -> Value {
    json!({
        "apiVersion": "whereabouts.cni.cncf.io/v1alpha1",
        "kind": "IPPool",
        "metadata": { "name": name },
        "spec": { "range": "10.2.0.0/24", "allocations": allocations },
    })
}

fn allocation(pod: &str) -> Value {
    json!({ "id": format!("container-{pod}"), "podref": format!("ns1/{pod}"), "ifname": "net1" })
}

fn pools() -> String {
    Resource::IP_POOLS.path("ns1")
}

fn pool_path(name: &str) -> String {
    Resource::IP_POOLS.object_path("ns1", name)
}

#[test]
fn create_get_and_list() -> Result<()> {
    let mut api = Api::new()?;
    let (code, created) = api.post(&pools(), &pool("10.2.0.0-24", json!({})))?;
    assert_eq!(code, 201, "{created}");
    let meta = &created["metadata"];
    assert_eq!(meta["namespace"], "ns1");
    assert!(
        meta["uid"].as_str().is_some_and(|u| u.len() == 36),
        "{meta}"
    );
    assert!(meta["creationTimestamp"].is_string(), "{meta}");
    assert_eq!(rv(&created), 1);
    assert_eq!(api.pool("10.2.0.0-24"), Some(created.clone()));
    assert_eq!(api.get(&pool_path("10.2.0.0-24"))?, (200, created.clone()));

    // The server owns uid and creationTimestamp; the name may be generated.
    let mut other = pool("", json!({}));
    other["metadata"] = json!({ "generateName": "pool-", "uid": "mine", "creationTimestamp": "2000-01-01T00:00:00Z" });
    let (code, generated) = api.post(&Resource::IP_POOLS.path("ns2"), &other)?;
    assert_eq!(code, 201, "{generated}");
    let name = generated["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("pool-") && name.len() == 10, "{name}");
    assert_ne!(generated["metadata"]["uid"], "mine");
    assert_ne!(
        generated["metadata"]["creationTimestamp"],
        "2000-01-01T00:00:00Z"
    );
    assert_eq!(rv(&generated), 2);
    assert_eq!(
        api.server.object(Resource::IP_POOLS, "ns2", name),
        Some(generated.clone())
    );

    let (code, list) = api.get(&pools())?;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "IPPoolList");
    assert_eq!(list["apiVersion"], "whereabouts.cni.cncf.io/v1alpha1");
    assert_eq!(list["metadata"]["resourceVersion"], "2");
    assert_eq!(list["items"], json!([created]));
    assert_eq!(list["items"][0]["kind"], "IPPool");

    let (code, all) = api.get(&format!("/apis/{WHEREABOUTS}/v1alpha1/ippools"))?;
    assert_eq!(code, 200);
    assert_eq!(all["items"], json!([created, generated]));
    assert_eq!(api.server.objects(Resource::IP_POOLS), [created, generated]);
    // Another resource's store is apart.
    let (code, list) = api.get(&Resource::NODE_SLICE_POOLS.path("ns1"))?;
    assert_eq!((code, list["items"].clone()), (200, json!([])));
    assert_eq!(list["kind"], "NodeSlicePoolList");
    Ok(())
}

#[test]
fn create_refuses_a_taken_name_a_foreign_namespace_and_no_name() -> Result<()> {
    let mut api = Api::new()?;
    let (code, first) = api.post(&pools(), &pool("p", json!({ "1": allocation("a") })))?;
    assert_eq!(code, 201);
    let (code, reply) = api.post(&pools(), &pool("p", json!({})))?;
    assert_eq!(code, 409, "{reply}");
    assert_eq!(reply["reason"], "AlreadyExists");
    assert_eq!(
        reply["message"],
        r#"ippools.whereabouts.cni.cncf.io "p" already exists"#
    );
    assert_eq!(
        reply["details"],
        json!({ "name": "p", "group": WHEREABOUTS, "kind": "ippools" })
    );
    assert_eq!(api.pool("p"), Some(first));

    let mut elsewhere = pool("q", json!({}));
    elsewhere["metadata"]["namespace"] = json!("ns2");
    let (code, reply) = api.post(&pools(), &elsewhere)?;
    assert_eq!((code, reply["reason"].clone()), (400, json!("BadRequest")));
    let (code, reply) = api.post(&pools(), &pool("", json!({})))?;
    assert_eq!((code, reply["reason"].clone()), (422, json!("Invalid")));
    assert_eq!(
        reply["message"],
        r#"IPPool.whereabouts.cni.cncf.io "" is invalid: metadata.name: Required value: name or generateName is required"#
    );
    let mut wrong_kind = pool("r", json!({}));
    wrong_kind["kind"] = json!("NodeSlicePool");
    let (code, _) = api.post(&pools(), &wrong_kind)?;
    assert_eq!(code, 400);
    let (code, _) = api.call("POST", &pools(), "application/json", "{")?;
    assert_eq!(code, 400);
    assert_eq!(api.server.objects(Resource::IP_POOLS).len(), 1);
    Ok(())
}

#[test]
fn put_needs_the_current_resource_version() -> Result<()> {
    let mut api = Api::new()?;
    let (_, created) = api.post(&pools(), &pool("p", json!({})))?;
    let mut stale = created.clone();
    stale["spec"]["allocations"] = json!({ "1": allocation("a") });
    stale["metadata"]["resourceVersion"] = json!("0");
    let (code, reply) = api.put(&pool_path("p"), &stale)?;
    assert_eq!(code, 409, "{reply}");
    assert_eq!(reply["reason"], "Conflict");
    assert_eq!(
        reply["message"],
        r#"Operation cannot be fulfilled on ippools.whereabouts.cni.cncf.io "p": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(api.pool("p"), Some(created.clone()));

    // Custom resources allow no unconditional update.
    let mut unconditional = stale.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (code, reply) = api.put(&pool_path("p"), &unconditional)?;
    assert_eq!((code, reply["reason"].clone()), (422, json!("Invalid")));
    assert_eq!(
        reply["message"],
        r#"ippools.whereabouts.cni.cncf.io "p" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"#
    );
    assert_eq!(api.pool("p"), Some(created.clone()));

    let mut renamed = created.clone();
    renamed["metadata"]["name"] = json!("q");
    let (code, reply) = api.put(&pool_path("p"), &renamed)?;
    assert_eq!(code, 400, "{reply}");
    assert_eq!(
        reply["message"],
        "the name of the object (q) does not match the name on the URL (p)"
    );
    let (code, reply) = api.put(&pool_path("q"), &renamed)?;
    assert_eq!((code, reply["reason"].clone()), (404, json!("NotFound")));
    assert_eq!(api.pool("q"), None);

    let mut current = stale.clone();
    current["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    // A client cannot move the creation time.
    current["metadata"]["creationTimestamp"] = json!("2000-01-01T00:00:00Z");
    let (code, updated) = api.put(&pool_path("p"), &current)?;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"]["allocations"]["1"]["podref"], "ns1/a");
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        updated["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    assert!(rv(&updated) > rv(&created));
    assert_eq!(api.pool("p"), Some(updated));
    Ok(())
}

/// The patches whereabouts sends: test the resourceVersion and that the slot is free, then
/// claim it.
#[test]
fn json_patch_with_tests_is_optimistic_concurrency() -> Result<()> {
    let mut api = Api::new()?;
    let (_, created) = api.post(&pools(), &pool("p", json!({ "3": allocation("a") })))?;
    let claim = |rv: &str, slot: &str, pod: &str| {
        json!([
            { "op": "test", "path": "/metadata/resourceVersion", "value": rv },
            { "op": "test", "path": format!("/spec/allocations/{slot}"), "value": null },
            { "op": "add", "path": format!("/spec/allocations/{slot}"), "value": allocation(pod) },
        ])
    };
    let rv0 = created["metadata"]["resourceVersion"].as_str().unwrap();

    let (code, patched) = api.json_patch(&pool_path("p"), &claim(rv0, "5", "b"))?;
    assert_eq!(code, 200, "{patched}");
    let stored = api.pool("p").unwrap();
    assert_eq!(stored, patched);
    assert_eq!(stored["spec"]["allocations"]["5"], allocation("b"));
    assert_eq!(stored["spec"]["allocations"]["3"], allocation("a"));
    assert!(rv(&stored) > rv(&created));

    // The same claim again: its resourceVersion is stale now.
    let (code, reply) = api.json_patch(&pool_path("p"), &claim(rv0, "6", "c"))?;
    assert_eq!(code, 422, "{reply}");
    assert_eq!(reply["reason"], "Invalid");
    assert_eq!(api.pool("p"), Some(stored.clone()));

    // With the current version, a taken slot fails its test-for-null, a free one passes.
    let rv1 = stored["metadata"]["resourceVersion"].as_str().unwrap();
    let (code, reply) = api.json_patch(&pool_path("p"), &claim(rv1, "3", "c"))?;
    assert_eq!((code, reply["reason"].clone()), (422, json!("Invalid")));
    assert_eq!(api.pool("p"), Some(stored.clone()));
    let (code, patched) = api.json_patch(&pool_path("p"), &claim(rv1, "7", "c"))?;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        api.pool("p").unwrap()["spec"]["allocations"]["7"],
        allocation("c")
    );
    Ok(())
}

#[test]
fn json_patch_operations() -> Result<()> {
    let mut api = Api::new()?;
    let mut seed = pool("p", json!({}));
    seed["metadata"]["annotations"] = json!({ "a/b": "slash", "m~n": "tilde" });
    seed["spec"]["list"] = json!([1, 2]);
    let (_, created) = api.post(&pools(), &seed)?;
    let ops = json!([
        { "op": "test", "path": "/metadata/annotations/a~1b", "value": "slash" },
        { "op": "replace", "path": "/metadata/annotations/m~0n", "value": "TILDE" },
        { "op": "add", "path": "/spec/list/-", "value": 3 },
        { "op": "add", "path": "/spec/list/0", "value": 0 },
        { "op": "remove", "path": "/spec/list/1" },
        { "op": "copy", "from": "/spec/range", "path": "/spec/copied" },
        { "op": "move", "from": "/metadata/annotations/a~1b", "path": "/spec/moved" },
        { "op": "test", "path": "/spec/absent", "value": null },
    ]);
    let (code, patched) = api.json_patch(&pool_path("p"), &ops)?;
    assert_eq!(code, 200, "{patched}");
    let stored = api.pool("p").unwrap();
    assert_eq!(stored, patched);
    assert_eq!(stored["metadata"]["annotations"], json!({ "m~n": "TILDE" }));
    assert_eq!(stored["spec"]["list"], json!([0, 2, 3]));
    assert_eq!(stored["spec"]["copied"], "10.2.0.0/24");
    assert_eq!(stored["spec"]["moved"], "slash");
    assert_eq!(stored["metadata"]["uid"], created["metadata"]["uid"]);

    // Each of these fails as a whole, leaving the object as it was.
    for (ops, code) in [
        (json!([{ "op": "remove", "path": "/spec/absent" }]), 422),
        (
            json!([{ "op": "replace", "path": "/spec/absent", "value": 1 }]),
            422,
        ),
        (
            json!([{ "op": "add", "path": "/spec/no/such", "value": 1 }]),
            422,
        ),
        (
            json!([{ "op": "test", "path": "/spec/no/such", "value": null }]),
            422,
        ),
        (
            json!([{ "op": "add", "path": "/spec/list/4", "value": 1 }]),
            422,
        ),
        (json!([{ "op": "add", "path": "spec", "value": 1 }]), 422),
        (json!([{ "op": "frobnicate", "path": "/spec" }]), 422),
        (
            json!([
                { "op": "add", "path": "/spec/first", "value": 1 },
                { "op": "test", "path": "/spec/range", "value": "other" },
            ]),
            422,
        ),
        (json!({ "op": "add" }), 400),
        (json!([1]), 400),
        // Identity stays.
        (
            json!([{ "op": "replace", "path": "/metadata/name", "value": "q" }]),
            400,
        ),
        (
            json!([{ "op": "replace", "path": "/metadata/namespace", "value": "ns2" }]),
            400,
        ),
        (
            json!([{ "op": "replace", "path": "/metadata/uid", "value": "other" }]),
            409,
        ),
        (
            json!([{ "op": "replace", "path": "/kind", "value": "Lease" }]),
            400,
        ),
        // A replaced resourceVersion is a precondition.
        (
            json!([{ "op": "replace", "path": "/metadata/resourceVersion", "value": "1" }]),
            409,
        ),
    ] {
        let (got, reply) = api.json_patch(&pool_path("p"), &ops)?;
        assert_eq!(got, code, "{ops}: {reply}");
        assert_eq!(api.pool("p"), Some(stored.clone()), "{ops}");
    }
    let (code, _) = api.call("PATCH", &pool_path("p"), "application/json-patch+json", "[")?;
    assert_eq!(code, 400);

    // Leaving the resourceVersion out makes a patch unconditional.
    let (code, patched) = api.json_patch(
        &pool_path("p"),
        &json!([
            { "op": "remove", "path": "/metadata/resourceVersion" },
            { "op": "remove", "path": "/metadata/uid" },
            { "op": "add", "path": "/spec/last", "value": true },
        ]),
    )?;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["uid"], created["metadata"]["uid"]);
    assert!(rv(&patched) > rv(&stored));
    assert_eq!(api.pool("p"), Some(patched));

    let (code, reply) = api.json_patch(&pool_path("nope"), &json!([]))?;
    assert_eq!((code, reply["reason"].clone()), (404, json!("NotFound")));
    Ok(())
}

#[test]
fn merge_patch() -> Result<()> {
    let mut api = Api::new()?;
    let (_, created) = api.post(
        &pools(),
        &pool("p", json!({ "1": allocation("a"), "2": allocation("b") })),
    )?;
    let (code, patched) = api.merge_patch(
        &pool_path("p"),
        &json!({ "spec": { "allocations": { "1": null, "9": allocation("c") } } }),
    )?;
    assert_eq!(code, 200, "{patched}");
    let stored = api.pool("p").unwrap();
    assert_eq!(stored, patched);
    assert_eq!(
        stored["spec"]["allocations"],
        json!({ "2": allocation("b"), "9": allocation("c") })
    );
    assert_eq!(stored["spec"]["range"], "10.2.0.0/24");
    assert!(rv(&stored) > rv(&created));

    let stale = json!({ "metadata": { "resourceVersion": created["metadata"]["resourceVersion"] }, "spec": { "range": "x" } });
    let (code, reply) = api.merge_patch(&pool_path("p"), &stale)?;
    assert_eq!((code, reply["reason"].clone()), (409, json!("Conflict")));
    assert_eq!(api.pool("p"), Some(stored.clone()));

    let (code, reply) = api.call(
        "PATCH",
        &pool_path("p"),
        "application/strategic-merge-patch+json",
        r#"{"spec":{"range":"x"}}"#,
    )?;
    assert_eq!(
        (code, reply["reason"].clone()),
        (415, json!("UnsupportedMediaType"))
    );
    assert_eq!(api.pool("p"), Some(stored));
    Ok(())
}

#[test]
fn delete_with_and_without_preconditions() -> Result<()> {
    let mut api = Api::new()?;
    let (_, created) = api.post(&pools(), &pool("p", json!({})))?;
    let (code, reply) = api.delete(
        &pool_path("p"),
        r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"0"}}"#,
    )?;
    assert_eq!((code, reply["reason"].clone()), (409, json!("Conflict")));
    assert!(
        reply["message"].as_str().unwrap().contains(
            "Precondition failed: ResourceVersion in precondition: 0, ResourceVersion in object meta: 1"
        ),
        "{reply}"
    );
    assert_eq!(api.pool("p"), Some(created.clone()));

    let options =
        json!({ "preconditions": { "uid": created["metadata"]["uid"], "resourceVersion": "1" } });
    let (code, deleted) = api.delete(&pool_path("p"), &options.to_string())?;
    assert_eq!(code, 200, "{deleted}");
    assert_eq!(deleted["spec"], created["spec"]);
    assert_eq!(deleted["metadata"]["uid"], created["metadata"]["uid"]);
    assert!(rv(&deleted) > rv(&created));
    assert_eq!(api.pool("p"), None);
    let (code, reply) = api.get(&pool_path("p"))?;
    assert_eq!(code, 404);
    assert_eq!(
        reply["message"],
        r#"ippools.whereabouts.cni.cncf.io "p" not found"#
    );
    let (code, _) = api.delete(&pool_path("p"), "")?;
    assert_eq!(code, 404);
    // The deletion was a write: lists are at its version.
    let (_, list) = api.get(&pools())?;
    assert_eq!(list["metadata"]["resourceVersion"], "2");
    Ok(())
}

#[test]
fn leases_for_leader_election() -> Result<()> {
    let mut api = Api::new()?;
    let leases = Resource::LEASES.path("kube-system");
    let path = Resource::LEASES.object_path("kube-system", "whereabouts");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": "whereabouts", "namespace": "kube-system" },
        "spec": { "holderIdentity": "node-1", "leaseDurationSeconds": 15 },
    });
    let (code, created) = api.post(&leases, &lease)?;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["kind"], "Lease");

    let mut renewed = created.clone();
    renewed["spec"]["holderIdentity"] = json!("node-2");
    let (code, updated) = api.put(&path, &renewed)?;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        api.server
            .object(Resource::LEASES, "kube-system", "whereabouts")
            .unwrap()["spec"]["holderIdentity"],
        "node-2"
    );
    // Another candidate with the old version loses.
    let (code, reply) = api.put(&path, &renewed)?;
    assert_eq!((code, reply["reason"].clone()), (409, json!("Conflict")));
    assert_eq!(
        reply["message"],
        r#"Operation cannot be fulfilled on leases.coordination.k8s.io "whereabouts": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(
        api.server
            .object(Resource::LEASES, "kube-system", "whereabouts"),
        Some(updated)
    );

    // Unlike a custom resource, a Lease is created by a PUT, and takes strategic merge patches.
    let mut other = lease.clone();
    other["metadata"]["name"] = json!("other");
    let (code, _) = api.put(
        &Resource::LEASES.object_path("kube-system", "other"),
        &other,
    )?;
    assert_eq!(code, 201);
    let (code, _) = api.call(
        "PATCH",
        &Resource::LEASES.object_path("kube-system", "other"),
        "application/strategic-merge-patch+json",
        r#"{"spec":{"leaseDurationSeconds":30}}"#,
    )?;
    assert_eq!(code, 200);
    let (_, list) = api.get(&leases)?;
    assert_eq!(list["kind"], "LeaseList");
    let durations: Vec<Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["spec"]["leaseDurationSeconds"].clone())
        .collect();
    assert_eq!(durations, [json!(30), json!(15)]);
    Ok(())
}

#[test]
fn fixtures_from_the_test_side() -> Result<()> {
    let mut api = Api::new()?;
    let seeded = api.server.add_object(
        Resource::OVERLAPPING_RANGE_IP_RESERVATIONS,
        json!({
            "metadata": { "namespace": "kube-system", "name": "10.2.0.5" },
            "spec": { "podref": "ns1/a", "ifname": "net1" },
        }),
    );
    assert_eq!(seeded["kind"], "OverlappingRangeIPReservation");
    assert_eq!(seeded["apiVersion"], "whereabouts.cni.cncf.io/v1alpha1");
    assert!(seeded["metadata"]["uid"].is_string());
    let path = Resource::OVERLAPPING_RANGE_IP_RESERVATIONS.object_path("kube-system", "10.2.0.5");
    assert_eq!(api.get(&path)?, (200, seeded.clone()));
    assert_eq!(
        api.server
            .objects(Resource::OVERLAPPING_RANGE_IP_RESERVATIONS),
        std::slice::from_ref(&seeded)
    );
    // The deleted object comes back at the deletion's resourceVersion, as from a DELETE.
    let mut deleted = api
        .server
        .delete_object(
            Resource::OVERLAPPING_RANGE_IP_RESERVATIONS,
            "kube-system",
            "10.2.0.5",
        )
        .expect("the deleted reservation");
    assert!(rv(&deleted) > rv(&seeded));
    deleted["metadata"]["resourceVersion"] = seeded["metadata"]["resourceVersion"].clone();
    assert_eq!(deleted, seeded);
    assert_eq!(api.get(&path)?.0, 404);
    assert!(api
        .server
        .objects(Resource::OVERLAPPING_RANGE_IP_RESERVATIONS)
        .is_empty());
    Ok(())
}

/// "The next 3 PATCHes on ippools answer 409": a conflict storm on one resource, which leaves
/// reads, other namespaces and other resources alone.
#[test]
fn faults_aimed_under_a_path() -> Result<()> {
    let mut api = Api::new()?;
    api.server.add_object(Resource::IP_POOLS, {
        let mut p = pool("p", json!({}));
        p["metadata"]["namespace"] = json!("ns1");
        p
    });
    api.server
        .add_object(Resource::IP_POOLS, pool("p", json!({})));
    api.server.add_object(
        Resource::LEASES,
        json!({ "metadata": { "namespace": "ns1", "name": "l" }, "spec": {} }),
    );
    api.server
        .inject_under("PATCH", &pools(), Fault::Status(409), 3);
    let claim = json!({ "spec": { "allocations": { "1": allocation("a") } } });
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(api.merge_patch(&pool_path("p"), &claim)?.0);
        assert_eq!(api.pool("p").unwrap()["spec"]["allocations"], json!({}));
        assert_eq!(api.get(&pool_path("p"))?.0, 200);
        let default = Resource::IP_POOLS.object_path("default", "p");
        assert_eq!(api.merge_patch(&default, &json!({}))?.0, 200);
        let lease = Resource::LEASES.object_path("ns1", "l");
        assert_eq!(api.merge_patch(&lease, &json!({}))?.0, 200);
    }
    assert_eq!(codes, [409, 409, 409]);
    let (code, patched) = api.merge_patch(&pool_path("p"), &claim)?;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        api.pool("p").unwrap()["spec"]["allocations"]["1"],
        allocation("a")
    );
    let conflicts: Vec<String> = api
        .server
        .requests()
        .into_iter()
        .filter(|r| r.status == 409)
        .map(|r| r.path)
        .collect();
    assert_eq!(conflicts, [pool_path("p"), pool_path("p"), pool_path("p")]);

    // The prefix ends at a path segment: `ippools` does not aim at `ippoolsx`.
    api.server.inject_under(
        "GET",
        &format!("/apis/{WHEREABOUTS}/v1alpha1/namespaces/ns"),
        Fault::Status(500),
        1,
    );
    assert_eq!(api.get(&pool_path("p"))?.0, 200);
    Ok(())
}

#[test]
fn discovery_and_kubectl() -> Result<()> {
    let mut api = Api::new()?;
    let (code, groups) = api.get("/apis")?;
    assert_eq!(code, 200);
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "k8s.cni.cncf.io",
            WHEREABOUTS,
            "coordination.k8s.io",
            "apps"
        ]
    );
    assert_eq!(
        groups["groups"][1]["preferredVersion"]["groupVersion"],
        "whereabouts.cni.cncf.io/v1alpha1"
    );
    let (code, resources) = api.get(&format!("/apis/{WHEREABOUTS}/v1alpha1"))?;
    assert_eq!(code, 200);
    let kinds: Vec<(&str, &str)> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("ippools", "IPPool"),
            (
                "overlappingrangeipreservations",
                "OverlappingRangeIPReservation"
            ),
            ("nodeslicepools", "NodeSlicePool"),
        ]
    );
    assert_eq!(resources["resources"][0]["singularName"], "ippool");
    assert_eq!(api.get(&format!("/apis/{WHEREABOUTS}/v2"))?.0, 404);
    assert_eq!(api.get("/apis/coordination.k8s.io/v1")?.0, 200);

    // kubectl finds the resources through discovery (and sends a token only over HTTPS).
    let server = KubeApiServer::https()?;
    let dir = tempfile::tempdir()?;
    let kubeconfig: PathBuf = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
    let stored = server.add_object(Resource::IP_POOLS, {
        let mut p = pool("p", json!({}));
        p["metadata"]["namespace"] = json!("ns1");
        p
    });
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let got: Value = serde_json::from_str(&kubectl(&[
        "get", "ippools", "-n", "ns1", "p", "-o", "json",
    ]))?;
    assert_eq!(got, stored);
    let names = kubectl(&["get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "name"]);
    assert_eq!(names.trim(), "ippool.whereabouts.cni.cncf.io/p");
    kubectl(&["delete", "--wait=false", "ippool", "-n", "ns1", "p"]);
    assert_eq!(server.object(Resource::IP_POOLS, "ns1", "p"), None);
    Ok(())
}

/// IPAMClaims have a status subresource, as their CRD gives them: a create drops the status,
/// a write to the object keeps the stored status, and a write to `/status` changes only the
/// status. Discovery lists their version under the NADs' group.
#[test]
fn ipam_claims_write_their_status_only_through_the_subresource() -> Result<()> {
    let mut api = Api::new()?;
    let claims = Resource::IPAM_CLAIMS.path("ns1");
    let claim = Resource::IPAM_CLAIMS.object_path("ns1", "vm1");
    let status = format!("{claim}/status");
    let (code, created) = api.post(
        &claims,
        &json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
                "metadata": {"name": "vm1"}, "spec": {"network": "blue", "interface": "net1"},
                "status": {"ips": ["10.0.0.9/24"]}}),
    )?;
    assert_eq!(code, 201, "{created}");
    assert!(created.get("status").is_none(), "{created}");

    let (code, patched) = api.merge_patch(
        &status,
        &json!({"spec": {"network": "red"}, "metadata": {"labels": {"a": "b"}},
                "status": {"ips": ["10.0.0.1/24"], "ownerPod": {"name": "p"}}}),
    )?;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"]["network"], "blue");
    assert!(patched["metadata"].get("labels").is_none(), "{patched}");
    assert_eq!(
        patched["status"],
        json!({"ips": ["10.0.0.1/24"], "ownerPod": {"name": "p"}})
    );
    assert!(rv(&patched) > rv(&created));

    let (code, patched) = api.merge_patch(
        &claim,
        &json!({"spec": {"network": "red"}, "status": {"ips": []}}),
    )?;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"]["network"], "red");
    assert_eq!(patched["status"]["ips"], json!(["10.0.0.1/24"]));
    assert_eq!(api.get(&status)?.1, patched);

    let stale = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                       "status": {"ips": []}});
    assert_eq!(api.merge_patch(&status, &stale)?.0, 409);
    // Only a resource with a status subresource has one.
    let pool_status = format!("{}/status", pool_path("p"));
    assert_eq!(api.get(&pool_status)?.0, 404);

    let (_, groups) = api.get("/apis")?;
    let nads = &groups["groups"][0];
    assert_eq!(nads["name"], "k8s.cni.cncf.io");
    assert_eq!(nads["preferredVersion"]["version"], "v1");
    let versions: Vec<&str> = nads["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v1", "v1alpha1"]);
    let (code, resources) = api.get("/apis/k8s.cni.cncf.io/v1alpha1")?;
    assert_eq!(code, 200);
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ipamclaims", "ipamclaims/status"]);
    Ok(())
}
