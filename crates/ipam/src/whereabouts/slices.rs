//! Node slices (`node_slice_size`): the range cut into equal slices, one per node, so that each
//! node allocates from an IPPool of its own. This module owns the NodeSlicePool object: its
//! shape (`spec.range`, `spec.sliceSize`, `status.allocations` of `{nodeName, sliceRange}`,
//! `nodeName` empty for a free slice), how the range is cut, and the conditional patches that
//! give a slice to a node or take it back.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{json, Value};

use super::pool::{ObjectError, API_VERSION};
use crate::common::{from_num, num};

/// More slices than this would not fit one object (etcd keeps objects under about 1.5 MB).
pub const MAX_SLICES: u32 = 4096;

/// Parses `node_slice_size` as the reference does: a prefix length, with or without a `/`.
pub fn parse_slice_size(text: &str) -> Option<u8> {
    text.strip_prefix('/')
        .unwrap_or(text)
        .parse()
        .ok()
        .filter(|p: &u8| *p <= 128)
}

/// The slices of `range` at prefix `size`, lowest first, as the reference's controller cuts
/// them. `None` when `size` is shorter than the range's prefix, too long for its family, or
/// makes more than [`MAX_SLICES`].
pub fn cut(range: IpNet, size: u8) -> Option<Vec<IpNet>> {
    let range = range.trunc();
    if size < range.prefix_len() || size > range.max_prefix_len() {
        return None;
    }
    let bits = u32::from(size - range.prefix_len());
    if bits >= 32 || (1u32 << bits) > MAX_SLICES {
        return None;
    }
    // A /0 slice is 2^128 addresses: the shift would overflow.
    let step = 1u128.checked_shl(u32::from(range.max_prefix_len() - size))?;
    let first = num(range.network());
    let v4 = range.addr().is_ipv4();
    (0..(1u128 << bits))
        .map(|i| {
            let at = i.checked_mul(step).and_then(|o| o.checked_add(first))?;
            IpNet::new(from_num(at, v4), size).ok()
        })
        .collect()
}

/// A NodeSlicePool as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSlicePool {
    pub resource_version: String,
    /// `spec.range` and `spec.sliceSize`, as written.
    pub range: String,
    pub slice_size: String,
    /// `(nodeName, sliceRange)` in the object's order; an empty name is a free slice.
    pub slices: Vec<(String, String)>,
}

impl NodeSlicePool {
    /// The object to create for a range that has none yet: every slice free. The reference's
    /// controller writes the same; it adds itself to each slice's node as nodes join.
    pub fn new_object(name: &str, range: IpNet, slice_size: &str, slices: &[IpNet]) -> Value {
        let allocations: Vec<Value> = slices
            .iter()
            .map(|s| json!({"nodeName": "", "sliceRange": s.to_string()}))
            .collect();
        json!({
            "apiVersion": API_VERSION,
            "kind": "NodeSlicePool",
            "metadata": {"name": name},
            "spec": {"range": range.trunc().to_string(), "sliceSize": slice_size},
            "status": {"allocations": allocations},
        })
    }

    pub fn from_object(obj: &Value) -> Result<NodeSlicePool, ObjectError> {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        let resource_version = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            .ok_or(ObjectError::NoResourceVersion("NodeSlicePool"))?
            .to_owned();
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let slices = match obj.pointer("/status/allocations") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .map(|a| {
                    Some((
                        text(a, "nodeName").unwrap_or_default(),
                        text(a, "sliceRange")?,
                    ))
                })
                .collect::<Option<_>>()
                .ok_or(ObjectError::SliceWithoutRange)?,
            Some(_) => return Err(ObjectError::AllocationsNotAList),
        };
        Ok(NodeSlicePool {
            resource_version,
            range: text(spec, "range").unwrap_or_default(),
            slice_size: text(spec, "sliceSize").unwrap_or_default(),
            slices,
        })
    }

    /// Whether the object cuts `range` at `size` (the size compared as a number: `/28` and
    /// `28` are the same cut).
    pub fn cuts(&self, range: IpNet, size: u8) -> bool {
        self.range.parse::<IpNet>().ok() == Some(range.trunc())
            && parse_slice_size(&self.slice_size) == Some(size)
    }

    /// The slice `node` holds.
    pub fn slice_of(&self, node: &str) -> Option<IpNet> {
        self.slices
            .iter()
            .find(|(n, _)| n == node)
            .and_then(|(_, s)| s.parse().ok())
    }

    /// How many slices nodes hold.
    pub fn taken(&self) -> usize {
        self.slices.iter().filter(|(n, _)| !n.is_empty()).count()
    }

    fn guard(&self) -> Value {
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": self.resource_version})
    }

    /// Gives `node` the first free slice, lowest first as the reference's controller does:
    /// the slice and its patch, conditioned on the version read and on the slice being free.
    pub fn claim_patch(&self, node: &str) -> Option<(IpNet, Value)> {
        let (index, slice) = self
            .slices
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| n.is_empty())
            .find_map(|(i, (_, s))| Some((i, s.parse::<IpNet>().ok()?)))?;
        let path = format!("/status/allocations/{index}/nodeName");
        let patch = json!([
            self.guard(),
            {"op": "test", "path": path, "value": ""},
            {"op": "replace", "path": path, "value": node},
        ]);
        Some((slice, patch))
    }

    /// Frees the slices of nodes not in `nodes`, in one write conditioned on the version read:
    /// the freed `(node, slice)` pairs and the patch, or `None` when every holder lives.
    pub fn release_patch(
        &self,
        live: &dyn Fn(&str) -> bool,
    ) -> Option<(Vec<(String, String)>, Value)> {
        let mut freed = Vec::new();
        let mut ops = vec![self.guard()];
        for (i, (node, slice)) in self.slices.iter().enumerate() {
            if node.is_empty() || live(node) {
                continue;
            }
            let path = format!("/status/allocations/{i}/nodeName");
            ops.push(json!({"op": "test", "path": path, "value": node}));
            ops.push(json!({"op": "replace", "path": path, "value": ""}));
            freed.push((node.clone(), slice.clone()));
        }
        (!freed.is_empty()).then(|| (freed, Value::Array(ops)))
    }
}

