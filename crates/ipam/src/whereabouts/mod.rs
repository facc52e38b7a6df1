//! whereabouts: cluster-wide IPAM whose state lives in the Kubernetes API. This module is the
//! storage-agnostic half: the configuration, the ranges and the order addresses are tried in,
//! the offsets and the object names. The Kubernetes-backed store is beside multus's client.

mod claim;
mod config;
mod hold;
mod names;
mod pool;
mod range;
mod record;
mod reservation;
mod slices;
mod statefulset;

pub use claim::{claim_podref, claimed_by, status_patch as claim_status_patch};
pub use config::{keys, Config, NodeSlices, PodRef, Sources};
pub use hold::{has_ended, held_until, hold, hold_reservation_patch, HOLD};
pub use names::{pool_name, reservation_name};
pub use pool::{Allocation, Choice, ObjectError, Pool, API_VERSION};
pub use range::{parse_exclude, parse_range, Range};
pub use record::{Record, STATE_DIR};
pub use reservation::{adopt_patch, reservation_object, reservation_owner};
pub use slices::{cut, parse_slice_size, NodeSlicePool, MAX_SLICES};
pub use statefulset::{
    owning_statefulset, statefulset_member, statefulset_podref, wants_ordinal, Member,
};
