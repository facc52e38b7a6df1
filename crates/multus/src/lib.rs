//! The multus meta-plugin: its Kubernetes client, the node installer (`multus install`) and
//! the NAD checker (`multus lint`).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod install;
pub mod k8s;
pub mod lint;
