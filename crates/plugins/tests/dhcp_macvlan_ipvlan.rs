//! macvlan + dhcp and ipvlan + dhcp against dnsmasq, the master a veth whose peer is a port of
//! the server's bridge. This machine's kernel has no ipvlan: the ipvlan case runs under `cargo
//! xtask vm-test` (MULTUS_RS_VM=1), where skipping it is a failure.

mod common;
mod dhcp_env;

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

#[test]
fn ipvlan_pods_sharing_a_mac_get_their_own_leases_with_broadcast() {
    if !common::kernel_has_ipvlan() {
        return;
    }
    let s = Setup::on_master(Server::Dnsmasq(DNSMASQ), "ipvlan", r#","mode":"l2""#);
    let conf = s.conf(r#","broadcast":true"#);
    let second = Netns::new("pod2");
    let result = s.add(&conf).ok();
    let mut call = s.call("ADD", &conf);
    call.container_id = "d00d".into();
    call.netns = second.path().display().to_string();
    let result2 = s.run(&call).ok();
    let (ip, ip2) = (leased_ip(&result), leased_ip(&result2));
    assert_ne!(
        ip, ip2,
        "one lease per pod although both share the master's MAC"
    );
    assert!(
        s.net.log().contains("broadcast response"),
        "{}",
        s.net.log()
    );
    s.del(&conf).ok();
    call.command = "DEL".into();
    s.run(&call).ok();
    s.assert_released(&ip);
    s.assert_released(&ip2);
    assert!(s.lease_files().is_empty());
}
