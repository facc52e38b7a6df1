//! `cargo xtask bench`: our plugins and Debian's Go reference side by side, in one run, with
//! the same harness. Prints medians, p90, peak RSS, binary sizes and ratios; the dhcp part is
//! in [`crate::dhcp_bench`].
//!
//! `cargo xtask vm-bench` runs the macvlan, ipvlan, vlan, dummy and vrf cases inside the VM of `cargo xtask
//! vm-test` (this kernel has no ipvlan): there the VM's init runs this program's
//! `bench-in-vm` task, which is [`run_in_vm`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use testkit::{reference_dir, CniCall, Netns, PluginDir};

use crate::measure;

/// One implementation under test: where its plugins are, plus its own node namespace and store.
struct Side {
    label: &'static str,
    plugin_dir: PathBuf,
    node: Netns,
    data: tempfile::TempDir,
}

impl Side {
    fn new(label: &'static str, plugin_dir: PathBuf) -> Result<Side> {
        Ok(Side {
            label,
            plugin_dir,
            node: Netns::new(&format!("bench-{label}")),
            data: tempfile::tempdir()?,
        })
    }

    fn call(&self, command: &str, config: &str, container_id: &str, pod: &Netns) -> CniCall {
        let mut call = CniCall::new(
            command,
            &config.replace("DATADIR", &self.data.path().display().to_string()),
        );
        call.container_id = container_id.into();
        call.netns = pod.path().display().to_string();
        call.path = self.plugin_dir.display().to_string();
        call
    }

    fn run(&self, plugin: &str, call: &CniCall) -> Result<measure::Sample> {
        let sample = measure::run(&self.plugin_dir.join(plugin), call, &self.node)?;
        ensure!(
            sample.status.success(),
            "{} {} {} failed: {}",
            self.label,
            plugin,
            call.command,
            sample.stdout
        );
        Ok(sample)
    }
}

const BRIDGE_V4: &str = r#"{"cniVersion":"1.0.0","name":"bench","type":"bridge","bridge":"bench0","isGateway":true,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"DATADIR"}}"#;
const BRIDGE_DUAL: &str = r#"{"cniVersion":"1.0.0","name":"bench6","type":"bridge","bridge":"bench1","isGateway":true,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.98.0.0/16"}],[{"subnet":"fd00:98::/64"}]],"dataDir":"DATADIR"}}"#;
/// macvlan, ipvlan and vlan with static IPAM on the master `up0` ("TYPE" replaced), IPv4 and
/// dual-stack, with gateways and default routes as a real network would have them.
const SUBLINK_V4: &str = r#"{"cniVersion":"1.0.0","name":"benchsub","type":"TYPE","master":"up0",
 "ipam":{"type":"static","addresses":[{"address":"10.96.0.5/24","gateway":"10.96.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}}"#;
const SUBLINK_DUAL: &str = r#"{"cniVersion":"1.0.0","name":"benchsub","type":"TYPE","master":"up0",
 "ipam":{"type":"static","addresses":[{"address":"10.96.0.5/24","gateway":"10.96.0.1"},{"address":"fd00:96::5/64","gateway":"fd00:96::1"}],
 "routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}"#;
/// The reference waits for IPv6 duplicate address detection (about 2 s per ADD): dual-stack
/// macvlan, ipvlan and vlan cases run at most this many cycles.
const DAD_CASE_CYCLES: usize = 20;

/// host-device moving the node's `hd0` in, with static IPAM.
const HOST_DEVICE: &str = r#"{"cniVersion":"1.0.0","name":"benchhd","type":"host-device","device":"hd0",
 "ipam":{"type":"static","addresses":[{"address":"10.98.0.2/24"}]}}"#;

/// tap, dummy and vrf: the pod's own devices, with static IPAM for the first two.
const TAP: &str = r#"{"cniVersion":"1.0.0","name":"benchtap","type":"tap",
 "ipam":{"type":"static","addresses":[{"address":"10.93.0.5/24"}]}}"#;
const DUMMY: &str = r#"{"cniVersion":"1.0.0","name":"benchdm","type":"dummy",
 "ipam":{"type":"static","addresses":[{"address":"10.92.0.5/24"}]}}"#;
const VRF: &str = r#"{"cniVersion":"1.0.0","name":"benchvrf","type":"vrf","vrfname":"blue",PREV}"#;

/// tuning chained after the pod's `eth0`: a sysctl and the MTU, put back by DEL.
const TUNING: &str = r#"{"cniVersion":"1.0.0","name":"benchtune","type":"tuning","dataDir":"DATADIR/tuning",
 "sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"},"mtu":1400,
 "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}]}}"#;

