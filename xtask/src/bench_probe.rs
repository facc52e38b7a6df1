//! `cargo xtask bench-probe`: what `conflictProbe` costs a macvlan ADD. Our macvlan with static
//! IPAM on a veth master whose far end is a LAN host in a namespace of its own, in one run,
//! alternating: ADD / DEL without the probe; with the probe (100 ms) for a free address; and
//! with the probe for the address the LAN host holds (the ADD fails). Medians and p90 of the
//! ADDs, fork to exit.

use anyhow::{ensure, Context, Result};
use testkit::{CniCall, Netns, PluginDir};

use crate::measure;

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"probe","type":"macvlan","master":"up0"PROBE,
 "ipam":{"type":"static","addresses":[{"address":"ADDRESS/24","gateway":"10.96.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}}"#;
const FREE: &str = "10.96.0.5";
/// The LAN host's address.
const TAKEN: &str = "10.96.0.9";

pub fn run(args: &[String]) -> Result<()> {
    let cycles: usize = match args {
        [flag, n] if flag == "--cycles" => n.parse().context("--cycles N")?,
        _ => 50,
    };
    let bin = crate::build_release()?;
    let plugins = PluginDir::new(&bin, &["macvlan", "static"]);
    let node = Netns::new("probe-node");
    let lan = Netns::new("probe-lan");
    let pod = Netns::new("probe-pod");
    node.ip(&["link", "add", "up0", "type", "veth", "peer", "name", "up0p"]);
    node.ip(&["link", "set", "up0p", "netns", lan.name()]);
    node.ip(&["link", "set", "up0", "up"]);
    lan.ip(&["link", "set", "up0p", "up"]);
    lan.ip(&["addr", "add", &format!("{TAKEN}/24"), "dev", "up0p"]);

    let call = |command: &str, probe: &str, address: &str| {
        let conf = CONF.replace("PROBE", probe).replace("ADDRESS", address);
        let mut call = CniCall::new(command, &conf);
        call.container_id = "probe".into();
        call.netns = pod.path().display().to_string();
        call.path = plugins.path().display().to_string();
        call
    };
    let macvlan = plugins.path().join("macvlan");
    let probe = r#","conflictProbe":true"#;
    let cases = [
        ("without the probe", "", FREE),
        ("probe, address free", probe, FREE),
        ("probe, address taken (fails)", probe, TAKEN),
    ];
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..cycles {
        for (i, (label, probe, address)) in cases.iter().enumerate() {
            let add = measure::run(&macvlan, &call("ADD", probe, address), &node)?;
            let refused = *address == TAKEN;
            ensure!(
                add.status.success() != refused,
                "{label}: ADD {}: {}",
                if refused { "succeeded" } else { "failed" },
                add.stdout
            );
            times[i].push(add.elapsed);
            let del = measure::run(&macvlan, &call("DEL", probe, address), &node)?;
            ensure!(del.status.success(), "{label}: DEL failed: {}", del.stdout);
        }
    }
    println!("macvlan+static ADD, {cycles} cycles each, alternating (fork to exit):\n");
    println!("| case | median (ms) | p90 (ms) |");
    println!("|---|---|---|");
    let mut medians = Vec::new();
    for ((label, _, _), t) in cases.iter().zip(&mut times) {
        let (p50, p90) = measure::percentiles(t);
        medians.push(p50);
        println!("| {label} | {p50:.2} | {p90:.2} |");
    }
    println!(
        "\nthe probe adds {:.2} ms to an ADD whose address is free (its wait is 100 ms)",
        medians[1] - medians[0]
    );
    Ok(())
}
