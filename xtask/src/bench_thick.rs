//! `cargo xtask bench-thick`: thick mode against thin mode in one run, with the release
//! binaries, against testkit's API server over HTTPS with a latency profile (`datacenter`
//! unless `--profile` says otherwise). A pod gets the cluster network and two NADs (bridge +
//! host-local each); the same three delegates are also called directly, and the difference is
//! multus's own time. Then 200 pods at once each way, the API requests of one ADD and DEL, the
//! daemon's RSS with 1,000 NADs and 200 pods cached and at its peak during the burst, its
//! threads, and the shim's peak RSS.

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::json;
use testkit::kube_api::{pod_manifest, KubeApiServer, KubeconfigAuth, Latency};
use testkit::{CniCall, Netns, PluginDir};

use crate::bench_multus::Bench;
use crate::measure;

const BURST: usize = 200;

/// A process's resident set and its peak, in KB, and its threads.
fn status_of(pid: u32) -> Result<(i64, i64, i64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:"), field("Threads:")))
}

/// One request to the daemon's socket: the body of the reply.
fn ask(socket: &Path, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: dummy\r\nContent-Length: 0\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply.starts_with("HTTP/1.1 200").then(|| {
        reply
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    })
}

fn metric(text: &str, start: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(start)?.trim().parse().ok())
        .unwrap_or(-1)
}

