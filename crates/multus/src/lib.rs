//! The multus meta-plugin: its Kubernetes client and the node installer (`multus install`).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod install;
pub mod k8s;