/// ptp with host-local, masquerading: the pair, both ends' routes, and the rules.
const PTP: &str = r#"{"cniVersion":"1.0.0","name":"benchptp","type":"ptp","ipMasq":true,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.95.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"DATADIR"}}"#;

/// The chained plugins after a pair whose node end is `vethch0` and whose pod end is eth0
/// with 10.94.0.5/16 (see [`chained_rows`]).
const CHAINED_PREV: &str = r#""prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"vethch0"},{"name":"eth0","sandbox":"/x"}],
 "ips":[{"address":"10.94.0.5/16","gateway":"10.94.0.1","interface":1}],"routes":[{"dst":"0.0.0.0/0"}]}"#;
const SBR: &str = r#"{"cniVersion":"1.0.0","name":"benchsbr","type":"sbr",PREV}"#;
const BANDWIDTH: &str = r#"{"cniVersion":"1.0.0","name":"benchbw","type":"bandwidth",
 "ingressRate":100000000,"ingressBurst":1000000,"egressRate":100000000,"egressBurst":1000000,PREV}"#;
const FIREWALL: &str =
    r#"{"cniVersion":"1.0.0","name":"benchfw","type":"firewall","backend":"iptables",PREV}"#;
const FIREWALLD: &str =
    r#"{"cniVersion":"1.0.0","name":"benchfwd","type":"firewall","backend":"firewalld",PREV}"#;
/// firewalld answers slowly: fewer cycles keep the run short.
const FIREWALLD_CYCLES: usize = 30;
const PORTMAP: &str = r#"{"cniVersion":"1.0.0","name":"benchpm","type":"portmap",
 "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":5353,"containerPort":53,"protocol":"udp"}]},PREV}"#;

const LOOPBACK: &str = r#"{"cniVersion":"1.0.0","name":"benchlo","type":"loopback"}"#;

const HOST_LOCAL: &str = r#"{"cniVersion":"1.0.0","name":"benchipam","type":"host-local",
 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.97.0.0/16"}]],"dataDir":"DATADIR"}}"#;

#[derive(Default)]
struct Series {
    times: Vec<Duration>,
    max_rss_kb: i64,
}

impl Series {
    fn push(&mut self, s: &measure::Sample) {
        self.times.push(s.elapsed);
        self.max_rss_kb = self.max_rss_kb.max(s.max_rss_kb);
    }
}

struct Row {
    case: String,
    ours: (f64, f64),
    reference: (f64, f64),
    floor: f64,
    /// Peak RSS of one call, ours and Go's, in KB (for a full ADD / DEL cycle).
    rss: Option<[i64; 2]>,
}

