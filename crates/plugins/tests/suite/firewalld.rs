//! The firewall plugin's firewalld backend against a real firewalld, in the node namespace and
//! on a bus of the test's own: the pod's addresses bound to the zone (as firewalld lists them
//! and as its nftables rules show), side by side with the reference, each implementation's DEL
//! unbinding what the other's ADD bound, and the failures that say what to fix.

use crate::common;

use common::{Plugins, Sandbox, Side};
use testkit::firewalld::Firewalld;
use testkit::CniOutput;

const DUAL: &str = r#"{"address":"10.20.0.5/24","gateway":"10.20.0.1","interface":2},{"address":"fd20::5/64","interface":2}"#;
const SOURCES: [&str; 2] = ["10.20.0.5/32", "fd20::5/128"];

/// firewall after a bridge, with `body`'s keys.
fn conf(body: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"fwd","type":"firewall"{body},"prevResult":{{"cniVersion":"1.0.0","interfaces":[{{"name":"fwd0"}},{{"name":"vethfwd0"}},{{"name":"eth0","sandbox":"/var/run/netns/x"}}],"ips":[{DUAL}]}}}}"#
    )
}

/// One call of `side`'s firewall, on `bus` (a D-Bus address).
fn run(
    plugins: &Plugins,
    sb: &Sandbox,
    side: Side,
    command: &str,
    conf: &str,
    bus: &str,
) -> CniOutput {
    let mut call = sb.call(command, conf);
    call.env
        .push(("DBUS_SYSTEM_BUS_ADDRESS".into(), Some(bus.to_owned())));
    sb.run_in_node(&plugins.dir(side).join("firewall"), &call)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Whether firewalld's nftables rules in the node send `ip`'s traffic to `zone`.
fn steered(sb: &Sandbox, ip: &str, zone: &str) -> bool {
    sb.node
        .firewall()
        .lines()
        .any(|l| l.contains(&format!("saddr {ip} goto filter_FWD_{zone}")))
}

#[test]
fn either_implementation_unbinds_what_the_other_bound() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let fw = Firewalld::start(&sb.node);
    let bus = fw.address();
    let conf = conf(r#","backend":"firewalld""#);
    for (adder, deleter) in [(Side::Ours, Side::Reference), (Side::Reference, Side::Ours)] {
        let what = format!("{adder:?} ADD, {deleter:?} DEL");
        let add = run(&plugins, &sb, adder, "ADD", &conf, bus);
        assert_eq!(add.code, 0, "{what}: {add:?}");
        assert_eq!(
            add.json()["ips"][1]["address"],
            "fd20::5/64",
            "{what}: the prevResult"
        );
        assert_eq!(sorted(fw.sources("trusted")), SOURCES, "{what}");
        assert!(
            steered(&sb, "10.20.0.5", "trusted"),
            "{what}: {}",
            sb.node.firewall()
        );
        assert!(steered(&sb, "fd20::5", "trusted"), "{what}");
        assert!(
            !sb.node.firewall().contains("CNI-FORWARD"),
            "{what}: no iptables rules with the firewalld backend"
        );
        for checker in [Side::Ours, Side::Reference] {
            let check = run(&plugins, &sb, checker, "CHECK", &conf, bus);
            assert_eq!(check.code, 0, "{what}: {checker:?} CHECK: {check:?}");
        }
        for n in 1..=2 {
            let del = run(&plugins, &sb, deleter, "DEL", &conf, bus);
            assert_eq!(del.code, 0, "{what}: DEL {n}: {del:?}");
            assert!(fw.sources("trusted").is_empty(), "{what}: DEL {n}");
        }
        assert!(!steered(&sb, "10.20.0.5", "trusted"), "{what}: rules left");
    }
    // A zone of the config's choosing.
    let public = self::conf(r#","backend":"firewalld","firewalldZone":"public""#);
    let add = run(&plugins, &sb, Side::Ours, "ADD", &public, bus);
    assert_eq!(add.code, 0, "{add:?}");
    assert_eq!(sorted(fw.sources("public")), SOURCES);
    assert!(steered(&sb, "10.20.0.5", "public"));
    assert!(fw.sources("trusted").is_empty());
    assert_eq!(run(&plugins, &sb, Side::Ours, "DEL", &public, bus).code, 0);
    assert!(fw.sources("public").is_empty());
}

/// No backend set: firewalld while it runs (as the reference picks), iptables once it is gone;
/// DEL removes either kind.
#[test]
fn no_backend_means_firewalld_while_it_runs_and_iptables_without_it() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let conf = conf("");
    let fw = Firewalld::start(&sb.node);
    let bus = fw.address().to_owned();
    for side in [Side::Ours, Side::Reference] {
        let add = run(&plugins, &sb, side, "ADD", &conf, &bus);
        assert_eq!(add.code, 0, "{side:?}: {add:?}");
        assert_eq!(sorted(fw.sources("trusted")), SOURCES, "{side:?}");
        assert!(!sb.node.firewall().contains("CNI-FORWARD"), "{side:?}");
        assert_eq!(run(&plugins, &sb, Side::Ours, "DEL", &conf, &bus).code, 0);
        assert!(fw.sources("trusted").is_empty(), "{side:?}");
    }
    drop(fw);
    // The bus is gone with firewalld: ADD writes iptables rules, CHECK and DEL find them.
    let add = run(&plugins, &sb, Side::Ours, "ADD", &conf, &bus);
    assert_eq!(add.code, 0, "{add:?}");
    assert!(
        sb.node.firewall().contains("-s 10.20.0.5/32 -j ACCEPT"),
        "{}",
        sb.node.firewall()
    );
    assert_eq!(run(&plugins, &sb, Side::Ours, "CHECK", &conf, &bus).code, 0);
    for n in 1..=2 {
        assert_eq!(
            run(&plugins, &sb, Side::Ours, "DEL", &conf, &bus).code,
            0,
            "DEL {n}"
        );
    }
    let left = sb.node.firewall();
    assert!(
        !left.contains("10.20.0.5") && !left.contains("fd20::5"),
        "{left}"
    );
}

#[test]
fn failures_say_what_to_fix_and_take_back_what_was_bound() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let fw = Firewalld::start(&sb.node);
    let bus = fw.address();

    // A zone firewalld does not have.
    let nozone = conf(r#","backend":"firewalld","firewalldZone":"nozone""#);
    let add = run(&plugins, &sb, Side::Ours, "ADD", &nozone, bus);
    assert_eq!(add.err_code(), 7, "{add:?}");
    assert!(add.stdout.contains("firewalld has no such zone") && add.stdout.contains("nozone"));
    assert_eq!(run(&plugins, &sb, Side::Ours, "DEL", &nozone, bus).code, 0);

    // The IPv6 address is bound to another zone already: the IPv4 one is unbound again.
    assert!(fw
        .cmd(&["--zone=public", "--add-source=fd20::5/128"])
        .contains("success"));
    let firewalld = conf(r#","backend":"firewalld""#);
    let add = run(&plugins, &sb, Side::Ours, "ADD", &firewalld, bus);
    assert_ne!(add.code, 0, "{add:?}");
    assert!(add.stdout.contains("ZONE_CONFLICT"), "{add:?}");
    assert!(
        fw.sources("trusted").is_empty(),
        "the half-made binding stays"
    );
    // DEL leaves another zone's binding alone.
    assert_eq!(
        run(&plugins, &sb, Side::Ours, "DEL", &firewalld, bus).code,
        0
    );
    assert_eq!(fw.sources("public"), ["fd20::5/128"]);
    assert!(fw
        .cmd(&["--zone=public", "--remove-source=fd20::5/128"])
        .contains("success"));

    // CHECK finds a source that someone unbound (the reference's CHECK passes).
    assert_eq!(
        run(&plugins, &sb, Side::Ours, "ADD", &firewalld, bus).code,
        0
    );
    assert!(fw
        .cmd(&["--zone=trusted", "--remove-source=10.20.0.5/32"])
        .contains("success"));
    let check = run(&plugins, &sb, Side::Ours, "CHECK", &firewalld, bus);
    assert_ne!(check.code, 0, "{check:?}");
    assert!(
        check
            .stdout
            .contains(r#"10.20.0.5/32 is not in firewalld zone \"trusted\""#),
        "{check:?}"
    );
    assert_eq!(
        run(&plugins, &sb, Side::Ours, "DEL", &firewalld, bus).code,
        0
    );
    assert!(fw.sources("trusted").is_empty());
}

/// `backend: "firewalld"` on a node without firewalld: ADD says so (code 11, the runtime may
/// retry once it runs), DEL has nothing to remove.
#[test]
fn the_firewalld_backend_without_firewalld_says_so() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let conf = conf(r#","backend":"firewalld""#);
    let add = sb.run(&sb.call("ADD", &conf));
    assert_eq!(add.err_code(), 11, "{add:?}");
    assert!(
        add.stdout.contains("is firewalld running on this node?"),
        "{add:?}"
    );
    assert_eq!(sb.run(&sb.call("DEL", &conf)).code, 0);
    let check = sb.run(&sb.call("CHECK", &conf));
    assert_eq!(check.err_code(), 11, "{check:?}");
}
