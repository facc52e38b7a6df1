//! The names of whereabouts' objects, as the reference derives them, so that both
//! implementations find each other's pools and reservations.

use std::net::IpAddr;

use ipnet::IpNet;

/// `10.77.0.0/24` becomes `10.77.0.0-24`, `fd77:3::/64` becomes `fd77-3---64`.
fn normalize(text: &str) -> String {
    let mut s = text.to_owned();
    if s.ends_with(':') {
        s.push('0');
    }
    s.replace([':', '/'], "-")
}

fn prefixed(network_name: &str, rest: &str) -> String {
    if network_name.is_empty() {
        rest.to_owned()
    } else {
        format!("{network_name}-{rest}")
    }
}

/// The IPPool of a range: `[<network_name>-][<node>-]<range>`, the node only in node-slice
/// mode (where the range is the node's slice).
pub fn pool_name(network_name: &str, node: Option<&str>, range: &IpNet) -> String {
    let range = normalize(&range.to_string());
    match node {
        Some(node) => prefixed(network_name, &format!("{node}-{range}")),
        None => prefixed(network_name, &range),
    }
}

/// The OverlappingRangeIPReservation of an address: `[<network_name>-]<ip>`, `:` made `-`.
pub fn reservation_name(network_name: &str, ip: IpAddr) -> String {
    prefixed(network_name, &normalize(&ip.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_reference_makes_them() {
        let v4: IpNet = "10.77.0.0/24".parse().unwrap();
        let v6: IpNet = "fd77:3::/64".parse().unwrap();
        assert_eq!(pool_name("", None, &v4), "10.77.0.0-24");
        assert_eq!(pool_name("", None, &v6), "fd77-3---64");
        assert_eq!(pool_name("blue", None, &v4), "blue-10.77.0.0-24");
        assert_eq!(
            pool_name("blue", Some("node-a"), &v4),
            "blue-node-a-10.77.0.0-24"
        );
        assert_eq!(pool_name("", Some("node-a"), &v4), "node-a-10.77.0.0-24");
        let ip: IpAddr = "fd77:3::1".parse().unwrap();
        assert_eq!(reservation_name("", ip), "fd77-3--1");
        assert_eq!(reservation_name("blue", ip), "blue-fd77-3--1");
        assert_eq!(reservation_name("", "fd77::".parse().unwrap()), "fd77--0");
        assert_eq!(
            reservation_name("", "10.77.0.5".parse().unwrap()),
            "10.77.0.5"
        );
    }
}
