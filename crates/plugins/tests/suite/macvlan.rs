//! Our macvlan on this machine's kernel: the master is a veth end in a node namespace the test
//! owns. Every mode, MTU, MAC precedence, layer 2 only, linkInContainer, CHECK, DEL without the
//! master, every error path (each leaving nothing behind), and two pods reaching each other.

use crate::common;

use common::{
    assert_no_master_needs_a_default_route, assert_pod_and_ipam_clean, eth0, host_local,
    master_sandbox, ping, second_pod, with_prev, Plugins, Sandbox, Side,
};
use serde_json::{json, Value};
use testkit::Netns;

const STATIC_V4: &str = r#""ipam":{"type":"static","addresses":[{"address":"10.60.0.5/24","gateway":"10.60.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}"#;

fn conf(body: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","master":"up0"{body}}}"#)
}

/// A sandbox whose node has the master `up0`, a veth end (MTU 1500), with a default route.
fn sandbox(plugins: &Plugins) -> Sandbox {
    master_sandbox(plugins, false)
}

/// The pod has nothing but lo, no reservation is left, and the node has nothing but the
/// master pair.
fn assert_clean(sb: &Sandbox) {
    assert_pod_and_ipam_clean(sb);
    let mut node = sb.node_links();
    node.sort();
    assert_eq!(node, ["up0", "up0p"], "node links");
}

