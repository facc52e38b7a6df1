//! Test support: network namespaces owned by a test, and running CNI plugin binaries exactly as a
//! container runtime does (env, stdin, stdout, exit code).
//!
//! Nothing here touches the machine's root network namespace: plugins run with their process
//! moved into a "node" namespace that the test created. DHCP servers and daemons run there too.

pub mod dhcp;
mod netns;
mod plugin;

pub use netns::{delete_all_of_this_process, Netns};
pub use plugin::{
    reference_dir, reservation_files, workspace_binary, CniCall, CniOutput, PluginDir,
};
