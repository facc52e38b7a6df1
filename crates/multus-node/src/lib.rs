//! What the `multus` binary runs besides the CNI commands: the installer (`multus install`),
//! the NAD checker (`multus lint`), `multus try`, and thick mode's daemon and shim.

pub mod install;
pub mod lint;
pub mod thick;
pub mod tryout;
