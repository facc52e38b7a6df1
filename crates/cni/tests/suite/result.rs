//! Result encoding and version conversion: the reference's own fixtures, then properties over
//! generated results (rules from containernetworking/cni pkg/types/{020,040,100}).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni::{CniResult, Code, Dns, Interface, IpConfig, Route, Version};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;
use serde_json::json;

/// The reference's `testResult()` from pkg/types/100/types_test.go.
fn reference_result() -> CniResult {
    CniResult {
        cni_version: "1.1.0".into(),
        interfaces: vec![Interface {
            name: "eth0".into(),
            mac: "00:11:22:33:44:55".into(),
            mtu: Some(1500),
            sandbox: "/proc/3553/ns/net".into(),
            socket_path: "/path/to/vhost/fd".into(),
            pci_id: "8086:9a01".into(),
        }],
        ips: vec![
            IpConfig {
                address: "1.2.3.30/24".parse().expect("an address"),
                gateway: Some("1.2.3.1".parse().expect("an address")),
                interface: Some(0),
            },
            IpConfig {
                address: "abcd:1234:ffff::cdde/64".parse().expect("an address"),
                gateway: Some("abcd:1234:ffff::1".parse().expect("an address")),
                interface: Some(0),
            },
        ],
        routes: vec![
            Route::new(
                "15.5.6.0/24".parse().expect("a subnet"),
                "15.5.6.8".parse().ok(),
            ),
            Route::new(
                "1111:dddd::/80".parse().expect("a subnet"),
                "1111:dddd::aaaa".parse().ok(),
            ),
        ],
        dns: Dns {
            nameservers: vec!["1.2.3.4".into(), "1::cafe".into()],
            domain: "acompany.com".into(),
            search: vec!["somedomain.com".into(), "otherdomain.net".into()],
            options: vec!["foo".into(), "bar".into()],
        },
    }
}

fn reference_dns() -> serde_json::Value {
    json!({
        "nameservers": ["1.2.3.4", "1::cafe"],
        "domain": "acompany.com",
        "search": ["somedomain.com", "otherdomain.net"],
        "options": ["foo", "bar"]
    })
}

#[test]
fn encodes_like_the_reference_fixtures() {
    let r = reference_result();
    assert_eq!(
        r.to_value(Version::V1_1_0).unwrap(),
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "00:11:22:33:44:55", "mtu": 1500,
                "sandbox": "/proc/3553/ns/net", "pciID": "8086:9a01",
                "socketPath": "/path/to/vhost/fd"}],
            "ips": [
                {"interface": 0, "address": "1.2.3.30/24", "gateway": "1.2.3.1"},
                {"interface": 0, "address": "abcd:1234:ffff::cdde/64", "gateway": "abcd:1234:ffff::1"}
            ],
            "routes": [
                {"dst": "15.5.6.0/24", "gw": "15.5.6.8"},
                {"dst": "1111:dddd::/80", "gw": "1111:dddd::aaaa"}
            ],
            "dns": reference_dns()
        })
    );
    assert_eq!(
        r.to_value(Version::V0_4_0).unwrap(),
        json!({
            "cniVersion": "0.4.0",
            "interfaces": [{"name": "eth0", "mac": "00:11:22:33:44:55",
                "sandbox": "/proc/3553/ns/net"}],
            "ips": [
                {"interface": 0, "version": "4", "address": "1.2.3.30/24", "gateway": "1.2.3.1"},
                {"interface": 0, "version": "6", "address": "abcd:1234:ffff::cdde/64",
                    "gateway": "abcd:1234:ffff::1"}
            ],
            "routes": [
                {"dst": "15.5.6.0/24", "gw": "15.5.6.8"},
                {"dst": "1111:dddd::/80", "gw": "1111:dddd::aaaa"}
            ],
            "dns": reference_dns()
        })
    );
    assert_eq!(
        r.to_value(Version::V0_1_0).unwrap(),
        json!({
            "cniVersion": "0.1.0",
            "ip4": {"ip": "1.2.3.30/24", "gateway": "1.2.3.1",
                "routes": [{"dst": "15.5.6.0/24", "gw": "15.5.6.8"}]},
            "ip6": {"ip": "abcd:1234:ffff::cdde/64", "gateway": "abcd:1234:ffff::1",
                "routes": [{"dst": "1111:dddd::/80", "gw": "1111:dddd::aaaa"}]},
            "dns": reference_dns()
        })
    );
}

