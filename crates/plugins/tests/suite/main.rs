//! The plugins crate's integration tests, one module per subject, in one binary.

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

mod bad_input;
mod bridge;
mod check_drift;
mod common;
mod conflict_probe;
mod crash;
mod dhcp;
mod dhcp_env;
mod dhcp_macvlan_ipvlan;
mod dummy;
mod firewall_nft;
mod firewalld;
mod host_device_del;
mod host_local_concurrency;
mod host_local_symlinks;
mod iptables_concurrency;
mod ipvlan;
mod macvlan;
mod no_iptables;
mod node_bridge;
mod passthru;
mod podman;
mod portmap;
mod side_by_side;
mod tap;
mod tenant_paths;
mod validate;
mod vlan;
mod vrf;
