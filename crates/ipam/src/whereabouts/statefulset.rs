//! `keep_statefulset_addresses`: a StatefulSet's pod keeps its address across restarts, keyed
//! by its name (which the StatefulSet gives back to the pod's replacement), until the
//! StatefulSet no longer wants that ordinal (scaled down) or is gone.
//!
//! Its allocation's `podref` is `statefulset:<namespace>/<pod>`: no pod's namespace has a `:`,
//! so DEL and the reconciler's pod checks do not apply, and the pod's replacement finds it as a
//! pod finds its own.

use serde_json::Value;

const PODREF_PREFIX: &str = "statefulset:";

/// The `podref` of StatefulSet pod `pod`'s allocations, in `namespace`.
pub fn statefulset_podref(namespace: &str, pod: &str) -> String {
    format!("{PODREF_PREFIX}{namespace}/{pod}")
}

/// A StatefulSet's pod, as its allocation names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    pub namespace: &'a str,
    /// `<statefulset>-<ordinal>`.
    pub pod: &'a str,
    pub statefulset: &'a str,
    pub ordinal: u32,
}

/// The StatefulSet pod an allocation's `podref` names; `None` for any other.
pub fn statefulset_member(podref: &str) -> Option<Member<'_>> {
    let (namespace, pod) = podref.strip_prefix(PODREF_PREFIX)?.split_once('/')?;
    let (statefulset, ordinal) = pod.rsplit_once('-')?;
    Some(Member {
        namespace,
        pod,
        statefulset,
        ordinal: ordinal.parse().ok()?,
    })
}

/// The StatefulSet that controls `pod` (its controller owner reference), when its name is the
/// StatefulSet's followed by an ordinal, as the StatefulSet controller names its pods.
pub fn owning_statefulset(pod: &Value) -> Option<&str> {
    let name = pod.pointer("/metadata/name")?.as_str()?;
    let owner = pod
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|o| o["controller"] == true && o["kind"] == "StatefulSet")?["name"]
        .as_str()?;
    let ordinal = name.strip_prefix(owner)?.strip_prefix('-')?;
    (!ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit())).then_some(owner)
}

/// Whether StatefulSet `statefulset` (as read) still wants pod `ordinal`: its ordinals run from
/// `spec.ordinals.start` (0 unless set) for `spec.replicas` (1 unless set).
pub fn wants_ordinal(statefulset: &Value, ordinal: u32) -> bool {
    let number = |p: &str, default: u64| {
        statefulset
            .pointer(p)
            .and_then(Value::as_u64)
            .unwrap_or(default)
    };
    let start = number("/spec/ordinals/start", 0);
    let replicas = number("/spec/replicas", 1);
    (start..start + replicas).contains(&u64::from(ordinal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_owners_and_ordinals() {
        let podref = statefulset_podref("db", "pg-12");
        assert_eq!(podref, "statefulset:db/pg-12");
        assert_eq!(
            statefulset_member(&podref),
            Some(Member {
                namespace: "db",
                pod: "pg-12",
                statefulset: "pg",
                ordinal: 12
            })
        );
        assert_eq!(statefulset_member("db/pg-12"), None);
        assert_eq!(statefulset_member("statefulset:db/pg"), None);
        let pod = |name: &str, kind: &str| {
            json!({"metadata": {"name": name, "ownerReferences": [
                {"kind": kind, "name": "pg", "controller": true}]}})
        };
        assert_eq!(owning_statefulset(&pod("pg-0", "StatefulSet")), Some("pg"));
        assert_eq!(owning_statefulset(&pod("pg-0", "ReplicaSet")), None);
        assert_eq!(owning_statefulset(&pod("pgx-0", "StatefulSet")), None);
        assert_eq!(owning_statefulset(&pod("pg-a", "StatefulSet")), None);
        let sts = json!({"spec": {"replicas": 3}});
        assert!(wants_ordinal(&sts, 2));
        assert!(!wants_ordinal(&sts, 3));
        let shifted = json!({"spec": {"replicas": 2, "ordinals": {"start": 5}}});
        assert!(!wants_ordinal(&shifted, 0));
        assert!(wants_ordinal(&shifted, 6));
        assert!(wants_ordinal(&json!({"spec": {}}), 0));
    }
}
