//! A trial's report as the text `multus try` prints (docs/try.md shows it).

use std::fmt::Write;

use npwg::status::NETWORK_STATUS_ANNOTATION;

use super::report::{
    Attached, CheckResult, Del, Kept, Leftovers, Node, Outcome, Place, Target, Trial,
};
use super::CLUSTER_SUBNET;

/// Everything but the verdict line; a section the trial did not reach is left out.
pub fn trial(t: &Trial) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_trial(&mut out, t);
    out
}

/// The last line: whether the trial passed.
pub fn verdict(t: &Trial) -> String {
    let word = if t.passed() { "PASS" } else { "FAIL" };
    format!("=== {}: {word}\n\n", t.heading)
}

fn write_trial(out: &mut String, t: &Trial) -> std::fmt::Result {
    writeln!(out, "=== {}", t.heading)?;
    if let Some(d) = &t.dhcp {
        writeln!(
            out,
            "dhcp: dnsmasq on the lan serving {}, our dhcp daemon on {}",
            d.subnet,
            d.socket.display()
        )?;
    }
    if let Some(api) = &t.whereabouts_api {
        writeln!(
            out,
            "whereabouts: pools in a Kubernetes API of this run, {api} on the node"
        )?;
    }
    let name = &t.sandbox;
    match &t.node {
        Some(Node::Simulated { uplink, lan_bridge }) => {
            writeln!(
                out,
                "node: namespace {name}-node, uplink {uplink} to the lan (namespace {name}-lan, bridge {lan_bridge} 198.18.0.1/24)"
            )?;
            writeln!(
                out,
                "cluster network: bridge cni0, host-local {CLUSTER_SUBNET}; pod namespace {name}-pod"
            )?;
        }
        Some(Node::OnHost { cluster_parent }) => writeln!(
            out,
            "node: this machine (only read); cluster network: macvlan on {cluster_parent} inside the pod, host-local {CLUSTER_SUBNET}; pod namespace {name}-pod"
        )?,
        None => {}
    }
    if let Some(add) = &t.add {
        writeln!(out, "\n--- ADD")?;
        match add {
            Outcome::Ok => writeln!(out, "ok")?,
            Outcome::Failed(e) => writeln!(out, "FAILED: {e}")?,
        }
    }
    if let Some(a) = &t.attached {
        write_attached(out, a)?;
    }
    if t.add.is_some() {
        writeln!(out, "\n--- events")?;
        for e in &t.events {
            let kind = if e.warning { "Warning" } else { "Normal" };
            writeln!(out, "{kind:<8} {:<21} {}", e.reason, e.message)?;
        }
    }
    if let Some(checks) = &t.connectivity {
        writeln!(out, "\n--- connectivity")?;
        for c in checks {
            let (ifname, network) = (&c.interface, &c.network);
            match &c.result {
                CheckResult::NoSuchInterface => writeln!(
                    out,
                    "{ifname} ({network}): FAILED: the pod has no such interface"
                )?,
                CheckResult::NoAddress => {
                    writeln!(out, "{ifname} ({network}): no address, nothing to check")?
                }
                CheckResult::NotChecked => writeln!(
                    out,
                    "{ifname} ({network}): no gateway to ping, and --on-host adds no peer: not checked"
                )?,
                CheckResult::Pinged {
                    what,
                    target,
                    place,
                    reached,
                } => {
                    let what = match what {
                        Target::Gateway => "gateway",
                        Target::NodeAddress => "the node's address",
                        Target::Peer => "peer",
                    };
                    let place = match place {
                        Place::Node => "on the node",
                        Place::RealNetwork => "on the real network",
                        Place::NodeBridge => "on the node's bridge, for this check",
                        Place::Nowhere => "nowhere: the veth is on no bridge",
                        Place::Lan => "on the lan",
                    };
                    let reached = if *reached { "ok" } else { "FAILED, no reply" };
                    writeln!(
                        out,
                        "{ifname} ({network}): ping {what} {target} ({place}): {reached}"
                    )?;
                }
            }
        }
    }
    if let Some(e) = &t.exec {
        writeln!(out, "\n--- exec in the pod: {}", e.command)?;
        out.push_str(&e.output);
        writeln!(out, "({})", e.status)?;
    }
    match &t.del {
        Some(Del::NotRun) => writeln!(
            out,
            "\n--- DEL: not run (--keep): the pod stays as ADD left it"
        )?,
        Some(Del::Ok) => writeln!(out, "\n--- DEL\nok")?,
        Some(Del::Failed(e)) => writeln!(out, "\n--- DEL\nFAILED: {e}")?,
        None => {}
    }
    if let Some(l) = &t.left {
        write_left(out, l)?;
    }
    if let Some(k) = &t.kept {
        write_kept(out, k)?;
    }
    Ok(())
}

