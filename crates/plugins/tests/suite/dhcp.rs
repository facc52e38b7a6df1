//! bridge + dhcp against real DHCP servers (dnsmasq, busybox udhcpd) in a node namespace, with
//! our daemon run from the `cni-plugins` binary as `dhcp daemon`.

use crate::common;
use crate::dhcp_env;

use std::path::Path;
use std::time::{Duration, Instant};

use dhcp_env::*;
use serde_json::json;
use testkit::dhcp::{DhcpDaemon, Server};
use testkit::{CniCall, CniOutput, Netns};

#[test]
fn lease_with_classless_routes_dns_check_and_release() {
    let s = Setup::new(Server::Dnsmasq(DNSMASQ_121));
    let conf = s.conf("");
    let result = s.add(&conf).ok();
    let ip = leased_ip(&result);
    assert!(ip.starts_with("10.97.0.1"), "{result}");
    assert_eq!(result["ips"][0]["gateway"], "10.97.0.1");
    // 121 present: its routes only, the router option gives no extra default route.
    assert_eq!(
        result["routes"],
        json!([
            {"dst": "192.0.2.0/24", "gw": "10.97.0.254"},
            {"dst": "0.0.0.0/0", "gw": "10.97.0.1"}
        ])
    );
    assert_eq!(
        result["dns"],
        json!({"nameservers": ["10.97.0.53"], "domain": "example.test"})
    );
    assert_eq!(
        s.pod_routes(),
        [
            "10.97.0.0/24 dev",
            "192.0.2.0/24 via 10.97.0.254",
            "default via 10.97.0.1"
        ]
    );
    assert!(
        s.net.log().contains(&format!("DHCPACK(dbr0) {ip}")),
        "{}",
        s.net.log()
    );
    // The reference's client identifier: type 0, then container/network/ifname.
    let leases = std::fs::read_to_string(s.net.dir.path().join("leases")).unwrap();
    let id: Vec<String> = b"\0c0ffee/dnet/eth0"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(leases.contains(&id.join(":")), "{leases}");
    assert_eq!(s.lease_files().len(), 1);
    assert!(s
        .daemon_log()
        .contains("acquired container=c0ffee network=dnet interface=eth0"));

    s.run(&s.call("CHECK", &common::with_prev(&conf, &result)))
        .ok();
    // The dhcp plugin called again for the same attachment gets the same lease back.
    let again = s
        .call("ADD", &conf)
        .run(&s.dhcp_plugin(), Some(&s.net.node));
    assert_eq!(leased_ip(&again.ok()), ip);
    let pod_if_before = s.pod.links();
    assert!(pod_if_before.contains(&"eth0".to_owned()));

    s.del(&conf).ok();
    s.assert_released(&ip);
    assert!(s.lease_files().is_empty(), "{:?}", s.lease_files());
    assert_eq!(s.node_links(), ["dbr0"]);
    assert!(s
        .daemon_log()
        .contains("released container=c0ffee network=dnet interface=eth0"));
    // DEL again: nothing left to do, still success.
    s.del(&conf).ok();
}

#[test]
fn static_routes_and_a_default_through_the_router_without_121() {
    let s = Setup::new(Server::Dnsmasq(&[
        "--dhcp-option=option:router,10.97.0.1",
        "--dhcp-option=option:static-route,172.16.0.0,10.97.0.9",
    ]));
    let conf = s.conf("");
    let result = s.add(&conf).ok();
    assert_eq!(
        result["routes"],
        json!([
            {"dst": "172.16.0.0/16", "gw": "10.97.0.9"},
            {"dst": "0.0.0.0/0", "gw": "10.97.0.1"}
        ])
    );
    assert_eq!(
        s.pod_routes(),
        [
            "10.97.0.0/24 dev",
            "172.16.0.0/16 via 10.97.0.9",
            "default via 10.97.0.1"
        ]
    );
    s.del(&conf).ok();
}

#[test]
fn router_only_gives_the_default_route_and_priority_applies() {
    let s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    let conf = s.conf(r#","priority":300"#);
    let result = s.add(&conf).ok();
    assert_eq!(
        result["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.97.0.1", "priority": 300}])
    );
    assert!(
        result.get("dns").is_none() || result["dns"] == json!({}),
        "{result}"
    );
    let routes = s.pod.ip_json(&["-4", "route", "show", "default"]);
    assert_eq!(routes[0]["metric"], 300, "{routes}");
    s.del(&conf).ok();
}

