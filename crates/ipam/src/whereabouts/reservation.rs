//! The OverlappingRangeIPReservation object: which pod holds an address across every pool, so
//! that pools whose ranges overlap never hand out the same address twice.

use serde_json::{json, Value};

use super::pool::API_VERSION;

/// The object to create when `podref`'s interface takes the address named by `name`.
/// `containerid` is in the CRD, but the reference never fills it; neither do we.
pub fn reservation_object(name: &str, podref: &str, ifname: &str) -> Value {
    let mut spec = json!({"podref": podref});
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
        let obj = reservation_object("fd77-3--1", "ns/a", "net1");
        assert_eq!(obj["spec"], json!({"podref": "ns/a", "ifname": "net1"}));
        assert_eq!(obj["kind"], "OverlappingRangeIPReservation");
        assert_eq!(
            reservation_object("x", "ns/a", "")["spec"],
            json!({"podref": "ns/a"})
        );
        let stored = json!({"metadata": {"resourceVersion": "9"}, "spec": {"podref": "ns/b", "containerid": ""}});
        assert_eq!(
            reservation_owner(&stored),
            ("ns/b".into(), Some("9".into()))
        );
    }
}
