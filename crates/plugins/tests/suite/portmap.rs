//! Our portmap forwarding real traffic: a client in another namespace and the node itself
//! reach a pod's TCP and UDP servers through the node's ports, and the ports close with DEL.
//! The servers answer with the address they see the client at, which shows what was
//! masqueraded: localhost by default, every client with `masqAll`.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use common::{Plugins, Sandbox, Side};
use testkit::Netns;

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"pmnet","type":"portmap",
 "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":5353,"containerPort":53,"protocol":"udp"}]},
 "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"vethpm0"},{"name":"eth0","sandbox":"/x"}],
  "ips":[{"address":"10.30.0.5/24","gateway":"10.30.0.1","interface":1}]}}"#;

/// The node routes between the pod (10.30.0.5 on `vethpm0`) and a client (192.0.2.2 on
/// `up0`; the node is 192.0.2.1).
fn topology(sb: &Sandbox) -> Netns {
    common::veth_to_pod(sb, "vethpm0");
    sb.node
        .ip(&["addr", "add", "10.30.0.1/24", "dev", "vethpm0"]);
    sb.pod.ip(&["addr", "add", "10.30.0.5/24", "dev", "eth0"]);
    sb.pod.ip(&["link", "set", "lo", "up"]);
    sb.pod.ip(&["route", "add", "default", "via", "10.30.0.1"]);
    common::peer_on_up0(sb, "pmclient", true)
}

fn in_ns<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> T {
    netkit::NetNs::open(ns.path())
        .and_then(|n| n.run(f))
        .expect("enter the namespace")
}

/// A TCP server on :80 and a UDP server on :53 in the pod, answering with the client's address.
fn serve(pod: &Netns) -> (TcpListener, UdpSocket) {
    in_ns(pod, || {
        let tcp = TcpListener::bind("0.0.0.0:80").expect("bind tcp");
        let udp = UdpSocket::bind("0.0.0.0:53").expect("bind udp");
        (tcp, udp)
    })
}

