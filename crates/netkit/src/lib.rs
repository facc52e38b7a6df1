//! Linux networking for the CNI plugins and multus: network namespaces, a synchronous
//! rtnetlink layer, sysctl, tap devices, link-layer sockets and the address conflict probe,
//! traffic shaping, and packet filtering ([`firewall`]: masquerade, host port and forwarding
//! rules, the spoof check, firewalld's zones over D-Bus). Everything is synchronous and keeps
//! the kernel's errno in its errors.

pub mod dbus;
pub mod error;
pub mod firewall;
pub mod netlink;
pub mod netns;
pub mod packet;
pub mod probe;
pub mod sockets;
pub mod sysctl;
pub mod tap;
mod tool;

pub use error::{Error, Result};
pub use netlink::{Family, Netlink};
pub use netns::NetNs;
use sha2::{Digest, Sha512};

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (case-insensitive).
pub fn parse_mac(text: &str) -> Result<[u8; 6]> {
    let bad = || Error::Invalid(format!("invalid MAC address {text:?}"));
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next().ok_or_else(bad)?;
        if part.len() != 2 {
            return Err(bad());
        }
        *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

/// The first `len` hex digits of the SHA-512 of `data`: the reference's rule, chain and
/// device names (masquerade chains, bandwidth's ifb) are such prefixes.
pub fn sha512_hex_prefix(data: &str, len: usize) -> String {
    let mut hex: String = Sha512::digest(data.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    hex.truncate(len);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip() {
        let mac = parse_mac("0A:58:0a:f4:00:01").expect("valid MAC");
        assert_eq!(mac, [0x0a, 0x58, 0x0a, 0xf4, 0, 1]);
        assert_eq!(format_mac(&mac), "0a:58:0a:f4:00:01");
        assert!(parse_mac("0a:58:0a:f4:00").is_err());
        assert!(parse_mac("0a:58:0a:f4:00:01:02").is_err());
        assert!(parse_mac("0a:58:0a:f4:00:zz").is_err());
    }
}
