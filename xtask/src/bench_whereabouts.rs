//! `cargo xtask bench-whereabouts`: whereabouts ADD and DEL through the release binary against
//! testkit's API server over HTTPS with a latency profile: 20 allocations one after another,
//! and 2 nodes × 20 pods started at once, as the reference was measured; then 40 pods at once
//! over 2 and 4 nodes, allocating from the whole range and from node slices.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;
use testkit::kube_api::{KubeApiServer, KubeconfigAuth, Latency};
use testkit::{CniCall, Netns, PluginDir};

use crate::measure;

struct Bench {
    bin: PathBuf,
    conf_dir: PathBuf,
    node: Netns,
    pod: Netns,
}

/// Which node calls, and whether the network uses node slices.
#[derive(Clone, Copy)]
struct On {
    node: usize,
    sliced: bool,
}

const NODE_0: On = On {
    node: 0,
    sliced: false,
};

impl Bench {
    fn call(&self, command: &str, id: &str, pod_name: &str, on: On) -> CniCall {
        let mut ipam = json!({"type": "whereabouts", "range": "10.80.0.0/16"});
        if on.sliced {
            ipam["network_name"] = json!("sliced");
            ipam["node_slice_size"] = json!("/24");
        }
        let conf = json!({"cniVersion": "1.0.0", "name": "bench", "type": "macvlan",
                          "ipam": ipam});
        let mut call = CniCall::new(command, &conf.to_string());
        call.container_id = id.into();
        call.ifname = "net1".into();
        call.netns = self.pod.path().display().to_string();
        call.path = self
            .bin
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        call.args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={pod_name}");
        call.env.push((
            "WHEREABOUTS_CONFIG_DIR".into(),
            Some(self.conf_dir.display().to_string()),
        ));
        let state = self.conf_dir.join(format!("state-{}", on.node));
        call.env.push((
            "WHEREABOUTS_STATE_DIR".into(),
            Some(state.display().to_string()),
        ));
        call.env
            .push(("NODENAME".into(), Some(format!("node-{}", on.node))));
        call
    }

    /// `nodes` nodes start `per_node` pods each at once: every ADD's time, and the wall time.
    fn at_once(
        &self,
        pods: &[Netns],
        tag: &str,
        nodes: usize,
        sliced: bool,
    ) -> Result<(Vec<Duration>, Duration, i64)> {
        let on = |i: usize| On {
            node: i % nodes,
            sliced,
        };
        let (wall, samples) = measure::at_once(pods, |i, _| {
            self.run(&self.call(
                "ADD",
                &format!("{tag}-{i}"),
                &format!("node{}-pod{i}", i % nodes),
                on(i),
            ))
        })?;
        let unique: std::collections::HashSet<String> =
            samples.iter().map(|s| s.stdout.clone()).collect();
        if unique.len() != samples.len() {
            bail!("two parallel ADDs got the same result");
        }
        for i in 0..pods.len() {
            self.run(&self.call("DEL", &format!("{tag}-{i}"), "", on(i)))?;
        }
        let rss = samples.iter().fold(0, |m, s| m.max(s.max_rss_kb));
        Ok((samples.iter().map(|s| s.elapsed).collect(), wall, rss))
    }