#[test]
fn provided_and_requested_options_reach_the_server() {
    let s = Setup::new(Server::Dnsmasq(&[
        "--dhcp-option=option:router,10.97.0.1",
        "--dhcp-option=option:ntp-server,10.97.0.123",
    ]));
    let conf = s.conf(
        r#","request":[{"skipDefault":true},{"option":"subnet-mask"},{"option":"42"}],
            "provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"},
                       {"option":"vendor-class-identifier","value":"edge-node"}]"#,
    );
    let mut add = s.call("ADD", &conf);
    add.args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1".into();
    let result = s.run(&add).ok();
    let log = s.net.log();
    assert!(log.contains("client provides name: web-1"), "{log}");
    assert!(log.contains("vendor class: edge-node"), "{log}");
    assert!(
        log.contains("requested options: 1:netmask, 42:ntp-server"),
        "{log}"
    );
    // The router was not asked for, so there is no gateway and no route.
    assert!(result["ips"][0].get("gateway").is_none(), "{result}");
    assert!(result.get("routes").is_none(), "{result}");
    let mut del = s.call("DEL", &conf);
    del.args = add.args.clone();
    s.run(&del).ok();
}

#[test]
fn busybox_udhcpd_as_the_server() {
    let s = Setup::new(Server::Udhcpd(
        "option router 10.97.0.1\noption dns 10.97.0.53 10.97.0.54\noption domain corp.test",
    ));
    let conf = s.conf("");
    let result = s.add(&conf).ok();
    let ip = leased_ip(&result);
    assert!(ip.starts_with("10.97.0.1"), "{result}");
    assert_eq!(
        result["dns"],
        json!({"nameservers": ["10.97.0.53", "10.97.0.54"], "domain": "corp.test"})
    );
    assert_eq!(
        result["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.97.0.1"}])
    );
    s.del(&conf).ok();
    assert!(s.lease_files().is_empty());
}

#[test]
fn a_restarted_daemon_resumes_renewal_and_still_releases() {
    // A 4 s lease: the first renewal (T1, half of it) is due right after the restart.
    let mut s = Setup::new(Server::Udhcpd(UDHCPD_4S_LEASE));
    let conf = s.conf("");
    let ip = s.lease(&conf);
    let acks = |s: &Setup| s.net.log().matches(&format!("sending ACK to {ip}")).count();
    assert_eq!(acks(&s), 1, "{}", s.net.log());
    s.stop_daemon();
    assert!(
        !s.socket().exists(),
        "the daemon removes its socket on exit"
    );
    assert_eq!(
        s.lease_files().len(),
        1,
        "the lease is kept for the next daemon"
    );
    s.start_daemon(&[]);
    assert!(s
        .daemon_log()
        .contains("resumed container=c0ffee network=dnet interface=eth0"));
    // The daemon logs the renewal, and the server answered it.
    s.wait_daemon_event("renewed", Duration::from_secs(10));
    assert_eq!(acks(&s), 2, "{}", s.net.log());
    assert!(
        !s.daemon_log().contains("rebound"),
        "renewed before T2: {}",
        s.daemon_log()
    );
    s.del(&conf).ok();
    assert!(s
        .daemon_log()
        .contains("released container=c0ffee network=dnet interface=eth0"));
    assert!(s.lease_files().is_empty());
}

#[test]
fn dnsmasq_sees_the_release_after_a_daemon_restart() {
    let mut s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    let conf = s.conf("");
    let ip = s.lease(&conf);
    s.stop_daemon();
    s.start_daemon(&[]);
    s.release(&conf, &ip);
}

#[test]
fn an_expired_lease_loses_its_address() {
    let mut s = Setup::new(Server::Udhcpd(UDHCPD_4S_LEASE));
    let conf = s.conf("");
    let ip = s.lease(&conf);
    s.net.stop_server();
    s.wait_daemon_event("expired", Duration::from_secs(15));
    let log = s.daemon_log();
    assert!(
        log.contains("failed container=c0ffee network=dnet interface=eth0 renewing"),
        "{log}"
    );
    assert!(
        log.contains("failed container=c0ffee network=dnet interface=eth0 rebinding"),
        "{log}"
    );
    let addrs = s.pod.ip(&["-4", "addr", "show", "dev", "eth0"]);
    assert!(!addrs.contains(&ip), "{addrs}");
    assert!(s.lease_files().is_empty());
    s.del(&conf).ok();
}

