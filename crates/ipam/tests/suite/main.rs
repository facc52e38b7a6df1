//! The ipam crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod common;
mod fuzz;
mod host_local;
mod reference;
mod static_ipam;
