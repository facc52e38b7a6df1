//! The plugin <-> daemon protocol: one JSON request line from the plugin, one JSON response
//! line from the daemon, per connection. It is ours; the reference's Go daemon speaks net/rpc,
//! so our plugin and its daemon (or the reverse) cannot be mixed.

use cni::{CniError, CniResult, GcAttachment};
use serde::{Deserialize, Serialize};

use super::config::LeaseParams;

/// Longest request or response line either side accepts.
pub const MAX_LINE: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Op {
    Add,
    Del,
    Check,
    Status,
    Gc,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub op: Op,
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    /// Absolute path of the pod's namespace; empty when the runtime gave none (DEL).
    pub netns: String,
    pub params: LeaseParams,
    /// GC: the attachments of this network that are still in use; every other lease of the
    /// network is released.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub valid: Vec<GcAttachment>,
}

/// The attachment a lease belongs to: (container ID, network name, interface name).
pub type Key = (String, String, String);

pub fn key(container_id: &str, network: &str, ifname: &str) -> Key {
    (
        container_id.to_owned(),
        network.to_owned(),
        ifname.to_owned(),
    )
}

impl Request {
    pub fn key(&self) -> Key {
        key(&self.container_id, &self.network, &self.ifname)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Response {
    /// ADD's result; nothing for the other commands.
    Ok(Option<CniResult>),
    Error(CniError),
}
