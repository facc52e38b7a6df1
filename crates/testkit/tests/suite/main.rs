//! The testkit crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod common;
mod kube_api_custom;
mod kube_api_http;
mod kube_api_http2;
mod kube_api_kubectl;