#[test]
fn empty_dns_is_left_out_of_1x_only() {
    let r = CniResult {
        ips: vec![IpConfig {
            address: "10.0.0.2/8".parse().unwrap(),
            gateway: None,
            interface: None,
        }],
        ..CniResult::default()
    };
    assert!(r.to_value(Version::V1_0_0).unwrap().get("dns").is_none());
    assert_eq!(r.to_value(Version::V0_4_0).unwrap()["dns"], json!({}));
    assert_eq!(r.to_value(Version::V0_2_0).unwrap()["dns"], json!({}));
}

#[test]
fn reads_legacy_results_with_or_without_a_version() {
    let old = json!({"ip4": {"ip": "10.0.0.2/8", "routes": [{"dst": "0.0.0.0/0"}]}});
    let r = CniResult::from_value(&old).unwrap();
    assert_eq!(r.ips.len(), 1);
    assert_eq!(r.routes[0].dst.to_string(), "0.0.0.0/0");
    let err = CniResult::from_value(&json!({"cniVersion": "9.9.9"})).unwrap_err();
    assert_eq!(err.code, Code::IncompatibleVersion as u32);
}

fn ipv4() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

/// Plain IPv6 addresses: an IPv4-mapped one counts as IPv4 in Go, which is not modelled here.
fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>()
        .prop_map(Ipv6Addr::from)
        .prop_filter("not v4-mapped", |a| a.to_ipv4_mapped().is_none())
}

fn family_net(v6: bool) -> BoxedStrategy<IpNet> {
    if v6 {
        (ipv6(), 0..=128u8)
            .prop_map(|(a, p)| {
                IpNet::V6(Ipv6Net::new(a, p).expect("the prefix length is in range"))
            })
            .boxed()
    } else {
        (ipv4(), 0..=32u8)
            .prop_map(|(a, p)| {
                IpNet::V4(Ipv4Net::new(a, p).expect("the prefix length is in range"))
            })
            .boxed()
    }
}

fn family_addr(v6: bool) -> BoxedStrategy<IpAddr> {
    if v6 {
        ipv6().prop_map(IpAddr::V6).boxed()
    } else {
        ipv4().prop_map(IpAddr::V4).boxed()
    }
}

fn ip_config() -> impl Strategy<Value = IpConfig> {
    any::<bool>().prop_flat_map(|v6| {
        (
            family_net(v6),
            proptest::option::of(family_addr(v6)),
            proptest::option::of(0..3usize),
        )
            .prop_map(|(address, gateway, interface)| IpConfig {
                address,
                gateway,
                interface,
            })
    })
}

fn route() -> impl Strategy<Value = Route> {
    any::<bool>().prop_flat_map(|v6| {
        (
            family_net(v6).prop_map(|n| n.trunc()),
            proptest::option::of(family_addr(v6)),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u8>()),
        )
            .prop_map(|(dst, gw, mtu, advmss, priority, table, scope)| Route {
                dst,
                gw,
                mtu,
                advmss,
                priority,
                table,
                scope,
            })
    })
}

fn words(max: usize) -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec("[a-z0-9.:-]{1,12}", 0..max)
}

fn dns() -> impl Strategy<Value = Dns> {
    (words(3), "[a-z.]{0,10}", words(3), words(3)).prop_map(
        |(nameservers, domain, search, options)| Dns {
            nameservers,
            domain,
            search,
            options,
        },
    )
}

fn interface() -> impl Strategy<Value = Interface> {
    (
        "[a-z][a-z0-9]{0,14}",
        "([0-9a-f]{2}(:[0-9a-f]{2}){5})?",
        proptest::option::of(any::<u32>()),
        "(/var/run/netns/[a-z0-9]{1,8})?",
        "(/run/[a-z]{1,8})?",
        "([0-9a-f]{4}:[0-9a-f]{4})?",
    )
        .prop_map(|(name, mac, mtu, sandbox, socket_path, pci_id)| Interface {
            name,
            mac,
            mtu,
            sandbox,
            socket_path,
            pci_id,
        })
}

