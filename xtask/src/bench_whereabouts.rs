//! `cargo xtask bench-whereabouts`: whereabouts ADD and DEL through the release binary against
//! testkit's API server over HTTPS with a latency profile: 20 allocations one after another,
//! and 2 nodes × 20 pods started at once, as the reference was measured.

use std::path::PathBuf;

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

impl Bench {
    fn call(&self, command: &str, id: &str, pod_name: &str) -> CniCall {
        let conf = json!({"cniVersion": "1.0.0", "name": "bench", "type": "macvlan",
                          "ipam": {"type": "whereabouts", "range": "10.80.0.0/16"}});
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
        call
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
                    .run(&bench.call("ADD", &format!("s{r}-{i}"), &format!("s{r}-{i}")))?
                    .elapsed,
            );
            requests_per_add.push(api.requests().len() - before);
        }
        for i in 0..20 {
            seq_del.push(
                bench
                    .run(&bench.call("DEL", &format!("s{r}-{i}"), ""))?
                    .elapsed,
            );
        }
    }
    // 2 nodes × 20 pods at once. A node is only a caller here: no lease, no node identity.
    let pods: Vec<Netns> = (0..40).map(|i| Netns::new(&format!("bwb{i}"))).collect();
    let (mut par_add, mut walls) = (Vec::new(), Vec::new());
    let mut rss = 0i64;
    for r in 0..rounds {
        let (wall, samples) = measure::at_once(&pods, |i, _| {
            bench.run(&bench.call(
                "ADD",
                &format!("p{r}-{i}"),
                &format!("node{}-pod{i}", i % 2),
            ))
        })?;
        walls.push(wall);
        rss = samples.iter().fold(rss, |m, s| m.max(s.max_rss_kb));
        par_add.extend(samples.iter().map(|s| s.elapsed));
        let unique: std::collections::HashSet<String> =
            samples.iter().map(|s| s.stdout.clone()).collect();
        if unique.len() != samples.len() {
            bail!("two parallel ADDs got the same result");
        }
        for i in 0..40 {
            bench.run(&bench.call("DEL", &format!("p{r}-{i}"), ""))?;
        }
    }
    let peak = measure::peak_rss_kb(&bench.bin, &bench.call("ADD", "rss", "rss"), &bench.node)?;
    bench.run(&bench.call("DEL", "rss", ""))?;

    let (sa, sa90) = measure::percentiles(&mut seq_add);
    let (sd, sd90) = measure::percentiles(&mut seq_del);
    let (pa, pa90) = measure::percentiles(&mut par_add);
    let (pw, _) = measure::percentiles(&mut walls);
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
    println!("| ADD, 2 nodes x 20 pods at once | {pa:.2} | {pa90:.2} |");
    println!("| wall time of the 40 ADDs at once | {pw:.2} | |");
    println!("\nAPI requests per sequential ADD (median): {median_requests}");
    println!("peak RSS of one ADD: {peak} KB (parallel ADDs, upper bound: {rss} KB)");
    Ok(())
}
