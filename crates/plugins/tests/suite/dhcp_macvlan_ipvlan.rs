//! macvlan + dhcp and ipvlan + dhcp against dnsmasq, the master a veth whose peer is a port of
//! the server's bridge. This machine's kernel has no ipvlan: the ipvlan case runs under `cargo
//! xtask vm-test` (MULTUS_RS_VM=1), where skipping it is a failure.

use crate::common;
use crate::dhcp_env;

use dhcp_env::*;
use testkit::dhcp::Server;
use testkit::Netns;

const DNSMASQ: &[&str] = &[
    "--dhcp-option=option:router,10.97.0.1",
    "--dhcp-option=option:dns-server,10.97.0.53",
];

#[test]
fn macvlan_lease_and_release_seen_by_the_server() {
    let s = Setup::on_master(Server::Dnsmasq(DNSMASQ), "macvlan", r#","mode":"bridge""#);
    let conf = s.conf("");
    let result = s.add(&conf).ok();
    let ip = leased_ip(&result);
    assert!(ip.starts_with("10.97.0.1"), "{result}");
    assert_eq!(result["dns"]["nameservers"][0], "10.97.0.53");
    assert_eq!(
        s.pod_routes(),
        ["10.97.0.0/24 dev", "default via 10.97.0.1"]
    );
    // macvlan calls the IPAM DEL while its interface exists, so the release goes out.
    s.release(&conf, &ip);
    assert!(s.pod.links().iter().all(|l| l == "lo"));
}

/// The pod's IPv4 default routes in the kernel's order, as `dev via`.
fn default_routes(pod: &Netns) -> Vec<String> {
    pod.ip_json(&["-4", "route", "show", "default"])
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            format!(
                "{} via {}",
                r["dev"].as_str().unwrap_or_default(),
                r["gateway"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// A server that sends a router, as every LAN's does, to a pod whose eth0 already has the
/// default route: the reference (Go plugin and daemon) attaches net1 and adds its default route
/// first; ours does the same (multus then puts it behind eth0's, see the multus tests).
#[test]
fn macvlan_dhcp_router_beside_the_pods_default_route_as_the_reference() {
    let mut s = Setup::on_master(Server::Dnsmasq(DNSMASQ), "macvlan", r#","mode":"bridge""#);
    common::pod_eth0(&s.pod);
    let conf = s.conf("");
    let mut add = s.call("ADD", &conf);
    add.ifname = "net1".into();
    let ip = leased_ip(&s.run(&add).ok());
    assert_eq!(
        default_routes(&s.pod),
        ["net1 via 10.97.0.1", "eth0 via 10.88.0.1"]
    );
    let mut del = add.clone();
    del.command = "DEL".into();
    s.run(&del).ok();
    s.assert_released(&ip);
    assert_eq!(default_routes(&s.pod), ["eth0 via 10.88.0.1"]);

    // The reference, on the same server, in a pod of its own.
    let go = s.swap_in_go_daemon();
    let pod = Netns::new("refpod");
    common::pod_eth0(&pod);
    let mut add = s.call("ADD", &conf);
    add.ifname = "net1".into();
    add.netns = pod.path().display().to_string();
    add.path = testkit::reference_dir().display().to_string();
    let out = add.run(&testkit::reference_dir().join("macvlan"), Some(&s.net.node));
    let ip = leased_ip(&out.ok());
    assert!(ip.starts_with("10.97.0."), "{ip}");
    assert_eq!(
        default_routes(&pod),
        ["net1 via 10.97.0.1", "eth0 via 10.88.0.1"]
    );
    let mut del = add.clone();
    del.command = "DEL".into();
    del.run(&testkit::reference_dir().join("macvlan"), Some(&s.net.node))
        .ok();
    // Whether dnsmasq takes v1.9.1's release depends on the kernel: it is sent from 0.0.0.0
    // (docs/compatibility.md, dhcp). Ours is released above, everywhere.
    drop(go);
}

#[test]
fn ipvlan_pods_sharing_a_mac_get_their_own_leases_with_broadcast() {
    if !common::kernel_has_ipvlan() {
        return;
    }
    let s = Setup::on_master(Server::Dnsmasq(DNSMASQ), "ipvlan", r#","mode":"l2""#);
    let conf = s.conf(r#","broadcast":true"#);
    let second = Netns::new("pod2");
    let result = s.add(&conf).ok();
    let mut call = s.call_for("ADD", &conf, "d00d", &second);
    let result2 = s.run(&call).ok();
    let (ip, ip2) = (leased_ip(&result), leased_ip(&result2));
    assert_ne!(
        ip, ip2,
        "one lease per pod although both share the master's MAC"
    );
    s.assert_broadcast(true);
    s.del(&conf).ok();
    call.command = "DEL".into();
    s.run(&call).ok();
    s.assert_released(&ip);
    s.assert_released(&ip2);
    assert!(s.lease_files().is_empty());
}
