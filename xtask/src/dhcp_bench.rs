//! The dhcp part of `cargo xtask bench`: our daemon and the Go reference daemon
//! (`dhcp daemon` of the reference plugins, `testkit::reference_dir`) side by side against one dnsmasq. Each lease is one exec of the
//! `dhcp` plugin ADD on a fresh veth, timed from fork to exit; then 100 pods acquire at once
//! (wall time), and each daemon's peak RSS is read from /proc.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use testkit::dhcp::{DhcpDaemon, DhcpNet, Server};
use testkit::{reference_dir, CniCall, Netns, PluginDir};

use crate::measure;

const CONCURRENT: usize = 100;

/// One implementation: its plugin binary and its running daemon.
struct Side {
    label: &'static str,
    plugin: PathBuf,
    daemon: DhcpDaemon,
    _state: tempfile::TempDir,
}

impl Side {
    fn start(label: &'static str, plugin: PathBuf, net: &DhcpNet, ours: bool) -> Result<Side> {
        let state = tempfile::tempdir()?;
        let socket = state.path().join("dhcp.sock");
        let mut args: Vec<String> = vec!["daemon".into(), "-socketpath".into()];
        args.push(socket.display().to_string());
        if ours {
            args.push("-statedir".into());
            args.push(state.path().join("leases").display().to_string());
        }
        let daemon = DhcpDaemon::start(
            &net.node,
            &plugin,
            &args,
            &socket,
            &state.path().join("daemon.log"),
        );
        Ok(Side {
            label,
            plugin,
            daemon,
            _state: state,
        })
    }

    fn conf(&self) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"benchdhcp","type":"bridge",
                "ipam":{{"type":"dhcp","daemonSocketPath":"{}"}}}}"#,
            self.daemon.socket.display()
        )
    }

    fn call(&self, command: &str, id: &str, pod: &Netns) -> CniCall {
        let mut call = CniCall::new(command, &self.conf());
        call.container_id = id.into();
        call.netns = pod.path().display().to_string();
        call.path = self
            .plugin
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        call
    }

    fn run(&self, call: &CniCall, node: &Netns) -> Result<measure::Sample> {
        let s = measure::run(&self.plugin, call, node)?;
        ensure!(
            s.status.success(),
            "{} dhcp {} failed: {}\n{}",
            self.label,
            call.command,
            s.stdout,
            self.daemon.log()
        );
        Ok(s)
    }
}

/// A veth from the server's bridge into `pod` as eth0, down, as an interface plugin leaves it
/// before calling IPAM.
fn plug(net: &DhcpNet, pod: &Netns, host: &str) {
    let pod_path = pod.path().display().to_string();
    net.node.ip(&[
        "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", &pod_path,
    ]);
    net.node
        .ip(&["link", "set", host, "master", &net.bridge, "up"]);
}

fn unplug(net: &DhcpNet, host: &str) {
    net.node.ip(&["link", "del", host]);
}

pub struct Report {
    pub lease: [(f64, f64); 2],
    pub wall_ms: [f64; 2],
    pub rss_kb: [u64; 2],
}

/// Runs both sides; `leases` sequential leases each, then one round of 100 at once.
pub fn run(bin: &Path, leases: usize) -> Result<Report> {
    let net = DhcpNet::new(Server::Dnsmasq(&[
        "--dhcp-range=10.97.0.10,10.97.0.250,255.255.255.0,1h",
        "--dhcp-option=option:router,10.97.0.1",
        "--dhcp-option=option:dns-server,10.97.0.53",
    ]));
    let ours_dir = PluginDir::new(bin, &["dhcp"]);
    let sides = [
        Side::start("ours", ours_dir.path().join("dhcp"), &net, true)?,
        Side::start("go", reference_dir().join("dhcp"), &net, false)?,
    ];
    let pod = Netns::new("dhcp-bench-pod");
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..leases {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            let side = &sides[s];
            let host = format!("vb{i}{s}");
            plug(&net, &pod, &host);
            let id = format!("lease-{}-{i}", side.label);
            let add = side.run(&side.call("ADD", &id, &pod), &net.node)?;
            times[s].push(add.elapsed);
            side.run(&side.call("DEL", &id, &pod), &net.node)?;
            unplug(&net, &host);
        }
    }
    let lease = [
        measure::percentiles(&mut times[0]),
        measure::percentiles(&mut times[1]),
    ];

    let pods: Vec<Netns> = (0..CONCURRENT)
        .map(|i| Netns::new(&format!("dp{i}")))
        .collect();
    let mut wall_ms = [0.0; 2];
    let mut rss_kb = [0; 2];
    for (s, side) in sides.iter().enumerate() {
        for (i, p) in pods.iter().enumerate() {
            plug(&net, p, &format!("vc{i}"));
        }
        let start = Instant::now();
        let results: Vec<Result<String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = pods
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let call = side.call("ADD", &format!("par-{}-{i}", side.label), p);
                    let node = &net.node;
                    scope.spawn(move || -> Result<String> {
                        let s = side.run(&call, node)?;
                        let v: serde_json::Value = serde_json::from_str(&s.stdout)?;
                        Ok(v["ips"][0]["address"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("thread panicked")))
                })
                .collect()
        });
        wall_ms[s] = start.elapsed().as_secs_f64() * 1000.0;
        rss_kb[s] = side.daemon.peak_rss_kb();
        let mut addresses = results.into_iter().collect::<Result<Vec<_>>>()?;
        addresses.sort();
        addresses.dedup();
        ensure!(
            addresses.len() == CONCURRENT,
            "{}: {} distinct leases for {CONCURRENT} pods",
            side.label,
            addresses.len()
        );
        for (i, p) in pods.iter().enumerate() {
            side.run(
                &side.call("DEL", &format!("par-{}-{i}", side.label), p),
                &net.node,
            )?;
            unplug(&net, &format!("vc{i}"));
        }
    }
    Ok(Report {
        lease,
        wall_ms,
        rss_kb,
    })
}

/// Prints the dhcp rows.
pub fn print(report: &Report, leases: usize) {
    let [ours, go] = report.lease;
    println!("\ndhcp against dnsmasq ({leases} leases per side, each a fresh veth; median / p90 in ms)\n");
    println!("| case | ours | Go | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| dhcp lease (plugin ADD exec) | {:.2} / {:.2} | {:.2} / {:.2} | {:.3}x |",
        ours.0,
        ours.1,
        go.0,
        go.1,
        ours.0 / go.0
    );
    println!(
        "| {CONCURRENT} concurrent leases, wall time (ms) | {:.0} | {:.0} | {:.3}x |",
        report.wall_ms[0],
        report.wall_ms[1],
        report.wall_ms[0] / report.wall_ms[1]
    );
    println!(
        "| daemon peak RSS with {CONCURRENT} leases (KB) | {} | {} | {:.2}x |",
        report.rss_kb[0],
        report.rss_kb[1],
        report.rss_kb[0] as f64 / report.rss_kb[1].max(1) as f64
    );
}

/// `cargo xtask bench dhcp [--leases N]`: only this part.
pub fn run_alone(args: &[String]) -> Result<()> {
    let leases: usize = match args {
        [flag, n] if flag == "--leases" => n.parse().context("--leases N")?,
        _ => 30,
    };
    let bin = crate::build_release()?;
    let report = run(&bin, leases)?;
    print(&report, leases);
    Ok(())
}

/// Leases a full `cargo xtask bench` measures per side.
pub const DEFAULT_LEASES: usize = 30;
