//! What the plugins share (upstream's pkg/): the container's namespace, the IPAM call, sysctls,
//! the address conflict probe, masquerading, MAC addresses, master and sub-links, CHECK's comparisons and the state files.

pub mod check;
pub mod conflict;
pub mod container;
pub mod ip_masq;
pub mod ipam_call;
pub mod mac;
pub mod master;
pub mod state_file;
pub mod sublink;
pub mod sys;
