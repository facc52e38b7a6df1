//! The netlink layer against the kernel, always inside namespaces the test creates.

use std::net::IpAddr;

use anyhow::{Context, Result};
use ipnet::IpNet;
use netkit::netlink::{
    AddrOpts, BridgeOpts, BridgePortOpts, IpvlanMode, MacvlanMode, MacvlanOpts, Route,
    RT_SCOPE_LINK,
};
use netkit::{Family, NetNs, Netlink};
use serde_json::Value;

/// A sandbox namespace plus a handle and a netlink socket inside it.
struct Ns {
    sandbox: testkit::Netns,
    ns: NetNs,
    nl: Netlink,
}

impl Ns {
    fn new(tag: &str) -> Result<Ns> {
        let sandbox = testkit::Netns::new(tag);
        let ns = NetNs::open(sandbox.path())?;
        let nl = Netlink::in_ns(&ns)?;
        Ok(Ns { sandbox, ns, nl })
    }

    fn index(&self, name: &str) -> Result<u32> {
        Ok(self.nl.link(name)?.index)
    }

    /// `ip -j -d link show dev <name>`, first object.
    fn link_json(&self, name: &str) -> Value {
        self.sandbox.ip_json(&["-d", "link", "show", "dev", name])[0].clone()
    }
}

/// Under `cargo xtask vm-test`, whose kernel has what this machine's lacks: no skipping there.
fn in_vm() -> bool {
    std::env::var_os("MULTUS_RS_VM").is_some()
}

fn net(s: &str) -> IpNet {
    s.parse().expect("test CIDR")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test IP")
}

#[test]
fn veth_peer_is_created_straight_in_the_other_namespace() -> Result<()> {
    let node = Ns::new("vnode")?;
    let pod = Ns::new("vpod")?;
    let mac = [0x0a, 0x58, 0x0a, 0x01, 0x02, 0x03];
    node.nl
        .add_veth("vhost0", "eth0", Some(&pod.ns), Some(1400), Some(mac))?;

    let host = node.link_json("vhost0");
    assert_eq!(host["mtu"], 1400);
    assert_eq!(host["address"], "0a:58:0a:01:02:03");
    assert_eq!(host["linkinfo"]["info_kind"], "veth");
    assert!(!node.sandbox.links().contains(&"eth0".to_string()));
    let peer = pod.link_json("eth0");
    assert_eq!(peer["mtu"], 1400);

    let link = node.nl.link("vhost0")?;
    assert_eq!(link.kind.as_deref(), Some("veth"));
    assert_eq!(link.mac, Some(mac));
    assert_eq!(link.mtu, 1400);
    // As the reference makes a pair: no queue on the node's end, the kernel's default in the pod.
    assert_eq!(link.txqlen, Some(0));
    assert_eq!(pod.nl.link("eth0")?.txqlen, Some(1000));
    assert_eq!(
        link.link,
        Some(pod.index("eth0")?),
        "IFLA_LINK is the peer's index"
    );
    assert!(
        link.link_netnsid.is_some(),
        "peer lives in another namespace"
    );

    // Creating it again: EEXIST, and the message says what and where.
    let err = node
        .nl
        .add_veth("vhost0", "eth1", Some(&pod.ns), None, None)
        .expect_err("exists");
    assert_eq!(err.errno(), Some(libc::EEXIST));
    let text = err.to_string();
    assert!(text.contains("\"vhost0\""), "{text}");
    assert!(
        text.contains(&node.sandbox.path().display().to_string()),
        "{text}"
    );
    assert!(text.contains("File exists (os error 17)"), "{text}");
    Ok(())
}

#[test]
fn socket_made_in_a_namespace_works_from_another_thread() -> Result<()> {
    let node = Ns::new("thread")?;
    let nl = Netlink::in_ns(&node.ns)?;
    std::thread::spawn(move || nl.add_veth("a0", "a1", None, None, None))
        .join()
        .expect("thread")?;
    let links = node.sandbox.links();
    assert!(links.contains(&"a0".to_string()) && links.contains(&"a1".to_string()));
    Ok(())
}