fn result() -> impl Strategy<Value = CniResult> {
    (
        proptest::collection::vec(interface(), 0..3),
        proptest::collection::vec(ip_config(), 0..5),
        proptest::collection::vec(route(), 0..5),
        dns(),
    )
        .prop_map(|(interfaces, ips, routes, dns)| CniResult {
            cni_version: "1.1.0".into(),
            interfaces,
            ips,
            routes,
            dns,
        })
}

/// What 0.x and 1.0.0 cannot carry: the 1.1.0-only interface fields.
fn without_1_1_fields(r: &CniResult) -> CniResult {
    let mut r = r.clone();
    for i in &mut r.interfaces {
        i.mtu = None;
        i.socket_path.clear();
        i.pci_id.clear();
    }
    r
}

proptest! {
    #[test]
    fn encoding_is_stable_in_every_version(r in result()) {
        for v in Version::ALL {
            let Ok(first) = r.to_value(v) else {
                prop_assert!(v.is_legacy_result() && r.ips.is_empty());
                continue;
            };
            prop_assert_eq!(&first["cniVersion"], v.as_str());
            let back = CniResult::from_value(&first).unwrap();
            prop_assert_eq!(back.cni_version.as_str(), v.as_str());
            prop_assert_eq!(back.to_value(v).unwrap(), first, "version {}", v);
        }
    }

    #[test]
    fn through_0_3_or_0_4_keeps_everything_but_1_1_fields(r in result()) {
        for via in [Version::V0_3_0, Version::V0_3_1, Version::V0_4_0] {
            let mid = r.to_value(via).unwrap();
            for ip in mid["ips"].as_array().into_iter().flatten() {
                let family = if ip["address"].as_str().unwrap().contains(':') { "6" } else { "4" };
                prop_assert_eq!(&ip["version"], family);
            }
            let back = r.convert(via).unwrap().convert(Version::V1_0_0).unwrap();
            let mut want = without_1_1_fields(&r);
            want.cni_version = "1.0.0".into();
            prop_assert_eq!(back, want);
        }
        let mut same = r.convert(Version::V1_1_0).unwrap();
        same.cni_version = r.cni_version.clone();
        prop_assert_eq!(same, r);
    }

    #[test]
    fn legacy_keeps_the_first_address_of_each_family_and_its_routes(r in result()) {
        let first = |v6: bool| r.ips.iter().find(|ip| ip.address.addr().is_ipv6() == v6);
        let (v4, v6) = (first(false), first(true));
        for version in [Version::V0_1_0, Version::V0_2_0] {
            if r.ips.is_empty() {
                let err = r.to_value(version).unwrap_err();
                prop_assert_eq!(err.code, Code::IncompatibleVersion as u32);
                continue;
            }
            let json = r.to_value(version).unwrap();
            prop_assert_eq!(json.get("ip4").is_some(), v4.is_some());
            prop_assert_eq!(json.get("ip6").is_some(), v6.is_some());
            prop_assert!(json.get("ips").is_none() && json.get("interfaces").is_none());

            let back = CniResult::from_value(&json).unwrap();
            let want_ips: Vec<IpConfig> = [v4, v6]
                .into_iter()
                .flatten()
                .map(|ip| IpConfig { interface: None, ..ip.clone() })
                .collect();
            prop_assert_eq!(&back.ips, &want_ips);
            let want_routes: Vec<Route> = [(v4, false), (v6, true)]
                .into_iter()
                .filter(|(ip, _)| ip.is_some())
                .flat_map(|(_, is6)| {
                    r.routes
                        .iter()
                        .filter(move |rt| rt.dst.addr().is_ipv6() == is6)
                        .map(|rt| Route::new(rt.dst, rt.gw))
                })
                .collect();
            prop_assert_eq!(&back.routes, &want_routes);
            prop_assert_eq!(&back.dns, &r.dns);
            prop_assert!(back.interfaces.is_empty());
        }
    }
}
