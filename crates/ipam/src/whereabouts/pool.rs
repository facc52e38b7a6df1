//! The IPPool object: its shape (`spec.range`, `spec.allocations` keyed by the decimal offset
//! from the network address), what an ADD or DEL changes in it, and the JSON patches that
//! write those changes only if the allocation they change is still as it was read.
//!
//! Patches name only the allocation they change, so a key this module cannot read (written by
//! some other tool) is kept, where the reference's whole-map diff would drop it. Each tests
//! that allocation (free, or held by the same owner) rather than the pool's resourceVersion:
//! the API server applies a JSON patch to the object as it is when the write lands, so the
//! test is exactly the condition the write needs, and writers of other addresses of the pool
//! do not make each other read it again. A write that needs the whole pool as read (the
//! reconciler's, a pool whose map is missing) still tests the resourceVersion.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use serde_json::{json, Value};

use super::range::Range;

/// The API group and version of whereabouts' objects.
pub const API_VERSION: &str = "whereabouts.cni.cncf.io/v1alpha1";

/// One address's owner, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The container ID.
    pub id: String,
    /// `namespace/name`.
    pub podref: String,
    pub ifname: String,
}

impl Allocation {
    fn to_value(&self) -> Value {
        let mut v = json!({"id": self.id, "podref": self.podref});
        if !self.ifname.is_empty() {
            v["ifname"] = json!(self.ifname);
        }
        v
    }
}

/// A pool as read, with the resourceVersion every patch is conditioned on.
#[derive(Clone, Debug)]
pub struct Pool {
    pub resource_version: String,
    pub allocations: BTreeMap<u128, Allocation>,
    /// Whether `spec.allocations` is an object a patch can add a key to.
    has_map: bool,
}

/// What ADD does in a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The pod's interface already holds this address: it is handed back, and the container
    /// ID written to it when it changed.
    Reuse { offset: u128, ip: IpAddr },
    /// The lowest free address.
    New { offset: u128, ip: IpAddr },
    /// Nothing is free.
    Full,
}

fn escape(offset: u128) -> String {
    // Decimal keys need no JSON-pointer escaping.
    format!("/spec/allocations/{offset}")
}

/// A pool or slice object that is not in the shape whereabouts writes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("the {0} has no metadata.resourceVersion")]
    NoResourceVersion(&'static str),
    #[error("a status.allocations entry has no sliceRange")]
    SliceWithoutRange,
    #[error("status.allocations is not a list")]
    AllocationsNotAList,
}

