//! What the `multus` binary runs besides the CNI commands: the installer (`multus install`),
//! the NAD checker (`multus lint`) and `multus try`. Thick mode's daemon and shim are the
//! `thick` crate's.

pub mod install;
pub mod lint;
pub mod tryout;
pub mod whereabouts_tools;
