//! The cni crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod cache;
mod config;
mod deadline;
mod env;
mod fuzz;
mod invoke;
mod network;
mod result;
mod skel;
