//! Test support: network namespaces owned by a test, running CNI plugin binaries exactly as a
//! container runtime does (env, stdin, stdout, exit code) in a node and pod [`Sandbox`], a
//! Kubernetes API test server ([`kube_api`]), a fake kubelet pod-resources API
//! ([`pod_resources`]), podman as a runtime ([`podman`]), the upstream peers built from their
//! Go modules ([`peers`]), and the fuzz suites' corpus and mutations ([`fuzz`]).
//!
//! Nothing here touches the machine's root network namespace: plugins run with their process
//! moved into a "node" namespace that the test created. DHCP servers and daemons run there too.

// Test support: a failed setup panics, which fails the test that asked for it.
#![allow(clippy::expect_used)]

pub mod dhcp;
pub mod firewalld;
pub mod fuzz;
pub mod kube_api;
pub mod manifests;
mod netns;
pub mod peers;
mod plugin;
pub mod pod_resources;
pub mod podman;
mod sandbox;

pub use netns::{delete_all_of_this_process, Netns};
pub use plugin::{
    count_file_changes, reference_dir, reservation_files, test_path_roots, validate_config,
    workspace_binary, CniCall, CniOutput, PluginDir, FILE_CHANGES,
};
pub use sandbox::Sandbox;

/// Set (to any value) while the suites run with the aarch64 binaries under qemu-user (`cargo
/// xtask aarch64-test`): the few checks of kernel interfaces that qemu-user does not translate
/// for the emulated process are left out.
pub const EMULATED: &str = "MULTUS_RS_EMULATED";