pub fn run(args: &[String]) -> Result<()> {
    let cycles: usize = match args {
        [flag, n] if flag == "--cycles" => n.parse().context("--cycles N")?,
        _ => 200,
    };
    let bin = crate::build_release()?;
    let ours_dir = PluginDir::new(
        &bin,
        &[
            "bridge",
            "ptp",
            "macvlan",
            "host-local",
            "static",
            "loopback",
            "host-device",
            "tuning",
            "sbr",
            "bandwidth",
            "portmap",
            "firewall",
            "tap",
        ],
    );
    let sides = [
        Side::new("ours", ours_dir.path().to_path_buf())?,
        Side::new("go", reference_dir())?,
    ];
    let pod = Netns::new("bench-pod");
    let mut rows = Vec::new();
    let mut rss = [0i64; 2];

    let floor_ms = exec_floor(&sides[0], &pod, cycles)?;

    for (case, plugin, config) in [
        ("loopback ADD / DEL", "loopback", LOOPBACK),
        ("host-local ADD / DEL", "host-local", HOST_LOCAL),
        ("bridge+host-local ADD / DEL, IPv4", "bridge", BRIDGE_V4),
        (
            "bridge+host-local ADD / DEL, dual-stack",
            "bridge",
            BRIDGE_DUAL,
        ),
        ("ptp+host-local ADD / DEL, ipMasq", "ptp", PTP),
        (
            "ptp+host-local ADD / DEL, ipMasq with nftables",
            "ptp",
            &PTP.replace(
                r#""ipMasq":true"#,
                r#""ipMasq":true,"ipMasqBackend":"nftables""#,
            ),
        ),
    ] {
        let bench = AddDel {
            case: case.to_owned(),
            plugin,
            config: config.to_owned(),
            cycles,
            floor_ms,
            env: Default::default(),
        };
        bench.run(&sides, &pod, &mut rows, &mut rss)?;
    }
    for side in &sides {
        veth_master(&side.node);
        side.node
            .ip(&["link", "add", "hd0", "type", "veth", "peer", "name", "hd0p"]);
    }
    // tuning needs an interface of its own to tune.
    let tuned = Netns::new("bench-tuned");
    tuned.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
    ]);
    AddDel {
        case: "tuning ADD / DEL".into(),
        plugin: "tuning",
        config: TUNING.to_owned(),
        cycles,
        floor_ms,
        env: Default::default(),
    }
    .run(&sides, &tuned, &mut rows, &mut rss)?;
    AddDel {
        case: "host-device+static ADD / DEL".into(),
        plugin: "host-device",
        config: HOST_DEVICE.to_owned(),
        cycles,
        floor_ms,
        env: Default::default(),
    }
    .run(&sides, &pod, &mut rows, &mut rss)?;
    AddDel {
        case: "tap+static ADD / DEL".into(),
        plugin: "tap",
        config: TAP.to_owned(),
        cycles,
        floor_ms,
        env: Default::default(),
    }
    .run(&sides, &pod, &mut rows, &mut rss)?;
    sublink_rows(
        &sides, &pod, "macvlan", cycles, floor_ms, &mut rows, &mut rss,
    )?;
    let [add_source_ms, remove_source_ms] =
        chained_rows(&sides, cycles, floor_ms, &mut rows, &mut rss)?;

    // The kernel's floor for DEL: deleting the pod's veth with iproute2, net of the exec floor.
    let mut veth_del = Vec::new();
    for i in 0..cycles {
        let id = format!("floor-{i}");
        sides[0].run("bridge", &sides[0].call("ADD", BRIDGE_V4, &id, &pod))?;
        veth_del.push(timed_ip(&["-n", pod.name(), "link", "del", "eth0"])?);
        sides[0].run("bridge", &sides[0].call("DEL", BRIDGE_V4, &id, &pod))?;
    }
    let (veth_del_ms, _) = measure::percentiles(&mut veth_del);
    let kernel_floor_ms = veth_del_ms - floor_ms;

    // host-device's floor: moving `hd0` into the pod with iproute2 (timed), and back (not).
    let mut moves = Vec::new();
    for _ in 0..cycles {
        let node = sides[0].node.name();
        moves.push(timed_ip(&[
            "-n",
            node,
            "link",
            "set",
            "hd0",
            "netns",
            pod.name(),
        ])?);
        pod.ip(&["link", "set", "hd0", "netns", sides[0].node.name()]);
    }
    let (move_ms, _) = measure::percentiles(&mut moves);

    // 64 ADDs at once, each into its own pod namespace: wall time for all of them.
    let pods: Vec<Netns> = (0..64).map(|i| Netns::new(&format!("bp{i}"))).collect();
    let mut wall = [Vec::new(), Vec::new()];
    let rounds = (cycles / 20).max(3);
    for round in 0..rounds {
        for (s, side) in sides.iter().enumerate() {
            let (elapsed, _) = measure::at_once(&pods, |i, p| {
                side.run(
                    "bridge",
                    &side.call("ADD", BRIDGE_V4, &format!("par-{round}-{i}"), p),
                )
            })?;
            wall[s].push(elapsed);
            for (i, p) in pods.iter().enumerate() {
                side.run(
                    "bridge",
                    &side.call("DEL", BRIDGE_V4, &format!("par-{round}-{i}"), p),
                )?;
            }
        }
    }
    let [ours, go] = &mut wall;
    rows.push(Row {
        case: "64 parallel bridge+host-local ADDs (wall time)".into(),
        ours: measure::percentiles(ours),
        reference: measure::percentiles(go),
        floor: 0.0,
        rss: None,
    });

    print_report(cycles, floor_ms, &rows, rss, &bin)?;
    println!(
        "kernel floor for DEL: `ip link del` of the pod's veth {veth_del_ms:.2} ms median, {kernel_floor_ms:.2} ms net of the exec floor"
    );
    println!(
        "kernel floor for host-device: `ip link set hd0 netns <pod>` {move_ms:.2} ms median, {:.2} ms net of the exec floor",
        move_ms - floor_ms
    );
    println!(
        "firewalld's floor: `addSource` {add_source_ms:.2} ms median, `removeSource` {remove_source_ms:.2} ms, called from this process"
    );
    let dhcp = crate::dhcp_bench::run(&bin, crate::dhcp_bench::DEFAULT_LEASES)?;
    crate::dhcp_bench::print(&dhcp, crate::dhcp_bench::DEFAULT_LEASES);
    Ok(())
}