/// One exchange with each server, from `from`, to `ip`'s forwarded ports; the answers.
fn ask(
    from: &Netns,
    ip: &str,
    servers: &(TcpListener, UdpSocket),
) -> (Option<String>, Option<String>) {
    let tcp_to: SocketAddr = format!("{ip}:8080").parse().expect("addr");
    let udp_to: SocketAddr = format!("{ip}:5353").parse().expect("addr");
    std::thread::scope(|s| {
        let (tcp, udp) = servers;
        tcp.set_nonblocking(false).expect("blocking");
        udp.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let accept = s.spawn(move || {
            // Answer one connection, if one comes.
            tcp.set_nonblocking(true).expect("nonblocking");
            for _ in 0..200 {
                if let Ok((mut c, peer)) = tcp.accept() {
                    let _ = c.write_all(peer.ip().to_string().as_bytes());
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let echo = s.spawn(move || {
            let mut buf = [0u8; 64];
            if let Ok((_, peer)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(peer.ip().to_string().as_bytes(), peer);
            }
        });
        let answers = in_ns(from, || {
            let tcp_answer = TcpStream::connect_timeout(&tcp_to, Duration::from_secs(2))
                .ok()
                .and_then(|mut c| {
                    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                    let mut got = String::new();
                    c.read_to_string(&mut got).ok()?;
                    Some(got)
                });
            let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
            sock.set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            let udp_answer = sock.send_to(b"ping", udp_to).ok().and_then(|_| {
                let mut buf = [0u8; 64];
                let (n, _) = sock.recv_from(&mut buf).ok()?;
                Some(String::from_utf8_lossy(&buf[..n]).into_owned())
            });
            (tcp_answer, udp_answer)
        });
        let _ = accept.join();
        let _ = echo.join();
        answers
    })
}

/// Both servers' answers: the address each saw the client at.
fn seen_as(ip: &str) -> (Option<String>, Option<String>) {
    (Some(ip.to_owned()), Some(ip.to_owned()))
}

#[test]
fn host_ports_reach_the_pod_from_outside_and_from_the_node_until_del() {
    let fw = forwards_until_del(CONF, None);
    assert!(
        fw.contains("CNI-HOSTPORT-DNAT"),
        "iptables while installed: {fw}"
    );
}

#[test]
fn with_nftables_too() {
    let conf = CONF.replace(
        r#""type":"portmap","#,
        r#""type":"portmap","backend":"nftables","#,
    );
    assert_ne!(conf, CONF);
    let fw = forwards_until_del(&conf, None);
    assert!(!fw.contains("CNI-HOSTPORT"), "{fw}");
}

/// A second nftables ADD replaces the attachment's rules, and a DEL whose config names no
/// backend (iptables, here) still removes them.
#[test]
fn nftables_rules_are_replaced_by_a_second_add_and_removed_by_any_del() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let _client = topology(&sb);
    let conf = CONF.replace(
        r#""type":"portmap","#,
        r#""type":"portmap","backend":"nftables","#,
    );
    assert_eq!(sb.add(&conf).code, 0);
    assert_eq!(sb.add(&conf).code, 0);
    let fw = sb.firewall();
    assert_eq!(fw.matches("dnat to 10.30.0.5:80").count(), 1, "{fw}");
    assert_eq!(sb.del(CONF).code, 0);
    let fw = sb.firewall();
    assert!(!fw.contains("dnat to"), "{fw}");
}

/// On a node without iptables, a config that names no backend gets nftables, as with the
/// reference.
#[test]
fn nftables_where_iptables_is_missing() {
    let bin = common::NftOnly::new();
    let path = bin.path();
    let fw = forwards_until_del(CONF, Some(&path));
    assert!(!fw.contains("CNI-HOSTPORT"), "{fw}");
}

/// A client in another namespace and the node reach the pod through the node's ports, until
/// DEL closes them and leaves no rule; the plugin runs with `path` as its PATH when given.
/// Returns the node's rules while the ports were open.
fn forwards_until_del(conf: &str, path: Option<&str>) -> String {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let client = topology(&sb);
    let servers = serve(&sb.pod);
    let call = |command: &str| {
        let mut call = sb.call(command, conf);
        if let Some(path) = path {
            call.env.push(("PATH".into(), Some(path.into())));
        }
        sb.run(&call)
    };
    assert_eq!(call("ADD").code, 0);
    let open = sb.firewall();
    assert!(open.contains("8080"), "{open}");
    assert_eq!(
        ask(&client, "192.0.2.1", &servers),
        seen_as("192.0.2.2"),
        "from another namespace, not masqueraded"
    );
    assert_eq!(
        ask(&sb.node, "192.0.2.1", &servers),
        seen_as("192.0.2.1"),
        "from the node, to its address"
    );
    assert_eq!(
        ask(&sb.node, "127.0.0.1", &servers).0,
        seen_as("10.30.0.1").0,
        "from the node, to localhost: masqueraded to the node's address toward the pod"
    );
    let check = call("CHECK");
    assert_eq!(check.code, 0, "{check:?}");

    assert_eq!(call("DEL").code, 0);
    assert_eq!(
        ask(&client, "192.0.2.1", &servers),
        (None, None),
        "closed after DEL"
    );
    let fw = sb.firewall();
    assert!(!fw.contains("CNI-DN-") && !fw.contains("dnat to"), "{fw}");
    open
}

/// `net.ipv4.conf.<link>.route_localnet` in the node.
fn route_localnet(node: &Netns, link: &str) -> String {
    let out = node
        .command("sysctl")
        .args(["-n", &format!("net.ipv4.conf.{link}.route_localnet")])
        .output()
        .expect("sysctl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn localhost_is_routed_only_to_a_pods_own_link() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let _client = topology(&sb);
    assert_eq!(sb.add(CONF).code, 0);
    assert_eq!(route_localnet(&sb.node, "vethpm0"), "1", "the pod's veth");
    assert_eq!(sb.del(CONF).code, 0);
    // A pod address the node reaches through its uplink (a macvlan here): turning
    // route_localnet on there would open the node's localhost services to that LAN.
    sb.node.ip(&[
        "link", "add", "mv0", "link", "up0", "type", "macvlan", "mode", "bridge",
    ]);
    sb.node
        .ip(&["addr", "add", "198.51.100.1/24", "dev", "mv0"]);
    sb.node.ip(&["link", "set", "mv0", "up"]);
    let lan = CONF
        .replace("10.30.0.5/24", "198.51.100.5/24")
        .replace("10.30.0.1", "198.51.100.1");
    let out = sb.add(&lan);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(route_localnet(&sb.node, "mv0"), "0", "the node's uplink");
    assert!(
        out.stderr.contains("route_localnet left off on \"mv0\""),
        "{}",
        out.stderr
    );
    assert_eq!(sb.del(&lan).code, 0);
}

/// `masqAll`: whatever the source, forwarded traffic is masqueraded, so the pod answers the
/// node (for a pod whose replies would not go back through it otherwise).
#[test]
fn masq_all_masquerades_every_client() {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    let client = topology(&sb);
    let servers = serve(&sb.pod);
    let conf = CONF.replacen(
        r#""type":"portmap","#,
        r#""type":"portmap","masqAll":true,"#,
        1,
    );
    assert_eq!(sb.add(&conf).code, 0);

    // One mark rule per mapping, for any source: no pod-subnet or localhost rule.
    let nat = sb
        .node
        .command("iptables")
        .args(["-t", "nat", "-S"])
        .output()
        .expect("iptables");
    let nat = String::from_utf8_lossy(&nat.stdout);
    let marks: Vec<&str> = nat
        .lines()
        .filter(|l| l.starts_with("-A CNI-DN-") && l.ends_with("-j CNI-HOSTPORT-SETMARK"))
        .collect();
    assert_eq!(marks.len(), 2, "{nat}");
    assert!(marks.iter().all(|l| !l.contains(" -s ")), "{nat}");

    assert_eq!(
        ask(&client, "192.0.2.1", &servers),
        seen_as("10.30.0.1"),
        "from another namespace: masqueraded"
    );
    assert_eq!(
        ask(&sb.node, "127.0.0.1", &servers).0,
        seen_as("10.30.0.1").0,
        "from the node's localhost"
    );
    let check = sb.run(&sb.call("CHECK", &conf));
    assert_eq!(check.code, 0, "{check:?}");
    assert_eq!(sb.del(&conf).code, 0);
}
