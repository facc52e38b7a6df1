//! CHECK finds drift: after a good ADD (and a CHECK that passes), something changes the state
//! under the attachment (a rule deleted, a qdisc's rate changed, a sysctl, MTU or MAC set
//! back, a route deleted, a link set down or renamed), and CHECK fails naming what changed.
//! vrf's case runs in the VM (tests/vrf.rs): this machine's kernel has no VRFs.

use crate::common;

use common::{with_prev, Plugins, Sandbox, Side};
use testkit::Netns;

/// CHECK of `conf` passes.
fn check_passes(sb: &Sandbox, conf: &str) {
    let out = sb.run(&sb.call("CHECK", conf));
    assert_eq!(out.code, 0, "CHECK after ADD: {out:?}");
}

/// CHECK of `conf` fails (code 999, as CHECK failures are) with a message naming `what`.
fn check_fails(sb: &Sandbox, conf: &str, what: &str) {
    let out = sb.run(&sb.call("CHECK", conf));
    common::assert_error(&out, 999, what, &format!("CHECK after {what} changed"));
}

/// Runs `program args` in `ns`, which must succeed.
fn run(ns: &Netns, program: &str, args: &[&str]) {
    let out = ns.command(program).args(args).output().expect("run");
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// Deletes the rule of `table` (as `iptables -S` lists it) that contains `marker`, by its
/// number in its chain; the rule.
fn delete_rule(ns: &Netns, table: &str, marker: &str) -> String {
    let out = ns
        .command("iptables")
        .args(["-t", table, "-S"])
        .output()
        .expect("iptables");
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let rule = listing
        .lines()
        .find(|l| l.starts_with("-A ") && l.contains(marker))
        .unwrap_or_else(|| panic!("no rule with {marker:?} in {listing}"));
    let chain = rule.split_whitespace().nth(1).unwrap_or_default();
    let head = format!("-A {chain} ");
    let number = listing
        .lines()
        .filter(|l| l.starts_with(&head))
        .position(|l| l == rule)
        .map(|i| (i + 1).to_string())
        .unwrap_or_default();
    run(ns, "iptables", &["-t", table, "-D", chain, &number]);
    rule.to_owned()
}

const PORTMAP: &str = r#"{"cniVersion":"1.0.0","name":"pm","type":"portmap",
 "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]},
 "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],
  "ips":[{"address":"10.30.0.5/24","interface":0}]}}"#;

#[test]
fn portmap_check_names_a_deleted_rule() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    for (table, marker, named) in [
        // The attachment's own DNAT, its entry in the shared chain, and what the shared chains
        // need for its traffic to get there and back.
        (
            "nat",
            "--to-destination 10.30.0.5:80",
            "--to-destination 10.30.0.5:80",
        ),
        ("nat", r#"id: \"c0ffee\""#, "CNI-HOSTPORT-DNAT"),
        ("nat", "-A PREROUTING", "PREROUTING"),
        ("nat", "-A OUTPUT", "OUTPUT"),
        ("nat", "-A CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-SETMARK"),
        ("nat", "-A POSTROUTING", "POSTROUTING"),
    ] {
        assert_eq!(sb.add(PORTMAP).code, 0);
        check_passes(&sb, PORTMAP);
        let rule = delete_rule(&sb.node, table, marker);
        eprintln!("deleted {rule}");
        check_fails(&sb, PORTMAP, named);
    }
}

const FIREWALL: &str = r#"{"cniVersion":"1.0.0","name":"fw","type":"firewall","backend":"iptables",
 "ingressPolicy":"same-bridge",
 "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"fwbr0"},{"name":"eth0","sandbox":"/x"}],
  "ips":[{"address":"10.40.0.5/24","interface":1}]}}"#;

#[test]
fn firewall_check_names_a_removed_rule() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    // The bridge same-bridge isolates is one of the node's.
    sb.node.ip(&["link", "add", "fwbr0", "type", "bridge"]);
    for (marker, named) in [
        ("-s 10.40.0.5/32 -j ACCEPT", "-s 10.40.0.5/32 -j ACCEPT"),
        ("-d 10.40.0.5/32", "-d 10.40.0.5/32"),
        ("-j CNI-ADMIN", "CNI-ADMIN"),
        ("-j CNI-FORWARD", "CNI-FORWARD"),
        // same-bridge: the drop of what enters the bridge from elsewhere, and the way to it.
        ("-A CNI-ISOLATION-STAGE-2 -o fwbr0", "-o fwbr0 -j DROP"),
        (
            "-A CNI-ISOLATION-STAGE-1 -i fwbr0",
            "-j CNI-ISOLATION-STAGE-2",
        ),
        ("-j CNI-ISOLATION-STAGE-1", "CNI-ISOLATION-STAGE-1"),
    ] {
        assert_eq!(sb.add(FIREWALL).code, 0);
        check_passes(&sb, FIREWALL);
        let rule = delete_rule(&sb.node, "filter", marker);
        eprintln!("deleted {rule}");
        check_fails(&sb, FIREWALL, named);
    }
}

const BANDWIDTH: &str = r#"{"cniVersion":"1.0.0","name":"bw","type":"bandwidth",
 "ingressRate":1000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":300000,
 "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"vethbw0"},{"name":"eth0","sandbox":"/x"}],
  "ips":[{"address":"10.20.0.5/24","interface":1}]}}"#;

/// bandwidth ADDed on the veth pair a bridge or ptp leaves, and CHECKed.
fn bandwidth_sandbox(plugins: &Plugins) -> Sandbox {
    let sb = Sandbox::new(plugins, Side::Ours);
    common::bw_pair(&sb);
    assert_eq!(sb.add(BANDWIDTH).code, 0);
    check_passes(&sb, BANDWIDTH);
    sb
}