fn write_attached(out: &mut String, a: &Attached) -> std::fmt::Result {
    writeln!(out, "\n--- the pod's interfaces")?;
    for l in &a.interfaces {
        writeln!(
            out,
            "{:<9} {:<8} {} mtu {}{}",
            l.name,
            l.kind,
            l.mac,
            l.mtu,
            if l.up { "" } else { " (down)" }
        )?;
        for addr in &l.addresses {
            writeln!(out, "          {addr}")?;
        }
    }
    writeln!(out, "\n--- the pod's routes")?;
    for r in &a.routes {
        writeln!(out, "{r}")?;
    }
    writeln!(out, "\n--- annotation {NETWORK_STATUS_ANNOTATION}")?;
    writeln!(
        out,
        "{}",
        a.network_status.as_deref().unwrap_or("(not written)")
    )
}

fn write_left(out: &mut String, l: &Leftovers) -> std::fmt::Result {
    writeln!(out, "\n--- left behind")?;
    for (where_, d) in [("pod", &l.pod), ("node", &l.node)] {
        for k in &d.kept {
            writeln!(out, "{where_}: kept, as on a real node: {k}")?;
        }
        for left in &d.left {
            writeln!(out, "{where_}: LEFT BEHIND: {left}")?;
        }
    }
    for lease in &l.leases {
        writeln!(
            out,
            "lan: LEFT BEHIND: dhcp lease {lease} on the server (not released)"
        )?;
    }
    for held in &l.allocations {
        writeln!(out, "api: LEFT BEHIND: whereabouts {held}")?;
    }
    if l.is_clean() {
        writeln!(
            out,
            "nothing: no link, address, route, rule, firewall rule, reservation or cache file"
        )?;
    }
    Ok(())
}

fn write_kept(out: &mut String, k: &Kept) -> std::fmt::Result {
    writeln!(out, "\n--- kept")?;
    writeln!(out, "enter the pod:  ip netns exec {} sh", k.pod_netns)?;
    if let Some(node) = &k.node_netns {
        writeln!(out, "enter the node: ip netns exec {node} sh")?;
    }
    writeln!(out, "files:          {}", k.dir.display())?;
    writeln!(out, "remove:         multus try --clean")
}

#[cfg(test)]
mod tests {
    use super::super::report::*;
    use super::super::state::Diff;
    use super::*;

    fn simulated(heading: &str) -> Trial {
        Trial {
            heading: heading.into(),
            sandbox: "mtry7-0".into(),
            node: Some(Node::Simulated {
                uplink: "eth0".into(),
                lan_bridge: "lan0".into(),
            }),
            ..Trial::default()
        }
    }

