//! IPAM plugins: host-local (ranges, reservations on disk), static (addresses from the config
//! or the runtime), and dhcp (leases from a DHCP server, held by a daemon). All read the whole network config on stdin, with their settings
//! under `ipam`, so an interface plugin can call them in-process or exec them.

mod common;
pub mod dhcp;
pub mod error;
pub mod host_local;
mod json;
pub mod static_ipam;
pub mod whereabouts;

pub use error::Error;
