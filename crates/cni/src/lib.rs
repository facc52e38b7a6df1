//! The CNI protocol: network configurations, results in every spec version and the conversions
//! between them, error objects, the `CNI_*` environment, the plugin entry point, delegation to
//! other plugins through `CNI_PATH`, and the libcni result cache.

pub mod args;
pub mod atomic_file;
pub mod cache;
pub mod config;
pub mod decode;
pub mod dir;
pub mod env;
pub mod error;
pub mod go_duration;
pub mod in_use;
pub mod input;
pub mod invoke;
pub mod keys;
pub mod network;
pub mod path_roots;
pub mod quote;
pub mod result;
mod rooted_spawn;
pub mod skel;
pub mod version;

pub use config::{Dns, GcAttachment, NetConf, NetConfList};
pub use env::{CmdArgs, Command};
pub use error::{CniError, Code};
pub use result::{CniResult, Interface, IpConfig, Route};
pub use skel::{plugin_main, Plugin};
pub use version::Version;