#[test]
fn del_does_not_wait_for_a_renewal_that_gets_no_answer() {
    // dnsmasq's shortest lease (2 min), renewed from 3 s on and rebound from 30 s: a renewal
    // that gets no answer goes on resending until T2.
    let mut s = Setup::new(Server::Dnsmasq(&[
        "--dhcp-range=10.97.0.100,10.97.0.199,255.255.255.0,2m",
        "--dhcp-option=option:T1,3",
        "--dhcp-option=option:T2,30",
    ]));
    let conf = s.conf("");
    let ip = s.lease(&conf);
    s.net.stop_server();
    wait_until("a renewal on the wire", Duration::from_secs(10), || {
        s.pod_packet_sockets() > 0
    });
    // The IPAM DEL that bridge makes, alone, so the interface stays for the checks below.
    let started = Instant::now();
    s.call("DEL", &conf)
        .run(&s.dhcp_plugin(), Some(&s.net.node))
        .ok();
    let took = started.elapsed();
    // An upper bound, far below the renewal's remaining ~27 s.
    assert!(
        took < Duration::from_secs(2),
        "DEL waited {took:?} for the renewal: {}",
        s.daemon_log()
    );
    assert!(s.lease_files().is_empty(), "{:?}", s.lease_files());
    let log = s.daemon_log();
    assert!(
        log.contains(&format!(
            "released container=c0ffee network=dnet interface=eth0 address={ip}/24"
        )),
        "{log}"
    );
    // The renewal stopped (its socket is closed) with the interface still there, and it does
    // not bring the lease back.
    wait_until("the renewal's end", Duration::from_secs(5), || {
        s.pod_packet_sockets() == 0
    });
    assert!(s.lease_files().is_empty(), "{:?}", s.lease_files());
    assert!(!s.daemon_log().contains("renewed"), "{}", s.daemon_log());
    s.del(&conf).ok();
    assert_eq!(s.node_links(), ["dbr0"]);
}

#[test]
fn a_del_during_an_add_waits_for_it_and_releases_its_lease() {
    // The pod's interface on the server's bridge, and the dhcp plugin called directly: the two
    // calls meet only in the daemon.
    let mut s = Setup::new(Server::Silent);
    s.net.node.veth_to("dv0", &s.pod, "eth0");
    s.net
        .node
        .ip(&["link", "set", "dv0", "master", "dbr0", "up"]);
    let conf = s.conf("");
    let (add, del) = (s.call("ADD", &conf), s.call("DEL", &conf));
    let dhcp = s.dhcp_plugin();
    let run = |call: &CniCall| {
        let out = call.run(&dhcp, None);
        (out, Instant::now())
    };
    let ((added, _), (deleted, del_done), server_up) = std::thread::scope(|scope| {
        let add = scope.spawn(|| run(&add));
        wait_until("ADD on the wire", Duration::from_secs(10), || {
            s.pod_packet_sockets() > 0
        });
        let del = scope.spawn(|| run(&del));
        // Time for DEL to reach the daemon; then ADD's next DISCOVER gets an answer.
        std::thread::sleep(Duration::from_millis(300));
        s.net.start_server(Server::Dnsmasq(&[]));
        let server_up = Instant::now();
        (add.join().unwrap(), del.join().unwrap(), server_up)
    });
    let ip = leased_ip(&added.ok());
    deleted.ok();
    assert!(del_done > server_up, "DEL did not wait for the ADD");
    s.assert_released(&ip);
    assert!(s.lease_files().is_empty(), "{:?}", s.lease_files());
}