/// Requests besides the caches' lists and watches, sorted into `GET`, `PATCH`, events.
fn count(api: &KubeApiServer) -> String {
    let reqs = api.requests();
    let calls: Vec<_> = reqs
        .iter()
        .filter(|r| {
            !(r.method == "GET" && (r.query.contains("watch") || r.query.contains("limit")))
        })
        .collect();
    let events = calls.iter().filter(|r| r.path.ends_with("/events")).count();
    format!(
        "{} ({} GET, {} PATCH, {} events)",
        calls.len(),
        calls.iter().filter(|r| r.method == "GET").count(),
        calls.iter().filter(|r| r.method == "PATCH").count(),
        events
    )
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut cycles, mut profile) = (30usize, "datacenter".to_owned());
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--cycles" => cycles = value()?.parse().context("--cycles N")?,
            "--profile" => profile.clone_from(value()?),
            other => {
                bail!("unknown argument {other:?}: --cycles N, --profile zero|datacenter|edge")
            }
        }
    }
    let latency = Latency::profile(&profile)
        .with_context(|| format!("--profile {profile:?}: zero, datacenter or edge"))?;
    let plugins_bin = crate::build_release()?;
    let multus = plugins_bin.with_file_name("multus");
    let links = PluginDir::new(&multus, &["multus-daemon", "multus-shim"]);
    let shim = links.path().join("multus-shim");
    let bench = Bench {
        multus: multus.clone(),
        plugins: PluginDir::new(&plugins_bin, &["bridge", "host-local", "static"]),
        node: Netns::new("bench-thick"),
        dir: tempfile::tempdir()?,
    };
    let node_ns = netkit::NetNs::open(bench.node.path())?;
    let api = node_ns.run(KubeApiServer::https)??;
    api.set_latency(latency);
    let kubeconfig = bench.dir.path().join("multus.kubeconfig");
    api.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
    let [cluster, (a, _), (b, _)] = bench.networks();
    api.add_nad("default", "net-a", json!({"config": a.to_string()}));
    api.add_nad("default", "net-b", json!({"config": b.to_string()}));
    let add_pods = |prefix: &str, n: usize, networks: &str| {
        for i in 0..n {
            let mut pod = pod_manifest("default", &format!("{prefix}{i}"));
            pod["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/networks": networks});
            api.add_pod(pod);
        }
    };
    for prefix in ["thin", "thick", "gone-thin", "gone-thick"] {
        add_pods(prefix, cycles + 1, "net-a,net-b");
    }
    add_pods("burst-thin", BURST, "net-a,net-b");
    add_pods("burst-thick", BURST, "net-a,net-b");

    // Thin: the multus config with the cluster network inline.
    let thin = json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
        "cniDir": bench.dir.path().join("thin"), "binDir": bench.plugins.path(),
        "kubeconfig": kubeconfig, "delegates": [cluster.0]})
    .to_string();
    // Thick: the daemon, with the cluster network's file for its 00-multus.conf.
    let net_d = bench.dir.path().join("net.d");
    std::fs::create_dir_all(&net_d)?;
    std::fs::write(net_d.join("10-cluster.conf"), cluster.0.to_string())?;
    let socket_dir = bench.dir.path().join("run");
    let config = json!({"cniConfigDir": net_d, "multusAutoconfigDir": net_d,
        "socketDir": socket_dir, "daemonSocketDir": socket_dir, "binDir": bench.plugins.path(),
        "cniDir": bench.dir.path().join("thick"), "kubeconfig": kubeconfig,
        "logLevel": "error"});
    let config_path = bench.dir.path().join("daemon-config.json");
    std::fs::write(&config_path, config.to_string())?;
    let mut daemon: Child = bench
        .node
        .command(links.path().join("multus-daemon"))
        .args(["-config".as_ref(), config_path.as_os_str()])
        .env("MULTUS_NODE_NAME", "node-1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the daemon")?;
    let pid = daemon.id();
    let socket = socket_dir.join("multus.sock");
    let ready_by = Instant::now() + Duration::from_secs(30);
    while ask(&socket, "/readyz").is_none() {
        ensure!(Instant::now() < ready_by, "the daemon did not get ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let thick = std::fs::read_to_string(net_d.join("00-multus.conf"))?;
    let pod = Netns::new("bench-tpod");
    let bridge = bench.plugins.path().join("bridge");

    // Interleaved: thin, thick, the delegates directly.
    let (mut thin_add, mut thin_del, mut thick_add, mut thick_del) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut direct_add, mut direct_del) = (Vec::new(), Vec::new());
    for i in 0..cycles {
        let round = |bin: &Path,
                     conf: &str,
                     id: String,
                     adds: &mut Vec<Duration>,
                     dels: &mut Vec<Duration>|
         -> Result<()> {
            adds.push(
                bench
                    .run(bin, &bench.call("ADD", conf, &id, "eth0", &pod))?
                    .elapsed,
            );
            dels.push(
                bench
                    .run(bin, &bench.call("DEL", conf, &id, "eth0", &pod))?
                    .elapsed,
            );
            Ok(())
        };
        let order = [0, 1, 2];
        for which in order.iter().cycle().skip(i % 3).take(3) {
            match which {
                0 => round(
                    &bench.multus,
                    &thin,
                    format!("thin{i}"),
                    &mut thin_add,
                    &mut thin_del,
                )?,
                1 => round(
                    &shim,
                    &thick,
                    format!("thick{i}"),
                    &mut thick_add,
                    &mut thick_del,
                )?,
                _ => {
                    let (mut add, mut del) = (Duration::ZERO, Duration::ZERO);
                    let networks = bench.networks();
                    let id = format!("direct{i}");
                    for (net, ifname) in &networks {
                        add += bench
                            .run(
                                &bridge,
                                &bench.call("ADD", &net.to_string(), &id, ifname, &pod),
                            )?
                            .elapsed;
                    }
                    for (net, ifname) in networks.iter().rev() {
                        del += bench
                            .run(
                                &bridge,
                                &bench.call("DEL", &net.to_string(), &id, ifname, &pod),
                            )?
                            .elapsed;
                    }
                    direct_add.push(add);
                    direct_del.push(del);
                }
            }
        }
    }
    // DEL once the pod's namespace is gone: the delegates only release their addresses, so
    // multus's own time is not lost in the kernel's veth teardown.
    let (mut gone_thin, mut gone_thick, mut gone_direct) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..cycles {
        let ns = Netns::new("bench-gone");
        let id = format!("gone-direct{i}");
        let networks = bench.networks();
        for (net, ifname) in &networks {
            bench.run(
                &bridge,
                &bench.call("ADD", &net.to_string(), &id, ifname, &ns),
            )?;
        }
        let dels: Vec<CniCall> = networks
            .iter()
            .rev()
            .map(|(net, ifname)| bench.call("DEL", &net.to_string(), &id, ifname, &ns))
            .collect();
        drop(ns);
        let mut del = Duration::ZERO;
        for call in &dels {
            del += bench.run(&bridge, call)?.elapsed;
        }
        gone_direct.push(del);
        for (bin, conf, prefix, out) in [
            (&bench.multus, &thin, "gone-thin", &mut gone_thin),
            (&shim, &thick, "gone-thick", &mut gone_thick),
        ] {
            let ns = Netns::new("bench-gone");
            let id = format!("{prefix}{i}");
            bench.run(bin, &bench.call("ADD", conf, &id, "eth0", &ns))?;
            let del = bench.call("DEL", conf, &id, "eth0", &ns);
            drop(ns);
            out.push(bench.run(bin, &del)?.elapsed);
        }
    }

    // The daemon with 1,000 NADs and 200 more of the node's pods cached.
    for i in 0..1000 {
        let net = bench.network(&format!("filler{i}"), "btf", "10.99.0.0/16", false);
        api.add_nad(
            "default",
            &format!("filler{i}"),
            json!({"config": net.to_string()}),
        );
    }
    add_pods("filler", 200, "net-a");
    let cached_by = Instant::now() + Duration::from_secs(60);
    loop {
        let m = ask(&socket, "/metrics").unwrap_or_default();
        if metric(&m, "multus_cache_objects{kind=\"nads\"}") >= 1002
            && metric(&m, "multus_cache_objects{kind=\"pods\"}") >= 200
        {
            break;
        }
        ensure!(Instant::now() < cached_by, "the caches did not fill: {m}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (steady_rss, _, steady_threads) = status_of(pid)?;

    // 200 pods at once, thin and thick; the daemon's peak RSS and threads meanwhile.
    let pods: Vec<Netns> = (0..BURST).map(|i| Netns::new(&format!("bt{i}"))).collect();
    let watching = AtomicBool::new(true);
    let (mut peak_threads, mut walls) = (0i64, Vec::new());
    std::thread::scope(|s| -> Result<()> {
        let sampler = s.spawn(|| {
            let mut most = 0;
            while watching.load(Ordering::SeqCst) {
                if let Ok((_, _, threads)) = status_of(pid) {
                    most = most.max(threads);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            most
        });
        for (name, bin, conf) in [("thin", &bench.multus, &thin), ("thick", &shim, &thick)] {
            for command in ["ADD", "DEL"] {
                let (wall, _) = measure::at_once(&pods, |i, p| {
                    bench.run(
                        bin,
                        &bench.call(command, conf, &format!("burst-{name}{i}"), "eth0", p),
                    )
                })?;
                walls.push((name, command, wall));
            }
        }
        watching.store(false, Ordering::SeqCst);
        peak_threads = sampler.join().map_err(|_| anyhow::anyhow!("sampler"))?;
        Ok(())
    })?;
    let (_, peak_rss, _) = status_of(pid)?;

    // The API requests of one ADD and one DEL, each way (events, which the daemon sends
    // after its reply, counted once they have arrived), once the bursts' events are sent.
    let drained_by = Instant::now() + Duration::from_secs(120);
    while metric(
        &ask(&socket, "/metrics").unwrap_or_default(),
        "multus_events_queued",
    ) != 0
    {
        ensure!(
            Instant::now() < drained_by,
            "the burst's events were not sent"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut requests = Vec::new();
    for (name, bin, conf) in [("thin", &bench.multus, &thin), ("thick", &shim, &thick)] {
        let id = format!("{name}{cycles}");
        for command in ["ADD", "DEL"] {
            api.clear_requests();
            bench.run(bin, &bench.call(command, conf, &id, "eth0", &pod))?;
            std::thread::sleep(Duration::from_millis(500));
            requests.push(format!("{name} {command}: {}", count(&api)));
        }
    }
    let shim_rss = measure::peak_rss_kb(
        &shim,
        &bench.call("ADD", &thick, &format!("thick{}", cycles), "eth0", &pod),
        &bench.node,
    )?;
    bench.run(
        &shim,
        &bench.call("DEL", &thick, &format!("thick{}", cycles), "eth0", &pod),
    )?;
    let _ = daemon.kill();
    let _ = daemon.wait();

    let med = |v: &mut Vec<Duration>| measure::percentiles(v);
    let (ta, ta90) = med(&mut thin_add);
    let (ka, ka90) = med(&mut thick_add);
    let (da, _) = med(&mut direct_add);
    let (td, td90) = med(&mut thin_del);
    let (kd, kd90) = med(&mut thick_del);
    let (dd, _) = med(&mut direct_del);
    let (gt, _) = med(&mut gone_thin);
    let (gk, _) = med(&mut gone_thick);
    let (gd, _) = med(&mut gone_direct);
    println!(
        "cycles: {cycles}; API latency profile {profile}: reads {} ms, writes {} ms; a pod with the cluster network and 2 NADs (bridge + host-local each)\n",
        latency.read.as_millis(),
        latency.write.as_millis()
    );
    println!("| case | median (ms) | p90 (ms) |");
    println!("|---|---|---|");
    println!("| the 3 delegates' ADDs called directly | {da:.2} | |");
    println!("| thin: multus ADD | {ta:.2} | {ta90:.2} |");
    println!("| thick: multus-shim ADD | {ka:.2} | {ka90:.2} |");
    println!(
        "| thin: own time per ADD (difference of medians) | {:.2} | |",
        ta - da
    );
    println!(
        "| thick: own time per ADD (difference of medians) | {:.2} | |",
        ka - da
    );
    println!("| the 3 delegates' DELs called directly | {dd:.2} | |");
    println!("| thin: multus DEL | {td:.2} | {td90:.2} |");
    println!("| thick: multus-shim DEL | {kd:.2} | {kd90:.2} |");
    println!(
        "| thin: own time per DEL (difference of medians) | {:.2} | |",
        td - dd
    );
    println!(
        "| thick: own time per DEL (difference of medians) | {:.2} | |",
        kd - dd
    );
    println!("| the 3 delegates' DELs directly, the pod's namespace gone | {gd:.2} | |");
    println!("| thin: DEL, the pod's namespace gone | {gt:.2} | |");
    println!("| thick: DEL, the pod's namespace gone | {gk:.2} | |");
    println!(
        "| thin: own time per DEL, the namespace gone | {:.2} | |",
        gt - gd
    );
    println!(
        "| thick: own time per DEL, the namespace gone | {:.2} | |",
        gk - gd
    );
    for (name, command, wall) in &walls {
        println!(
            "| {name}: {BURST} pods at once, {command} (wall) | {:.0} | |",
            wall.as_secs_f64() * 1000.0
        );
    }
    println!("\nAPI requests: {}", requests.join("; "));
    println!(
        "daemon RSS with 1,000 NADs and 200 pods cached: {steady_rss} KB ({steady_threads} threads)"
    );
    println!(
        "daemon peak RSS (VmHWM) through the {BURST}-pod bursts: {peak_rss} KB; most threads seen: {peak_threads}"
    );
    println!("multus-shim peak RSS of one ADD: {shim_rss} KB");
    Ok(())
}
