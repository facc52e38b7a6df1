//! The netkit crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod firewall_tools;
mod masq;
mod netlink;
mod netns;
mod sysctl;
