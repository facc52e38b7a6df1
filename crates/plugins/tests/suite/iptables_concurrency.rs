//! Twenty pods ADDed at once on a node whose iptables tables are empty (first use, or after a
//! reboot): portmap and firewall, exec'd as a runtime execs them, each pod with its own
//! namespace, all in one node namespace. Every pod's rules must be there afterwards, and the
//! shared chains' rules exactly once: a call that declares a shared chain another call has just
//! made would flush that call's rules. Once with iptables-nft, once with iptables-legacy, as the
//! node's `iptables` may be either.

use std::path::Path;

use serde_json::json;
use testkit::{CniCall, Netns, PluginDir};

const PODS: usize = 20;

/// A directory of `iptables`, `iptables-save`, ... links to one variant's tools (`nft` or
/// `legacy`), as Debian's alternatives make them, for the front of `PATH`.
fn variant_tools(variant: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for family in ["iptables", "ip6tables"] {
        for tool in ["", "-save", "-restore"] {
            let target = format!("/usr/sbin/{family}-{variant}{tool}");
            std::os::unix::fs::symlink(target, dir.path().join(format!("{family}{tool}")))
                .expect("link a tool");
        }
    }
    dir
}

/// The rules of `table` in `ns`, as `iptables -S` prints them.
fn rules(ns: &Netns, tools: &Path, table: &str) -> Vec<String> {
    let out = ns
        .command(tools.join("iptables"))
        .args(["-w", "-t", table, "-S"])
        .output()
        .expect("run iptables");
    assert!(out.status.success(), "iptables -t {table} -S: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn count(rules: &[String], wanted: &str) -> usize {
    rules.iter().filter(|r| r.contains(wanted)).count()
}

#[test]
fn twenty_concurrent_adds_keep_every_pods_rules_with_iptables_nft() {
    twenty_concurrent_adds("nft");
}

#[test]
fn twenty_concurrent_adds_keep_every_pods_rules_with_iptables_legacy() {
    twenty_concurrent_adds("legacy");
}

fn twenty_concurrent_adds(variant: &str) {
    let tools = variant_tools(variant);
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", tools.path().display());
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["portmap", "firewall"],
    );
    let node = Netns::new("node");
    let pods: Vec<Netns> = (0..PODS).map(|_| Netns::new("pod")).collect();
    let calls: Vec<(String, Vec<CniCall>)> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            let ip = format!("10.88.0.{}", i + 2);
            let prev = json!({"cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
                "ips": [{"address": format!("{ip}/24"), "interface": 0}]});
            let portmap = json!({"cniVersion": "1.0.0", "name": "race", "type": "portmap",
                "runtimeConfig": {"portMappings": [
                    {"hostPort": 8000 + i, "containerPort": 80, "protocol": "tcp"}]},
                "prevResult": prev});
            let firewall = json!({"cniVersion": "1.0.0", "name": "race", "type": "firewall",
                "backend": "iptables", "prevResult": prev});
            let calls = [portmap, firewall]
                .iter()
                .map(|conf| {
                    let mut call = CniCall::new("ADD", &conf.to_string());
                    call.container_id = format!("pod{i:02}");
                    call.netns = pod.path().display().to_string();
                    call.path = plugins.path().display().to_string();
                    call.env.push(("PATH".into(), Some(path.clone())));
                    call
                })
                .collect();
            (ip, calls)
        })
        .collect();

    std::thread::scope(|s| {
        for (_, pod_calls) in &calls {
            for call in pod_calls {
                let node = &node;
                let plugins = &plugins;
                s.spawn(move || {
                    let conf: serde_json::Value =
                        serde_json::from_str(&call.stdin).expect("a config");
                    let plugin = conf["type"].as_str().expect("a type");
                    let out = call.run(&plugins.path().join(plugin), Some(node));
                    assert_eq!(
                        out.code, 0,
                        "{plugin} ADD of {}: {out:?}",
                        call.container_id
                    );
                });
            }
        }
    });

    let nat = rules(&node, tools.path(), "nat");
    let filter = rules(&node, tools.path(), "filter");
    let mut lost = Vec::new();
    for (i, (ip, _)) in calls.iter().enumerate() {
        let entry = format!("id: \\\"pod{i:02}\\\"");
        if count(&nat, &entry) != 1 {
            lost.push(format!("pod{i:02}'s entry rule in CNI-HOSTPORT-DNAT"));
        }
        if count(&nat, &format!("--to-destination {ip}:80")) != 1 {
            lost.push(format!("pod{i:02}'s DNAT to {ip}:80"));
        }
        if count(&filter, &format!("-A CNI-FORWARD -s {ip}/32 -j ACCEPT")) != 1 {
            lost.push(format!("pod{i:02}'s firewall rule for {ip}"));
        }
    }
    assert_eq!(
        lost,
        Vec::<String>::new(),
        "nat:\n{nat:#?}\nfilter:\n{filter:#?}"
    );
    for (table, shared) in [
        (
            &nat,
            "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        ),
        (
            &nat,
            "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        ),
        (&nat, "-j CNI-HOSTPORT-MASQ"),
        (&nat, "-A CNI-HOSTPORT-SETMARK "),
        (&nat, "-A CNI-HOSTPORT-MASQ "),
        (
            &filter,
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\"",
        ),
        (&filter, "-j CNI-ADMIN"),
    ] {
        assert_eq!(count(table, shared), 1, "{shared:?} in {table:#?}");
    }
}