#[test]
fn link_attributes_can_be_changed() -> Result<()> {
    let node = Ns::new("attrs")?;
    node.nl.add_veth("v0", "v0p", None, None, None)?;
    let i = node.index("v0")?;

    node.nl.set_mtu(i, 1300)?;
    node.nl.set_mac(i, [0x02, 0, 0, 0, 0, 0x42])?;
    node.nl.set_txqlen(i, 500)?;
    node.nl.set_promisc(i, true)?;
    node.nl.set_name(i, "renamed0")?;
    node.nl.set_up(i)?;

    let j = node.link_json("renamed0");
    assert_eq!(j["mtu"], 1300);
    assert_eq!(j["address"], "02:00:00:00:00:42");
    assert_eq!(j["txqlen"], 500);
    assert_eq!(j["promiscuity"], 1);
    let flags: Vec<&str> = j["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        flags.contains(&"UP") && flags.contains(&"PROMISC"),
        "{flags:?}"
    );

    let link = node.nl.link_by_index(i)?.context("link by index")?;
    assert_eq!(link.name, "renamed0");
    assert!(link.up && link.promisc);
    assert_eq!(link.txqlen, Some(500));
    assert!(node.nl.link_by_name("v0")?.is_none());

    node.nl.set_down(i)?;
    node.nl.set_promisc(i, false)?;
    let link = node.nl.link("renamed0")?;
    assert!(!link.up && !link.promisc);

    assert!(node.nl.links()?.iter().any(|l| l.name == "v0p"));
    assert!(node.nl.del_link_by_name("renamed0")?);
    assert!(!node.nl.del_link_by_name("renamed0")?, "already gone");
    // Deleting one end of a veth removes both.
    assert!(node.nl.link_by_name("v0p")?.is_none());

    let err = node.nl.del_link(i).expect_err("gone");
    assert_eq!(err.errno(), Some(libc::ENODEV), "{err}");
    assert!(node.nl.set_name(i, "this-name-is-far-too-long").is_err());

    // By index: deleted once, then reported gone instead of failing.
    node.nl.add_veth("d0", "d0p", None, None, None)?;
    let d = node.index("d0")?;
    assert!(node.nl.del_link_if_exists(d)?);
    assert!(!node.nl.del_link_if_exists(d)?, "already gone");
    assert!(node.nl.link_by_name("d0p")?.is_none());
    Ok(())
}

