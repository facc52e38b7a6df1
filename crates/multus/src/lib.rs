//! The multus meta-plugin: the container runtime calls it as the node's CNI network; it calls
//! the cluster network for the pod's first interface and one delegate per network the pod's
//! annotation selects, writes what the pod got to its network-status annotation, and undoes
//! everything when any part fails.
//!
//! A command runs in three stages ([`command`]): [`plan`], [`attach`], [`report`]. The formats
//! it reads and writes have a module each: [`config`] (the multus config), [`k8s_args`]
//! (`CNI_ARGS`), [`cache`] (the delegate cache); the Network Plumbing WG's annotations and
//! device-info files are the `npwg` crate's.

pub mod api;
pub mod attach;
pub mod cache;
pub mod command;
pub mod config;
pub mod container_lock;
pub mod delegate;
pub mod error;
pub mod invocation;
pub mod k8s_args;
pub mod log;
pub mod missing;
pub mod plan;
pub mod report;

pub use error::{Error, Result};
