//! The multus-node crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod annotations;
mod aux_chain;
mod bad_config;
mod common;
mod crash;
mod device_info;
mod doctor;
mod in_cluster;
mod install;
mod interrupted;
mod kube;
mod lint;
mod multus;
mod podman;
mod security;
mod thick;
mod thick_mixed;
mod tryout;
mod webhook;
mod whereabouts;
