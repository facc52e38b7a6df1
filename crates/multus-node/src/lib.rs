//! What the `multus` binary runs besides the CNI commands: the installer (`multus install`),
//! the NAD checker (`multus lint`) and `multus try`.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod install;
pub mod lint;
pub mod tryout;
