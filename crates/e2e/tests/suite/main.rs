//! The e2e crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod admission;
mod certificates;
mod deploy_trees;
mod doctor;
mod failures;
mod hotplug;
mod missing_networks;
mod reboot;
mod status;
mod teardown;
mod thick_watch;
mod upstream_cases;
mod walkthrough;
mod whereabouts;
