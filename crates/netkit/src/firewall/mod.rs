//! Packet filtering: the rules the plugins write, through iptables, ip6tables and nft, or
//! firewalld. Masquerade, host ports, forwarding, the spoof check, and firewalld's zones.

pub mod firewalld;
pub mod forward;
pub mod hostport;
mod ipt;
pub mod masq;
pub mod nftables;
pub mod spoofcheck;
