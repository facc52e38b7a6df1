//! `cargo xtask bench-hotplug [--rounds N]`: how long hot-plug takes on the real node of
//! scripts/cluster.sh (thick mode), from `kubectl annotate` to the pod's interface: a running
//! pod gains a bridge network (until its interface has its address), then loses it (until the
//! interface is gone), N times (50 unless told). The pod itself waits for the interface and
//! reads the machine's clock (`/proc/uptime`), which the bench reads just before it annotates.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use e2e::Node;

const POD: &str = "bench-hotplug";
const ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

pub fn run(args: &[String]) -> Result<()> {
    let mut rounds = 50;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => rounds = it.next().context("--rounds N")?.parse()?,
            _ => bail!("usage: cargo xtask bench-hotplug [--rounds N]"),
        }
    }
    crate::bench_cluster::this_image_on_the_node()?;
    let node = e2e::up("thick")?;
    let nads = [
        e2e::bridge_nad("bench-hp-a", "br-bha", &ipam("10.50.0.0/24")),
        e2e::bridge_nad("bench-hp-b", "br-bhb", &ipam("10.51.0.0/24")),
    ]
    .join("---\n");
    node.apply(&nads)?;
    let pod = e2e::sleeping_pod(POD, Some("bench-hp-a"));
    node.apply(&pod)?;
    let measured = (|| {
        node.wait_ready("default", POD, Duration::from_secs(120))?;
        let (mut added, mut removed, mut kubectl) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=rounds {
            let (took, annotate) = change(
                &node,
                "bench-hp-a,bench-hp-b",
                "until ip addr show net2 2>/dev/null | grep -q 'inet '",
            )?;
            added.push(took);
            kubectl.push(annotate);
            let (took, annotate) = change(
                &node,
                "bench-hp-a",
                "while ip link show net2 >/dev/null 2>&1",
            )?;
            removed.push(took);
            kubectl.push(annotate);
            eprintln!(
                "bench-hotplug: round {round}: added in {:?}, removed in {:?}",
                added[added.len() - 1],
                removed[removed.len() - 1]
            );
        }
        Ok::<_, anyhow::Error>((added, removed, kubectl))
    })();
    node.delete(&pod)?;
    node.delete(&nads)?;
    let (mut added, mut removed, mut kubectl) = measured?;
    added.sort();
    removed.sort();
    kubectl.sort();
    let ms = |v: &[Duration], p| crate::bench_cluster::percentile(v, p);
    println!("| hot-plug on the real node, {rounds} rounds | p50 ms | p99 ms |");
    println!("|---|---|---|");
    println!(
        "| `kubectl annotate` adds a network: until its interface has its address | {:.0} | {:.0} |",
        ms(&added, 50),
        ms(&added, 99)
    );
    println!(
        "| `kubectl annotate` removes it: until its interface is gone | {:.0} | {:.0} |",
        ms(&removed, 50),
        ms(&removed, 99)
    );
    println!(
        "| of which `kubectl annotate` itself, from its start to its exit (both changes) | {:.0} | {:.0} |",
        ms(&kubectl, 50),
        ms(&kubectl, 99)
    );
    Ok(())
}

fn ipam(subnet: &str) -> String {
    format!(
        r#"{{"type": "host-local", "subnet": "{subnet}", "dataDir": "/var/lib/cni/bench-hotplug"}}"#
    )
}

/// Sets the pod's networks to `networks` while the pod runs `wait` (a shell loop that ends
/// once the change shows): the time from just before `kubectl annotate` to the loop's end,
/// and the time `kubectl annotate` itself took.
fn change(node: &Node, networks: &str, wait: &str) -> Result<(Duration, Duration)> {
    let script = format!("{wait}; do sleep 0.005; done; cut -d' ' -f1 /proc/uptime");
    let waiter = node
        .exec_command(&["kubectl", "exec", POD, "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("kubectl exec")?;
    // The loop is running once kubectl exec has reached the pod.
    std::thread::sleep(Duration::from_millis(500));
    let before = e2e::uptime()?;
    let annotating = std::time::Instant::now();
    node.kubectl(&[
        "annotate",
        "--overwrite",
        "pod",
        POD,
        &format!("{ANNOTATION}={networks}"),
    ])?;
    let annotate = annotating.elapsed();
    let out = waiter.wait_with_output()?;
    let seen: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .with_context(|| format!("the pod's clock: {}", String::from_utf8_lossy(&out.stderr)))?;
    Ok((Duration::from_secs_f64((seen - before).max(0.0)), annotate))
}
