//! The plugins that run after an interface plugin, on what it made (upstream's plugins/meta):
//! tuning, sbr, vrf, bandwidth, portmap and firewall; and passthru, which hands the previous
//! result on.

pub mod bandwidth;
pub mod firewall;
pub mod passthru;
pub mod portmap;
pub mod sbr;
pub mod tuning;
pub mod vrf;
