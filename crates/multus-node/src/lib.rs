//! What the `multus` binary runs besides the CNI commands: the installer (`multus install`),
//! `multus try` and the whereabouts tools. `multus lint`'s checks are the `lint` crate's, and
//! thick mode's daemon and shim the `thick` crate's.

pub mod approver;
pub mod install;
pub mod tryout;
pub mod whereabouts_tools;