/// How long one `ip args` takes, fork to exit: the kernel's floor for a plugin's step.
fn timed_ip(args: &[&str]) -> Result<Duration> {
    let start = Instant::now();
    let out = Command::new("ip").args(args).output()?;
    let elapsed = start.elapsed();
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(elapsed)
}

/// ADD and DEL of one config, `cycles` times, alternating the two sides.
struct AddDel {
    case: String,
    plugin: &'static str,
    config: String,
    cycles: usize,
    floor_ms: f64,
    /// Each side's extra environment (a D-Bus address, say).
    env: [Vec<(String, Option<String>)>; 2],
}

impl AddDel {
    fn run(
        &self,
        sides: &[Side; 2],
        pod: &Netns,
        rows: &mut Vec<Row>,
        rss: &mut [i64; 2],
    ) -> Result<()> {
        self.run_in(sides, [pod, pod], |_| {}, rows, rss)
    }

    /// [`AddDel::run`] with a pod per side, and `reset(side)` after each DEL, untimed: for
    /// chained plugins whose DEL leaves what the interface plugin's DEL would remove.
    fn run_in(
        &self,
        sides: &[Side; 2],
        pods: [&Netns; 2],
        reset: impl Fn(usize),
        rows: &mut Vec<Row>,
        rss: &mut [i64; 2],
    ) -> Result<()> {
        let (case, plugin, config) = (self.case.as_str(), self.plugin, self.config.as_str());
        let mut add = [Series::default(), Series::default()];
        let mut del = [Series::default(), Series::default()];
        let mut cycle = [Vec::new(), Vec::new()];
        for i in 0..self.cycles {
            // Alternate who goes first so drift on a noisy machine hits both sides alike.
            let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let id = format!("bench-{i}");
                let pod = pods[s];
                let call = |command| {
                    let mut call = sides[s].call(command, config, &id, pod);
                    call.env.extend(self.env[s].iter().cloned());
                    call
                };
                let a = sides[s].run(plugin, &call("ADD"))?;
                let d = sides[s].run(plugin, &call("DEL"))?;
                reset(s);
                cycle[s].push(a.elapsed + d.elapsed);
                add[s].push(&a);
                del[s].push(&d);
            }
        }
        for s in 0..2 {
            rss[s] = rss[s].max(add[s].max_rss_kb).max(del[s].max_rss_kb);
        }
        for (what, series) in [("ADD", &mut add), ("DEL", &mut del)] {
            let [ours, go] = series;
            rows.push(Row {
                case: format!("{case}: {what}"),
                ours: measure::percentiles(&mut ours.times),
                reference: measure::percentiles(&mut go.times),
                floor: self.floor_ms,
                rss: None,
            });
        }
        let [ours, go] = &mut cycle;
        rows.push(Row {
            case: format!("{case}: full cycle"),
            ours: measure::percentiles(ours),
            reference: measure::percentiles(go),
            floor: 2.0 * self.floor_ms,
            rss: Some([0, 1].map(|s| add[s].max_rss_kb.max(del[s].max_rss_kb))),
        });
        Ok(())
    }
}

