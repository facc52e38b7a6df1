//! What a namespace and the sandbox's directories hold, as lines that can be printed and
//! compared before ADD and after DEL; and running commands inside a namespace.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use netkit::netlink::{Link, Route};
use netkit::{Family, NetNs, Netlink};

use super::Error;

/// A command whose process joins `ns` before it execs.
pub fn command_in(ns: &NetNs, program: &str) -> Result<Command, Error> {
    let mut cmd = Command::new(program);
    ns.enter_on_exec(&mut cmd)
        .map_err(|e| Error::Sandbox(e.to_string()))?;
    Ok(cmd)
}

/// One kind of thing in a namespace or a directory, each as a printable line.
#[derive(Default, Debug)]
pub struct State {
    pub links: BTreeSet<String>,
    pub addrs: BTreeSet<String>,
    pub routes: BTreeSet<String>,
    pub rules: BTreeSet<String>,
    pub firewall: BTreeSet<String>,
    pub files: BTreeSet<String>,
}

fn name_of(links: &[Link], index: Option<u32>) -> String {
    index
        .and_then(|i| links.iter().find(|l| l.index == i))
        .map_or_else(|| "?".to_owned(), |l| l.name.clone())
}

/// A route as `ip route` would print it, in brief.
pub fn route_line(links: &[Link], r: &Route) -> String {
    let mut line = if r.is_default() {
        "default".to_owned()
    } else {
        r.dst.to_string()
    };
    if let Some(gw) = r.gateway {
        line.push_str(&format!(" via {gw}"));
    }
    if r.oif.is_some() {
        line.push_str(&format!(" dev {}", name_of(links, r.oif)));
    }
    if r.table != netkit::netlink::RT_TABLE_MAIN {
        line.push_str(&format!(" table {}", r.table));
    }
    // Which default route leads is down to the metric.
    if let (true, Some(metric)) = (r.is_default(), r.metric) {
        line.push_str(&format!(" metric {metric}"));
    }
    line
}

/// Links, addresses and routes of a namespace, seen through `nl`.
pub struct Kernel {
    pub links: Vec<Link>,
    pub addrs: Vec<(String, ipnet::IpNet)>,
    pub routes: Vec<(String, String)>,
}

impl Kernel {
    pub fn read(ns: &NetNs) -> Result<Kernel, Error> {
        let err =
            |e: netkit::Error| Error::Sandbox(format!("reading {}: {e}", ns.path().display()));
        let nl = Netlink::in_ns(ns).map_err(err)?;
        let links = nl.links().map_err(err)?;
        let addrs = nl
            .addrs(None, None)
            .map_err(err)?
            .into_iter()
            .map(|a| (name_of(&links, Some(a.index)), a.net))
            .collect();
        let mut routes = Vec::new();
        for family in [Family::V4, Family::V6] {
            for r in nl.routes(family, None).map_err(err)? {
                routes.push((name_of(&links, r.oif), route_line(&links, &r)));
            }
        }
        Ok(Kernel {
            links,
            addrs,
            routes,
        })
    }
}

/// Everything `multus try` compares before ADD and after DEL for one namespace, plus the
/// files under `dirs`.
pub fn snapshot(ns: &NetNs, dirs: &[&Path]) -> Result<State, Error> {
    let k = Kernel::read(ns)?;
    let mut s = State {
        links: k
            .links
            .iter()
            .map(|l| format!("{} ({})", l.name, l.kind.as_deref().unwrap_or("device")))
            .collect(),
        addrs: k
            .addrs
            .iter()
            .map(|(dev, a)| format!("{a} on {dev}"))
            .collect(),
        routes: k.routes.into_iter().map(|(_, line)| line).collect(),
        ..State::default()
    };
    for family in ["-4", "-6"] {
        s.rules
            .extend(tool_lines(ns, "ip", &[family, "rule", "show"]));
    }
    s.firewall
        .extend(tool_lines(ns, "nft", &["list", "ruleset"]));
    for tool in ["iptables-save", "ip6tables-save"] {
        s.firewall.extend(
            tool_lines(ns, tool, &[])
                .into_iter()
                .filter(|l| !l.starts_with('#') && !l.starts_with(':')),
        );
    }
    for dir in dirs {
        collect_files(dir, &mut s.files);
    }
    Ok(s)
}

