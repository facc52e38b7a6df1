//! Thick mode, upstream's default deployment: `multus-daemon` on every node keeps the
//! Kubernetes client and runs the multus commands; `multus-shim`, the CNI plugin the runtime
//! calls, hands each call to it over a unix socket. Both halves speak upstream's protocol
//! ([`wire`]), so either can be swapped for upstream's during a rolling upgrade.

pub mod daemon;
pub mod shim;
pub mod wire;
