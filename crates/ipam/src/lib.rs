//! IPAM plugins: host-local (ranges, reservations on disk) and static (addresses from the
//! config or the runtime). Both read the whole network config on stdin, with their settings
//! under `ipam`, so an interface plugin can call them in-process or exec them.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod common;
pub mod error;
pub mod host_local;
mod json;
pub mod static_ipam;

pub use error::Error;