/// The output lines of a tool run in `ns`; nothing when the tool is not installed.
fn tool_lines(ns: &NetNs, tool: &str, args: &[&str]) -> Vec<String> {
    let Ok(mut cmd) = command_in(ns, tool) else {
        return Vec::new();
    };
    match cmd.args(args).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

fn collect_files(dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.insert(path.display().to_string());
        }
    }
}

/// What appeared between two snapshots, split into what stays by design and what is left
/// behind.
#[derive(Default, Debug, serde::Serialize)]
pub struct Diff {
    pub kept: Vec<String>,
    pub left: Vec<String>,
}

impl Diff {
    /// Bridges stay (the bridge plugin keeps them for the node's next pod), with their
    /// gateway addresses and routes; host-local keeps its lock and last-reserved files.
    pub fn between(before: &State, after: &State) -> Diff {
        let mut d = Diff::default();
        let new = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Vec<String> {
            b.difference(a).cloned().collect()
        };
        let bridges: Vec<String> = new(&before.links, &after.links)
            .into_iter()
            .filter_map(|l| l.strip_suffix(" (bridge)").map(str::to_owned))
            .collect();
        let on_bridge = |line: &str| {
            bridges
                .iter()
                .any(|b| line.ends_with(&format!(" {b}")) || line.contains(&format!(" dev {b}")))
        };
        for l in new(&before.links, &after.links) {
            match l.strip_suffix(" (bridge)") {
                Some(b) => d.kept.push(format!(
                    "bridge {b} with its addresses (the bridge plugin keeps it for the next pod)"
                )),
                None => d.left.push(format!("link {l}")),
            }
        }
        for (what, a, b) in [
            ("address", &before.addrs, &after.addrs),
            ("route", &before.routes, &after.routes),
        ] {
            for line in new(a, b) {
                // A kept bridge's addresses and routes go with it.
                if !on_bridge(&line) {
                    d.left.push(format!("{what} {line}"));
                }
            }
        }
        for line in new(&before.rules, &after.rules) {
            d.left.push(format!("rule {line}"));
        }
        for line in new(&before.firewall, &after.firewall) {
            d.left.push(format!("firewall {line}"));
        }
        let mut bookkeeping = 0;
        for f in new(&before.files, &after.files) {
            let base = Path::new(&f)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if base == "lock" || base.starts_with("last_reserved_ip") {
                bookkeeping += 1;
            } else {
                d.left.push(format!("file {f}"));
            }
        }
        if bookkeeping > 0 {
            d.kept.push(format!(
                "{bookkeeping} of host-local's lock and last_reserved_ip files (no reservation)"
            ));
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_kept_bridge_and_host_local_bookkeeping_are_kept_everything_else_is_left() {
        let before = State {
            links: set(&["lo (device)", "eth0 (veth)"]),
            ..State::default()
        };
        let after = State {
            links: set(&[
                "lo (device)",
                "eth0 (veth)",
                "cni0 (bridge)",
                "veth1 (veth)",
            ]),
            addrs: set(&["10.42.0.1/24 on cni0", "10.9.0.2/24 on eth0"]),
            routes: set(&["10.42.0.0/24 dev cni0", "10.9.0.0/24 dev eth0"]),
            rules: set(&["100: from all lookup 100"]),
            firewall: set(&["-A POSTROUTING -s 10.42.0.2/32 -j CNI-1"]),
            files: set(&[
                "/s/ipam/cluster/lock",
                "/s/ipam/cluster/last_reserved_ip.0",
                "/s/ipam/cluster/10.42.0.2",
                "/s/multus/c1",
            ]),
        };
        let d = Diff::between(&before, &after);
        assert_eq!(d.kept.len(), 2, "{d:?}");
        assert!(d.kept[0].contains("bridge cni0"));
        assert!(d.kept[1].starts_with("2 of host-local's"));
        assert_eq!(
            d.left,
            [
                "link veth1 (veth)",
                "address 10.9.0.2/24 on eth0",
                "route 10.9.0.0/24 dev eth0",
                "rule 100: from all lookup 100",
                "firewall -A POSTROUTING -s 10.42.0.2/32 -j CNI-1",
                "file /s/ipam/cluster/10.42.0.2",
                "file /s/multus/c1",
            ]
        );
    }
}
