//! `cargo xtask bench-multus`: what multus costs on top of its delegates. A pod gets the
//! cluster network and the two NADs its annotation selects (bridge + host-local each), served
//! by the testkit Kubernetes API server; the same three delegates are also called directly, as
//! a runtime would call them, and the difference is multus's own time (API calls included).
//! The same ADD against a server that offers HTTP/1.1 only, and, with `--compare BIN`, with
//! another multus binary (an older build), interleaved in the same run. Then 50 pods at once,
//! the API requests and connections of one ADD and DEL, and peak RSS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, KubeApiServer, KubeconfigAuth, Latency, Scheme};
use testkit::{CniCall, Netns, PluginDir};

use crate::measure;

/// A node namespace, the plugins, a scratch directory, and the pod's three networks; shared
/// with `bench-thick`.
pub(crate) struct Bench {
    pub multus: PathBuf,
    pub plugins: PluginDir,
    pub node: Netns,
    pub dir: tempfile::TempDir,
}

impl Bench {
    pub fn network(&self, name: &str, bridge: &str, subnet: &str, gateway_route: bool) -> Value {
        let routes = if gateway_route {
            json!([{"dst": "0.0.0.0/0"}])
        } else {
            json!([])
        };
        json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": bridge,
            "isGateway": true,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": routes,
                     "dataDir": self.dir.path().join("ipam")}})
    }

    pub fn networks(&self) -> [(Value, &'static str); 3] {
        [
            (self.network("cluster", "bm0", "10.90.0.0/16", true), "eth0"),
            (self.network("net-a", "bm1", "10.91.0.0/16", false), "net1"),
            (self.network("net-b", "bm2", "10.92.0.0/16", false), "net2"),
        ]
    }

    /// The multus config, with the two NADs and `pods` (each selecting both) in the API, whose
    /// kubeconfig is written to `kubeconfig` in the bench's directory.
    fn multus_conf(
        &self,
        api: &KubeApiServer,
        pods: &[String],
        kubeconfig: &str,
    ) -> Result<String> {
        let [cluster, (a, _), (b, _)] = self.networks();
        api.add_nad("default", "net-a", json!({"config": a.to_string()}));
        api.add_nad("default", "net-b", json!({"config": b.to_string()}));
        for name in pods {
            let mut pod = pod_manifest("default", name);
            pod["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/networks": "net-a,net-b"});
            api.add_pod(pod);
        }
        let kubeconfig = self.dir.path().join(kubeconfig);
        api.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
        Ok(
            json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
            "cniDir": self.dir.path().join("multus"), "binDir": self.plugins.path(),
            "kubeconfig": kubeconfig, "delegates": [cluster.0]})
            .to_string(),
        )
    }

    /// The same three networks inline, without an API: what multus costs without Kubernetes.
    fn inline_conf(&self) -> String {
        let delegates: Vec<Value> = self.networks().into_iter().map(|(n, _)| n).collect();
        json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
            "cniDir": self.dir.path().join("multus"), "binDir": self.plugins.path(),
            "delegates": delegates})
        .to_string()
    }

    /// A call for container `id` of the API's pod `id`.
    pub fn call(&self, command: &str, conf: &str, id: &str, ifname: &str, pod: &Netns) -> CniCall {
        let mut call = CniCall::new(command, conf);
        call.container_id = id.into();
        call.ifname = ifname.into();
        call.netns = pod.path().display().to_string();
        call.path = self.plugins.path().display().to_string();
        call.args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={id}");
        call
    }

    pub fn run(&self, bin: &Path, call: &CniCall) -> Result<measure::Sample> {
        let sample = measure::run(bin, call, &self.node)?;
        ensure!(
            sample.status.success(),
            "{} {} failed: {}",
            bin.display(),
            call.command,
            sample.stdout
        );
        Ok(sample)
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let plugins_bin = crate::build_release()?;
    let bench = Bench {
        multus: plugins_bin.with_file_name("multus"),
        plugins: PluginDir::new(&plugins_bin, &["bridge", "host-local", "static"]),
        node: Netns::new("bench-multus"),
        dir: tempfile::tempdir()?,
    };
    let (mut cycles, mut profile, mut compare) = (100, "zero".to_owned(), None);
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--scale" => {
                let sizes = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<std::result::Result<Vec<usize>, _>>()
                    .context("--scale N,N,...")?;
                return scale(&bench, &sizes);
            }
            "--cycles" => cycles = value()?.parse().context("--cycles N")?,
            "--profile" => profile.clone_from(value()?),
            "--compare" => compare = Some(PathBuf::from(value()?)),
            other => anyhow::bail!("unknown argument {other:?}: --cycles N, --profile zero|datacenter|edge, --compare BIN, --scale N,N,..."),
        }
    }
    let latency = Latency::profile(&profile)
        .with_context(|| format!("--profile {profile:?}: zero, datacenter or edge"))?;
    // The API server listens in the node namespace, where multus runs.
    let node_ns = netkit::NetNs::open(bench.node.path())?;
    let api = node_ns.run(KubeApiServer::https)??;
    let api_http1 = node_ns.run(|| KubeApiServer::start(Scheme::HttpsHttp1Only))??;
    api.set_latency(latency);
    api_http1.set_latency(latency);
    let pod_names: Vec<String> = (0..=cycles)
        .flat_map(|i| [format!("bm{i}"), format!("bm{i}-cmp")])
        .chain((0..(cycles / 20).max(3)).flat_map(|r| (0..50).map(move |i| format!("par{r}-{i}"))))
        .collect();
    let conf = bench.multus_conf(&api, &pod_names, "multus.kubeconfig")?;
    let conf_http1 = bench.multus_conf(&api_http1, &pod_names, "http1.kubeconfig")?;
    let inline_conf = bench.inline_conf();
    let bridge = bench.plugins.path().join("bridge");
    let pod = Netns::new("bench-mpod");

    let (mut via_multus, mut direct) = (Vec::new(), Vec::new());
    let (mut direct_add, mut direct_del) = (Vec::new(), Vec::new());
    let (mut multus_add, mut multus_del) = (Vec::new(), Vec::new());
    let mut inline_add = Vec::new();
    let (mut http1_add, mut compare_add, mut compare_del) = (Vec::new(), Vec::new(), Vec::new());
    let mut rss = 0i64;
    for i in 0..cycles {
        let id = format!("bm{i}");
        let mut one_multus = || -> Result<Duration> {
            let a = bench.run(&bench.multus, &bench.call("ADD", &conf, &id, "eth0", &pod))?;
            let d = bench.run(&bench.multus, &bench.call("DEL", &conf, &id, "eth0", &pod))?;
            rss = rss.max(a.max_rss_kb).max(d.max_rss_kb);
            multus_add.push(a.elapsed);
            multus_del.push(d.elapsed);
            let inline_id = format!("{id}-inline");
            let call = |command| bench.call(command, &inline_conf, &inline_id, "eth0", &pod);
            inline_add.push(bench.run(&bench.multus, &call("ADD"))?.elapsed);
            bench.run(&bench.multus, &call("DEL"))?;
            http1_add.push(
                bench
                    .run(
                        &bench.multus,
                        &bench.call("ADD", &conf_http1, &id, "eth0", &pod),
                    )?
                    .elapsed,
            );
            bench.run(
                &bench.multus,
                &bench.call("DEL", &conf_http1, &id, "eth0", &pod),
            )?;
            if let Some(other) = &compare {
                let id = format!("{id}-cmp");
                compare_add.push(
                    bench
                        .run(other, &bench.call("ADD", &conf, &id, "eth0", &pod))?
                        .elapsed,
                );
                compare_del.push(
                    bench
                        .run(other, &bench.call("DEL", &conf, &id, "eth0", &pod))?
                        .elapsed,
                );
            }
            Ok(a.elapsed + d.elapsed)
        };
        let mut one_direct = || -> Result<Duration> {
            let (mut add, mut del) = (Duration::ZERO, Duration::ZERO);
            let networks = bench.networks();
            for (net, ifname) in &networks {
                let call = bench.call("ADD", &net.to_string(), &id, ifname, &pod);
                add += bench.run(&bridge, &call)?.elapsed;
            }
            for (net, ifname) in networks.iter().rev() {
                let call = bench.call("DEL", &net.to_string(), &id, ifname, &pod);
                del += bench.run(&bridge, &call)?.elapsed;
            }
            direct_add.push(add);
            direct_del.push(del);
            Ok(add + del)
        };
        // Alternate who goes first so drift on a noisy machine hits both alike.
        if i % 2 == 0 {
            via_multus.push(one_multus()?);
            direct.push(one_direct()?);
        } else {
            direct.push(one_direct()?);
            via_multus.push(one_multus()?);
        }
    }
    let (m, m90) = measure::percentiles(&mut via_multus);
    let (d, d90) = measure::percentiles(&mut direct);
    let (ma, ma90) = measure::percentiles(&mut multus_add);
    let (md, md90) = measure::percentiles(&mut multus_del);
    let (ia, ia90) = measure::percentiles(&mut inline_add);
    let (ha, ha90) = measure::percentiles(&mut http1_add);
    let (da, da90) = measure::percentiles(&mut direct_add);
    let (dd, dd90) = measure::percentiles(&mut direct_del);

    // DEL once the pod's namespace is gone, as the runtime's DEL after a sandbox died: the
    // delegates have only their IPAM to release, so multus's own time is not lost in the
    // kernel's veth teardown.
    let (mut gone_multus, mut gone_direct) = (Vec::new(), Vec::new());
    for i in 0..cycles {
        let id = format!("bm{i}");
        let direct_id = format!("{id}-direct");
        let (gone, gone_direct_ns) = (Netns::new("bench-gone"), Netns::new("bench-gone-d"));
        bench.run(&bench.multus, &bench.call("ADD", &conf, &id, "eth0", &gone))?;
        let networks = bench.networks();
        for (net, ifname) in &networks {
            let call = bench.call("ADD", &net.to_string(), &direct_id, ifname, &gone_direct_ns);
            bench.run(&bridge, &call)?;
        }
        let multus_del = bench.call("DEL", &conf, &id, "eth0", &gone);
        let direct_dels: Vec<CniCall> = networks
            .iter()
            .rev()
            .map(|(net, ifname)| {
                bench.call("DEL", &net.to_string(), &direct_id, ifname, &gone_direct_ns)
            })
            .collect();
        drop((gone, gone_direct_ns));
        gone_multus.push(bench.run(&bench.multus, &multus_del)?.elapsed);
        let mut del = Duration::ZERO;
        for call in &direct_dels {
            del += bench.run(&bridge, call)?.elapsed;
        }
        gone_direct.push(del);
    }
    let (gm, gm90) = measure::percentiles(&mut gone_multus);
    let (gd, gd90) = measure::percentiles(&mut gone_direct);

    // 50 pods at once, each into its own namespace: wall time of all ADDs, then all DELs.
    let pods: Vec<Netns> = (0..50).map(|i| Netns::new(&format!("bmp{i}"))).collect();
    let (mut wall_add, mut wall_del) = (Vec::new(), Vec::new());
    for round in 0..(cycles / 20).max(3) {
        for (command, wall) in [("ADD", &mut wall_add), ("DEL", &mut wall_del)] {
            let (elapsed, samples) = measure::at_once(&pods, |i, p| {
                let call = bench.call(command, &conf, &format!("par{round}-{i}"), "eth0", p);
                bench.run(&bench.multus, &call)
            })?;
            rss = samples.iter().fold(rss, |rss, s| rss.max(s.max_rss_kb));
            wall.push(elapsed);
        }
    }
    let (pa, pa90) = measure::percentiles(&mut wall_add);
    let (pd, pd90) = measure::percentiles(&mut wall_del);

    println!(
        "cycles: {cycles}; a pod with the cluster network and 2 NADs from the API (bridge + host-local each)"
    );
    println!(
        "API latency profile {profile}: reads {} ms, writes {} ms\n",
        latency.read.as_millis(),
        latency.write.as_millis()
    );
    println!("| case | median (ms) | p90 (ms) |");
    println!("|---|---|---|");
    println!("| multus ADD | {ma:.2} | {ma90:.2} |");
    println!("| the 3 delegates' ADDs called directly | {da:.2} | {da90:.2} |");
    println!(
        "| multus's own time per ADD (difference of medians) | {:.2} | |",
        ma - da
    );
    println!("| multus ADD without an API (the same networks inline) | {ia:.2} | {ia90:.2} |");
    println!(
        "| multus's own time per ADD without an API (difference of medians) | {:.2} | |",
        ia - da
    );
    println!("| multus ADD, the server offering HTTP/1.1 only | {ha:.2} | {ha90:.2} |");
    println!(
        "| multus's own time per ADD over HTTP/1.1 (difference of medians) | {:.2} | |",
        ha - da
    );
    if let Some(other) = &compare {
        let (ca, ca90) = measure::percentiles(&mut compare_add);
        let (cd, cd90) = measure::percentiles(&mut compare_del);
        println!("| {} ADD | {ca:.2} | {ca90:.2} |", other.display());
        println!(
            "| its own time per ADD (difference of medians) | {:.2} | |",
            ca - da
        );
        println!("| {} DEL | {cd:.2} | {cd90:.2} |", other.display());
        println!(
            "| its own time per DEL (difference of medians) | {:.2} | |",
            cd - dd
        );
    }
    println!("| multus DEL | {md:.2} | {md90:.2} |");
    println!("| the 3 delegates' DELs called directly | {dd:.2} | {dd90:.2} |");
    println!(
        "| multus's own time per DEL (difference of medians) | {:.2} | |",
        md - dd
    );
    println!("| multus DEL, the pod's namespace gone | {gm:.2} | {gm90:.2} |");
    println!("| the 3 delegates' DELs directly, the namespace gone | {gd:.2} | {gd90:.2} |");
    println!(
        "| multus's own time per DEL, the namespace gone (difference of medians) | {:.2} | |",
        gm - gd
    );
    println!("| multus ADD + DEL | {m:.2} | {m90:.2} |");
    println!("| the delegates directly, ADD + DEL | {d:.2} | {d90:.2} |");
    println!("| 50 pods in parallel, ADD (wall) | {pa:.2} | {pa90:.2} |");
    println!("| 50 pods in parallel, DEL (wall) | {pd:.2} | {pd90:.2} |");
    // One more pod: the requests and connections of one ADD and one DEL, then multus's own
    // peak RSS measured on its own.
    let id = format!("bm{cycles}");
    for (server, conf, protocol) in [
        (&api, &conf, "HTTP/2"),
        (&api_http1, &conf_http1, "HTTP/1.1"),
    ] {
        let mut counts = Vec::new();
        for command in ["ADD", "DEL"] {
            server.clear_requests();
            let connections = server.connections();
            bench.run(&bench.multus, &bench.call(command, conf, &id, "eth0", &pod))?;
            counts.push(format!(
                "{command} {} requests on {} connections",
                server.requests().len(),
                server.connections() - connections
            ));
        }
        println!("\nAPI calls over {protocol}: {}", counts.join(", "));
    }
    let own_rss = ["ADD", "DEL"]
        .iter()
        .map(|command| {
            let call = bench.call(command, &conf, &id, "eth0", &pod);
            measure::peak_rss_kb(&bench.multus, &call, &bench.node)
        })
        .collect::<Result<Vec<i64>>>()?;
    println!(
        "\npeak RSS of multus itself: ADD {} KB, DEL {} KB",
        own_rss[0], own_rss[1]
    );
    println!("peak RSS of a multus call as wait4 reports it (multus, its delegates, and the pages of this benchmark process at fork; an upper bound): {rss} KB");
    println!(
        "multus binary: {} KB",
        std::fs::metadata(&bench.multus)
            .map(|m| m.len())
            .unwrap_or(0)
            / 1024
    );
    Ok(())
}

