//! The Network Plumbing WG's formats, as multus, whereabouts, `multus lint` and `multus try`
//! read and write them: [`selection`] (the networks annotations), [`status`] (network-status)
//! and [`devinfo`] (device-info files).

pub mod devinfo;
pub mod selection;
pub mod status;
