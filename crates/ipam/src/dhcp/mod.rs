//! dhcp: addresses from the site's DHCP server. The plugin side ([`Dhcp`]) is a thin client of
//! the daemon (`daemon`, with the crate's `daemon` feature), which holds the leases, renews
//! them, and keeps them across its own restarts. The client protocol is ours, on `dhcproto`'s
//! wire format; only the daemon speaks it, so it is part of the feature too.

pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(test)]
#[cfg(feature = "daemon")]
mod fuzz;
#[cfg(feature = "daemon")]
mod message;
#[cfg(feature = "daemon")]
mod packet;
mod plugin;
pub mod wire;

pub use plugin::Dhcp;