/// `--scale`: one pod with the cluster network and `n` NADs (distinct, from the API, bridge +
/// host-local on one bridge, no gateway), for each size: multus's ADD and DEL wall time, and per
/// network.
fn scale(bench: &Bench, sizes: &[usize]) -> Result<()> {
    let node_ns = netkit::NetNs::open(bench.node.path())?;
    let api = node_ns.run(KubeApiServer::https)??;
    let most = sizes.iter().copied().max().unwrap_or(0);
    let names: Vec<String> = (0..most).map(|i| format!("scale{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let subnet = format!("10.{}.{}.0/24", 100 + i / 250, i % 250);
        let mut net = bench.network(name, "bms", &subnet, false);
        // Many subnets on one bridge: the bridge is no gateway of theirs.
        net["isGateway"] = json!(false);
        api.add_nad("default", name, json!({"config": net.to_string()}));
    }
    let kubeconfig = bench.dir.path().join("multus.kubeconfig");
    api.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
    let [cluster, ..] = bench.networks();
    let conf = json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
        "cniDir": bench.dir.path().join("multus"), "binDir": bench.plugins.path(),
        "kubeconfig": kubeconfig, "delegates": [cluster.0]})
    .to_string();
    println!("| networks | ADD (s) | per network (ms) | DEL (s) | per network (ms) |");
    println!("|---|---|---|---|---|");
    for &n in sizes {
        let id = format!("scale-pod-{n}");
        let mut pod = pod_manifest("default", &id);
        pod["metadata"]["annotations"] =
            json!({"k8s.v1.cni.cncf.io/networks": names[..n].join(",")});
        api.add_pod(pod);
        let netns = Netns::new("bench-scale");
        let add = bench.run(
            &bench.multus,
            &bench.call("ADD", &conf, &id, "eth0", &netns),
        )?;
        let del = bench.run(
            &bench.multus,
            &bench.call("DEL", &conf, &id, "eth0", &netns),
        )?;
        let per = |d: Duration| d.as_secs_f64() * 1000.0 / n.max(1) as f64;
        println!(
            "| {n} | {:.2} | {:.1} | {:.2} | {:.1} |",
            add.elapsed.as_secs_f64(),
            per(add.elapsed),
            del.elapsed.as_secs_f64(),
            per(del.elapsed)
        );
    }
    Ok(())
}