#[test]
fn every_mode_is_created_in_the_pod_and_deleted() {
    let plugins = Plugins::new();
    for mode in ["bridge", "private", "vepa", "passthru"] {
        let sb = sandbox(&plugins);
        if mode == "passthru" {
            // passthru takes the master whole: one the node does not use itself.
            sb.node.ip(&["addr", "flush", "dev", "up0"]);
        }
        let c = conf(&format!(r#","mode":"{mode}",{STATIC_V4}"#));
        let r = sb.add(&c).ok();
        let link = eth0(&sb.pod);
        assert_eq!(link["linkinfo"]["info_kind"], "macvlan", "{mode}");
        assert_eq!(link["linkinfo"]["info_data"]["mode"], mode);
        assert!(link["flags"].to_string().contains("UP"), "{link}");
        assert_eq!(r["interfaces"][0]["name"], "eth0");
        assert_eq!(
            r["interfaces"][0]["sandbox"],
            sb.pod.path().display().to_string()
        );
        assert_eq!(r["interfaces"][0]["mac"], link["address"]);
        assert_eq!(
            r["ips"][0],
            json!({"address":"10.60.0.5/24","gateway":"10.60.0.1","interface":0})
        );
        let routes = sb.pod.ip_json(&["route", "show", "default"]);
        assert_eq!(routes[0]["gateway"], "10.60.0.1", "{routes}");
        sb.run(&sb.call("CHECK", &with_prev(&c, &r))).ok();
        sb.del(&c).ok();
        assert_clean(&sb);
    }
}

#[test]
fn default_mode_is_bridge_and_master_defaults_to_the_default_route() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = format!(r#"{{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan",{STATIC_V4}}}"#);
    sb.add(&c).ok();
    let link = eth0(&sb.pod);
    assert_eq!(link["linkinfo"]["info_data"]["mode"], "bridge");
    assert_eq!(link["link_index"], master_index(&sb.node, "up0"), "{link}");
    sb.del(&c).ok();
    assert_clean(&sb);
}

#[test]
fn mtu_up_to_the_masters_and_not_beyond() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(&format!(r#","mtu":1400,{STATIC_V4}"#));
    sb.add(&c).ok();
    assert_eq!(eth0(&sb.pod)["mtu"], 1400);
    sb.del(&c).ok();

    let c = conf(&format!(r#","mtu":1500,{STATIC_V4}"#));
    sb.add(&c).ok();
    assert_eq!(eth0(&sb.pod)["mtu"], 1500);
    sb.del(&c).ok();

    let out = sb.add(&conf(&format!(r#","mtu":1501,{STATIC_V4}"#)));
    assert_eq!(out.err_code(), 7, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("1501") && msg.contains("1500") && msg.contains("up0"),
        "{msg}"
    );
    assert_clean(&sb);
}

#[test]
fn mac_from_config_cni_args_and_runtime_config_in_that_order() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let cases = [
        (r#","mac":"02:00:00:00:00:01""#, "", "02:00:00:00:00:01"),
        (
            r#","mac":"02:00:00:00:00:01""#,
            "IgnoreUnknown=1;MAC=02:00:00:00:00:02",
            "02:00:00:00:00:02",
        ),
        (
            r#","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}"#,
            "IgnoreUnknown=1;MAC=02:00:00:00:00:02",
            "02:00:00:00:00:03",
        ),
        // macvlan does not read args.cni.mac (the reference does not either).
        (
            r#","args":{"cni":{"mac":"02:00:00:00:00:04"}}"#,
            "IgnoreUnknown=1;MAC=02:00:00:00:00:02",
            "02:00:00:00:00:02",
        ),
    ];
    for (body, env, want) in cases {
        let c = conf(&format!("{body},{STATIC_V4}"));
        let mut call = sb.call("ADD", &c);
        call.args = env.into();
        let r = sb.run(&call).ok();
        assert_eq!(eth0(&sb.pod)["address"], want, "{body} {env}");
        assert_eq!(r["interfaces"][0]["mac"], want);
        sb.del(&c).ok();
    }
    assert_clean(&sb);
}

#[test]
fn layer_2_only_without_ipam() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf("");
    let r = sb.add(&c).ok();
    assert!(r.get("ips").is_none(), "{r}");
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    let link = eth0(&sb.pod);
    assert!(link["flags"].to_string().contains("\"UP\""), "{link}");
    let global: Vec<&Value> = link["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] == "global")
        .collect();
    assert!(global.is_empty(), "{link}");
    sb.run(&sb.call("CHECK", &with_prev(&c, &r))).ok();
    sb.del(&c).ok();
    assert_clean(&sb);
}

#[test]
fn bcqueuelen_and_sysctls() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(
        r#","bcqueuelen":200,"ipam":{"type":"static","addresses":[{"address":"10.60.0.5/24"},{"address":"fd60::5/64"}]}"#,
    );
    sb.add(&c).ok();
    assert_eq!(eth0(&sb.pod)["linkinfo"]["info_data"]["bcqueuelen"], 200);
    let sysctl = |key: &str| {
        let o = sb.pod.command("sysctl").args(["-n", key]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    assert_eq!(sysctl("net.ipv4.conf.eth0.arp_notify"), "1");
    assert_eq!(sysctl("net.ipv6.conf.eth0.ndisc_notify"), "1");
    // enabledad is off: the IPv6 address is usable at once.
    let v6 = sb
        .pod
        .ip_json(&["-6", "addr", "show", "dev", "eth0", "scope", "global"]);
    assert_eq!(v6[0]["addr_info"][0]["local"], "fd60::5", "{v6}");
    assert!(v6[0]["addr_info"][0].get("tentative").is_none(), "{v6}");
    sb.del(&c).ok();
    assert_clean(&sb);
}

#[test]
fn dns_from_ipam_is_kept_and_merged_with_the_configs() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(
        r#","dns":{"nameservers":["10.60.0.53"],"search":["cluster.local"]},"ipam":{"type":"static","addresses":[{"address":"10.60.0.5/24"}],"dns":{"nameservers":["10.60.0.54"],"domain":"example.org"}}"#,
    );
    let r = sb.add(&c).ok();
    assert_eq!(
        r["dns"],
        json!({"nameservers":["10.60.0.53","10.60.0.54"],"domain":"example.org","search":["cluster.local"]})
    );
    sb.del(&c).ok();
}

#[test]
fn two_pods_in_bridge_mode_reach_each_other() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let ipam = |ip: &str| {
        format!(
            r#","mode":"bridge","ipam":{{"type":"static","addresses":[{{"address":"{ip}/24"}},{{"address":"fd60::{}/64"}}]}}"#,
            &ip[8..]
        )
    };
    let a = conf(&ipam("10.60.0.5"));
    let b = conf(&ipam("10.60.0.6"));
    sb.add(&a).ok();
    let (pod_b, _) = second_pod(&sb, &b);
    ping(&sb.pod, "10.60.0.6").unwrap();
    ping(&pod_b, "10.60.0.5").unwrap();
    ping(&sb.pod, "fd60::6").unwrap();
}

#[test]
fn private_mode_isolates_pods_on_one_master() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let ipam = |ip: &str| {
        format!(
            r#","mode":"private","ipam":{{"type":"static","addresses":[{{"address":"{ip}/24"}}]}}"#
        )
    };
    sb.add(&conf(&ipam("10.60.0.5"))).ok();
    let (_pod_b, _) = second_pod(&sb, &conf(&ipam("10.60.0.6")));
    assert!(ping(&sb.pod, "10.60.0.6").is_err());
}

#[test]
fn link_in_container_uses_a_master_in_the_pod() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    sb.pod.veth_pair("pup0", "pup0p");
    let c = format!(
        r#"{{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","master":"pup0","linkInContainer":true,{STATIC_V4}}}"#
    );
    let r = sb.add(&c).ok();
    assert_eq!(
        eth0(&sb.pod)["link"],
        "pup0",
        "the master is a sibling in the pod"
    );
    sb.run(&sb.call("CHECK", &with_prev(&c, &r))).ok();
    sb.del(&c).ok();
    assert!(sb.pod.try_ip(&["link", "show", "eth0"]).status.code() != Some(0));
    // Not found in the node: the master is looked up in the pod only.
    let out = sb.add(&c.replace(r#","linkInContainer":true"#, ""));
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(out.stdout.contains("node's netns"), "{}", out.stdout);
}

#[test]
fn check_finds_drift() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(&format!(",{STATIC_V4}"));
    let r = sb.add(&c).ok();
    let check = with_prev(&c, &r);
    sb.run(&sb.call("CHECK", &check)).ok();
    // Another mode in the config.
    let other = check.replacen(r#""master":"up0""#, r#""master":"up0","mode":"vepa""#, 1);
    let out = sb.run(&sb.call("CHECK", &other));
    assert!(
        out.stdout.contains("mode bridge, the config says vepa"),
        "{}",
        out.stdout
    );
    // Another MAC in the result.
    let mut wrong_mac: Value = serde_json::from_str(&check).unwrap();
    wrong_mac["prevResult"]["interfaces"][0]["mac"] = json!("02:de:ad:be:ef:00");
    let out = sb.run(&sb.call("CHECK", &wrong_mac.to_string()));
    assert!(out.stdout.contains("has MAC"), "{}", out.stdout);
    // A missing route, then a missing address.
    sb.pod.ip(&["route", "del", "default"]);
    let out = sb.run(&sb.call("CHECK", &check));
    assert!(out.stdout.contains("route 0.0.0.0/0"), "{}", out.stdout);
    sb.pod.ip(&["addr", "del", "10.60.0.5/24", "dev", "eth0"]);
    let out = sb.run(&sb.call("CHECK", &check));
    assert!(
        out.stdout.contains("address 10.60.0.5/24 is missing"),
        "{}",
        out.stdout
    );
    // No prevResult.
    let out = sb.run(&sb.call("CHECK", &c));
    assert_eq!(out.err_code(), 7);
    // The interface is gone.
    sb.pod.ip(&["link", "del", "eth0"]);
    let out = sb.run(&sb.call("CHECK", &check));
    assert!(out.stdout.contains("not found"), "{}", out.stdout);
}

#[test]
fn del_needs_neither_master_nor_default_route_and_is_idempotent() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(&format!(
        ",{}",
        host_local(r#"[[{"subnet":"10.61.0.0/24"}]]"#, "")
    ));
    sb.add(&c).ok();
    assert_eq!(sb.reservations().len(), 1);
    // The master goes away (and the macvlan with it), and so does the default route.
    sb.node.ip(&["link", "del", "up0"]);
    sb.del(&c).ok();
    sb.del(&c).ok();
    assert!(sb.reservations().is_empty());
    // A config without master, on a node without default route.
    let no_master = c.replace(r#","master":"up0""#, "");
    sb.del(&no_master).ok();
    // An empty CNI_NETNS, and a namespace that is gone.
    let mut call = sb.call("DEL", &no_master);
    call.netns.clear();
    sb.run(&call).ok();
    call.netns = "/run/netns/gone-already".into();
    sb.run(&call).ok();
}

#[test]
fn status_and_gc_go_to_ipam() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    let c = conf(&format!(
        ",{}",
        host_local(r#"[[{"subnet":"10.61.0.0/24"}]]"#, "")
    ))
    .replace("1.0.0", "1.1.0");
    sb.add(&c).ok();
    sb.run(&sb.call("STATUS", &c)).ok();
    let mut gc: Value =
        serde_json::from_str(&c.replace("DATADIR", &sb.dir.path().display().to_string())).unwrap();
    gc["cni.dev/valid-attachments"] = json!([]);
    sb.run(&sb.call("GC", &gc.to_string())).ok();
    assert!(sb.reservations().is_empty(), "{:?}", sb.reservations());
    // Layer 2: nothing to ask.
    sb.run(&sb.call("STATUS", &conf("").replace("1.0.0", "1.1.0")))
        .ok();
    // A config ADD would refuse is reported by STATUS too.
    let out = sb.run(&sb.call("STATUS", &conf(r#","mode":"l9""#).replace("1.0.0", "1.1.0")));
    assert_eq!(out.err_code(), 7);
}

/// Each failure: the expected code, words in the message, and nothing left behind.
#[test]
fn every_error_path_leaves_nothing_behind() {
    let plugins = Plugins::new();
    let hl = host_local(r#"[[{"subnet":"10.61.0.0/24"}]]"#, "");
    let cases: Vec<(&str, String, &str, u64, &str)> = vec![
        (
            "master missing",
            conf(&format!(",{hl}")).replace("up0", "nosuch0"),
            "",
            7,
            r#"master: "nosuch0" is not found"#,
        ),
        (
            "unknown mode",
            conf(&format!(r#","mode":"l3",{hl}"#)),
            "",
            7,
            r#"mode: "l3" is not a mode of macvlan"#,
        ),
        (
            "mtu above the master's",
            conf(&format!(r#","mtu":9000,{hl}"#)),
            "",
            7,
            "larger than the MTU 1500",
        ),
        (
            "negative mtu",
            conf(&format!(r#","mtu":-1,{hl}"#)),
            "",
            7,
            "mtu: -1 is out of range",
        ),
        (
            "mtu not a number",
            conf(&format!(r#","mtu":"big",{hl}"#)),
            "",
            6,
            r#"mtu: "big" is not a whole number"#,
        ),
        (
            "bad mac",
            conf(&format!(r#","mac":"02:00",{hl}"#)),
            "",
            7,
            r#"mac: "02:00" is not a MAC address"#,
        ),
        (
            "bad CNI_ARGS MAC",
            conf(&format!(",{hl}")),
            "MAC=zz",
            7,
            "CNI_ARGS MAC",
        ),
        (
            "unknown CNI_ARGS",
            conf(&format!(",{hl}")),
            "FOO=1",
            7,
            "unknown args",
        ),
        (
            "multicast mac",
            conf(&format!(r#","mac":"01:00:5e:00:00:01",{hl}"#)),
            "",
            999,
            "macvlan",
        ),
        (
            "IPAM refuses the address",
            conf(&format!(",{hl}")),
            "IgnoreUnknown=1;IP=10.9.9.9",
            7,
            "10.9.9.9",
        ),
        (
            "IPAM not installed",
            conf(r#","ipam":{"type":"no-such-ipam"}"#),
            "",
            7,
            "no-such-ipam",
        ),
        (
            "master name invalid",
            conf(&format!(",{hl}")).replace("up0", "a/b"),
            "",
            7,
            r#"master: "a/b" is not an interface name"#,
        ),
        (
            "static IPAM without addresses",
            conf(r#","ipam":{"type":"static"}"#),
            "",
            999,
            "no IP address",
        ),
    ];
    for (what, c, env, code, words) in cases {
        let sb = sandbox(&plugins);
        let mut call = sb.call("ADD", &c);
        call.args = env.into();
        common::assert_error(&sb.run(&call), code, words, what);
        assert_clean(&sb);
    }

    assert_no_master_needs_a_default_route(
        &plugins,
        &format!(r#"{{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan",{STATIC_V4}}}"#),
    );

    // The interface name is taken in the pod.
    let sb = sandbox(&plugins);
    sb.pod.veth_pair("eth0", "eth0p");
    let out = sb.add(&conf(&format!(",{hl}")));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("already exists"), "{}", out.stdout);
    let mut left = sb.pod.links();
    left.sort();
    assert_eq!(left, ["eth0", "eth0p", "lo"]);
    assert!(sb.reservations().is_empty());

    // An unusable netns.
    let sb = sandbox(&plugins);
    let mut call = sb.call("ADD", &conf(&format!(",{hl}")));
    call.netns = "/run/netns/does-not-exist".into();
    let out = sb.run(&call);
    assert_eq!(out.err_code(), 8, "{out:?}");
    assert_clean(&sb);
}

/// The interface index of `name` in `ns`.
fn master_index(ns: &Netns, name: &str) -> Value {
    ns.ip_json(&["link", "show", "dev", name])[0]["ifindex"].clone()
}

/// A refused ADD (the pod had an interface of that name) is followed by the runtime's DEL: the
/// interface that was there is not ours, and DEL leaves it, for macvlan and bridge alike.
#[test]
fn del_leaves_an_interface_of_that_name_it_did_not_make() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    sb.pod.ip(&["link", "add", "eth0", "type", "bridge"]);
    let mv = conf(&format!(",{STATIC_V4}"));
    let bridge = r#"{"cniVersion":"1.0.0","name":"brnet","type":"bridge","bridge":"cni9","ipam":{"type":"static","addresses":[{"address":"10.61.0.5/24"}]}}"#;
    for c in [mv.as_str(), bridge] {
        let out = sb.add(c);
        assert_ne!(out.code, 0, "{out:?}");
        sb.del(c).ok();
        assert_eq!(
            eth0(&sb.pod)["linkinfo"]["info_kind"],
            "bridge",
            "DEL of {c} removed the pod's own eth0"
        );
    }
}

/// A macvlan and a bridge config, each with host-local on `subnet`.
fn macvlan_and_bridge(subnet: &str) -> [String; 2] {
    let hl = host_local(&format!(r#"[[{{"subnet":"{subnet}"}}]]"#), "");
    [
        conf(&format!(",{hl}")),
        format!(r#"{{"cniVersion":"1.0.0","name":"mvnet","type":"bridge","bridge":"cni9",{hl}}}"#),
    ]
}

/// Two ADDs of one attachment at once (macvlan and bridge, host-local): one wins, and the
/// loser's failure releases nothing of the winner's (its reservation, its interface).
#[test]
fn concurrent_adds_of_one_attachment_keep_the_winners_reservation() {
    let plugins = Plugins::new();
    for c in &macvlan_and_bridge("10.62.0.0/24") {
        for round in 0..10 {
            let sb = sandbox(&plugins);
            let call = sb.call("ADD", c);
            let outs: Vec<testkit::CniOutput> = std::thread::scope(|s| {
                let runs: Vec<_> = (0..2).map(|_| s.spawn(|| sb.run(&call))).collect();
                runs.into_iter().map(|r| r.join().unwrap()).collect()
            });
            let won: Vec<_> = outs.iter().filter(|o| o.code == 0).collect();
            assert_eq!(won.len(), 1, "{c} round {round}: {outs:?}");
            let ip = won[0].json()["ips"][0]["address"]
                .as_str()
                .unwrap()
                .to_owned();
            assert_eq!(sb.reservations().len(), 1, "{c} round {round}: {outs:?}");
            let addrs = eth0(&sb.pod)["addr_info"].to_string();
            assert!(
                addrs.contains(ip.split('/').next().unwrap()),
                "{c} round {round}: {addrs}"
            );
            sb.del(c).ok();
            assert!(sb.reservations().is_empty(), "{c} round {round}");
        }
    }
}

/// A repeated ADD of an attachment (same container and interface) that host-local refuses as
/// a duplicate reserved nothing: its failure must not release the first ADD's address.
#[test]
fn a_refused_repeated_add_keeps_the_first_reservation() {
    let plugins = Plugins::new();
    for c in &macvlan_and_bridge("10.63.0.0/24") {
        let sb = sandbox(&plugins);
        sb.add(c).ok();
        let first = sb.reservations();
        assert_eq!(first.len(), 1, "{c}");
        let other_pod = Netns::new("pod2");
        let mut again = sb.call("ADD", c);
        again.netns = other_pod.path().display().to_string();
        let out = sb.run(&again);
        assert_ne!(out.code, 0, "{c}: {out:?}");
        assert!(out.stdout.contains("10.63.0.2"), "{c}: {}", out.stdout);
        assert_eq!(
            sb.reservations(),
            first,
            "{c}: the first ADD's address was released"
        );
        assert!(other_pod.links().iter().all(|l| l == "lo"), "{c}");
        sb.del(c).ok();
        assert!(sb.reservations().is_empty(), "{c}");
    }
}

/// On a master without a carrier (an unplugged NIC), an ADD with an IPv6 address returns at
/// once, the address already local: without DAD the kernel makes it so with no carrier too,
/// and ADD's wait for it must not hang there.
#[test]
fn ipv6_on_a_master_without_a_carrier_is_added_at_once() {
    let plugins = Plugins::new();
    let sb = sandbox(&plugins);
    sb.node.ip(&["link", "set", "up0p", "down"]);
    let c = conf(r#","ipam":{"type":"static","addresses":[{"address":"fd60::5/64"}]}"#);
    let started = std::time::Instant::now();
    sb.add(&c).ok();
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(2),
        "ADD on a master without a carrier took {took:?}"
    );
    let link = sb.pod.ip(&["link", "show", "dev", "eth0"]);
    assert!(link.contains("NO-CARRIER"), "{link}");
    let local = sb
        .pod
        .ip(&["-6", "route", "show", "table", "local", "fd60::5"]);
    assert!(local.starts_with("local fd60::5 "), "{local:?}");
    sb.del(&c).ok();
    assert_clean(&sb);
}
