//! Packet filtering: the rules the plugins write, through iptables, ip6tables and nft, or
//! firewalld. Masquerade, host ports, forwarding, the spoof check, and firewalld's zones.

pub mod firewalld;
pub mod forward;
pub mod forward_nft;
pub mod hostport;
pub mod hostport_nft;
mod ipt;
pub mod masq;
pub mod nftables;
pub mod spoofcheck;

/// Whether `iptables` is installed: the reference plugins use it unless it is missing, and a
/// plugin with no backend named does as they do.
pub fn iptables_installed() -> bool {
    crate::tool::installed("iptables")
}
