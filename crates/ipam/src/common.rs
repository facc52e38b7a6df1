//! Config checks that host-local and static share, with the reference's wording.

use std::net::IpAddr;

use cni::args::CniArgs;
use cni::decode::{parse_cidr, parse_ip};
use cni::quote::quote;
use cni::Version;
use ipnet::IpNet;

use crate::error::{Error, Result};

/// An address as a number inside its family, so that ranges step and compare with integer
/// operations.
pub fn num(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address of number `n` in the family `v4` says.
pub fn from_num(n: u128, v4: bool) -> IpAddr {
    if v4 {
        // Only called with numbers taken from IPv4 addresses of the same range: the high 96
        // bits are zero.
        let [.., a, b, c, d] = n.to_be_bytes();
        IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d))
    } else {
        IpAddr::V6(std::net::Ipv6Addr::from(n))
    }
}

/// An `addresses` entry as static and whereabouts read it: `address` is checked by the plugin.
#[derive(serde::Deserialize)]
pub struct RawAddress {
    #[serde(default)]
    pub address: String,
    #[serde(default, deserialize_with = "cni::decode::gateway")]
    pub gateway: Option<IpAddr>,
}

/// The `ipam` object, which every command of both plugins needs.
pub fn require_ipam<T>(ipam: Option<T>) -> Result<T> {
    ipam.ok_or_else(|| {
        Error::config("ipam: required, but missing (IPAM config missing 'ipam' key)")
    })
}

/// Results before 0.3.0 have one `ip4` and one `ip6` slot, so a config may not yield more than
/// one address per family. `is_v4` gives the family of each address.
pub fn check_addresses_per_family(
    cni_version: &str,
    is_v4: impl IntoIterator<Item = bool>,
) -> Result<()> {
    let (v4, v6) = is_v4.into_iter().fold((0usize, 0usize), |(v4, v6), is_v4| {
        if is_v4 {
            (v4 + 1, v6)
        } else {
            (v4, v6 + 1)
        }
    });
    if (v4 > 1 || v6 > 1) && Version::from_config(cni_version)? < Version::V0_3_0 {
        return Err(Error::config(format!(
            "CNI version {cni_version} does not support more than 1 address per family"
        )));
    }
    Ok(())
}

/// A gateway must be of its subnet's family. The reference does not check, and the mistake
/// surfaces later as a kernel error when the interface plugin adds the route. A gateway outside
/// the subnet is accepted, as by the reference (it may be reached through an onlink route).
pub fn check_gateway_family(gateway: IpAddr, subnet: &IpNet) -> Result<(), String> {
    if gateway.is_ipv4() == subnet.addr().is_ipv4() {
        Ok(())
    } else {
        Err(format!(
            "{gateway} and {subnet} are of different address families"
        ))
    }
}

/// An address with its prefix, host bits kept (`10.10.0.1/24`), IPv4-mapped made IPv4. The
/// error is `<key>: <value> is not <what it takes>`.
pub fn parse_address(key: &str, s: &str) -> Result<IpNet> {
    let bad = |want: String| Error::config(format!("{key}: {} is not {want}", quote(s)));
    let net = parse_cidr(s, "an address").map_err(bad)?;
    match net {
        IpNet::V6(n) => match n.addr().to_ipv4_mapped() {
            Some(v4) if n.prefix_len() >= 96 => IpNet::new(v4.into(), n.prefix_len() - 96)
                .map_err(|_| bad("a CIDR like 10.1.2.0/24".to_owned())),
            _ => Ok(net),
        },
        IpNet::V4(_) => Ok(net),
    }
}

/// `CNI_ARGS` `IP` and `GATEWAY`, comma-separated lists as the reference reads them: the
/// addresses (with their prefixes) and the gateways, for the plugin to match up.
pub fn cni_args_ips(args: &CniArgs) -> Result<(Vec<IpNet>, Vec<IpAddr>)> {
    let list = |key: &str| {
        args.get(key)
            .filter(|v| !v.is_empty())
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
    };
    let ips = list("IP")
        .map(|item| parse_address("CNI_ARGS IP", item))
        .collect::<Result<_>>()?;
    let gateways = list("GATEWAY")
        .map(|item| {
            parse_ip(item, "a gateway").map_err(|want| {
                Error::config(format!("CNI_ARGS GATEWAY: {} is not {want}", quote(item)))
            })
        })
        .collect::<Result<_>>()?;
    Ok((ips, gateways))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_family_limit_before_0_3_0() {
        let e = check_addresses_per_family("0.2.0", [true, false, true]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
        assert_eq!(cni::CniError::from(e).code, 7);
        // An empty version is 0.1.0.
        assert!(check_addresses_per_family("", [false, false]).is_err());
        assert!(check_addresses_per_family("0.2.0", [true, false]).is_ok());
        assert!(check_addresses_per_family("0.3.0", [true, true, false, false]).is_ok());
        assert!(check_addresses_per_family("1.0.0", [true, true]).is_ok());
    }

    #[test]
    fn gateway_family() {
        let net: IpNet = "10.1.2.0/24".parse().unwrap();
        assert!(check_gateway_family("10.1.2.1".parse().unwrap(), &net).is_ok());
        assert!(check_gateway_family("10.9.9.9".parse().unwrap(), &net).is_ok());
        assert_eq!(
            check_gateway_family("fd00::1".parse().unwrap(), &net).unwrap_err(),
            "fd00::1 and 10.1.2.0/24 are of different address families"
        );
        let net6: IpNet = "fd00::/64".parse().unwrap();
        assert!(check_gateway_family("10.1.2.1".parse().unwrap(), &net6).is_err());
    }

    #[test]
    fn missing_ipam_is_code_7() {
        assert_eq!(require_ipam(Some(1)).unwrap(), 1);
        let e = require_ipam::<()>(None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ipam: required, but missing (IPAM config missing 'ipam' key)"
        );
        assert_eq!(cni::CniError::from(e).code, 7);
    }
}
