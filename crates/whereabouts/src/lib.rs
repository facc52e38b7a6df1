//! whereabouts, the cluster-wide IPAM plugin, as a drop-in for the reference's: its pools and
//! reservations live in the Kubernetes API, in the reference's shapes and names, so nodes can
//! switch between the two in either direction.
//!
//! The reference runs every ADD and DEL of the cluster under one Lease. Here every pool write
//! is a JSON patch conditioned on the resourceVersion read, so pods contend only when they
//! write the same pool at the same moment, and then the loser reads again.

mod error;
mod plugin;
mod reconcile;
mod store;

pub use error::Error;
pub use plugin::Whereabouts;
pub use reconcile::{reconcile, Summary};
