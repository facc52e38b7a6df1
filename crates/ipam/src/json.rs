//! serde helpers that read config values the way the reference's Go decoder does: `null` means
//! "not set", an empty IP string means "no IP", and IPs are kept in canonical form (an
//! IPv4-mapped IPv6 address is IPv4).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// A missing or `null` value is the type's default.
pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// An optional IP address; `""` and `null` are none.
pub fn opt_ip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(d)?.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => parse_ip(s).map(Some).map_err(D::Error::custom),
    }
}

/// An optional CIDR (`10.1.2.0/24`); the address keeps any host bits, for the caller to judge.
pub fn opt_net<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpNet>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => parse_cidr(&s).map(Some).map_err(D::Error::custom),
    }
}

/// A list of addresses, each `10.1.2.3` or `10.1.2.3/24` (the prefix is ignored).
pub fn ip_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    let items: Vec<String> = null_default(d)?;
    items
        .iter()
        .map(|s| parse_ip_maybe_prefixed(s))
        .collect::<Result<_, _>>()
        .map_err(D::Error::custom)
}

pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse::<IpAddr>()
        .map(|ip| ip.to_canonical())
        .map_err(|_| format!("invalid IP address: {s}"))
}

pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .map_err(|_| format!("invalid CIDR address: {s}"))
}

/// `10.1.2.3` or `10.1.2.3/24`: a requested address, as the reference's `ip.IP` reads it.
pub fn parse_ip_maybe_prefixed(s: &str) -> Result<IpAddr, String> {
    if s.contains('/') {
        parse_cidr(s).map(|n| n.addr().to_canonical())
    } else {
        parse_ip(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_ip_forms() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(parse_ip_maybe_prefixed("10.1.2.3"), Ok(v4));
        assert_eq!(parse_ip_maybe_prefixed("10.1.2.3/24"), Ok(v4));
        assert_eq!(parse_ip_maybe_prefixed("::ffff:10.1.2.3"), Ok(v4));
        assert!(parse_ip_maybe_prefixed("10.1.2.3/33").is_err());
        assert!(parse_ip_maybe_prefixed("10.1.2.3,10.1.2.4").is_err());
        assert!(parse_ip_maybe_prefixed("").is_err());
    }

    #[test]
    fn cidr_keeps_host_bits() {
        let n = parse_cidr("10.1.2.3/24").unwrap();
        assert_eq!(n.addr().to_string(), "10.1.2.3");
        assert_eq!(n.prefix_len(), 24);
    }
}
