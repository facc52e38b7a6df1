//! What the node tools share: the installer, thick mode's daemon and shim, and `multus try`.
//! Each is a format or a mechanism of its own: stop signals ([`signals`]), HTTP/1 over a
//! socket ([`http1`]), the node's primary network ([`primary`]) and Kubernetes object files
//! ([`documents`]).

pub mod documents;
pub mod http1;
pub mod primary;
pub mod signals;
