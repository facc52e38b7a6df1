//! What one trial found, as plain data: filled while the trial runs, rendered afterwards
//! (print.rs). A section is `None` until the trial got that far.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::Serialize;

use super::state::Diff;

#[derive(Debug, Default, Serialize)]
pub struct Trial {
    /// `example <name>: pod <ns>/<name>`, or `pod <ns>/<name> from <file>`.
    pub heading: String,
    /// The sandbox's name: its namespaces are `<sandbox>-node`, `-lan` and `-pod`.
    pub sandbox: String,
    pub node: Option<Node>,
    pub dhcp: Option<Dhcp>,
    /// Where whereabouts' pools are served, when a network uses it.
    pub whereabouts_api: Option<String>,
    pub add: Option<Outcome>,
    /// What the pod got; only after a successful ADD.
    pub attached: Option<Attached>,
    pub events: Vec<Event>,
    /// One entry per network-status entry that names an interface; `None` when ADD failed.
    pub connectivity: Option<Vec<Check>>,
    pub exec: Option<Exec>,
    pub del: Option<Del>,
    /// `None` when --keep stopped the trial before DEL.
    pub left: Option<Leftovers>,
    /// How to enter and remove a sandbox kept by --keep.
    pub kept: Option<Kept>,
}

impl Trial {
    /// ADD worked, every check reached its peer, --exec succeeded, DEL worked, and nothing
    /// was left behind.
    pub fn passed(&self) -> bool {
        matches!(self.add, Some(Outcome::Ok))
            && self
                .connectivity
                .iter()
                .flatten()
                .all(|c| c.result.passed())
            && self.exec.as_ref().is_none_or(|e| e.success)
            && !matches!(self.del, Some(Del::Failed(_)))
            && self.left.as_ref().is_none_or(Leftovers::is_clean)
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    /// Namespaces of our own: the node with an uplink to a simulated lan.
    Simulated { uplink: String, lan_bridge: String },
    /// This machine's interfaces, only read; the cluster network is a macvlan on a parent
    /// inside the pod.
    OnHost { cluster_parent: String },
}

#[derive(Debug, Serialize)]
pub struct Dhcp {
    /// What dnsmasq serves on the lan.
    pub subnet: String,
    /// Where our dhcp daemon listens.
    pub socket: PathBuf,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// The error exactly as the runtime would get it.
    Failed(String),
}

#[derive(Debug, Serialize)]
pub struct Attached {
    /// Every link but `lo`.
    pub interfaces: Vec<Interface>,
    /// Main-table routes, as `ip route` prints them in brief.
    pub routes: Vec<String>,
    /// The network-status annotation as multus wrote it; `None` when not written.
    pub network_status: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Interface {
    pub name: String,
    /// The link kind; `device` when the kernel names none.
    pub kind: String,
    pub mac: String,
    pub mtu: u32,
    pub up: bool,
    pub addresses: Vec<IpNet>,
}

#[derive(Debug, Serialize)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub interface: String,
    /// The network-status entry's name.
    pub network: String,
    pub result: CheckResult,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckResult {
    /// The network-status entry names an interface the pod does not have.
    NoSuchInterface,
    /// Nothing to check.
    NoAddress,
    /// --on-host with no gateway to ping: nothing is added to the host to answer.
    NotChecked,
    Pinged {
        what: Target,
        target: IpAddr,
        place: Place,
        reached: bool,
    },
}

impl CheckResult {
    fn passed(&self) -> bool {
        match self {
            CheckResult::NoSuchInterface => false,
            CheckResult::NoAddress | CheckResult::NotChecked => true,
            CheckResult::Pinged { reached, .. } => *reached,
        }
    }
}

/// What was pinged.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Gateway,
    NodeAddress,
    Peer,
}

/// Where the pinged address was.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// The node has it already.
    Node,
    /// --on-host: somewhere on this machine's network.
    RealNetwork,
    /// Added to the bridge of the pod's veth for the check, and removed after.
    NodeBridge,
    /// The pod's veth is on no bridge: nowhere to put a peer.
    Nowhere,
    /// Added on the simulated lan.
    Lan,
}

#[derive(Debug, Serialize)]
pub struct Exec {
    pub command: String,
    /// Its stdout and stderr, interleaved as written.
    pub output: String,
    /// The exit status as the standard library prints it.
    pub status: String,
    pub success: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Del {
    /// --keep: the pod stays as ADD left it.
    NotRun,
    Ok,
    Failed(String),
}

#[derive(Debug, Serialize)]
pub struct Leftovers {
    /// The pod namespace compared with before ADD.
    pub pod: Diff,
    /// The node namespace and the sandbox's directories compared with before ADD.
    pub node: Diff,
    /// Leases the lan's dhcp server still holds.
    pub leases: Vec<String>,
    /// What whereabouts' pools and reservations still hold.
    pub allocations: Vec<String>,
}

impl Leftovers {
    pub fn is_clean(&self) -> bool {
        self.leases.is_empty()
            && self.allocations.is_empty()
            && self.pod.left.is_empty()
            && self.node.left.is_empty()
    }
}

#[derive(Debug, Serialize)]
pub struct Kept {
    pub pod_netns: String,
    /// `None` on the host: the node is this machine.
    pub node_netns: Option<String>,
    pub dir: PathBuf,
}