/// The first and last address a slice hands out: its own network and broadcast addresses are
/// skipped, as the reference skips them.
pub fn usable(slice: IpNet) -> Option<(IpAddr, IpAddr)> {
    let (first, last) = (num(slice.network()), num(slice.broadcast()));
    let v4 = slice.addr().is_ipv4();
    (last >= first + 2).then(|| (from_num(first + 1, v4), from_num(last - 1, v4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn cuts_the_range_as_the_reference_does() {
        assert_eq!(parse_slice_size("/28"), Some(28));
        assert_eq!(parse_slice_size("28"), Some(28));
        assert_eq!(parse_slice_size("x"), None);
        assert_eq!(parse_slice_size("/129"), None);
        let slices = cut(net("10.0.0.0/8"), 10).unwrap();
        let text: Vec<String> = slices.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "10.0.0.0/10",
                "10.64.0.0/10",
                "10.128.0.0/10",
                "10.192.0.0/10"
            ]
        );
        assert_eq!(cut(net("10.0.0.5/24"), 24).unwrap(), [net("10.0.0.0/24")]);
        assert_eq!(
            cut(net("fd00::/62"), 64).unwrap().last(),
            Some(&net("fd00:0:0:3::/64"))
        );
        assert_eq!(cut(net("10.0.0.0/24"), 22), None);
        assert_eq!(cut(net("10.0.0.0/24"), 33), None);
        assert_eq!(cut(net("10.0.0.0/8"), 20).map(|s| s.len()), Some(4096));
        assert_eq!(cut(net("10.0.0.0/8"), 21), None);
        assert_eq!(cut(net("fd00::/48"), 112), None);
        assert_eq!(cut(net("::/0"), 0), None);
        assert_eq!(cut(net("0.0.0.0/0"), 0).map(|s| s.len()), Some(1));
    }

    #[test]
    fn the_reference_shape_claims_and_releases() {
        let obj = NodeSlicePool::new_object(
            "net1",
            net("10.0.0.0/8"),
            "/10",
            &cut(net("10.0.0.0/8"), 10).unwrap(),
        );
        assert_eq!(
            obj["spec"],
            json!({"range": "10.0.0.0/8", "sliceSize": "/10"})
        );
        assert_eq!(
            obj["status"]["allocations"][1],
            json!({"nodeName": "", "sliceRange": "10.64.0.0/10"})
        );
        let mut stored = obj.clone();
        stored["metadata"]["resourceVersion"] = json!("5");
        stored["status"]["allocations"][0]["nodeName"] = json!("node1");
        let pool = NodeSlicePool::from_object(&stored).unwrap();
        assert!(pool.cuts(net("10.0.0.0/8"), 10));
        assert!(!pool.cuts(net("10.0.0.0/8"), 12));
        assert!(!pool.cuts(net("10.0.0.0/9"), 10));
        assert_eq!(pool.slice_of("node1"), Some(net("10.0.0.0/10")));
        assert_eq!(pool.slice_of("node2"), None);
        assert_eq!(pool.taken(), 1);
        let (slice, patch) = pool.claim_patch("node2").unwrap();
        assert_eq!(slice, net("10.64.0.0/10"));
        assert_eq!(
            patch,
            json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
                   {"op": "test", "path": "/status/allocations/1/nodeName", "value": ""},
                   {"op": "replace", "path": "/status/allocations/1/nodeName", "value": "node2"}])
        );
        let (freed, patch) = pool.release_patch(&|n| n != "node1").unwrap();
        assert_eq!(freed, [("node1".to_owned(), "10.0.0.0/10".to_owned())]);
        assert_eq!(patch.as_array().map(Vec::len), Some(3));
        assert!(pool.release_patch(&|_| true).is_none());
        assert!(NodeSlicePool::from_object(&json!({"spec": {}})).is_err());
        assert_eq!(
            usable(net("10.0.0.16/28")),
            Some(("10.0.0.17".parse().unwrap(), "10.0.0.30".parse().unwrap()))
        );
        assert_eq!(usable(net("10.0.0.0/31")), None);
    }
}