/// macvlan or ipvlan (`kind`) with static IPAM on the node's `up0`, IPv4 and dual-stack.
fn sublink_rows(
    sides: &[Side; 2],
    pod: &Netns,
    kind: &'static str,
    cycles: usize,
    floor_ms: f64,
    rows: &mut Vec<Row>,
    rss: &mut [i64; 2],
) -> Result<()> {
    for (family, config, n) in [
        ("IPv4", SUBLINK_V4, cycles),
        ("dual-stack", SUBLINK_DUAL, cycles.min(DAD_CASE_CYCLES)),
    ] {
        let bench = AddDel {
            case: format!("{kind}+static ADD / DEL, {family} ({n} cycles)"),
            plugin: kind,
            // vlan's own key; the others have none.
            config: config
                .replace("TYPE", kind)
                .replace(r#""master""#, r#""vlanId":100,"master""#),
            cycles: n,
            floor_ms,
            env: Default::default(),
        };
        bench.run(sides, pod, rows, rss)?;
    }
    Ok(())
}

/// A pod per side with the end of a veth pair from the side's node (`vethch0`) as its eth0, as
/// an interface plugin leaves it, for the chained plugins.
fn chained_pods(sides: &[Side; 2]) -> [Netns; 2] {
    let pods = [Netns::new("bench-ch-ours"), Netns::new("bench-ch-go")];
    for (side, pod) in sides.iter().zip(&pods) {
        side.node.veth_to("vethch0", pod, "eth0");
        side.node.ip(&["link", "set", "vethch0", "up"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod_routes(pod);
    }
    pods
}

/// sbr, bandwidth, portmap and firewall (iptables, then firewalld) after [`chained_pods`], put
/// back between cycles as the interface plugin's DEL and ADD would. Returns firewalld's own
/// median time for `addSource` and for `removeSource`, in ms.
fn chained_rows(
    sides: &[Side; 2],
    cycles: usize,
    floor_ms: f64,
    rows: &mut Vec<Row>,
    rss: &mut [i64; 2],
) -> Result<[f64; 2]> {
    let pods = chained_pods(sides);
    let reset_sbr = |s: usize| {
        let pod = &pods[s];
        for table in ["100", "101", "102"] {
            pod.try_ip(&["route", "flush", "table", table]);
        }
        pod.ip(&["addr", "flush", "dev", "eth0"]);
        pod_routes(pod);
    };
    let reset_bandwidth = |s: usize| {
        for qdisc in ["root", "ingress"] {
            let _ = sides[s]
                .node
                .command("tc")
                .args(["qdisc", "del", "dev", "vethch0", qdisc])
                .output();
        }
    };
    for (case, plugin, config, reset) in [
        ("sbr ADD / DEL", "sbr", SBR, &reset_sbr as &dyn Fn(usize)),
        (
            "bandwidth ADD / DEL, both ways",
            "bandwidth",
            BANDWIDTH,
            &reset_bandwidth,
        ),
        (
            "portmap ADD / DEL, tcp and udp",
            "portmap",
            PORTMAP,
            &|_| {},
        ),
        (
            "portmap ADD / DEL, tcp and udp, nftables",
            "portmap",
            &PORTMAP.replace(
                r#""type":"portmap""#,
                r#""type":"portmap","backend":"nftables""#,
            ),
            &|_| {},
        ),
        ("firewall ADD / DEL", "firewall", FIREWALL, &|_| {}),
    ] {
        AddDel {
            case: case.into(),
            plugin,
            config: config.replace("PREV", CHAINED_PREV),
            cycles,
            floor_ms,
            env: Default::default(),
        }
        .run_in(sides, [&pods[0], &pods[1]], reset, rows, rss)?;
    }
    // firewalld in each side's node, on a bus of its own: firewalld's own answers (tens of
    // milliseconds each) are most of either side's time.
    let firewalld = [0, 1].map(|s| testkit::firewalld::Firewalld::start(&sides[s].node));
    AddDel {
        case: format!(
            "firewall ADD / DEL, firewalld ({} cycles)",
            cycles.min(FIREWALLD_CYCLES)
        ),
        plugin: "firewall",
        config: FIREWALLD.replace("PREV", CHAINED_PREV),
        cycles: cycles.min(FIREWALLD_CYCLES),
        floor_ms,
        env: [0, 1].map(|s| {
            vec![(
                "DBUS_SYSTEM_BUS_ADDRESS".to_owned(),
                Some(firewalld[s].address().to_owned()),
            )]
        }),
    }
    .run_in(sides, [&pods[0], &pods[1]], |_| {}, rows, rss)?;
    // firewalld's own time, which both sides' rows wait for: one `addSource` and one
    // `removeSource`, from this process, over a connection already made.
    let mut fw = netkit::firewall::firewalld::Firewalld::connect_to(firewalld[0].address())?;
    let ip: std::net::IpAddr = "10.94.0.5".parse()?;
    let (mut add, mut remove) = (Vec::new(), Vec::new());
    for _ in 0..cycles.min(FIREWALLD_CYCLES) {
        let start = Instant::now();
        fw.add_source("trusted", ip)?;
        add.push(start.elapsed());
        let start = Instant::now();
        fw.remove_source("trusted", ip)?;
        remove.push(start.elapsed());
    }
    Ok([
        measure::percentiles(&mut add).0,
        measure::percentiles(&mut remove).0,
    ])
}

/// eth0's address and default route, as the interface plugin leaves them.
fn pod_routes(pod: &Netns) {
    pod.ip(&["addr", "add", "10.94.0.5/16", "dev", "eth0"]);
    pod.ip(&["route", "add", "default", "via", "10.94.0.1"]);
}

/// The master `up0` in a node namespace: a veth end whose peer is up, so it has a carrier.
fn veth_master(node: &Netns) {
    node.ip(&["link", "add", "up0", "type", "veth", "peer", "name", "up0p"]);
    node.ip(&["link", "set", "up0p", "up"]);
    node.ip(&["link", "set", "up0", "up"]);
}

/// The harness's own cost: fork+exec of a program that does nothing, timed the same way.
fn exec_floor(side: &Side, pod: &Netns, cycles: usize) -> Result<f64> {
    let mut floor = Series::default();
    for _ in 0..cycles {
        let call = side.call("VERSION", "{}", "x", pod);
        floor.push(&measure::run(Path::new("/bin/true"), &call, &side.node)?);
    }
    Ok(measure::percentiles(&mut floor.times).0)
}

/// `VERSION` of macvlan on both sides, alternating: what starting the binary costs, which under
/// TCG is a large part of every call.
fn version_row(sides: &[Side; 2], pod: &Netns, cycles: usize, floor_ms: f64) -> Result<Row> {
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..cycles {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            let call = sides[s].call("VERSION", r#"{"cniVersion":"1.0.0"}"#, "v", pod);
            times[s].push(sides[s].run("macvlan", &call)?.elapsed);
        }
    }
    let [ours, go] = &mut times;
    Ok(Row {
        case: "macvlan VERSION (the binary's start)".into(),
        ours: measure::percentiles(ours),
        reference: measure::percentiles(go),
        floor: floor_ms,
        rss: None,
    })
}

/// `bench-in-vm --bin <cni-plugins> --cycles N`: macvlan, ipvlan and vlan on a dummy master, dummy
/// and vrf (kernels without those devices are common: this machine's is one), ours
/// against the reference plugins (`testkit::reference_dir`), inside the VM that `cargo xtask vm-bench` boots.
pub fn run_in_vm(args: &[String]) -> Result<()> {
    let (mut bin, mut cycles) = (None, 50);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--bin" => bin = it.next().map(PathBuf::from),
            "--cycles" => cycles = it.next().context("--cycles N")?.parse()?,
            other => anyhow::bail!("bench-in-vm: unknown argument {other:?}"),
        }
    }
    let bin = bin.context("bench-in-vm needs --bin <cni-plugins>")?;
    // qemu's TCG keeps the code it translated by virtual address: a position-independent binary
    // (ours) lands elsewhere at each exec and is translated again each time, while a fixed-address
    // one (the Go reference's) is not. Without ASLR in the VM (this VM only) both load where they
    // did before, as on hardware, where nothing is translated.
    std::fs::write("/proc/sys/kernel/randomize_va_space", "0")
        .context("turning ASLR off in the VM")?;
    let ours_dir = PluginDir::new(
        &bin,
        &["macvlan", "ipvlan", "vlan", "static", "dummy", "vrf"],
    );
    let sides = [
        Side::new("ours", ours_dir.path().to_path_buf())?,
        Side::new("go", reference_dir())?,
    ];
    for side in &sides {
        side.node.ip(&["link", "add", "up0", "type", "dummy"]);
        side.node.ip(&["link", "set", "up0", "up"]);
    }
    let pod = Netns::new("bench-pod");
    let floor_ms = exec_floor(&sides[0], &pod, cycles)?;
    let mut rows = Vec::new();
    let mut rss = [0i64; 2];
    rows.push(version_row(&sides, &pod, cycles, floor_ms)?);
    for kind in ["macvlan", "ipvlan", "vlan"] {
        sublink_rows(&sides, &pod, kind, cycles, floor_ms, &mut rows, &mut rss)?;
    }
    AddDel {
        case: "dummy+static ADD / DEL".into(),
        plugin: "dummy",
        config: DUMMY.to_owned(),
        cycles,
        floor_ms,
        env: Default::default(),
    }
    .run(&sides, &pod, &mut rows, &mut rss)?;
    // vrf's DEL lets eth0 go with the VRF: its address and routes are put back, untimed.
    let pods = chained_pods(&sides);
    let reset_vrf = |s: usize| {
        let pod = &pods[s];
        pod.try_ip(&["route", "del", "default"]);
        pod.ip(&["addr", "flush", "dev", "eth0"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod_routes(pod);
    };
    AddDel {
        case: "vrf ADD / DEL".into(),
        plugin: "vrf",
        config: VRF.replace("PREV", CHAINED_PREV),
        cycles,
        floor_ms,
        env: Default::default(),
    }
    .run_in(&sides, [&pods[0], &pods[1]], reset_vrf, &mut rows, &mut rss)?;
    println!("in the VM (qemu TCG, one vCPU), cycles per case: {cycles}; harness exec floor: {floor_ms:.2} ms median\n");
    print_table(&rows);
    println!(
        "\npeak RSS of one plugin call: ours {} KB, Go {} KB",
        rss[0], rss[1]
    );
    Ok(())
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn print_report(
    cycles: usize,
    floor_ms: f64,
    rows: &[Row],
    rss: [i64; 2],
    bin: &Path,
) -> Result<()> {
    println!("cycles per case: {cycles}; harness exec floor (fork+exec of /bin/true): {floor_ms:.2} ms median\n");
    print_table(rows);
    println!(
        "\npeak RSS of one plugin call: ours {} KB, Go {} KB",
        rss[0], rss[1]
    );
    // The reference binaries ours replaces: those of its plugins that Debian ships.
    let listed = Command::new(bin).arg("--list").output()?;
    let ref_dir = reference_dir();
    let replaced: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|p| ref_dir.join(p).exists())
        .map(str::to_owned)
        .collect();
    let go_total: u64 = replaced.iter().map(|p| file_size(&ref_dir.join(p))).sum();
    println!(
        "binary size: ours {} KB (one cni-plugins binary); Go {} KB (the {} binaries it replaces: {})",
        file_size(bin) / 1024,
        go_total / 1024,
        replaced.len(),
        replaced.join(", ")
    );
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!("| case | ours median / p90 (ms) | Go median / p90 (ms) | ratio | ratio net of exec floor | peak RSS ours / Go (KB) |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        let ratio = r.ours.0 / r.reference.0;
        let net = (r.ours.0 - r.floor).max(0.0) / (r.reference.0 - r.floor);
        println!(
            "| {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2}x | {} | {} |",
            r.case,
            r.ours.0,
            r.ours.1,
            r.reference.0,
            r.reference.1,
            ratio,
            if r.floor > 0.0 {
                format!("{net:.2}x")
            } else {
                "-".into()
            },
            r.rss
                .map_or_else(|| "-".to_owned(), |[o, g]| format!("{o} / {g}"))
        );
    }
}
