//! Our firewall's nftables backend on a node without iptables: two pods on two bridges, which
//! the node routes between, and real pings across. The admin chain's drop holds, an isolating
//! ingress policy cuts the bridges apart, and DEL removes exactly the pod's rules, from either
//! backend's side.

use crate::common;

use serde_json::Value;

use common::{ping, with_prev, NftOnly, Plugins, Sandbox, Side};
use testkit::{CniOutput, Netns};

/// A pod's bridge: `name`, with the node at `.1` of `10.<net>.0.0/24`.
fn bridge(name: &str, net: u8) -> String {
    common::bridge_conf("1.0.0", "")
        .replace("\"sbs0\"", &format!("\"{name}\""))
        .replace(
            "}",
            &format!(
                r#","isGateway":true,{}}}"#,
                common::host_local(
                    &format!(r#"[[{{"subnet":"10.{net}.0.0/24"}}]]"#),
                    r#","routes":[{"dst":"0.0.0.0/0"}]"#
                )
            ),
        )
}

/// The firewall after the bridge whose result is `prev`, with `body` inserted.
fn firewall(prev: &Value, body: &str) -> String {
    with_prev(
        &format!(r#"{{"cniVersion":"1.0.0","name":"fwnet","type":"firewall"{body}}}"#),
        prev,
    )
}

/// Two pods, each on a bridge of its own: (pod B's namespace, A's result, B's result).
fn two_bridges(sb: &Sandbox) -> (Netns, Value, Value) {
    let a = sb.add(&bridge("fwa0", 71)).ok();
    let (podb, b) = common::second_pod(sb, &bridge("fwb0", 72));
    sb.node
        .command("sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"])
        .status()
        .expect("sysctl");
    (podb, a, b)
}

/// The pod's address in `result`.
fn address(result: &Value) -> String {
    let cidr = result["ips"][0]["address"].as_str().expect("an address");
    cidr.split('/').next().unwrap_or_default().to_owned()
}

/// Runs the firewall `command` for `container` (whose namespace is `netns`) with `path` as
/// PATH (the node's own when `None`).
fn call(
    sb: &Sandbox,
    command: &str,
    conf: &str,
    container: (&str, &Netns),
    path: Option<&str>,
) -> CniOutput {
    let mut call = sb.call(command, conf);
    call.container_id = container.0.into();
    call.netns = container.1.path().display().to_string();
    if let Some(path) = path {
        call.env.push(("PATH".into(), Some(path.into())));
    }
    sb.run(&call)
}

fn nft(ns: &Netns, args: &[&str]) -> String {
    let out = ns.command("nft").args(args).output().expect("nft");
    assert!(out.status.success(), "nft {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `pods` chain of the node's table.
fn pods_chain(ns: &Netns) -> String {
    nft(
        ns,
        &["list", "chain", "inet", "cni_plugins_firewall", "pods"],
    )
}

#[test]
fn without_iptables_the_admin_chain_and_isolation_hold_and_del_takes_only_its_own() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let (podb, a, b) = two_bridges(&sb);
    let (ip_a, ip_b) = (address(&a), address(&b));
    let pod_a = (common::CONTAINER_ID, &sb.pod);
    let pod_b = ("podb", &podb);
    let bin = NftOnly::new();
    let path = Some(bin.path());
    ping(&sb.pod, &ip_b).expect("the node routes between the bridges");

    // Open: both pods let through, in nftables only.
    for (pod, prev) in [(pod_a, &a), (pod_b, &b)] {
        assert_eq!(
            call(&sb, "ADD", &firewall(prev, ""), pod, path.as_deref()).code,
            0
        );
    }
    let rules = sb.node.firewall();
    assert!(!rules.contains("CNI-FORWARD"), "{rules}");
    let pods = pods_chain(&sb.node);
    for comment in [
        format!("{} eth0 {ip_a}", common::CONTAINER_ID),
        format!("podb eth0 {ip_b}"),
    ] {
        assert_eq!(pods.matches(&comment).count(), 2, "{comment}: {pods}");
    }
    ping(&sb.pod, &ip_b).expect("open: A reaches B");
    let conf_a = firewall(&a, "");
    assert_eq!(call(&sb, "CHECK", &conf_a, pod_a, path.as_deref()).code, 0);

    // The admin's drop in the admin chain comes before the pods' rules.
    nft(
        &sb.node,
        &[
            "add",
            "rule",
            "inet",
            "cni_plugins_firewall",
            "CNI-ADMIN",
            "ip",
            "daddr",
            &ip_b,
            "drop",
        ],
    );
    assert!(
        ping(&sb.pod, &ip_b).is_err(),
        "the admin chain's drop holds"
    );
    nft(
        &sb.node,
        &[
            "flush",
            "chain",
            "inet",
            "cni_plugins_firewall",
            "CNI-ADMIN",
        ],
    );
    ping(&sb.pod, &ip_b).expect("and goes with it");

    // same-bridge on both: the bridges are cut apart; the gateway stays reachable. A second
    // ADD replaces the pod's rules instead of adding to them.
    for (pod, prev) in [(pod_a, &a), (pod_b, &b)] {
        let conf = firewall(prev, r#","ingressPolicy":"same-bridge""#);
        assert_eq!(call(&sb, "ADD", &conf, pod, path.as_deref()).code, 0);
    }
    assert!(
        ping(&sb.pod, &ip_b).is_err(),
        "same-bridge: A cannot reach B"
    );
    ping(&sb.pod, "10.71.0.1").expect("A still reaches its gateway");
    assert_eq!(
        pods_chain(&sb.node).matches(&ip_a).count(),
        4,
        "2 rules, each naming the address in the rule and in its comment"
    );
    let isolating = firewall(&a, r#","ingressPolicy":"same-bridge""#);
    assert_eq!(
        call(&sb, "CHECK", &isolating, pod_a, path.as_deref()).code,
        0
    );
    let isolated = firewall(&a, r#","ingressPolicy":"isolated""#);
    let out = call(&sb, "CHECK", &isolated, pod_a, path.as_deref());
    common::assert_error(&out, 999, "set closed", "CHECK of a policy never applied");

    // DEL of A, with iptables on PATH: A's rules go, B's stay, and so does the isolation.
    assert_eq!(call(&sb, "DEL", &conf_a, pod_a, None).code, 0);
    let pods = pods_chain(&sb.node);
    assert!(!pods.contains(&ip_a), "{pods}");
    assert_eq!(
        pods.matches(&format!("podb eth0 {ip_b}")).count(),
        2,
        "{pods}"
    );
    let out = call(&sb, "CHECK", &conf_a, pod_a, path.as_deref());
    common::assert_error(&out, 999, "chain pods", "CHECK after DEL");
    assert_eq!(
        call(&sb, "DEL", &conf_a, pod_a, path.as_deref()).code,
        0,
        "DEL twice"
    );
    assert!(
        ping(&sb.pod, &ip_b).is_err(),
        "the isolation stays for the bridge's other pods"
    );
    assert_eq!(
        call(&sb, "DEL", &firewall(&b, ""), pod_b, path.as_deref()).code,
        0
    );
    assert!(!pods_chain(&sb.node).contains("accept"), "no pod rule left");

    for (pod, prev, conf) in [
        (pod_a, &a, bridge("fwa0", 71)),
        (pod_b, &b, bridge("fwb0", 72)),
    ] {
        assert_eq!(call(&sb, "DEL", &with_prev(&conf, prev), pod, None).code, 0);
    }
}

#[test]
fn the_nftables_backend_by_name_and_its_refusals() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let prev: Value = serde_json::from_str(
        r#"{"cniVersion":"1.0.0","interfaces":[{"name":"fwc0"},{"name":"vethfw0"},{"name":"eth0","sandbox":"/x"}],
            "ips":[{"address":"10.73.0.5/24","interface":2},{"address":"fd73::5/64","interface":2}]}"#,
    )
    .expect("prevResult");
    let pod = (common::CONTAINER_ID, &sb.pod);
    sb.node.ip(&["link", "add", "fwc0", "type", "bridge"]);
    // Any process in the node's namespace may flock the namespace's file: the lock is
    // elsewhere.
    let ns_file = std::fs::File::open(sb.node.path()).expect("open the node's netns");
    ns_file.try_lock().expect("flock the node's netns");

    // Named, it is used even where iptables is installed; isolated closes the bridge to itself.
    let conf = firewall(&prev, r#","backend":"nftables","ingressPolicy":"isolated""#);
    assert_eq!(call(&sb, "ADD", &conf, pod, None).code, 0);
    let rules = sb.node.firewall();
    assert!(!rules.contains("CNI-FORWARD"), "{rules}");
    assert!(!rules.contains("CNI-ISOLATION"), "{rules}");
    assert!(rules.contains(r#""fwc0" . "fwc0""#), "{rules}");
    assert!(rules.contains("ip6 saddr fd73::5 accept"), "{rules}");
    assert_eq!(call(&sb, "CHECK", &conf, pod, None).code, 0);
    assert_eq!(call(&sb, "DEL", &conf, pod, None).code, 0);
    assert!(!pods_chain(&sb.node).contains("accept"));

    // An admin chain name nft cannot read, or a container ID that cannot be a comment (the
    // runtime interface refuses it first; the backend checks it again): a
    // clear error, and no rule.
    let conf = firewall(
        &prev,
        r#","backend":"nftables","iptablesAdminChainName":"9ADMIN""#,
    );
    let out = call(&sb, "ADD", &conf, pod, None);
    common::assert_error(
        &out,
        7,
        "admin chain in nftables",
        "admin chain starting with a digit",
    );
    let conf = firewall(&prev, r#","backend":"nftables""#);
    let out = call(&sb, "ADD", &conf, ("c\"1", &sb.pod), None);
    common::assert_error(&out, 4, "containerID", "a container ID with a quote");
    // The first interface must be a bridge of the node's, and no wildcard.
    sb.node.ip(&[
        "link", "add", "fwv0", "type", "veth", "peer", "name", "fwv1",
    ]);
    for (name, words) in [
        ("nolink0", "not a link of the node"),
        ("fwv0", "not a bridge on the node"),
        ("fwc+", "wildcard"),
    ] {
        let other = serde_json::from_str::<Value>(&prev.to_string().replace("fwc0", name))
            .expect("prevResult");
        let conf = firewall(
            &other,
            r#","backend":"nftables","ingressPolicy":"same-bridge""#,
        );
        let out = call(&sb, "ADD", &conf, pod, None);
        common::assert_error(&out, 7, words, name);
    }
    assert!(!pods_chain(&sb.node).contains("accept"));
    let sets = nft(
        &sb.node,
        &["list", "set", "inet", "cni_plugins_firewall", "isolating"],
    );
    assert!(!sets.contains("fwv0") && !sets.contains("fwc+"), "{sets}");

    // An admin chain other than CNI-ADMIN is jumped to once the admin has made it, never
    // made by a config.
    let conf = firewall(
        &prev,
        r#","backend":"nftables","iptablesAdminChainName":"MY-ADMIN""#,
    );
    let out = call(&sb, "ADD", &conf, pod, None);
    common::assert_error(
        &out,
        7,
        "the node's admin makes it first",
        "a new admin chain",
    );
    nft(
        &sb.node,
        &["add", "chain", "inet", "cni_plugins_firewall", "MY-ADMIN"],
    );
    assert_eq!(call(&sb, "ADD", &conf, pod, None).code, 0);
    let forward = nft(
        &sb.node,
        &["list", "chain", "inet", "cni_plugins_firewall", "forward"],
    );
    assert!(forward.contains("jump MY-ADMIN"), "{forward}");
    assert_eq!(call(&sb, "DEL", &conf, pod, None).code, 0);

    // Two networks of one pod with the same address: DEL of one leaves the other's rules.
    let on = |ifname: &str, command: &str| {
        let mut c = sb.call(command, &firewall(&prev, r#","backend":"nftables""#));
        c.ifname = ifname.into();
        sb.run(&c).code
    };
    assert_eq!(on("net1", "ADD"), 0);
    assert_eq!(on("net2", "ADD"), 0);
    assert_eq!(on("net1", "DEL"), 0);
    let pods = pods_chain(&sb.node);
    assert!(!pods.contains("c0ffee net1 "), "{pods}");
    assert_eq!(pods.matches("c0ffee net2 10.73.0.5").count(), 2, "{pods}");
    assert_eq!(on("net2", "DEL"), 0);
    assert!(!pods_chain(&sb.node).contains("accept"));
}

/// A DEL whose iptables half fails (an `iptables-save` that cannot read the table) still
/// removes the pod's nftables rules, and says what failed.
#[test]
fn del_clears_nftables_when_iptables_fails() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let prev: Value = serde_json::from_str(
        r#"{"cniVersion":"1.0.0","interfaces":[{"name":"vethfw0"},{"name":"eth0","sandbox":"/x"}],
            "ips":[{"address":"10.74.0.5/24","interface":1}]}"#,
    )
    .expect("prevResult");
    let pod = (common::CONTAINER_ID, &sb.pod);
    let bin = NftOnly::new();
    let save = std::path::Path::new(&bin.path()).join("iptables-save");
    std::fs::write(&save, "#!/bin/sh\necho 'table incompatible' >&2\nexit 1\n").expect("stub");
    std::fs::set_permissions(&save, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let conf = firewall(&prev, r#","backend":"nftables""#);
    assert_eq!(call(&sb, "ADD", &conf, pod, Some(&bin.path())).code, 0);
    assert!(pods_chain(&sb.node).contains("10.74.0.5"));
    let out = call(&sb, "DEL", &conf, pod, Some(&bin.path()));
    common::assert_error(
        &out,
        999,
        "table incompatible",
        "DEL past a failing iptables-save",
    );
    let pods = pods_chain(&sb.node);
    assert!(!pods.contains("10.74.0.5"), "{pods}");
}
