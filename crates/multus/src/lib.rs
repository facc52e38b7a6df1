//! The multus meta-plugin: the container runtime calls it as the node's CNI network; it calls
//! the cluster network for the pod's first interface and one delegate per network the pod's
//! annotation selects, writes what the pod got to its network-status annotation, and undoes
//! everything when any part fails. Also the node tools: the installer (`multus install`), the
//! NAD checker (`multus lint`) and `multus try`.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod api;
pub mod checkpoint;
pub mod cmd;
pub mod config;
pub mod container_lock;
pub mod delegate;
pub mod devinfo;
pub mod error;
pub mod install;
pub mod k8s;
mod kube_api;
pub mod lint;
pub mod log;
pub mod pod_devices;
pub mod pod_resources;
pub mod resolve;
pub mod route;
pub mod selection;
pub mod status;
pub mod tryout;

pub use error::{Error, Result};

pub use kube_api::connect;
