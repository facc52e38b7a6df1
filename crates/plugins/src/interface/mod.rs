//! The plugins that give a pod an interface (upstream's plugins/main): bridge, ptp, macvlan,
//! ipvlan, vlan, dummy, tap, host-device, and loopback.

pub mod bridge;
pub mod dummy;
pub mod host_device;
pub mod ipvlan;
pub mod loopback;
pub mod macvlan;
pub mod ptp;
pub mod tap;
pub mod vlan;