#[test]
fn bandwidth_check_names_a_changed_rate_and_a_lost_redirect() {
    let plugins = Plugins::new();
    // The rate of what the pod receives (the veth's tbf).
    let sb = bandwidth_sandbox(&plugins);
    let tbf = [
        "root", "tbf", "rate", "4mbit", "burst", "100kb", "latency", "25ms",
    ];
    run(
        &sb.node,
        "tc",
        &[&["qdisc", "replace", "dev", "vethbw0"][..], &tbf].concat(),
    );
    check_fails(&sb, BANDWIDTH, "\"vethbw0\" shapes to 500000 bytes/s");
    // The rate of what it sends (the ifb's tbf).
    let sb = bandwidth_sandbox(&plugins);
    let ifb = sb
        .node_links()
        .into_iter()
        .find(|l| l.starts_with("bwp"))
        .expect("the ifb");
    run(
        &sb.node,
        "tc",
        &[&["qdisc", "replace", "dev", &ifb][..], &tbf].concat(),
    );
    check_fails(&sb, BANDWIDTH, &format!("{ifb:?} shapes to 500000 bytes/s"));
    // The redirect of what it sends to the ifb.
    let sb = bandwidth_sandbox(&plugins);
    run(
        &sb.node,
        "tc",
        &["filter", "del", "dev", "vethbw0", "ingress"],
    );
    check_fails(&sb, BANDWIDTH, &format!("redirect to {ifb:?}"));
    let sb = bandwidth_sandbox(&plugins);
    run(
        &sb.node,
        "tc",
        &["qdisc", "del", "dev", "vethbw0", "ingress"],
    );
    check_fails(&sb, BANDWIDTH, "no ingress qdisc");
}

const TUNING: &str = r#"{"cniVersion":"1.0.0","name":"tun","type":"tuning","dataDir":"DATADIR/tuning",
 "sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"},"mtu":1400,"mac":"02:00:00:00:00:77",
 "promisc":true,
 "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],
  "ips":[{"address":"10.88.0.5/16","interface":0}]}}"#;

#[test]
fn tuning_check_names_a_changed_sysctl_mtu_mac_and_promisc() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    common::pod_eth0(&sb.pod);
    let changes: [(&[&str], &str); 4] = [
        (
            &["sysctl", "-qw", "net.ipv4.conf.eth0.arp_filter=0"],
            "sysctl net.ipv4.conf.IFNAME.arp_filter is \"0\"",
        ),
        (&["ip", "link", "set", "eth0", "mtu", "1500"], "MTU 1500"),
        (
            &["ip", "link", "set", "eth0", "address", "02:00:00:00:00:99"],
            "MAC 02:00:00:00:00:99",
        ),
        (
            &["ip", "link", "set", "eth0", "promisc", "off"],
            "not promiscuous",
        ),
    ];
    for (change, named) in changes {
        assert_eq!(sb.add(TUNING).code, 0);
        check_passes(&sb, TUNING);
        run(&sb.pod, change[0], &change[1..]);
        check_fails(&sb, TUNING, named);
        assert_eq!(sb.del(TUNING).code, 0);
    }
}

const PTP: &str = r#"{"cniVersion":"1.0.0","name":"ptpnet","type":"ptp",
 "ipam":{"type":"host-local","dataDir":"DATADIR","ranges":[[{"subnet":"10.50.0.0/24"}]]}}"#;

#[test]
fn ptp_check_names_a_deleted_route_or_address() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let result = sb.add(PTP).ok();
    let conf = with_prev(PTP, &result);
    check_passes(&sb, &conf);
    let host = result["interfaces"][0]["name"]
        .as_str()
        .expect("the node's veth");
    let pod_ip = result["ips"][0]["address"].as_str().expect("an address");
    let pod_ip = pod_ip.split('/').next().unwrap_or_default();
    // The node's route to the pod.
    sb.node.ip(&["route", "del", pod_ip, "dev", host]);
    check_fails(&sb, &conf, &format!("route to {pod_ip}/32 dev {host:?}"));
    sb.node
        .ip(&["route", "add", pod_ip, "dev", host, "scope", "host"]);
    check_passes(&sb, &conf);
    // The gateway address on the node's veth.
    sb.node.ip(&["addr", "del", "10.50.0.1/32", "dev", host]);
    check_fails(
        &sb,
        &conf,
        &format!("address 10.50.0.1/32 is missing from {host:?}"),
    );
    // The pod's address.
    sb.node.ip(&["addr", "add", "10.50.0.1/32", "dev", host]);
    sb.pod
        .ip(&["addr", "del", &format!("{pod_ip}/24"), "dev", "eth0"]);
    check_fails(
        &sb,
        &conf,
        &format!("address {pod_ip}/24 is missing from \"eth0\""),
    );
}

const HOST_DEVICE: &str = r#"{"cniVersion":"1.0.0","name":"hd","type":"host-device","device":"hd0",
 "ipam":{"type":"static","addresses":[{"address":"10.5.0.2/24"}]}}"#;

#[test]
fn host_device_check_names_a_link_set_down_or_renamed() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    sb.node.veth_pair("hd0", "hd0p");
    let result = sb.add(HOST_DEVICE).ok();
    let conf = with_prev(HOST_DEVICE, &result);
    check_passes(&sb, &conf);
    sb.pod.ip(&["link", "set", "eth0", "down"]);
    check_fails(&sb, &conf, "\"eth0\" is down");
    sb.pod.ip(&["link", "set", "eth0", "up"]);
    check_passes(&sb, &conf);
    sb.pod.ip(&["link", "set", "eth0", "name", "eth9"]);
    check_fails(&sb, &conf, "interface \"eth0\" not found");
}
