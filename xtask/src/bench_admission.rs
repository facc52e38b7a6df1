//! `cargo xtask bench-admission`: what the admission webhook adds to a NAD's create, on the real
//! node of scripts/cluster.sh. N NADs are created one request after another (one `kubectl
//! apply` of a List), without the webhook and with deploy/admission/base, in alternating rounds;
//! each create's time in the API server, from the request's arrival to its response, is read
//! from the API server's audit log. Reported: p50 and p99 of each, and the added time.

use std::io::{Read, Seek};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use e2e::admission::list;
use serde_json::{json, Value};

pub fn run(args: &[String]) -> Result<()> {
    let mut nads = 300;
    let mut rounds = 2;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || -> Result<usize> {
            it.next()
                .with_context(|| format!("{a} takes a number"))?
                .parse()
                .with_context(|| format!("{a} takes a number"))
        };
        match a.as_str() {
            "--nads" => nads = value()?,
            "--rounds" => rounds = value()?,
            _ => bail!("usage: cargo xtask bench-admission [--nads N] [--rounds N]"),
        }
    }
    crate::bench_cluster::this_image_on_the_node()?;
    let node = e2e::up("thin")?;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        eprintln!("bench-admission: round {round}, without the webhook");
        without.extend(creates(&node, nads, &format!("r{round}a"))?);
        eprintln!("bench-admission: round {round}, with the webhook");
        let admission = e2e::admission::install(&node, "base", |_| {})?;
        with.extend(creates(&node, nads, &format!("r{round}b"))?);
        drop(admission);
    }
    without.sort();
    with.sort();
    let (p50, p99) = (
        |v: &[Duration]| crate::bench_cluster::percentile(v, 50),
        |v: &[Duration]| crate::bench_cluster::percentile(v, 99),
    );
    println!(
        "| NAD create in the API server ({} creates each, {rounds} rounds) | p50 ms | p99 ms |",
        without.len()
    );
    println!("|---|---|---|");
    println!(
        "| without the webhook | {:.2} | {:.2} |",
        p50(&without),
        p99(&without)
    );
    println!(
        "| with deploy/admission | {:.2} | {:.2} |",
        p50(&with),
        p99(&with)
    );
    println!(
        "| added | {:.2} | {:.2} |",
        p50(&with) - p50(&without),
        p99(&with) - p99(&without)
    );
    Ok(())
}

/// Creates `count` NADs named `bench-<tag>-<i>` and reads each create's time from the audit
/// log; deletes them again.
fn creates(node: &e2e::Node, count: usize, tag: &str) -> Result<Vec<Duration>> {
    let audit = e2e::state_dir().join("logs/audit.log");
    let from = std::fs::metadata(&audit).map(|m| m.len()).unwrap_or(0);
    let prefix = format!("bench-{tag}-");
    let objects: Vec<Value> = (0..count)
        .map(|i| {
            let config = json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-bench",
                "ipam": {"type": "host-local", "subnet": format!("192.168.{}.0/24", i % 250)}});
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"name": format!("{prefix}{i}"), "namespace": "default"},
                   "spec": {"config": config.to_string()}})
        })
        .collect();
    let out = node.kubectl_output(&["create", "-f", "-"], Some(&list(&objects)))?;
    if !out.status.success() {
        bail!("kubectl create: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The audit log is written asynchronously: wait until every create is in it.
    let mut times = Vec::new();
    for _ in 0..100 {
        times = audit_times(&audit, from, &prefix)?;
        if times.len() >= count {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    node.delete(&list(&objects))?;
    if times.len() < count {
        bail!("{} of {count} creates in the audit log", times.len());
    }
    Ok(times)
}

/// Each create of a NAD named `prefix...` logged after byte `from`: its time from arrival to
/// response.
fn audit_times(audit: &std::path::Path, from: u64, prefix: &str) -> Result<Vec<Duration>> {
    let mut file = std::fs::File::open(audit)?;
    file.seek(std::io::SeekFrom::Start(from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut times = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let ours = event["verb"] == "create"
            && event["stage"] == "ResponseComplete"
            && event["objectRef"]["resource"] == "network-attachment-definitions"
            && event["objectRef"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(prefix));
        if !ours {
            continue;
        }
        let at = |key: &str| event[key].as_str().and_then(micros_of_day);
        if let (Some(start), Some(end)) = (at("requestReceivedTimestamp"), at("stageTimestamp")) {
            // Across midnight the day wraps.
            let span = (end + 86_400_000_000 - start) % 86_400_000_000;
            times.push(Duration::from_micros(span));
        }
    }
    Ok(times)
}

/// Microseconds since midnight of an RFC 3339 UTC time (`2026-12-04T04:05:06.123456Z`).
fn micros_of_day(stamp: &str) -> Option<u64> {
    let time = stamp.split_once('T')?.1.trim_end_matches('Z');
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    let digits: String = fraction.chars().chain("000000".chars()).take(6).collect();
    Some(((h * 60 + m) * 60 + s) * 1_000_000 + digits.parse::<u64>().ok()?)
}