#[test]
fn running_follows_the_veth_peer() -> Result<()> {
    let node = Ns::new("oper")?;
    node.nl.add_veth("r0", "r0p", None, None, None)?;
    let (r0, r0p) = (node.index("r0")?, node.index("r0p")?);
    // The kernel's link watcher sets the operational state shortly after, not synchronously
    // (late enough under qemu's emulation to be seen in both directions).
    let settle = |running: bool| -> Result<_> {
        let mut link = node.nl.link_by_index(r0)?.context("r0")?;
        for _ in 0..40 {
            if link.running == running {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            link = node.nl.link_by_index(r0)?.context("r0")?;
        }
        Ok(link)
    };
    node.nl.set_up(r0)?;
    let link = settle(false)?;
    assert!(
        link.up && !link.running,
        "no carrier while the peer is down: {link:?}"
    );
    node.nl.set_up(r0p)?;
    let link = settle(true)?;
    assert!(link.running, "carrier once the peer is up: {link:?}");
    Ok(())
}

#[test]
fn interface_names_are_checked_like_the_kernel_does() {
    use netkit::netlink::validate_ifname;
    for ok in ["eth0", "a", "br0.4094", "fifteen-bytes-x"] {
        assert!(validate_ifname(ok).is_ok(), "{ok:?}");
    }
    for bad in [
        "",
        ".",
        "..",
        "sixteen-bytes-xx",
        "a/b",
        "a:b",
        "a b",
        "a\0b",
    ] {
        let err = validate_ifname(bad).expect_err("invalid");
        assert!(matches!(err, netkit::Error::Invalid(_)), "{bad:?}: {err:?}");
    }
}

#[test]
fn move_to_namespace() -> Result<()> {
    let node = Ns::new("mvnode")?;
    let pod = Ns::new("mvpod")?;
    node.nl.add_veth("m0", "m1", None, None, None)?;
    node.nl.move_to_ns(node.index("m1")?, &pod.ns)?;
    assert!(pod.sandbox.links().contains(&"m1".to_string()));
    assert!(node.nl.link_by_name("m1")?.is_none());
    Ok(())
}

#[test]
fn bridge_with_ports_and_port_options() -> Result<()> {
    let node = Ns::new("br")?;
    let opts = BridgeOpts {
        mtu: Some(1450),
        vlan_filtering: false,
        mac: Some([0x02, 0xbb, 0, 0, 0, 1]),
    };
    node.nl.add_bridge("br0", &opts)?;
    let br = node.nl.link("br0")?;
    assert_eq!(br.kind.as_deref(), Some("bridge"));
    assert_eq!(br.mac, opts.mac);
    assert_eq!(br.mtu, 1450);
    assert!(!node.nl.bridge_vlan_filtering(br.index)?);

    node.nl.add_veth("p0", "p0peer", None, None, None)?;
    let port = node.index("p0")?;
    node.nl.set_master(port, Some(br.index))?;
    assert_eq!(node.link_json("p0")["master"], "br0");
    assert_eq!(node.nl.link("p0")?.master, Some(br.index));
    assert!(
        node.nl.bridge_vlan_filtering(port).is_err(),
        "a port is not a bridge"
    );

    node.nl.set_bridge_port_opts(
        port,
        &BridgePortOpts {
            hairpin: Some(true),
            isolated: Some(true),
            learning: Some(false),
        },
    )?;
    let slave = &node.link_json("p0")["linkinfo"]["info_slave_data"];
    assert_eq!(slave["hairpin"], true);
    assert_eq!(slave["isolated"], true);
    assert_eq!(slave["learning"], false);
    // None leaves a flag alone.
    node.nl.set_bridge_port_opts(
        port,
        &BridgePortOpts {
            hairpin: Some(false),
            ..Default::default()
        },
    )?;
    let slave = &node.link_json("p0")["linkinfo"]["info_slave_data"];
    assert_eq!(
        (slave["hairpin"].clone(), slave["isolated"].clone()),
        (false.into(), true.into())
    );

    node.nl.set_master(port, None)?;
    assert!(node.link_json("p0").get("master").is_none());
    assert_eq!(node.nl.link("p0")?.master, None);
    Ok(())
}

/// VLAN filtering needs CONFIG_BRIDGE_VLAN_FILTERING. Without it, creating a filtering bridge
/// must fail clearly (EOPNOTSUPP); with it, VLANs are added, read back and removed.
#[test]
fn bridge_vlans() -> Result<()> {
    let node = Ns::new("brvlan")?;
    let opts = BridgeOpts {
        vlan_filtering: true,
        ..Default::default()
    };
    if let Err(e) = node.nl.add_bridge("br0", &opts) {
        assert!(!in_vm(), "the VM kernel must have VLAN filtering: {e}");
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        assert!(e.to_string().contains("creating bridge \"br0\""), "{e}");
        eprintln!("kernel without bridge VLAN filtering: {e}");
        return Ok(());
    }
    let br = node.nl.link("br0")?;
    assert!(node.nl.bridge_vlan_filtering(br.index)?);
    node.nl.add_veth("p0", "p0peer", None, None, None)?;
    let port = node.index("p0")?;
    node.nl.set_master(port, Some(br.index))?;

    // VLAN 100 on the port as PVID/untagged, and on the bridge itself.
    node.nl.bridge_vlan_add(port, 100, true, true, false)?;
    node.nl.bridge_vlan_add(br.index, 100, false, false, true)?;
    let vlans = node.nl.bridge_vlans(Some(port))?;
    assert_eq!(vlans.len(), 1);
    let (index, port_vlans) = &vlans[0];
    assert_eq!(*index, port);
    let v100 = port_vlans
        .iter()
        .find(|v| v.vid == 100)
        .context("vid 100 on port")?;
    assert!(v100.pvid && v100.untagged);
    let all = node.nl.bridge_vlans(None)?;
    let on_bridge = all
        .iter()
        .find(|(i, _)| *i == br.index)
        .context("bridge entry")?;
    assert!(on_bridge.1.iter().any(|v| v.vid == 100 && !v.pvid));

    // `bridge vlan show` agrees.
    let out = node
        .sandbox
        .command("bridge")
        .args(["-j", "vlan", "show", "dev", "p0"])
        .output()?;
    let shown: Value = serde_json::from_slice(&out.stdout)?;
    let flags = shown[0]["vlans"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["vlan"] == 100)
        .map(|v| v["flags"].clone())
        .context("bridge vlan show lists 100")?;
    assert_eq!(flags, serde_json::json!(["PVID", "Egress Untagged"]));

    node.nl.bridge_vlan_del(port, 100, false)?;
    let vlans = node.nl.bridge_vlans(Some(port))?;
    assert!(vlans[0].1.iter().all(|v| v.vid != 100));
    Ok(())
}

#[test]
fn addresses_v4_v6_nodad_and_errors() -> Result<()> {
    let node = Ns::new("addr")?;
    node.nl.add_veth("a0", "a0p", None, None, None)?;
    let i = node.index("a0")?;
    node.nl.set_up(i)?;
    node.nl.set_up(node.index("a0p")?)?;

    node.nl
        .add_addr(i, net("10.1.0.2/24"), AddrOpts::default())?;
    node.nl.add_addr(
        i,
        net("fd00:1::2/64"),
        AddrOpts {
            nodad: true,
            ..Default::default()
        },
    )?;
    node.nl.add_addr(
        i,
        net("10.2.0.2/24"),
        AddrOpts {
            noprefixroute: true,
            ..Default::default()
        },
    )?;

    let j = node.sandbox.ip_json(&["addr", "show", "dev", "a0"]);
    let infos = j[0]["addr_info"].as_array().context("addr_info")?.clone();
    let v4 = infos
        .iter()
        .find(|a| a["local"] == "10.1.0.2")
        .context("v4 address")?;
    assert_eq!(v4["prefixlen"], 24);
    assert_eq!(v4["broadcast"], "10.1.0.255");
    let v6 = infos
        .iter()
        .find(|a| a["local"] == "fd00:1::2")
        .context("v6 address")?;
    assert!(v6.get("tentative").is_none(), "nodad: usable at once: {v6}");
    assert_eq!(v6["nodad"], true);

    let mine = node.nl.addrs(Some(i), Some(Family::V6))?;
    let a = mine
        .iter()
        .find(|a| a.net == net("fd00:1::2/64"))
        .context("listed")?;
    assert!(!a.is_tentative() && !a.dad_failed());
    assert_ne!(a.flags & libc::IFA_F_NODAD, 0);
    assert!(mine.iter().all(|a| a.net.addr().is_ipv6() && a.index == i));
    let v4s = node.nl.addrs(Some(i), Some(Family::V4))?;
    assert_eq!(v4s.len(), 2);
    let no_prefix_route = v4s
        .iter()
        .find(|a| a.net == net("10.2.0.2/24"))
        .context("10.2")?;
    assert_ne!(no_prefix_route.flags & libc::IFA_F_NOPREFIXROUTE, 0);
    let routes = node.nl.routes(Family::V4, None)?;
    assert!(routes.iter().any(|r| r.dst == net("10.1.0.0/24")));
    assert!(
        !routes.iter().any(|r| r.dst == net("10.2.0.0/24")),
        "noprefixroute"
    );
    assert!(node
        .nl
        .addrs(None, None)?
        .iter()
        .any(|a| a.net.addr() == ip("127.0.0.1")));

    let err = node
        .nl
        .add_addr(i, net("10.1.0.2/24"), AddrOpts::default())
        .expect_err("duplicate");
    assert_eq!(err.errno(), Some(libc::EEXIST));

    node.nl.del_addr(i, net("10.1.0.2/24"))?;
    node.nl.del_addr(i, net("fd00:1::2/64"))?;
    let err = node.nl.del_addr(i, net("10.1.0.2/24")).expect_err("gone");
    assert_eq!(err.errno(), Some(libc::EADDRNOTAVAIL), "{err}");
    assert!(err.to_string().contains("10.1.0.2/24"), "{err}");
    let left = node.nl.addrs(Some(i), None)?;
    assert!(!left
        .iter()
        .any(|a| a.net == net("10.1.0.2/24") || a.net == net("fd00:1::2/64")));
    Ok(())
}

#[test]
fn routes_with_metric_table_scope_mtu_advmss() -> Result<()> {
    let node = Ns::new("route")?;
    node.nl.add_veth("r0", "r0p", None, None, None)?;
    let i = node.index("r0")?;
    node.nl.set_up(i)?;
    node.nl.set_up(node.index("r0p")?)?;
    node.nl
        .add_addr(i, net("10.1.0.2/24"), AddrOpts::default())?;
    let nodad = AddrOpts {
        nodad: true,
        ..Default::default()
    };
    node.nl.add_addr(i, net("fd00:1::2/64"), nodad)?;

    assert_eq!(node.nl.default_route_iface(None)?, None);

    let via = Route::new(net("10.9.0.0/16"))
        .via(ip("10.1.0.1"))
        .dev(i)
        .metric(100)
        .mtu(1300)
        .advmss(1200);
    node.nl.add_route(&via)?;
    let in_table = Route::new(net("10.8.0.0/16"))
        .via(ip("10.1.0.1"))
        .dev(i)
        .table(100);
    node.nl.add_route(&in_table)?;
    let big_table = Route::new(net("10.7.0.0/16"))
        .dev(i)
        .table(1000)
        .scope(RT_SCOPE_LINK);
    node.nl.add_route(&big_table)?;
    let direct = Route::new(net("192.168.5.0/24"))
        .dev(i)
        .scope(RT_SCOPE_LINK)
        .src(ip("10.1.0.2"));
    node.nl.add_route(&direct)?;
    let default = Route::new(net("0.0.0.0/0")).via(ip("10.1.0.1")).dev(i);
    node.nl.add_route(&default)?;
    let v6 = Route::new(net("fd00:9::/64"))
        .via(ip("fd00:1::1"))
        .dev(i)
        .metric(50);
    node.nl.add_route(&v6)?;

    let all = node.sandbox.ip_json(&["route", "show", "table", "all"]);
    let find = |dst: &str| -> Result<Value> {
        all.as_array()
            .into_iter()
            .flatten()
            .find(|r| r["dst"] == dst)
            .cloned()
            .with_context(|| format!("ip route shows {dst}"))
    };
    let r = find("10.9.0.0/16")?;
    assert_eq!(r["gateway"], "10.1.0.1");
    assert_eq!(r["metric"], 100);
    let metrics = r["metrics"].as_array().context("metrics")?;
    assert!(metrics.iter().any(|m| m["mtu"] == 1300), "{r}");
    assert!(metrics.iter().any(|m| m["advmss"] == 1200), "{r}");
    assert_eq!(find("10.8.0.0/16")?["table"], "100");
    assert_eq!(find("10.7.0.0/16")?["table"], "1000");
    assert_eq!(find("10.7.0.0/16")?["scope"], "link");
    let d = find("192.168.5.0/24")?;
    assert_eq!(d["scope"], "link");
    assert_eq!(d["prefsrc"], "10.1.0.2");
    assert_eq!(find("default")?["gateway"], "10.1.0.1");
    assert_eq!(find("fd00:9::/64")?["metric"], 50);

    // Reading back with our own parser.
    let main = node.nl.routes(Family::V4, Some(254))?;
    let got = main
        .iter()
        .find(|r| r.dst == net("10.9.0.0/16"))
        .context("10.9 in main")?;
    assert_eq!(
        (got.gateway, got.oif, got.metric, got.mtu, got.advmss),
        (
            Some(ip("10.1.0.1")),
            Some(i),
            Some(100),
            Some(1300),
            Some(1200)
        )
    );
    assert!(
        !main.iter().any(|r| r.dst == net("10.8.0.0/16")),
        "table 100 filtered out"
    );
    let t1000 = node.nl.routes(Family::V4, Some(1000))?;
    assert_eq!(t1000.len(), 1);
    assert_eq!(t1000[0].scope, RT_SCOPE_LINK);
    let v6s = node.nl.routes(Family::V6, None)?;
    assert!(v6s
        .iter()
        .any(|r| r.dst == net("fd00:9::/64") && r.metric == Some(50)));
    assert_eq!(node.nl.default_route_iface(Some(Family::V4))?, Some(i));
    assert_eq!(node.nl.default_route_iface(Some(Family::V6))?, None);
    assert_eq!(node.nl.default_route_iface(None)?, Some(i));

    // add is exclusive, replace is not.
    let err = node.nl.add_route(&via).expect_err("exists");
    assert_eq!(err.errno(), Some(libc::EEXIST));
    node.nl.replace_route(&via.clone().mtu(1280))?;
    let got = node.nl.routes(Family::V4, Some(254))?;
    let got = got
        .iter()
        .find(|r| r.dst == net("10.9.0.0/16"))
        .context("replaced")?;
    assert_eq!(got.mtu, Some(1280));

    node.nl
        .del_route(&Route::new(net("10.9.0.0/16")).metric(100))?;
    node.nl.del_route(&in_table)?;
    let err = node.nl.del_route(&in_table).expect_err("gone");
    assert_eq!(err.errno(), Some(libc::ESRCH), "{err}");
    let left = node.nl.routes(Family::V4, None)?;
    assert!(!left
        .iter()
        .any(|r| r.dst == net("10.9.0.0/16") || r.dst == net("10.8.0.0/16")));
    Ok(())
}

/// A second default route through another interface: `add_route` refuses it, `add_route_beside`
/// puts it first (IPv4) or makes a multipath route (IPv6), which is listed once per next hop and
/// whose next hops are deleted one by one.
#[test]
fn a_route_beside_another_to_the_same_destination() -> Result<()> {
    let node = Ns::new("beside")?;
    let mut index = Vec::new();
    for (n, (v4, v6)) in [("10.1.0.2/24", "fd01::2/64"), ("10.2.0.2/24", "fd02::2/64")]
        .into_iter()
        .enumerate()
    {
        let name = format!("b{n}");
        node.nl
            .add_veth(&name, &format!("{name}p"), None, None, None)?;
        let i = node.index(&name)?;
        node.nl.set_up(i)?;
        node.nl.set_up(node.index(&format!("{name}p"))?)?;
        node.nl.add_addr(i, net(v4), AddrOpts::default())?;
        let nodad = AddrOpts {
            nodad: true,
            ..Default::default()
        };
        node.nl.add_addr(i, net(v6), nodad)?;
        index.push(i);
    }
    let first4 = Route::new(net("0.0.0.0/0"))
        .via(ip("10.1.0.1"))
        .dev(index[0]);
    let second4 = Route::new(net("0.0.0.0/0"))
        .via(ip("10.2.0.1"))
        .dev(index[1]);
    let first6 = Route::new(net("::/0")).via(ip("fd01::1")).dev(index[0]);
    let second6 = Route::new(net("::/0")).via(ip("fd02::1")).dev(index[1]);
    node.nl.add_route(&first4)?;
    node.nl.add_route(&first6)?;
    let err = node.nl.add_route(&second4).expect_err("exclusive");
    assert_eq!(err.errno(), Some(libc::EEXIST), "{err}");

    node.nl.add_route_beside(&second4)?;
    node.nl.add_route_beside(&second6)?;
    let err = node.nl.add_route_beside(&second4).expect_err("identical");
    assert_eq!(err.errno(), Some(libc::EEXIST), "{err}");
    // The kernel lists the newer IPv4 default first: it carries the traffic.
    let shown = node.sandbox.ip_json(&["-4", "route", "show", "default"]);
    assert_eq!(shown[0]["gateway"], "10.2.0.1", "{shown}");
    assert_eq!(
        node.nl.default_route_iface(Some(Family::V4))?,
        Some(index[1])
    );
    let shown = node.sandbox.ip_json(&["-6", "route", "show", "default"]);
    assert_eq!(
        shown[0]["nexthops"].as_array().map(Vec::len),
        Some(2),
        "{shown}"
    );

    let defaults6: Vec<(Option<IpAddr>, Option<u32>)> = node
        .nl
        .routes(Family::V6, Some(254))?
        .into_iter()
        .filter(|r| r.is_default())
        .map(|r| (r.gateway, r.oif))
        .collect();
    assert_eq!(
        defaults6,
        vec![
            (Some(ip("fd01::1")), Some(index[0])),
            (Some(ip("fd02::1")), Some(index[1]))
        ]
    );
    node.nl.del_route(&second6)?;
    node.nl.del_route(&second4)?;
    let left: Vec<Route> = [Family::V4, Family::V6]
        .into_iter()
        .map(|f| node.nl.routes(f, Some(254)))
        .collect::<netkit::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .filter(|r| r.is_default())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|r| r.oif == Some(index[0])), "{left:?}");
    Ok(())
}

