//! The multus meta-plugin: the container runtime calls it as the node's CNI network; it calls
//! the cluster network for the pod's first interface and one delegate per network the pod's
//! annotation selects, writes what the pod got to its network-status annotation, and undoes
//! everything when any part fails.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod api;
pub mod cmd;
pub mod config;
pub mod container_lock;
pub mod delegate;
pub mod devinfo;
pub mod error;
mod kube_api;
pub mod log;
pub mod pod_devices;
pub mod resolve;
pub mod route;
pub mod selection;
pub mod status;

pub use error::{Error, Result};

pub use kube_api::connect;
