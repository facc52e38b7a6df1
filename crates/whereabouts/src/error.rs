//! The plugin's errors and their CNI codes.

use cni::{CniError, Code};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ipam::Error),
    /// An API call failed (its call and cause are named).
    #[error("{0}")]
    Api(#[from] k8s::K8sError),
    /// Every address of the range is allocated (11: a DEL elsewhere frees one).
    #[error("no free address in {range}: every address is allocated (pool {pool})")]
    Full { range: String, pool: String },
    /// Other writers kept changing the object between our read and our write, or the
    /// deadline passed while free addresses turned out reserved elsewhere.
    #[error(
        "{object}: no write landed in {rounds} rounds (other writers kept changing it, or its \
         free addresses were reserved through overlapping ranges); try again"
    )]
    Contention { object: String, rounds: u32 },
    /// The reference's Lease stayed held by another until the deadline.
    #[error(
        "Lease {lease} is still held by {holder}: a node running the reference whereabouts \
         holds it while it allocates; try again"
    )]
    LeaseBusy { lease: String, holder: String },
    /// Another writer took the reference's Lease while this ADD held it.
    #[error(
        "the reference whereabouts' Lease was taken from this ADD while it allocated (a renewal \
         found it changed); its address was given back; try again"
    )]
    LeaseLost,
    /// Node-slice mode: every slice is held by a node (11: the reconciler frees the slices of
    /// nodes that left).
    #[error(
        "no free slice for node {node} in NodeSlicePool {pool}: its {slices} slices are all \
         held by other nodes; use a smaller node_slice_size, or run `whereabouts reconcile` to \
         free the slices of nodes that left the cluster"
    )]
    NoSlice {
        node: String,
        pool: String,
        slices: usize,
    },
    /// Node-slice mode: the NodeSlicePool cuts another range, or at another size.
    #[error("{0}")]
    SliceMismatch(String),
    /// An object in the API is not in the shape whereabouts writes.
    #[error("{object}: {source}")]
    Object {
        object: String,
        #[source]
        source: ipam::whereabouts::ObjectError,
    },
    /// A pool that was there when its creation failed, and gone when read again.
    #[error("pool {0} was created and deleted at once")]
    Vanished(String),
    /// CHECK: the pool does not hold the attachment's address.
    #[error("{0}")]
    NotAllocated(String),
    /// CHECK: the previous result does not show an allocated address.
    #[error("{0}")]
    Mismatch(String),
    /// The pod's IPAMClaim does not exist (11: it may be created after the pod).
    #[error(
        "IPAMClaim {0} not found: the pod's network selection names it in \
         ipam-claim-reference; create it, or remove the reference"
    )]
    NoClaim(String),
    /// A claim on a network whose addresses cannot follow a pod to another node.
    #[error("{0}")]
    ClaimRefused(String),
}

impl From<Error> for CniError {
    fn from(e: Error) -> CniError {
        let e = match e {
            Error::Config(inner) => return inner.into(),
            other => other,
        };
        let code = match &e {
            Error::Config(_) => Code::InvalidConfig,
            Error::Api(k) => k.cni_code(),
            Error::Full { .. }
            | Error::NoSlice { .. }
            | Error::Contention { .. }
            | Error::LeaseBusy { .. }
            | Error::LeaseLost
            | Error::Object { .. }
            | Error::Vanished(_)
            | Error::NoClaim(_) => Code::TryAgainLater,
            Error::SliceMismatch(_) | Error::ClaimRefused(_) => Code::InvalidConfig,
            Error::NotAllocated(_) => Code::UnknownContainer,
            Error::Mismatch(_) => Code::Internal,
        };
        CniError::new(code, e.to_string())
    }
}