#[test]
fn a_silent_server_fails_within_the_timeout_and_leaves_nothing() {
    let s = Setup::with_daemon_args(Server::Silent, &["-timeout", "1500ms"]);
    let conf = s.conf("");
    let started = Instant::now();
    let out = s.add(&conf);
    let took = started.elapsed();
    common::assert_error(
        &out,
        11,
        "no DHCPOFFER from any DHCP server on interface \"eth0\"",
        "a silent server",
    );
    // Bounded by the timeout (plus process start-up), not by a backoff.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(s.node_links(), ["dbr0"], "the veth is removed");
    assert!(s.pod.links().iter().all(|l| l == "lo"));
    assert!(s.lease_files().is_empty());
    assert!(s
        .daemon_log()
        .contains("failed container=c0ffee network=dnet interface=eth0"));
}

#[test]
fn no_daemon_is_a_clear_error_and_status_unavailable() {
    let mut s = Setup::new(Server::Dnsmasq(&[]));
    s.stop_daemon();
    let conf = s.conf("");
    let out = s.add(&conf);
    common::assert_error(&out, 11, &s.socket().display().to_string(), "no daemon");
    common::assert_error(&out, 11, "dhcp daemon", "no daemon");
    assert_eq!(s.node_links(), ["dbr0"], "the veth is removed");
    let status_conf = conf.replace("1.0.0", "1.1.0");
    let status = s.call("STATUS", &status_conf).run(&s.dhcp_plugin(), None);
    assert_eq!(status.err_code(), 50, "{status:?}");
}