    fn run(&self, call: &CniCall) -> Result<measure::Sample> {
        let sample = measure::run(&self.bin, call, &self.node)?;
        if !sample.status.success() {
            bail!(
                "whereabouts {} {} failed: {}",
                call.command,
                call.container_id,
                sample.stdout
            );
        }
        Ok(sample)
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut profile, mut rounds) = ("datacenter".to_owned(), 3usize);
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--profile" => profile.clone_from(value()?),
            "--rounds" => rounds = value()?.parse().context("--rounds N")?,
            other => {
                bail!("unknown argument {other:?}: --profile zero|datacenter|edge, --rounds N")
            }
        }
    }
    let latency = Latency::profile(&profile)
        .with_context(|| format!("--profile {profile:?}: zero, datacenter or edge"))?;
    let multus = crate::build_release()?.with_file_name("multus");
    let plugins = PluginDir::new(&multus, &["whereabouts"]);
    let dir = tempfile::tempdir()?;
    let node = Netns::new("bench-wb");
    let api = netkit::NetNs::open(node.path())?.run(KubeApiServer::https)??;
    api.set_latency(latency);
    let flat = dir.path().join("whereabouts.d");
    std::fs::create_dir_all(&flat)?;
    let kubeconfig = flat.join("whereabouts.kubeconfig");
    api.write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)?;
    std::fs::write(
        flat.join("whereabouts.conf"),
        json!({"kubernetes": {"kubeconfig": kubeconfig}}).to_string(),
    )?;
    let bench = Bench {
        bin: plugins.path().join("whereabouts"),
        conf_dir: dir.path().to_owned(),
        node,
        pod: Netns::new("bench-wbpod"),
    };

    // One after another: 20 ADDs, then their DELs, `rounds` times.
    let (mut seq_add, mut seq_del) = (Vec::new(), Vec::new());
    let mut requests_per_add = Vec::new();
    for r in 0..rounds {
        for i in 0..20 {
            let before = api.requests().len();
            seq_add.push(
                bench
                    .run(&bench.call("ADD", &format!("s{r}-{i}"), &format!("s{r}-{i}"), NODE_0))?
                    .elapsed,
            );
            requests_per_add.push(api.requests().len() - before);
        }
        for i in 0..20 {
            seq_del.push(
                bench
                    .run(&bench.call("DEL", &format!("s{r}-{i}"), "", NODE_0))?
                    .elapsed,
            );
        }
    }
    // 40 pods at once over 2 and 4 nodes, from the whole range and from node slices (a pool
    // per node). 2 nodes from the whole range is the reference's case.
    let pods: Vec<Netns> = (0..40).map(|i| Netns::new(&format!("bwb{i}"))).collect();
    let mut parallel = Vec::new();
    let mut rss = 0i64;
    for (nodes, sliced) in [(2, false), (2, true), (4, false), (4, true)] {
        let (mut adds, mut walls) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let tag = format!("p{nodes}{sliced}{r}");
            let (times, wall, peak) = bench.at_once(&pods, &tag, nodes, sliced)?;
            adds.extend(times);
            walls.push(wall);
            rss = rss.max(peak);
        }
        parallel.push((nodes, sliced, adds, walls));
    }
    let peak = measure::peak_rss_kb(
        &bench.bin,
        &bench.call("ADD", "rss", "rss", NODE_0),
        &bench.node,
    )?;
    bench.run(&bench.call("DEL", "rss", "", NODE_0))?;

    let (sa, sa90) = measure::percentiles(&mut seq_add);
    let (sd, sd90) = measure::percentiles(&mut seq_del);

    requests_per_add.sort_unstable();
    let median_requests = requests_per_add[requests_per_add.len() / 2];
    println!(
        "API latency profile {profile}: reads {} ms, writes {} ms; {rounds} rounds\n",
        latency.read.as_millis(),
        latency.write.as_millis()
    );
    println!("| case | median (ms) | p90 (ms) |");
    println!("|---|---|---|");
    println!("| ADD, 20 one after another | {sa:.2} | {sa90:.2} |");
    println!("| DEL, 20 one after another | {sd:.2} | {sd90:.2} |");
    for (nodes, sliced, adds, walls) in &mut parallel {
        let (pa, pa90) = measure::percentiles(adds);
        let (pw, _) = measure::percentiles(walls);
        let from = if *sliced {
            "node slices"
        } else {
            "the whole range"
        };
        let per = 40 / *nodes;
        println!("| ADD, {nodes} nodes x {per} pods at once, {from} | {pa:.2} | {pa90:.2} |");
        println!("| wall time of those 40 ADDs | {pw:.2} | |");
    }
    println!("\nAPI requests per sequential ADD (median): {median_requests}");
    println!("peak RSS of one ADD: {peak} KB (parallel ADDs, upper bound: {rss} KB)");
    Ok(())
}
