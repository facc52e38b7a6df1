//! `IPAM_ADDRESSES_IN_USE`: when an interface plugin's conflict probe finds addresses its IPAM
//! plugin chose already held by another host, the DEL that releases them says which, and who
//! answered, so that an IPAM plugin whose pools are shared (whereabouts) can hold them back
//! instead of handing them straight out again. The value is `<address>=<MAC>` pairs separated
//! by commas. Only the plugin that runs the IPAM plugin sets it: a delegate never inherits it
//! (see [`crate::invoke`]), and plugins that know nothing of it ignore it.

use std::net::IpAddr;

/// The variable's name.
pub const VAR: &str = "IPAM_ADDRESSES_IN_USE";

/// An address another host answered for, and that host's MAC (`aa:bb:cc:dd:ee:ff`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InUse {
    pub address: IpAddr,
    pub mac: String,
}

/// The variable's value for `list`.
pub fn encode(list: &[InUse]) -> String {
    list.iter()
        .map(|u| format!("{}={}", u.address, u.mac))
        .collect::<Vec<_>>()
        .join(",")
}

/// The entries of `value` that are an address and a MAC; anything else is skipped, since the
/// worst a lost entry does is free an address at once, as a DEL without the variable would.
pub fn decode(value: &str) -> Vec<InUse> {
    value
        .split(',')
        .filter_map(|entry| {
            let (address, mac) = entry.split_once('=')?;
            let mac = mac.to_ascii_lowercase();
            let octets: Vec<&str> = mac.split(':').collect();
            let is_mac = octets.len() == 6
                && octets
                    .iter()
                    .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
            Some(InUse {
                address: address.parse().ok()?,
                mac: is_mac.then_some(mac)?,
            })
        })
        .collect()
}

/// The entries of this process's `IPAM_ADDRESSES_IN_USE`.
pub fn from_env() -> Vec<InUse> {
    std::env::var(VAR).map(|v| decode(&v)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage_skipped() {
        let list = vec![
            InUse {
                address: "10.1.2.3".parse().unwrap(),
                mac: "02:42:ac:11:00:02".into(),
            },
            InUse {
                address: "fd00::5".parse().unwrap(),
                mac: "0a:0b:0c:0d:0e:0f".into(),
            },
        ];
        let text = encode(&list);
        assert_eq!(text, "10.1.2.3=02:42:ac:11:00:02,fd00::5=0a:0b:0c:0d:0e:0f");
        assert_eq!(decode(&text), list);
        assert_eq!(
            decode("10.1.2.3=02:42:AC:11:00:02,x=02:42:ac:11:00:02,10.1.2.4,10.1.2.5=02:42,,10.1.2.6=zz:42:ac:11:00:02"),
            [InUse {
                address: "10.1.2.3".parse().unwrap(),
                mac: "02:42:ac:11:00:02".into()
            }]
        );
        assert!(decode("").is_empty());
    }
}