    #[test]
    fn a_passing_trial_prints_every_section_in_order() {
        let t = Trial {
            dhcp: Some(Dhcp {
                subnet: "192.168.99.0/24".into(),
                socket: "/run/multus-try/mtry7-0/dhcp.sock".into(),
            }),
            add: Some(Outcome::Ok),
            attached: Some(Attached {
                interfaces: vec![
                    Interface {
                        name: "eth0".into(),
                        kind: "veth".into(),
                        mac: "0a:58:0a:2a:00:02".into(),
                        mtu: 1500,
                        up: true,
                        addresses: vec!["10.42.0.2/24".parse().unwrap()],
                    },
                    Interface {
                        name: "net1".into(),
                        kind: "device".into(),
                        mac: String::new(),
                        mtu: 9000,
                        up: false,
                        addresses: vec![],
                    },
                ],
                routes: vec!["default via 10.42.0.1 dev eth0".into()],
                network_status: Some("[\n{\"name\": \"cluster\"}\n]".into()),
            }),
            events: vec![Event {
                warning: false,
                reason: "AddedInterface".into(),
                message: "Add eth0 [10.42.0.2/24] from cluster".into(),
            }],
            connectivity: Some(vec![
                Check {
                    interface: "eth0".into(),
                    network: "cluster".into(),
                    result: CheckResult::Pinged {
                        what: Target::Gateway,
                        target: "10.42.0.1".parse().unwrap(),
                        place: Place::Node,
                        reached: true,
                    },
                },
                Check {
                    interface: "net1".into(),
                    network: "default/a".into(),
                    result: CheckResult::NoAddress,
                },
            ]),
            exec: Some(Exec {
                command: "echo hi".into(),
                output: "hi\n".into(),
                status: "exit status: 0".into(),
                success: true,
            }),
            del: Some(Del::Ok),
            left: Some(Leftovers {
                pod: Diff::default(),
                node: Diff {
                    kept: vec!["bridge cni0".into()],
                    left: vec![],
                },
                leases: vec![],
                allocations: vec![],
            }),
            ..simulated("example bridge: pod default/bridge-pod")
        };
        assert!(t.passed());
        let want = "\
=== example bridge: pod default/bridge-pod
dhcp: dnsmasq on the lan serving 192.168.99.0/24, our dhcp daemon on /run/multus-try/mtry7-0/dhcp.sock
node: namespace mtry7-0-node, uplink eth0 to the lan (namespace mtry7-0-lan, bridge lan0 198.18.0.1/24)
cluster network: bridge cni0, host-local 10.42.0.0/24; pod namespace mtry7-0-pod

--- ADD
ok

--- the pod's interfaces
eth0      veth     0a:58:0a:2a:00:02 mtu 1500
          10.42.0.2/24
net1      device    mtu 9000 (down)

--- the pod's routes
default via 10.42.0.1 dev eth0

--- annotation k8s.v1.cni.cncf.io/network-status
[
{\"name\": \"cluster\"}
]

--- events
Normal   AddedInterface        Add eth0 [10.42.0.2/24] from cluster

--- connectivity
eth0 (cluster): ping gateway 10.42.0.1 (on the node): ok
net1 (default/a): no address, nothing to check

--- exec in the pod: echo hi
hi
(exit status: 0)

--- DEL
ok

--- left behind
node: kept, as on a real node: bridge cni0
nothing: no link, address, route, rule, firewall rule, reservation or cache file
";
        assert_eq!(trial(&t), want);
        assert_eq!(
            verdict(&t),
            "=== example bridge: pod default/bridge-pod: PASS\n\n"
        );
    }

    #[test]
    fn a_failed_add_shows_events_and_leftovers_and_fails() {
        let t = Trial {
            add: Some(Outcome::Failed(
                "network default/a on interface net1: no".into(),
            )),
            events: vec![Event {
                warning: true,
                reason: "AddInterfaceFailed".into(),
                message: "no".into(),
            }],
            left: Some(Leftovers {
                pod: Diff {
                    kept: vec![],
                    left: vec!["link net1 (macvlan)".into()],
                },
                node: Diff::default(),
                leases: vec!["192.168.99.100".into()],
                allocations: vec![],
            }),
            kept: Some(Kept {
                pod_netns: "mtry7-0-pod".into(),
                node_netns: Some("mtry7-0-node".into()),
                dir: "/run/multus-try/mtry7-0".into(),
            }),
            ..simulated("pod default/web from pod.yaml")
        };
        assert!(!t.passed());
        let want = "\
=== pod default/web from pod.yaml
node: namespace mtry7-0-node, uplink eth0 to the lan (namespace mtry7-0-lan, bridge lan0 198.18.0.1/24)
cluster network: bridge cni0, host-local 10.42.0.0/24; pod namespace mtry7-0-pod

--- ADD
FAILED: network default/a on interface net1: no

--- events
Warning  AddInterfaceFailed    no

--- left behind
pod: LEFT BEHIND: link net1 (macvlan)
lan: LEFT BEHIND: dhcp lease 192.168.99.100 on the server (not released)

--- kept
enter the pod:  ip netns exec mtry7-0-pod sh
enter the node: ip netns exec mtry7-0-node sh
files:          /run/multus-try/mtry7-0
remove:         multus try --clean
";
        assert_eq!(trial(&t), want);
        assert_eq!(verdict(&t), "=== pod default/web from pod.yaml: FAIL\n\n");
    }

    #[test]
    fn kept_on_the_host_without_del() {
        let t = Trial {
            heading: "pod default/web from pod.yaml".into(),
            sandbox: "mtry7-0".into(),
            node: Some(Node::OnHost {
                cluster_parent: "cluster0".into(),
            }),
            add: Some(Outcome::Ok),
            connectivity: Some(vec![Check {
                interface: "eth0".into(),
                network: "cluster".into(),
                result: CheckResult::NotChecked,
            }]),
            exec: Some(Exec {
                command: "exit 3".into(),
                output: String::new(),
                status: "exit status: 3".into(),
                success: false,
            }),
            del: Some(Del::NotRun),
            kept: Some(Kept {
                pod_netns: "mtry7-0-pod".into(),
                node_netns: None,
                dir: "/run/multus-try/mtry7-0".into(),
            }),
            ..Trial::default()
        };
        assert!(!t.passed(), "the exec failed");
        let want = "\
=== pod default/web from pod.yaml
node: this machine (only read); cluster network: macvlan on cluster0 inside the pod, host-local 10.42.0.0/24; pod namespace mtry7-0-pod

--- ADD
ok

--- events

--- connectivity
eth0 (cluster): no gateway to ping, and --on-host adds no peer: not checked

--- exec in the pod: exit 3
(exit status: 3)

--- DEL: not run (--keep): the pod stays as ADD left it

--- kept
enter the pod:  ip netns exec mtry7-0-pod sh
files:          /run/multus-try/mtry7-0
remove:         multus try --clean
";
        assert_eq!(trial(&t), want);
    }
}
