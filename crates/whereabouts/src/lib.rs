//! whereabouts, the cluster-wide IPAM plugin, as a drop-in for the reference's: its pools and
//! reservations live in the Kubernetes API, in the reference's shapes and names, so nodes can
//! switch between the two in either direction.
//!
//! The reference runs every ADD and DEL of the cluster under one Lease. Here every pool write
//! is a JSON patch that tests the allocation it changes, so pods contend only when they want
//! the same address at the same moment, and then the loser reads again.

mod control;
mod error;
mod plugin;
mod reconcile;
mod store;

pub use control::{control, Watchers};
pub use error::Error;
pub use plugin::Whereabouts;
pub use reconcile::{reconcile, Summary};