impl Pool {
    /// The object to create for a range the first time it is used.
    pub fn new_object(name: &str, range: &Range) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": "IPPool",
            "metadata": {"name": name},
            "spec": {"range": range.subnet.to_string(), "allocations": {}},
        })
    }

    /// Reads a pool object. Keys that are not decimal offsets are left out, as the reference
    /// leaves them out; their addresses are unknown. Returns how many were left out too.
    pub fn from_object(obj: &Value) -> Result<(Pool, usize), ObjectError> {
        let resource_version = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            .ok_or(ObjectError::NoResourceVersion("IPPool"))?
            .to_owned();
        let field =
            |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        let mut allocations = BTreeMap::new();
        let mut unreadable = 0;
        let map = obj.pointer("/spec/allocations");
        if let Some(Value::Object(m)) = map {
            for (key, a) in m {
                match key.parse::<u128>() {
                    Ok(offset) if a.is_object() => {
                        allocations.insert(
                            offset,
                            Allocation {
                                id: field(a, "id"),
                                podref: field(a, "podref"),
                                ifname: field(a, "ifname"),
                            },
                        );
                    }
                    _ => unreadable += 1,
                }
            }
        }
        let has_map = matches!(map, Some(Value::Object(_)));
        Ok((
            Pool {
                resource_version,
                allocations,
                has_map,
            },
            unreadable,
        ))
    }

    /// The reference's choice: the pod's own address for this interface if it has one, else
    /// the lowest free address of the range, skipping `skip` (offsets found reserved by another
    /// pod through an overlapping range). With `nth` above 0, the free address that many
    /// places further up (or the highest free one), so that writers who lost a write to each
    /// other spread over the free addresses instead of all trying the lowest again.
    pub fn choose(
        &self,
        range: &Range,
        podref: &str,
        ifname: &str,
        skip: &HashSet<u128>,
        nth: usize,
    ) -> Choice {
        let mine = self
            .allocations
            .iter()
            .find(|(_, a)| a.podref == podref && a.ifname == ifname);
        if let Some((&offset, _)) = mine {
            if let Some(ip) = range.ip_at(offset) {
                return Choice::Reuse { offset, ip };
            }
        }
        let mut taken: HashSet<u128> = self.allocations.keys().copied().collect();
        taken.extend(skip);
        let picked = range.candidates(&taken).take(nth + 1).last();
        match picked.and_then(|ip| Some((range.offset_of(ip)?, ip))) {
            Some((offset, ip)) => Choice::New { offset, ip },
            None => Choice::Full,
        }
    }

    /// The allocation of this container's interface, for DEL.
    pub fn find_container(&self, id: &str, ifname: &str) -> Option<u128> {
        self.allocations
            .iter()
            .find(|(_, a)| a.id == id && a.ifname == ifname)
            .map(|(&offset, _)| offset)
    }

    fn guard(&self) -> Value {
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": self.resource_version})
    }

    /// Takes `offset` for `owner`, if the offset is still free.
    pub fn assign_patch(&self, offset: u128, owner: &Allocation) -> Value {
        if self.has_map {
            json!([
                {"op": "test", "path": escape(offset), "value": null},
                {"op": "add", "path": escape(offset), "value": owner.to_value()},
            ])
        } else {
            json!([
                self.guard(),
                {"op": "add", "path": "/spec/allocations", "value": {offset.to_string(): owner.to_value()}},
            ])
        }
    }

    /// Writes the new container ID into a reused allocation, if the allocation still names the
    /// pod it was read with.
    pub fn set_id_patch(&self, offset: u128, id: &str) -> Value {
        let podref = self.allocations.get(&offset).map(|a| a.podref.as_str());
        json!([
            {"op": "test", "path": format!("{}/podref", escape(offset)), "value": podref},
            {"op": "replace", "path": format!("{}/id", escape(offset)), "value": id},
        ])
    }

    /// Frees `offset`, if the allocation still names the container it was read with.
    pub fn release_patch(&self, offset: u128) -> Value {
        let id = self.allocations.get(&offset).map(|a| a.id.as_str());
        json!([
            {"op": "test", "path": format!("{}/id", escape(offset)), "value": id},
            {"op": "remove", "path": escape(offset)},
        ])
    }

    /// Turns the container's allocation at `offset` into `held` ([`super::hold`]), if it still
    /// names the container it was read with.
    pub fn hold_patch(&self, offset: u128, held: &Allocation) -> Value {
        let id = self.allocations.get(&offset).map(|a| a.id.as_str());
        json!([
            {"op": "test", "path": format!("{}/id", escape(offset)), "value": id},
            {"op": "replace", "path": escape(offset), "value": held.to_value()},
        ])
    }

    /// The offsets of holds that have ended by `now`.
    pub fn ended_holds(&self, now: std::time::SystemTime) -> Vec<u128> {
        self.allocations
            .iter()
            .filter(|(_, a)| super::hold::has_ended(a, now))
            .map(|(&offset, _)| offset)
            .collect()
    }

    /// Frees every offset of `offsets` in one write, if the pool is still as it was read.
    pub fn release_all_patch(&self, offsets: &[u128]) -> Value {
        let removes = offsets
            .iter()
            .map(|&o| json!({"op": "remove", "path": escape(o)}));
        Value::Array(std::iter::once(self.guard()).chain(removes).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(s: &str) -> Range {
        Range::new(s.parse().unwrap(), None, None, vec![]).unwrap()
    }

    fn pool(allocations: Value) -> Pool {
        let obj = json!({"metadata": {"name": "p", "resourceVersion": "41"},
                         "spec": {"range": "10.77.0.0/24", "allocations": allocations}});
        Pool::from_object(&obj).unwrap().0
    }

    #[test]
    fn reads_the_reference_shape() {
        let obj = json!({"metadata": {"resourceVersion": "7"},
            "spec": {"range": "10.77.0.0/24", "allocations": {
                "5": {"id": "c1", "podref": "ns/a", "ifname": "net1"},
                "6": {"id": "c2", "podref": "ns/b"},
                "x": {"id": "c3", "podref": "ns/c"},
                "7": "garbage"}}});
        let (p, unreadable) = Pool::from_object(&obj).unwrap();
        assert_eq!(unreadable, 2);
        assert_eq!(p.allocations.len(), 2);
        assert_eq!(p.allocations[&6].ifname, "");
        assert_eq!(p.find_container("c1", "net1"), Some(5));
        assert_eq!(p.find_container("c1", "net2"), None);
        assert!(Pool::from_object(&json!({"spec": {}})).is_err());
        let created = Pool::new_object("10.77.0.0-24", &range("10.77.0.5/24"));
        assert_eq!(
            created["spec"],
            json!({"range": "10.77.0.0/24", "allocations": {}})
        );
    }

    #[test]
    fn choose_reuses_then_takes_the_lowest_free() {
        let r = range("10.77.0.0/29");
        let p = pool(
            json!({"1": {"id": "c1", "podref": "ns/a", "ifname": "net1"},
                            "3": {"id": "c2", "podref": "ns/b", "ifname": "net1"}}),
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            p.choose(&r, "ns/a", "net1", &HashSet::new(), 0),
            Choice::Reuse {
                offset: 1,
                ip: ip("10.77.0.1")
            }
        );
        assert_eq!(
            p.choose(&r, "ns/a", "net2", &HashSet::new(), 0),
            Choice::New {
                offset: 2,
                ip: ip("10.77.0.2")
            }
        );
        assert_eq!(
            p.choose(&r, "ns/c", "net1", &[2, 4].into(), 0),
            Choice::New {
                offset: 5,
                ip: ip("10.77.0.5")
            }
        );
        assert_eq!(
            p.choose(&r, "ns/c", "net1", &[2, 4, 5, 6].into(), 0),
            Choice::Full
        );
        // Spread: two places up, or the highest free one.
        assert_eq!(
            p.choose(&r, "ns/c", "net1", &HashSet::new(), 2),
            Choice::New {
                offset: 5,
                ip: ip("10.77.0.5")
            }
        );
        assert_eq!(
            p.choose(&r, "ns/c", "net1", &HashSet::new(), 9),
            Choice::New {
                offset: 6,
                ip: ip("10.77.0.6")
            }
        );
    }

    #[test]
    fn patches_test_what_they_change() {
        let p = pool(json!({}));
        let owner = Allocation {
            id: "c9".into(),
            podref: "ns/z".into(),
            ifname: "net1".into(),
        };
        assert_eq!(
            p.assign_patch(9, &owner),
            json!([{"op": "test", "path": "/spec/allocations/9", "value": null},
                   {"op": "add", "path": "/spec/allocations/9", "value": {"id": "c9", "podref": "ns/z", "ifname": "net1"}}])
        );
        let p = pool(json!({"9": {"id": "c9", "podref": "ns/z", "ifname": "net1"}}));
        assert_eq!(
            p.release_patch(9),
            json!([{"op": "test", "path": "/spec/allocations/9/id", "value": "c9"},
                   {"op": "remove", "path": "/spec/allocations/9"}])
        );
        assert_eq!(
            p.set_id_patch(9, "c10"),
            json!([{"op": "test", "path": "/spec/allocations/9/podref", "value": "ns/z"},
                   {"op": "replace", "path": "/spec/allocations/9/id", "value": "c10"}])
        );
        let held = super::super::hold::hold("02:42:ac:11:00:02", std::time::UNIX_EPOCH);
        assert_eq!(
            p.hold_patch(9, &held),
            json!([{"op": "test", "path": "/spec/allocations/9/id", "value": "c9"},
                   {"op": "replace", "path": "/spec/allocations/9",
                    "value": {"id": "in-use-until-600", "podref": "address-in-use/02:42:ac:11:00:02"}}])
        );
        let p2 = pool(json!({"9": held.to_value(), "10": {"id": "c10", "podref": "ns/y"}}));
        assert_eq!(p2.ended_holds(std::time::UNIX_EPOCH), Vec::<u128>::new());
        assert_eq!(
            p2.ended_holds(std::time::UNIX_EPOCH + super::super::HOLD),
            [9]
        );
        assert_eq!(
            p.release_all_patch(&[9]),
            json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                   {"op": "remove", "path": "/spec/allocations/9"}])
        );
        // A pool whose allocations are null gets the whole map.
        let p = pool(Value::Null);
        assert_eq!(
            p.assign_patch(
                3,
                &Allocation {
                    id: "c".into(),
                    podref: "n/p".into(),
                    ifname: String::new()
                }
            )[1],
            json!({"op": "add", "path": "/spec/allocations", "value": {"3": {"id": "c", "podref": "n/p"}}})
        );
    }
}
