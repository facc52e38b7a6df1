//! An address held back: when an ADD chose it, another host on the network answered the
//! conflict probe for it, and the DEL that released it said so ([`cni::in_use`]). Its
//! allocation, and its reservation with overlapping ranges, stay for [`HOLD`] but name no pod:
//! ADDs skip the address meanwhile, and the first ADD or reconciler pass after frees it.
//!
//! A hold lives in the reference's own fields, which its CRD's schema keeps: `id` is
//! `in-use-until-<unix seconds>` and `podref` is `address-in-use/<MAC that answered>`. No pod
//! has a name with a MAC's colons, so no pod ever owns a hold; the reference's reconciler,
//! which knows nothing of holds, frees one at its next pass as a gone pod's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::pool::Allocation;

/// How long an address another host answered for is skipped.
pub const HOLD: Duration = Duration::from_secs(600);
const ID_PREFIX: &str = "in-use-until-";
const PODREF_PREFIX: &str = "address-in-use/";

/// The allocation that holds an address `mac` answered for, from `now` for [`HOLD`].
pub fn hold(mac: &str, now: SystemTime) -> Allocation {
    let until = (now + HOLD)
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Allocation {
        id: format!("{ID_PREFIX}{until}"),
        podref: format!("{PODREF_PREFIX}{mac}"),
        ifname: String::new(),
    }
}

/// When the hold stored as `id` and `podref` ends; `None` when they are a pod's.
pub fn held_until(id: &str, podref: &str) -> Option<SystemTime> {
    podref.strip_prefix(PODREF_PREFIX)?;
    let secs = id.strip_prefix(ID_PREFIX)?.parse().ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Whether `a` is a hold that has ended by `now`.
pub fn has_ended(a: &Allocation, now: SystemTime) -> bool {
    held_until(&a.id, &a.podref).is_some_and(|until| until <= now)
}

/// The JSON patch that turns a reservation still naming `podref` into `held`'s hold.
pub fn hold_reservation_patch(podref: &str, held: &Allocation) -> Value {
    json!([
        {"op": "test", "path": "/spec/podref", "value": podref},
        {"op": "replace", "path": "/spec/podref", "value": held.podref},
        {"op": "add", "path": "/spec/containerid", "value": held.id},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_names_no_pod_and_ends() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let h = hold("02:42:ac:11:00:02", now);
        assert_eq!(h.id, "in-use-until-1800000600");
        assert_eq!(h.podref, "address-in-use/02:42:ac:11:00:02");
        assert_eq!(held_until(&h.id, &h.podref), Some(now + HOLD));
        assert!(!has_ended(&h, now));
        assert!(has_ended(&h, now + HOLD));
        // A pod's allocation is never a hold, whatever its container ID says.
        assert_eq!(held_until("in-use-until-5", "default/a"), None);
        assert_eq!(held_until("c1", "address-in-use/02:42:ac:11:00:02"), None);
        assert_eq!(
            hold_reservation_patch("default/a", &h)[2],
            json!({"op": "add", "path": "/spec/containerid", "value": "in-use-until-1800000600"})
        );
    }
}