#[test]
fn macvlan_is_created_straight_in_the_pod() -> Result<()> {
    let node = Ns::new("mvlnode")?;
    let pod = Ns::new("mvlpod")?;
    node.nl.add_veth("uplink", "uplinkp", None, None, None)?;
    let parent = node.index("uplink")?;
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    let opts = MacvlanOpts {
        mode: MacvlanMode::Bridge,
        mtu: Some(1400),
        mac: Some(mac),
        bc_queue_len: Some(321),
    };
    node.nl.add_macvlan("net1", parent, &opts, Some(&pod.ns))?;

    let j = pod.link_json("net1");
    assert_eq!(j["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(j["linkinfo"]["info_data"]["mode"], "bridge");
    assert_eq!(j["mtu"], 1400);
    assert_eq!(j["address"], "02:11:22:33:44:55");
    assert_eq!(j["linkinfo"]["info_data"]["bcqueuelen"], 321);
    let link = pod.nl.link("net1")?;
    assert_eq!(link.kind.as_deref(), Some("macvlan"));
    assert_eq!(link.macvlan_mode, Some(MacvlanMode::Bridge as u32));
    assert_eq!(link.mac, Some(mac));
    assert!(!node.sandbox.links().contains(&"net1".to_string()));

    // In the node namespace with another mode.
    let private = MacvlanOpts {
        mode: MacvlanMode::Private,
        mtu: None,
        mac: None,
        bc_queue_len: None,
    };
    node.nl.add_macvlan("mv1", parent, &private, None)?;
    assert_eq!(
        node.nl.link("mv1")?.macvlan_mode,
        Some(MacvlanMode::Private as u32)
    );
    assert_eq!(node.nl.link("mv1")?.link, Some(parent));
    Ok(())
}

/// This kernel has no ipvlan: the failure must be clear. Under a kernel with ipvlan (the VM
/// run), the link is created straight in the pod with the requested mode.
#[test]
fn ipvlan_in_the_pod_or_a_clear_failure() -> Result<()> {
    let node = Ns::new("ipvl")?;
    let pod = Ns::new("ipvlpod")?;
    node.nl.add_veth("up0", "up0p", None, None, None)?;
    let parent = node.index("up0")?;
    match node
        .nl
        .add_ipvlan("net1", parent, IpvlanMode::L3, Some(&pod.ns), Some(1400))
    {
        Err(e) => {
            assert!(!in_vm(), "the VM kernel must have ipvlan: {e}");
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
            let text = e.to_string();
            assert!(text.contains("creating ipvlan \"net1\""), "{text}");
            assert!(text.contains("Unknown device type"), "{text}");
        }
        Ok(()) => {
            let link = pod.nl.link("net1")?;
            assert_eq!(link.kind.as_deref(), Some("ipvlan"));
            assert_eq!(link.ipvlan_mode, Some(IpvlanMode::L3 as u16));
            assert_eq!(link.mtu, 1400);
            assert_eq!(pod.link_json("net1")["linkinfo"]["info_data"]["mode"], "l3");
        }
    }
    Ok(())
}

#[test]
fn neighbours_are_listed() -> Result<()> {
    let node = Ns::new("neigh")?;
    node.nl.add_veth("n0", "n0p", None, None, None)?;
    let i = node.index("n0")?;
    node.nl.set_up(i)?;
    node.nl
        .add_addr(i, net("10.3.0.2/24"), AddrOpts::default())?;
    node.sandbox.ip(&[
        "neigh",
        "add",
        "10.3.0.9",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        "n0",
    ]);
    let neigh = node.nl.neighbours(Some(i))?;
    let n = neigh
        .iter()
        .find(|n| n.ip == ip("10.3.0.9"))
        .context("neighbour")?;
    assert_eq!(n.mac, Some([2, 0, 0, 0, 0, 9]));
    assert_eq!(n.state, 0x80, "NUD_PERMANENT");
    Ok(())
}

/// This kernel has no 8021q: the failure must be clear. Under the VM's kernel the vlan is
/// created straight in the pod with its id and MTU.
#[test]
fn vlan_in_the_pod_or_a_clear_failure() -> Result<()> {
    let node = Ns::new("vlan")?;
    let pod = Ns::new("vlanpod")?;
    node.nl.add_veth("up0", "up0p", None, None, None)?;
    let parent = node.index("up0")?;
    match node
        .nl
        .add_vlan("net1", parent, 42, Some(&pod.ns), Some(1400))
    {
        Err(e) => {
            assert!(!in_vm(), "the VM kernel must have 8021q: {e}");
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
            let text = e.to_string();
            assert!(text.contains("creating vlan \"net1\" with id 42"), "{text}");
            assert!(text.contains("Unknown device type"), "{text}");
        }
        Ok(()) => {
            let link = pod.nl.link("net1")?;
            assert_eq!(link.kind.as_deref(), Some("vlan"));
            assert_eq!(link.vlan_id, Some(42));
            assert_eq!(link.mtu, 1400);
            // No txqueuelen asked for: the kernel's default, as the reference leaves it.
            assert_eq!(link.txqlen, Some(1000));
            let j = pod.link_json("net1");
            assert_eq!(j["linkinfo"]["info_data"]["id"], 42);
            assert_eq!(j["linkinfo"]["info_data"]["protocol"], "802.1Q");
            assert!(!node.sandbox.links().contains(&"net1".to_string()));
        }
    }
    Ok(())
}

/// Likewise for dummy links: a clear failure here, a dummy with its MTU and MAC in the VM.
#[test]
fn dummy_in_the_pod_or_a_clear_failure() -> Result<()> {
    let node = Ns::new("dmy")?;
    let pod = Ns::new("dmypod")?;
    let mac = [0x02, 0, 0, 0, 0, 0x42];
    match node
        .nl
        .add_dummy("dm0", Some(&pod.ns), Some(1300), Some(mac))
    {
        Err(e) => {
            assert!(!in_vm(), "the VM kernel must have dummy links: {e}");
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
            let text = e.to_string();
            assert!(text.contains("creating dummy \"dm0\""), "{text}");
        }
        Ok(()) => {
            let link = pod.nl.link("dm0")?;
            assert_eq!(link.kind.as_deref(), Some("dummy"));
            assert_eq!(link.mtu, 1300);
            assert_eq!(link.mac, Some(mac));
            assert!(node.nl.link_by_name("dm0")?.is_none());
        }
    }
    Ok(())
}

/// A tap made in a pod's namespace: persistent, owned as asked, multi-queue when asked, and
/// nowhere else.
#[test]
fn tap_in_the_pod() -> Result<()> {
    let pod = Ns::new("tappod")?;
    let opts = netkit::tap::TapOpts {
        multi_queue: true,
        // Ids no account has, which `ip` prints as numbers.
        owner: Some(4242),
        group: Some(4343),
    };
    pod.ns.run(|| netkit::tap::create("tap0", opts))??;
    let link = pod.nl.link("tap0")?;
    assert_eq!(link.kind.as_deref(), Some("tun"));
    let j = pod.link_json("tap0");
    let info = &j["linkinfo"]["info_data"];
    assert_eq!(info["type"], "tap", "{j}");
    assert_eq!(info["pi"], false, "{j}");
    assert_eq!(info["vnet_hdr"], true, "{j}");
    assert_eq!(info["multi_queue"], true, "{j}");
    assert_eq!(info["persist"], true, "{j}");
    assert_eq!(info["user"], 4242, "{j}");
    assert_eq!(info["group"], 4343, "{j}");

    // Without an owner only root may attach; the name must be one the kernel takes.
    pod.ns
        .run(|| netkit::tap::create("tap1", Default::default()))??;
    let j = pod.link_json("tap1");
    assert_eq!(j["linkinfo"]["info_data"]["multi_queue"], false, "{j}");
    assert!(j["linkinfo"]["info_data"].get("user").is_none(), "{j}");
    let e = pod
        .ns
        .run(|| netkit::tap::create("tap0", Default::default()))?;
    assert!(e.is_err(), "a second tap0");
    let e = pod
        .ns
        .run(|| netkit::tap::create("bad/name", Default::default()))?;
    assert!(e
        .expect_err("refused")
        .to_string()
        .contains("invalid interface name"));
    Ok(())
}

#[test]
fn rules_are_added_listed_and_deleted() -> Result<()> {
    let pod = Ns::new("rules")?;
    let v4 = netkit::netlink::Rule::to_table(net("10.1.0.5/32"), 100);
    let v6 = netkit::netlink::Rule::to_table(net("fd01::5/128"), 1000);
    pod.nl.add_rule(&v4)?;
    pod.nl.add_rule(&v6)?;
    let find = |family, table| -> Result<Option<netkit::netlink::Rule>> {
        Ok(pod.nl.rules(family)?.into_iter().find(|r| r.table == table))
    };
    let got = find(Family::V4, 100)?.expect("the IPv4 rule");
    assert_eq!(got.src, Some(net("10.1.0.5/32")));
    assert!(got.to_table && got.priority.is_some());
    let got = find(Family::V6, 1000)?.expect("the IPv6 rule, in a table above 255");
    assert_eq!(got.src, Some(net("fd01::5/128")));
    let text = pod.sandbox.ip_json(&["-4", "rule", "show"]).to_string();
    assert!(
        text.contains(r#""src":"10.1.0.5""#) && text.contains(r#""table":"100""#),
        "{text}"
    );
    // The kernel's own rules are listed too (local, main, default).
    assert!(find(Family::V4, 254)?.is_some());

    pod.nl.del_rule(&v4)?;
    assert!(find(Family::V4, 100)?.is_none());
    let again = pod.nl.del_rule(&v4).expect_err("deleted already");
    assert_eq!(again.errno(), Some(libc::ENOENT), "{again}");
    pod.nl.del_rule(&v6)?;
    Ok(())
}

/// A clear failure on this kernel; under the VM's, a vrf with its table and no queue.
#[test]
fn vrf_or_a_clear_failure() -> Result<()> {
    let pod = Ns::new("vrfpod")?;
    match pod.nl.add_vrf("blue", 1001) {
        Err(e) => {
            assert!(!in_vm(), "the VM kernel must have VRFs: {e}");
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
            assert!(
                e.to_string()
                    .contains("creating vrf \"blue\" with table 1001"),
                "{e}"
            );
        }
        Ok(()) => {
            let link = pod.nl.link("blue")?;
            assert_eq!(link.kind.as_deref(), Some("vrf"));
            assert_eq!(link.vrf_table, Some(1001));
            // No txqueuelen asked for: the kernel's default, as the reference leaves it.
            assert_eq!(link.txqlen, Some(1000));
        }
    }
    Ok(())
}

/// A tbf and an ingress redirect to an ifb over netlink, read back, and removed.
#[test]
fn shaping_with_tbf_and_an_ifb_redirect() -> Result<()> {
    use netkit::netlink::Bucket;
    let node = Ns::new("tc")?;
    node.nl.add_veth("vtc0", "vtc1", None, None, None)?;
    node.nl.add_ifb("ifbtc0", Some(1500))?;
    let (veth, ifb) = (node.index("vtc0")?, node.index("ifbtc0")?);
    node.nl.set_up(ifb)?;
    let ticks = netkit::netlink::ticks_per_usec()?;
    let bucket = Bucket {
        rate: 125_000,
        burst: 12_500,
    };
    node.nl.add_tbf(veth, bucket, ticks)?;
    node.nl.add_redirect(veth, ifb)?;
    node.nl.add_tbf(
        ifb,
        Bucket {
            rate: 250_000,
            burst: 37_500,
        },
        ticks,
    )?;

    let (kinds, tbf) = node.nl.qdiscs(veth)?;
    assert!(
        kinds.contains(&"tbf".to_owned()) && kinds.contains(&"ingress".to_owned()),
        "{kinds:?}"
    );
    let tbf = tbf.expect("the root tbf");
    assert_eq!(
        (tbf.rate, tbf.limit, tbf.buffer),
        (125_000, 15_625, bucket.buffer(ticks))
    );
    // tc reads back what the reference makes: rate, burst and latency.
    let out = node
        .sandbox
        .command("tc")
        .args(["-j", "qdisc", "show", "dev", "vtc0"])
        .output()?;
    let listed: Value = serde_json::from_slice(&out.stdout)?;
    let root = listed
        .as_array()
        .and_then(|q| q.iter().find(|q| q["kind"] == "tbf"))
        .cloned();
    let root = root.unwrap_or_default();
    assert_eq!(root["options"]["rate"], 125_000, "{listed}");
    assert_eq!(root["options"]["burst"], 12_500, "{listed}");
    assert_eq!(root["options"]["lat"], 25_000, "{listed}");
    let out = node
        .sandbox
        .command("tc")
        .args(["-j", "filter", "show", "dev", "vtc0", "ingress"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#""to_dev":"ifbtc0""#) && text.contains(r#""flowid":"1:1""#),
        "{text}"
    );

    node.nl.del_qdiscs(veth)?;
    let (kinds, tbf) = node.nl.qdiscs(veth)?;
    assert!(
        tbf.is_none() && !kinds.contains(&"ingress".to_owned()),
        "{kinds:?}"
    );
    // Again: nothing to remove is no error.
    node.nl.del_qdiscs(veth)?;
    Ok(())
}

/// A node where pods come and go makes and deletes links all the time, so long dumps race
/// with changes (the kernel flags them NLM_F_DUMP_INTR). Listing links and addresses still
/// succeeds, as on a node starting a burst of pods: a dump that raced is taken again.
#[test]
fn dumps_succeed_while_links_come_and_go() -> Result<()> {
    // A race of the host's own kernel with veths only, which the host run covers. Under the
    // VM's emulated single CPU the churn starves the dumps for many minutes.
    if in_vm() {
        return Ok(());
    }
    let node = Ns::new("churn")?;
    // Enough links that a dump spans several datagrams.
    for i in 0..200 {
        node.nl
            .add_veth(&format!("a{i}"), &format!("b{i}"), None, None, None)?;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Three writers, as many sandboxes being set up at once.
    let churn: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            let ns = NetNs::open(node.sandbox.path())?;
            Ok(std::thread::spawn(move || -> Result<()> {
                let nl = Netlink::in_ns(&ns)?;
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let name = format!("c{t}-{}", i % 8);
                    nl.del_link_by_name(&name)?;
                    nl.add_veth(&name, &format!("p{t}-{}", i % 8), None, None, None)?;
                    nl.set_up(nl.link(&name)?.index)?;
                    i += 1;
                }
                Ok(())
            }))
        })
        .collect::<Result<_>>()?;
    let mut failures = Vec::new();
    for _ in 0..200 {
        if let Err(e) = node.nl.links() {
            failures.push(format!("links: {e}"));
        }
        if let Err(e) = node.nl.addrs(None, None) {
            failures.push(format!("addresses: {e}"));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in churn {
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("a churn thread panicked"))??;
    }
    assert!(
        failures.is_empty(),
        "{} failed dumps: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    Ok(())
}
