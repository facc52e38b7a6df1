//! dhcp: addresses from the site's DHCP server. The plugin side ([`Dhcp`]) is a thin client of
//! the daemon ([`daemon`]), which holds the leases, renews them, and keeps them across its own
//! restarts. The client protocol is ours, on `dhcproto`'s wire format.

pub mod config;
pub mod daemon;
#[cfg(test)]
mod fuzz;
mod message;
mod packet;
mod plugin;
pub mod wire;

pub use plugin::{exchange, Dhcp};
