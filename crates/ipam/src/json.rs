//! serde helpers that read config values the way the reference's Go decoder does: `null` means
//! "not set", an empty IP string means "no IP", and IPs are kept in canonical form (an
//! IPv4-mapped IPv6 address is IPv4). Their errors say what the key takes, for
//! [`cni::decode`] to show with the key path and the value.

use std::net::IpAddr;

use cni::decode::{parse_cidr, parse_ip};
use ipnet::IpNet;
use serde::de::{Error as _, Unexpected};
use serde::{Deserialize, Deserializer};

/// A missing or `null` value is the type's default.
pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// An optional IP address of a range's bounds; `""` and `null` are none.
pub fn opt_ip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(d)?.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => parse_ip(s, "a range bound")
            .map(Some)
            .map_err(|want| D::Error::invalid_value(Unexpected::Str(s), &want.as_str())),
    }
}

/// An optional subnet (`10.1.2.0/24`); the address keeps any host bits, for the caller to
/// judge.
pub fn opt_subnet<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpNet>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => parse_cidr(&s, "a subnet")
            .map(Some)
            .map_err(|want| D::Error::invalid_value(Unexpected::Str(&s), &want.as_str())),
    }
}

/// A requested address in a list: `10.1.2.3` or `10.1.2.3/24` (the prefix is ignored).
pub struct RequestedIp(pub IpAddr);

impl<'de> Deserialize<'de> for RequestedIp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RequestedIp, D::Error> {
        let s = String::deserialize(d)?;
        parse_ip_maybe_prefixed(&s)
            .map(RequestedIp)
            .map_err(|want| D::Error::invalid_value(Unexpected::Str(&s), &want.as_str()))
    }
}

/// A list of requested addresses; `null` is none.
pub fn ip_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    let items: Vec<RequestedIp> = null_default(d)?;
    Ok(items.into_iter().map(|ip| ip.0).collect())
}

/// `10.1.2.3` or `10.1.2.3/24`: a requested address, as the reference's `ip.IP` reads it. The
/// error is what was expected.
pub fn parse_ip_maybe_prefixed(s: &str) -> Result<IpAddr, String> {
    if s.contains('/') {
        parse_cidr(s, "an address")
            .map(|n| n.addr().to_canonical())
            .map_err(|_| "an IP address, with or without a prefix length".to_owned())
    } else {
        parse_ip(s, "an address")
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

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Conf {
        #[serde(default, deserialize_with = "opt_subnet")]
        subnet: Option<IpNet>,
        #[serde(default, deserialize_with = "ip_list")]
        ips: Vec<IpAddr>,
    }

    #[test]
    fn errors_say_what_the_key_takes() {
        let err = |json: &str| {
            cni::decode::from_slice::<Conf>(json.as_bytes())
                .err()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            err(r#"{"subnet":"10.1.2.0"}"#),
            r#"subnet: "10.1.2.0" is not a CIDR like 10.1.2.0/24 (a subnet needs a prefix length)"#
        );
        assert_eq!(
            err(r#"{"ips":["10.1.2.3","nope"]}"#),
            r#"ips[1]: "nope" is not an IP address"#
        );
    }
}
