//! What the `multus` binary runs besides the CNI commands: the installer (`multus install`),
//! the NAD checker (`multus lint`) and `multus try`.

pub mod install;
pub mod lint;
pub mod tryout;
