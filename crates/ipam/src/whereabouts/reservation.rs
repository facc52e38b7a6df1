//! The OverlappingRangeIPReservation object: which pod holds an address across every pool, so
//! that pools whose ranges overlap never hand out the same address twice.

use serde_json::{json, Value};

use super::pool::API_VERSION;

/// The object to create when `podref`'s interface takes the address named by `name`, in the
/// reference's shape. `containerid` is in the reference's CRD, though it never fills it: we
/// do, so that a new container of the same pod adopting the reservation changes it.
pub fn reservation_object(name: &str, podref: &str, ifname: &str, container_id: &str) -> Value {
    let mut spec = json!({"podref": podref, "containerid": container_id});
    if !ifname.is_empty() {
        spec["ifname"] = json!(ifname);
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "OverlappingRangeIPReservation",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// The JSON patch by which `container_id` adopts a reservation that still names `podref`:
/// writing its container ID changes the object's version, so that a reconciler which judged
/// the pod gone on an older read cannot delete it under the new container.
pub fn adopt_patch(podref: &str, container_id: &str) -> Value {
    json!([
        {"op": "test", "path": "/spec/podref", "value": podref},
        {"op": "add", "path": "/spec/containerid", "value": container_id},
    ])
}

/// The pod a reservation names, and the resourceVersion to delete it at.
pub fn reservation_owner(obj: &Value) -> (String, Option<String>) {
    let text = |path: &str| obj.pointer(path).and_then(Value::as_str).map(str::to_owned);
    (
        text("/spec/podref").unwrap_or_default(),
        text("/metadata/resourceVersion"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_shape() {
        let obj = reservation_object("fd77-3--1", "ns/a", "net1", "c1");
        assert_eq!(
            obj["spec"],
            json!({"podref": "ns/a", "ifname": "net1", "containerid": "c1"})
        );
        assert_eq!(obj["kind"], "OverlappingRangeIPReservation");
        assert_eq!(
            reservation_object("x", "ns/a", "", "c1")["spec"],
            json!({"podref": "ns/a", "containerid": "c1"})
        );
        assert_eq!(adopt_patch("ns/a", "c2")[1]["value"], "c2");
        let stored = json!({"metadata": {"resourceVersion": "9"}, "spec": {"podref": "ns/b", "containerid": ""}});
        assert_eq!(
            reservation_owner(&stored),
            ("ns/b".into(), Some("9".into()))
        );
    }
}
