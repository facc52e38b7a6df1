//! Crash consistency of the plugins: each ADD SIGKILLed at evenly spread points among its file
//! writes (the plugin's own, or its IPAM plugin's), then the runtime's DEL. DEL must succeed
//! and leave no interface, veth, reservation, firewall rule or temporary file.

use crate::common;
use crate::dhcp_env;

use std::time::Instant;

use common::{host_local, veth_master, Plugins, Sandbox, Side};

/// At least this many runs of each config must really have been killed.
const KILLS: usize = 30;

const RANGE: &str = r#"[[{"subnet":"10.77.0.0/24"}]]"#;

/// Every file left under the host-local data directory other than its `lock` and
/// `last_reserved_ip.*` files, which the reference keeps too.
fn store_leftovers(sb: &Sandbox) -> Vec<String> {
    let mut out = Vec::new();
    for net in std::fs::read_dir(sb.dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(net.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            if name != "lock" && !name.starts_with("last_reserved_ip.") {
                out.push(name);
            }
        }
    }
    out
}

fn assert_clean(sb: &Sandbox, what: &str) {
    let pod: Vec<String> = sb.pod.links().into_iter().filter(|l| l != "lo").collect();
    assert!(pod.is_empty(), "{what}: pod links {pod:?}");
    let veths: Vec<String> = sb
        .node_links()
        .into_iter()
        .filter(|l| l.starts_with("veth"))
        .collect();
    assert!(veths.is_empty(), "{what}: node veths {veths:?}");
    assert!(
        store_leftovers(sb).is_empty(),
        "{what}: store {:?}",
        store_leftovers(sb)
    );
    let fw = sb.firewall();
    assert!(!fw.contains("c0ffee"), "{what}: firewall rules left: {fw}");
}

/// Kills `plugin`'s ADD of `conf` at each of its file writes, then at evenly spread moments of
/// an ADD's run until at least [`KILLS`] runs died; DEL after each.
fn crash(conf: &str, plugin: &str) {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    veth_master(&sb.node, 1500);
    let bin = plugins.dir(Side::Ours).join(plugin);
    // The shortest of a few ADDs: the first also makes what the later ones find (the bridge,
    // shared firewall chains), and a kill must land inside the typical run.
    let mut took = std::time::Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        sb.add(conf).ok();
        took = took.min(started.elapsed());
        sb.del(conf).ok();
    }
    let writes = testkit::count_file_changes(&sb.call("ADD", conf), &bin, Some(&sb.node));
    sb.del(conf).ok();
    assert_clean(&sb, "after the measuring runs");
    let mut kills = 0;
    let mut after_each = |what: String, out: testkit::CniOutput, killed: bool| {
        kills += usize::from(killed);
        let del = sb.del(conf);
        assert_eq!(
            del.code, 0,
            "{plugin}: DEL after a kill {what}: {del:?}\nADD: {out:?}"
        );
        assert_clean(&sb, &format!("{plugin}: after a kill {what}"));
    };
    for n in 1..=writes {
        let (out, killed) = sb.call("ADD", conf).run_killed_at(&bin, Some(&sb.node), n);
        after_each(format!("at write {n} of {writes}"), out, killed);
    }
    for k in 0..2 * KILLS {
        let delay = took.mul_f64((k as f64 + 0.5) / (2 * KILLS) as f64);
        let (out, killed) = sb
            .call("ADD", conf)
            .run_killed_after(&bin, Some(&sb.node), delay);
        after_each(format!("after {delay:?} of {took:?}"), out, killed);
    }
    assert!(
        kills >= KILLS,
        "{plugin}: only {kills} of the runs were killed"
    );
}

#[test]
fn bridge_add_killed_at_any_file_write_is_cleaned_up_by_del() {
    let conf = common::bridge_conf(
        "1.0.0",
        &format!(
            r#","isGateway":true,"ipMasq":true,{}"#,
            host_local(RANGE, "")
        ),
    );
    crash(&conf, "bridge");
}

#[test]
fn macvlan_add_killed_at_any_file_write_is_cleaned_up_by_del() {
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"crash","type":"macvlan","master":"up0",{}}}"#,
        host_local(RANGE, "")
    );
    crash(&conf, "macvlan");
}

#[test]
fn host_local_add_killed_at_any_file_write_is_cleaned_up_by_del() {
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"crash","type":"host-local",{}}}"#,
        host_local(RANGE, "")
    );
    crash(&conf, "host-local");
}

/// macvlan + dhcp against dnsmasq: a plugin killed while the daemon takes the lease leaves the
/// lease with the daemon, and DEL releases it.
#[test]
fn macvlan_dhcp_add_killed_is_released_by_del() {
    use dhcp_env::Setup;
    let s = Setup::on_master(
        testkit::dhcp::Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]),
        "macvlan",
        r#","mode":"bridge""#,
    );
    let conf = s.conf("");
    let bin = s.plugins.path().join("macvlan");
    let started = Instant::now();
    s.add(&conf).ok();
    let took = started.elapsed();
    s.del(&conf).ok();
    let writes = testkit::count_file_changes(&s.call("ADD", &conf), &bin, Some(&s.net.node));
    s.del(&conf).ok();
    let mut kills = 0;
    let mut check = |what: String, killed: bool| {
        kills += usize::from(killed);
        let del = s.del(&conf);
        assert_eq!(del.code, 0, "DEL after a kill {what}: {del:?}");
        assert!(
            s.lease_files().is_empty(),
            "{what}: leases {:?}",
            s.lease_files()
        );
        let links: Vec<String> = s.pod.links().into_iter().filter(|l| l != "lo").collect();
        assert!(links.is_empty(), "{what}: pod links {links:?}");
    };
    for n in 1..=writes {
        let (_, killed) = s
            .call("ADD", &conf)
            .run_killed_at(&bin, Some(&s.net.node), n);
        check(format!("at write {n} of {writes}"), killed);
    }
    for k in 0..2 * KILLS {
        let delay = took.mul_f64((k as f64 + 0.5) / (2 * KILLS) as f64);
        let (_, killed) = s
            .call("ADD", &conf)
            .run_killed_after(&bin, Some(&s.net.node), delay);
        check(format!("after {delay:?} of {took:?}"), killed);
    }
    assert!(kills >= KILLS, "only {kills} of the runs were killed");
}
