//! The multus meta-plugin.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod k8s;