#[test]
fn a_route_the_kernel_refuses_is_named_and_the_lease_released() {
    // The gateway of the classless route is not on any connected network.
    let s = Setup::new(Server::Dnsmasq(&[
        "--dhcp-option=option:classless-static-route,192.0.2.0/24,203.0.113.1",
    ]));
    let conf = s.conf("");
    let out = s.add(&conf);
    assert_ne!(out.code, 0, "{out:?}");
    let err = out.json();
    let text = format!("{} {}", err["msg"], err["details"]);
    assert!(
        text.contains("route 192.0.2.0/24 via 203.0.113.1"),
        "{text}"
    );
    let ip = s
        .net
        .log()
        .lines()
        .find_map(|l| l.split("DHCPACK(dbr0) ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .expect("a lease was granted");
    s.assert_released(&ip);
    assert_eq!(s.node_links(), ["dbr0"]);
    assert!(s.lease_files().is_empty());
}

#[test]
fn daemon_socket_is_private_and_a_stale_one_is_replaced() {
    let mut s = Setup::new(Server::Dnsmasq(&[]));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(s.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A daemon killed hard leaves its socket behind; the next one starts anyway.
    let daemon = s.daemon.take().expect("daemon");
    drop(daemon); // SIGKILL
    assert!(s.socket().exists());
    s.start_daemon(&[]);
    let status_conf = s.conf("").replace("1.0.0", "1.1.0");
    s.call("STATUS", &status_conf)
        .run(&s.dhcp_plugin(), None)
        .ok();
}

#[test]
fn the_broadcast_flag_per_network_and_per_daemon() {
    let s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    let conf = s.conf(r#","broadcast":true"#);
    s.add(&conf).ok();
    s.assert_broadcast(true);
    s.del(&conf).ok();

    let mut s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    let conf = s.conf("");
    s.add(&conf).ok();
    s.assert_broadcast(false);
    s.del(&conf).ok();
    s.stop_daemon();
    s.start_daemon(&["-broadcast"]);
    s.add(&conf).ok();
    s.assert_broadcast(true);
    s.del(&conf).ok();
}

/// The daemon under socket activation, as the packages' units run it.
#[test]
fn systemd_socket_activation() {
    let mut s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    s.stop_daemon();
    // The packages' units: the socket at the daemon's path, root only, and the service's
    // command line, run here with the plugin directory, socket and state of the test's own.
    let packaging = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd");
    let socket_unit = std::fs::read_to_string(packaging.join("cni-dhcp.socket")).unwrap();
    assert!(socket_unit.contains("\nListenStream=/run/cni/dhcp.sock\n"));
    assert!(socket_unit.contains("\nSocketMode=0600\n"));
    let service_unit = std::fs::read_to_string(packaging.join("cni-dhcp.service")).unwrap();
    let exec = service_unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let dir = testkit::PluginDir::new(bin(), &["dhcp"]);
    let exec = exec.replace("@CNI_DIR@", &dir.path().display().to_string());
    let mut words = exec.split_whitespace();
    // systemd-socket-activate listens on the socket and starts the daemon on the first
    // connection, passing the socket as fd 3 (LISTEN_FDS=1, LISTEN_PID).
    let unused = s.work.path().join("not-used.sock");
    let mut cmd = s.net.node.command("systemd-socket-activate");
    cmd.arg("-l")
        .arg(s.socket())
        .arg(words.next().expect("the daemon"))
        .args(words)
        .arg("-socketpath")
        .arg(&unused)
        .arg("-statedir")
        .arg(s.state_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(s.work.path().join("daemon.log")).unwrap());
    let activator = testkit::dhcp::Process::spawn(cmd);
    testkit::dhcp::wait_for_path(&s.socket(), Duration::from_secs(10));
    let conf = s.conf("");
    let result = s.add(&conf).ok();
    assert!(leased_ip(&result).starts_with("10.97.0.1"), "{result}");
    assert!(!unused.exists(), "the daemon used the socket it was given");
    assert!(
        s.daemon_log()
            .contains("listening on the socket systemd passed"),
        "{}",
        s.daemon_log()
    );
    s.del(&conf).ok();
    drop(activator);
}

#[test]
fn a_hundred_pods_at_once_get_distinct_leases() {
    let s = Setup::new(Server::Dnsmasq(&[
        "--dhcp-range=10.97.0.10,10.97.0.250,255.255.255.0,1h",
        "--dhcp-option=option:router,10.97.0.1",
    ]));
    let conf = s.conf("");
    let pods: Vec<Netns> = (0..100).map(|i| Netns::new(&format!("p{i}"))).collect();
    let calls: Vec<CniCall> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| s.call_for("ADD", &conf, &format!("pod{i}"), pod))
        .collect();
    let outputs: Vec<CniOutput> = std::thread::scope(|scope| {
        let handles: Vec<_> = calls.iter().map(|c| scope.spawn(|| s.run(c))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ips: Vec<String> = outputs.iter().map(|o| leased_ip(&o.ok())).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 100, "{ips:?}");
    assert_eq!(s.lease_files().len(), 100);
    for c in &calls {
        let mut del = c.clone();
        del.command = "DEL".into();
        s.run(&del).ok();
    }
    assert!(s.lease_files().is_empty());
    // Every release reached the server: its lease database is empty again. (Its log may drop
    // lines under load, its lease file does not.)
    let leases = s.net.dir.path().join("leases");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&leases)
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "{}\n{}",
            std::fs::read_to_string(&leases).unwrap_or_default(),
            s.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn our_plugin_against_the_go_daemon_says_so() {
    let mut s = Setup::new(Server::Dnsmasq(&[]));
    let go = s.swap_in_go_daemon();
    let conf = s.conf("");
    let out = s.add(&conf);
    common::assert_error(
        &out,
        6,
        "Go dhcp daemon cannot serve this plugin",
        "the Go daemon",
    );
    assert_eq!(s.node_links(), ["dbr0"]);
    drop(go);
}

#[test]
fn pidfile_written_and_removed() {
    let mut s = Setup::new(Server::Dnsmasq(&[]));
    s.stop_daemon();
    let pidfile = s.work.path().join("dhcp.pid");
    s.start_daemon(&["-pidfile", &pidfile.display().to_string()]);
    let pid = s.daemon.as_ref().expect("daemon").process.pid();
    assert_eq!(std::fs::read_to_string(&pidfile).unwrap(), pid.to_string());
    s.stop_daemon();
    assert!(!pidfile.exists());
}

/// The daemon's log: the node's line on stderr, and only as much as `-loglevel` asks.
#[test]
fn the_daemon_logs_the_nodes_line_at_the_level_asked() {
    let mut s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    let conf = s.conf("");
    let ip = leased_ip(&s.add(&conf).ok());
    let logged = s.daemon_log();
    let acquired = logged
        .lines()
        .find(|l| l.contains("dhcp: acquired container=c0ffee"))
        .unwrap_or_else(|| panic!("no lease line in {logged}"));
    // 2026-11-30T01:54:36.791647Z  INFO dhcp: acquired ...
    let (stamp, rest) = acquired.split_at(27);
    assert!(
        stamp.ends_with('Z')
            && stamp.as_bytes()[10] == b'T'
            && stamp[20..26].bytes().all(|b| b.is_ascii_digit()),
        "{acquired}"
    );
    assert!(rest.starts_with("  INFO dhcp: acquired"), "{acquired}");
    s.stop_daemon();
    std::fs::write(s.work.path().join("daemon.log"), "").unwrap();
    s.start_daemon(&["-loglevel", "error"]);
    s.del(&conf).ok();
    s.assert_released(&ip);
    // The second daemon's stderr: neither the release nor its start.
    let logged = s.daemon_log();
    assert!(!logged.contains("released"), "{logged}");
    assert!(!logged.contains("listening on"), "{logged}");
}

#[test]
fn a_symlink_at_the_pidfile_is_replaced_not_written_through() {
    let mut s = Setup::new(Server::Dnsmasq(&[]));
    s.stop_daemon();
    let victim = s.work.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let pidfile = s.work.path().join("dhcp.pid");
    std::os::unix::fs::symlink(&victim, &pidfile).unwrap();
    s.start_daemon(&["-pidfile", &pidfile.display().to_string()]);
    let pid = s.daemon.as_ref().expect("daemon").process.pid();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&pidfile).unwrap().is_file());
    assert_eq!(std::fs::read_to_string(&pidfile).unwrap(), pid.to_string());
}

#[test]
fn the_lease_store_removes_stale_temp_files_and_never_writes_through_a_symlink() {
    let mut s = Setup::new(Server::Dnsmasq(&["--dhcp-option=option:router,10.97.0.1"]));
    s.stop_daemon();
    // A daemon killed while it wrote a lease left this.
    let stale = s.state_dir().join(".gone_dnet_eth0.json.tmp-4194300-0");
    std::fs::write(&stale, "{\"half\":").unwrap();
    // The daemon as PID 1 of its own PID namespace: its temp file names are known.
    let mut args: Vec<String> = ["--pid", "--fork", "--kill-child"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.push(bin().display().to_string());
    args.extend(s.daemon_args());
    s.daemon = Some(DhcpDaemon::start(
        &s.net.node,
        std::path::Path::new("/usr/bin/unshare"),
        &args,
        &s.socket(),
        &s.work.path().join("daemon.log"),
    ));
    // The daemon removes them (and says so) once its socket is its own, so a client may
    // connect a moment before: the removal is waited for.
    wait_until(
        "the daemon removing the stale temp file and saying so",
        Duration::from_secs(5),
        || !stale.exists() && s.daemon_log().contains("removed"),
    );
    // Every temp name of the lease this ADD saves is taken by a symlink.
    let victim = s.work.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    for n in 0..4 {
        let at = s
            .state_dir()
            .join(format!(".{CONTAINER_ID}_dnet_eth0.json.tmp-1-{n}"));
        std::os::unix::fs::symlink(&victim, at).unwrap();
    }
    let conf = s.conf("");
    let ip = leased_ip(&s.add(&conf).ok());
    assert!(ip.starts_with("10.97.0."), "{ip}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let lease = s.state_dir().join(format!("{CONTAINER_ID}_dnet_eth0.json"));
    assert!(std::fs::symlink_metadata(&lease).unwrap().is_file());
    s.del(&conf).ok();
    assert!(!lease.exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn hostprefix_applies_to_the_socket_and_the_pods_netns() {
    let mut s = Setup::new(Server::Dnsmasq(&[]));
    s.stop_daemon();
    // The "host" root as a containerised daemon would see it: <prefix>/run leads to /run.
    let prefix = s.work.path().join("host");
    std::fs::create_dir_all(&prefix).unwrap();
    std::os::unix::fs::symlink("/run", prefix.join("run")).unwrap();
    let args: Vec<String> = [
        "dhcp",
        "daemon",
        "-hostprefix",
        &prefix.display().to_string(),
        "-socketpath",
        "/dhcp.sock",
        "-statedir",
        &s.state_dir().display().to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let socket = prefix.join("dhcp.sock");
    let daemon = DhcpDaemon::start(
        &s.net.node,
        bin(),
        &args,
        &socket,
        &s.work.path().join("daemon.log"),
    );
    let conf = s.conf("").replace(
        &s.socket().display().to_string(),
        &socket.display().to_string(),
    );
    let ip = s.lease(&conf);
    let record = std::fs::read_to_string(&s.lease_files()[0]).unwrap();
    assert!(
        record.contains(&format!("{}{}", prefix.display(), s.pod.path().display())),
        "the pod's netns is opened under the prefix: {record}"
    );
    s.del(&conf).ok();
    s.assert_released(&ip);
    assert!(daemon.process.terminate());
}

#[test]
fn gc_releases_the_leases_of_attachments_that_are_gone() {
    let s = Setup::new(Server::Dnsmasq(&[]));
    let conf = s.conf("").replace("1.0.0", "1.1.0");
    let kept = s.lease(&conf);
    let other_pod = Netns::new("pod2");
    let add = s.call_for("ADD", &conf, "stale", &other_pod);
    let stale = leased_ip(&s.run(&add).ok());
    assert_eq!(s.lease_files().len(), 2);
    let mut gc_conf: serde_json::Value = serde_json::from_str(&conf).unwrap();
    gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": "eth0"}]);
    let mut gc = s.call("GC", &gc_conf.to_string());
    gc.netns = String::new();
    s.run(&gc).ok();
    s.assert_released(&stale);
    assert!(!s.net.log().contains(&format!("DHCPRELEASE(dbr0) {kept}")));
    assert_eq!(s.lease_files().len(), 1);
    s.del(&conf).ok();
    s.assert_released(&kept);
}

#[test]
fn bad_requests_get_clear_errors_and_leave_nothing() {
    let s = Setup::new(Server::Dnsmasq(&[]));
    let dhcp = s.dhcp_plugin();
    // The pod has no eth0: the interface plugin did not make it.
    let out = s.call("ADD", &s.conf("")).run(&dhcp, Some(&s.net.node));
    common::assert_error(
        &out,
        4,
        "there is no interface \"eth0\" in netns",
        "no eth0",
    );
    // An option the plugin cannot name is refused before the daemon is asked.
    let out = s
        .call("ADD", &s.conf(r#","request":[{"option":"routerz"}]"#))
        .run(&dhcp, Some(&s.net.node));
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(
        out.stdout.contains("unknown option \\\"routerz\\\""),
        "{out:?}"
    );
    assert!(s.lease_files().is_empty());
    assert!(!s.net.log().contains("DHCPDISCOVER"), "{}", s.net.log());
}

/// What the daemon is started with, and a socket it cannot have, stop it at once with the
/// reason: the usage for a command line it does not take (exit 2), the socket's trouble
/// (exit 1). `-h` is the usage alone.
#[test]
fn the_daemons_command_line_and_a_socket_it_cannot_have_are_refused_saying_why() {
    let daemon = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .args(["dhcp", "daemon"])
            .args(args)
            .output()
            .expect("runs the daemon");
        let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8");
        (out.status.code(), text(out.stdout), text(out.stderr))
    };
    let (code, stdout, _) = daemon(&["-h"]);
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("usage: dhcp daemon"), "{stdout}");
    for (args, says) in [
        (&["-nosuch"][..], "dhcp daemon: unknown flag -nosuch\n"),
        (
            &["-timeout", "ten"],
            "dhcp daemon: -timeout \"ten\": want a duration",
        ),
        (
            &["-pidfile", "x.pid"],
            "-pidfile x.pid: the path must be absolute",
        ),
        (
            &["-broadcast=maybe"],
            "-broadcast=maybe: want true or false",
        ),
    ] {
        let (code, _, stderr) = daemon(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(stderr.contains("usage: dhcp daemon"), "{args:?}: {stderr}");
    }
    // The test's daemon holds its socket: a second one does not take it over.
    let s = Setup::new(Server::Dnsmasq(&[]));
    let socket = s.socket().display().to_string();
    let state = s.work.path().join("second").display().to_string();
    let (code, _, stderr) = daemon(&["-socketpath", &socket, "-statedir", &state]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!("dhcp daemon: another dhcp daemon is listening on {socket}; stop it first")
    );
    let file = s.work.path().join("not-a-socket");
    std::fs::write(&file, "").expect("writes a test file");
    let (code, _, stderr) = daemon(&[
        "-socketpath",
        &file.display().to_string(),
        "-statedir",
        &state,
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("exists and is not a socket"), "{stderr}");
    assert!(s.socket().exists(), "the first daemon's socket stays");
}
