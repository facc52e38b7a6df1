//! whereabouts on the real node: a Deployment on two networks scaled to 0 and back, with the
//! pools matching the pods all along; the reconciler's CronJob, run as a Job with the shipped
//! RBAC, freeing a leaked address and keeping a live pod's; and the controller freeing the
//! address of a pod whose DEL never came; IPAMClaims keeping a VM's address across its pods,
//! 50 at once; and the reference's plugin beside ours on overlapping ranges.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use e2e::{up, Node};
use serde_json::{json, Value};

/// A bridge network `name` whose whereabouts range is `range`.
fn nad(name: &str, range: &str) -> String {
    let ipam = format!(r#"{{"type": "whereabouts", "range": "{range}"}}"#);
    e2e::bridge_nad(name, &format!("br-{name}"), &ipam)
}

fn pod() -> String {
    e2e::sleeping_pod("wb-live", Some("wb"))
}

/// Every IPPool on the node's cluster.
fn pools(node: &Node) -> Result<Vec<Value>> {
    let list: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "ippools.whereabouts.cni.cncf.io",
        "-A",
        "-o",
        "json",
    ])?)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// The pool of `range`: its namespace, name and allocations.
fn pool(node: &Node, range: &str) -> Result<(String, String, serde_json::Map<String, Value>)> {
    let p = pools(node)?
        .into_iter()
        .find(|p| p["spec"]["range"] == range)
        .with_context(|| format!("no pool for {range}"))?;
    Ok((
        p["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        p["spec"]["allocations"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    ))
}

/// One pass of the reconciler, as its CronJob runs it (a Job made from it, with the shipped
/// RBAC), which must complete; its log.
fn reconcile_now(node: &Node) -> Result<String> {
    node.kubectl(&[
        "-n",
        "multus",
        "create",
        "job",
        "reconcile-now",
        "--from=cronjob/whereabouts-reconciler",
    ])?;
    let done = node.kubectl_output(
        &[
            "-n",
            "multus",
            "wait",
            "--for=condition=Complete",
            "job/reconcile-now",
            "--timeout=120s",
        ],
        None,
    )?;
    let logs = node
        .kubectl(&["-n", "multus", "logs", "job/reconcile-now"])
        .unwrap_or_default();
    ensure!(
        done.status.success(),
        "the reconciler Job did not complete: {logs}"
    );
    node.kubectl(&[
        "-n",
        "multus",
        "delete",
        "job",
        "reconcile-now",
        "--wait=true",
    ])?;
    Ok(logs)
}

#[test]
fn the_reconciler_job_frees_a_leaked_address() -> Result<()> {
    let node = up("whereabouts")?;
    node.apply(&nad("wb", "10.21.0.0/24"))?;
    node.apply(&pod())?;
    node.wait_ready("default", "wb-live", Duration::from_secs(120))?;
    let (ns, name, live) = pool(&node, "10.21.0.0/24")?;
    ensure!(live.len() == 1, "allocations {live:?}");

    // A leak: an allocation whose pod is gone, as a node that died before its DEL leaves it.
    let leak = json!({"spec": {"allocations": {"200": {
        "id": "0123456789abcdef", "podref": "default/gone", "ifname": "net1"}}}});
    node.kubectl(&[
        "-n",
        &ns,
        "patch",
        "ippools.whereabouts.cni.cncf.io",
        &name,
        "--type=merge",
        "-p",
        &leak.to_string(),
    ])?;
    ensure!(pool(&node, "10.21.0.0/24")?.2.len() == 2);

    let logs = reconcile_now(&node)?;
    let (_, _, after) = pool(&node, "10.21.0.0/24")?;
    ensure!(
        after.len() == 1 && after.keys().eq(live.keys()),
        "after the reconciler: {after:?} (the live pod's: {live:?}); its log: {logs}"
    );
    node.delete(&pod())?;
    node.eventually("the pool empty", Duration::from_secs(30), || {
        Ok(pool(&node, "10.21.0.0/24")?.2.is_empty())
    })?;
    node.delete(&nad("wb", "10.21.0.0/24"))?;
    Ok(())
}

/// A pod deleted from the API while its node's kubelet is down, as when a node dies: no DEL
/// can come, and the controller frees its address within seconds, not at the daily pass. Once
/// the kubelet is back, its DEL of the sandbox finds the address free and succeeds.
#[test]
fn the_controller_frees_a_pod_whose_del_never_came() -> Result<()> {
    const RANGE: &str = "10.24.0.0/24";
    let node = up("whereabouts")?;
    let nad = nad("wb-orphan", RANGE);
    let pod = e2e::sleeping_pod("wb-orphan", Some("wb-orphan"));
    node.kubectl(&[
        "-n",
        "multus",
        "rollout",
        "status",
        "deployment/whereabouts-controller",
        "--timeout=120s",
    ])?;
    // After the rollout: the controller's own pod is part of what stays.
    let (state, veths) = (node.cni_state()?, node.veths()?.len());
    node.apply(&nad)?;
    node.apply(&pod)?;
    node.wait_ready("default", "wb-orphan", Duration::from_secs(120))?;
    ensure!(pool(&node, RANGE)?.2.len() == 1);

    e2e::cluster(&["stop", "kubelet"])?;
    let freed = node
        .kubectl(&["delete", "pod", "wb-orphan", "--grace-period=0", "--force"])
        .and_then(|_| {
            node.eventually(
                "the address freed with no DEL",
                Duration::from_secs(30),
                || Ok(pool(&node, RANGE)?.2.is_empty()),
            )
        });
    e2e::cluster(&["start", "kubelet"])?;
    // Logs come through the kubelet, which takes a moment to serve again.
    let mut logs = String::new();
    node.eventually("the controller's log", Duration::from_secs(60), || {
        let out = node.kubectl_output(
            &["-n", "multus", "logs", "deployment/whereabouts-controller"],
            None,
        )?;
        logs = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok(out.status.success())
    })?;
    freed.with_context(|| format!("the controller's log:\n{logs}"))?;
    ensure!(
        logs.contains("pod default/wb-orphan was deleted"),
        "the controller's log:\n{logs}"
    );
    node.eventually("the sandbox torn down", Duration::from_secs(90), || {
        Ok(node.veths()?.len() == veths && node.cni_state()? == state)
    })?;
    ensure!(pool(&node, RANGE)?.2.is_empty());
    node.delete(&nad)?;
    Ok(())
}

/// The two networks of the Deployment: its NADs' names and /24 ranges.
const SCALED: [(&str, &str); 2] = [("wb-a", "10.22.0.0/24"), ("wb-b", "10.23.0.0/24")];
const REPLICAS: usize = 30;

fn scaled_nads() -> String {
    SCALED
        .iter()
        .map(|(name, range)| nad(name, range))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn deployment() -> String {
    e2e::sleeping_deployment("wb-scale", REPLICAS, Some("wb-a,wb-b"))
}

/// Per network, the address each allocation holds and the pod it names (`namespace/name`).
type Held = BTreeMap<&'static str, BTreeMap<Ipv4Addr, String>>;

fn held(node: &Node) -> Result<Held> {
    let mut out = Held::new();
    for p in pools(node)? {
        let Some(&(name, range)) = SCALED.iter().find(|(_, r)| p["spec"]["range"] == *r) else {
            continue;
        };
        let base: Ipv4Addr = range.trim_end_matches("/24").parse()?;
        let mut by_ip = BTreeMap::new();
        for (offset, a) in p["spec"]["allocations"].as_object().into_iter().flatten() {
            let ip = Ipv4Addr::from(u32::from(base) + offset.parse::<u32>()?);
            let podref = a["podref"].as_str().context("allocation without podref")?;
            by_ip.insert(ip, podref.to_owned());
        }
        out.insert(name, by_ip);
    }
    Ok(out)
}

/// The Deployment's pods: by `namespace/name`, whether it is being deleted, and per network the
/// address its network-status lists (empty until multus wrote it).
type Pods = BTreeMap<String, (bool, BTreeMap<String, Ipv4Addr>)>;

fn scaled_pods(node: &Node) -> Result<Pods> {
    let mut out = Pods::new();
    for p in node.pods_labelled("wb-scale")? {
        let mut ips = BTreeMap::new();
        for s in &p.networks {
            let Some(net) = s["name"].as_str().and_then(|n| n.strip_prefix("default/")) else {
                continue;
            };
            if let Some(ip) = s["ips"][0].as_str() {
                ips.insert(net.to_owned(), ip.parse()?);
            }
        }
        out.insert(format!("default/{}", p.name), (p.deleting, ips));
    }
    Ok(out)
}

/// One look at the pools against the pods: read the pods, the pools, then the pods again, so an
/// allocation's pod exists in one of the two reads, and a pod that lived through both has its
/// address allocated to it. No address is held twice. Returns how many pods hold both addresses.
fn pools_match_pods(node: &Node) -> Result<usize> {
    let before = scaled_pods(node)?;
    let held = held(node)?;
    let after = scaled_pods(node)?;
    for (net, by_ip) in &held {
        for (ip, podref) in by_ip {
            if !before.contains_key(podref) && !after.contains_key(podref) {
                bail!("{net}: {ip} is held by {podref}, which no longer exists");
            }
        }
    }
    let mut complete = 0;
    for (pod, (deleting, ips)) in &before {
        let lived = matches!(after.get(pod), Some((false, _)));
        if *deleting || !lived {
            continue;
        }
        for (net, ip) in ips {
            let holder = held.get(net.as_str()).and_then(|h| h.get(ip));
            if holder != Some(pod) {
                bail!("{pod} has {ip} on {net}, which its pool gives to {holder:?}");
            }
        }
        complete += usize::from(ips.len() == SCALED.len());
    }
    let mut seen = BTreeSet::new();
    for (pod, (deleting, ips)) in &after {
        for (net, ip) in ips {
            if !deleting && !seen.insert((net.clone(), *ip)) {
                bail!("{ip} on {net} is listed by two pods, {pod} among them");
            }
        }
    }
    Ok(complete)
}

/// Waits until `want` pods hold both addresses and no other pod exists, checking the pools
/// against the pods at every look.
fn settle(node: &Node, want: usize) -> Result<()> {
    let mut last = 0;
    node.eventually(
        &format!("{want} pods with both addresses, matching the pools"),
        Duration::from_secs(300),
        || {
            last = pools_match_pods(node)?;
            let pods = scaled_pods(node)?;
            let held: usize = held(node)?.values().map(BTreeMap::len).sum();
            Ok(last == want && pods.len() == want && held == want * SCALED.len())
        },
    )
    .with_context(|| format!("{last} pods complete"))
}

#[test]
fn a_deployment_scaled_to_zero_and_back_keeps_the_pools_matching() -> Result<()> {
    let node = up("whereabouts")?;
    node.apply(&scaled_nads())?;
    node.apply(&deployment())?;
    settle(&node, REPLICAS)?;

    node.kubectl(&["scale", "deployment/wb-scale", "--replicas=0"])?;
    settle(&node, 0)?;

    node.kubectl(&[
        "scale",
        "deployment/wb-scale",
        &format!("--replicas={REPLICAS}"),
    ])?;
    settle(&node, REPLICAS)?;
    node.delete(&deployment())?;
    settle(&node, 0)?;
    node.delete(&scaled_nads())?;
    Ok(())
}

/// One whereabouts call on the node, exec'd as a runtime execs it: `plugin` with the CNI
/// environment for `pod`'s container `pod-c` (interface net1, in the namespace `wb-mixed`),
/// `conf` on stdin.
fn cni_call(node: &Node, plugin: &Path, command: &str, pod: &str, conf: &Value) -> Command {
    let mut cmd = node.exec_command(&[
        "env",
        &format!("CNI_COMMAND={command}"),
        &format!("CNI_CONTAINERID={pod}-c"),
        "CNI_NETNS=/run/netns/wb-mixed",
        "CNI_IFNAME=net1",
        "CNI_PATH=/opt/cni/bin",
        &format!("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"),
        "sh",
        "-c",
        "printf %s \"$0\" | \"$1\"",
        &conf.to_string(),
        &plugin.display().to_string(),
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn ran(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}, stdout {}, stderr {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The reservations of `prefix`'s addresses: name and podref.
fn reservations(node: &Node, prefix: &str) -> Result<BTreeMap<String, String>> {
    let list: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "overlappingrangeipreservations.whereabouts.cni.cncf.io",
        "-A",
        "-o",
        "json",
    ])?)?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let name = r["metadata"]["name"].as_str()?;
            name.starts_with(prefix).then(|| {
                let podref = r["spec"]["podref"].as_str().unwrap_or_default();
                (name.to_owned(), podref.to_owned())
            })
        })
        .collect())
}

/// A cluster mixing the reference's whereabouts (v0.9.4, its real binary) and ours on two
/// overlapping ranges. The reference checks a reservation under its Lease and creates it
/// later (`sleep_for_race` widens that gap to 3 s); our ADD in the gap waits for the Lease,
/// so both ADDs succeed with different addresses and each address keeps a reservation naming
/// its pod, also after the reference's DEL. Without the Lease, our ADD took the address first,
/// the reference's ADD failed, and its DEL deleted our reservation by name.
#[test]
fn the_reference_and_ours_on_overlapping_ranges_never_share_an_address() -> Result<()> {
    let node = up("whereabouts")?;
    let reference = testkit::peers::build("whereabouts")?.join("whereabouts");
    // The reference as the admin (it makes its Lease on first use); ours as shipped, with the
    // node's flat file naming multus's kubeconfig.
    let admin = e2e::state_dir().join("admin.kubeconfig");
    let theirs_conf = |sleep: u32| {
        json!({"cniVersion": "0.3.1", "name": "wb-mixed-wide", "type": "macvlan",
               "ipam": {"type": "whereabouts", "range": "10.26.0.0/24", "sleep_for_race": sleep,
                        "kubernetes": {"kubeconfig": admin}}})
    };
    let ours_conf = json!({"cniVersion": "1.0.0", "name": "wb-mixed-narrow", "type": "macvlan",
                           "ipam": {"type": "whereabouts", "range": "10.26.0.0/25"}});
    // The pods' namespace: the reference refuses its own.
    node.exec(&["ip", "netns", "add", "wb-mixed"])?;
    let checked = mixed(&node, &reference, &theirs_conf, &ours_conf);
    node.exec(&["ip", "netns", "delete", "wb-mixed"])?;
    checked
}

fn mixed(
    node: &Node,
    reference: &Path,
    theirs_conf: &dyn Fn(u32) -> Value,
    ours_conf: &Value,
) -> Result<()> {
    let ours = Path::new("/opt/cni/bin/whereabouts");
    let lease_holder = || -> Result<String> {
        let out = node.kubectl_output(
            &[
                "-n",
                "kube-system",
                "get",
                "lease",
                "whereabouts",
                "-o",
                "json",
            ],
            None,
        )?;
        let lease: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        Ok(lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    };
    let theirs = cni_call(node, reference, "ADD", "theirs", &theirs_conf(3)).spawn()?;
    node.eventually(
        "the reference holding its Lease",
        Duration::from_secs(60),
        || Ok(lease_holder()? == "default/theirs"),
    )?;
    // The reference is now between its reservation check and its writes.
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let ours_added = cni_call(node, ours, "ADD", "ours", ours_conf).output()?;
    let waited = started.elapsed();
    let theirs_added = theirs.wait_with_output()?;
    let ours_said = ran("our ADD", &ours_added);
    let theirs_said = ran("the reference's ADD", &theirs_added);
    let reserved = reservations(node, "10.26.0.")?;
    // As the runtime does after an ADD, failed or not, the reference's DEL, then ours.
    let theirs_deleted = cni_call(node, reference, "DEL", "theirs", &theirs_conf(0)).output()?;
    let after_their_del = reservations(node, "10.26.0.")?;
    let ours_deleted = cni_call(node, ours, "DEL", "ours", ours_conf).output()?;

    ensure!(
        theirs_added.status.success() && ours_added.status.success(),
        "{theirs_said}\n{ours_said}"
    );
    let address = |out: &Output| -> Result<String> {
        let result: Value = serde_json::from_slice(&out.stdout)?;
        Ok(result["ips"][0]["address"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    };
    ensure!(
        address(&theirs_added)? == "10.26.0.1/24" && address(&ours_added)? == "10.26.0.2/25",
        "{theirs_said}\n{ours_said}"
    );
    ensure!(
        waited >= Duration::from_secs(1),
        "our ADD took {waited:?}: it did not wait for the reference's Lease"
    );
    let expected: BTreeMap<String, String> = [
        ("10.26.0.1".to_owned(), "default/theirs".to_owned()),
        ("10.26.0.2".to_owned(), "default/ours".to_owned()),
    ]
    .into();
    ensure!(
        reserved == expected,
        "reservations after both ADDs: {reserved:?}"
    );
    ensure!(
        after_their_del == BTreeMap::from([("10.26.0.2".to_owned(), "default/ours".to_owned())]),
        "reservations after the reference's DEL: {after_their_del:?}"
    );
    ensure!(
        theirs_deleted.status.success() && ours_deleted.status.success(),
        "{}\n{}",
        ran("the reference's DEL", &theirs_deleted),
        ran("our DEL", &ours_deleted)
    );
    ensure!(reservations(node, "10.26.0.")?.is_empty());
    for range in ["10.26.0.0/24", "10.26.0.0/25"] {
        ensure!(pool(node, range)?.2.is_empty(), "pool {range} not emptied");
    }
    ensure!(
        lease_holder()?.is_empty(),
        "the Lease is still held by {}",
        lease_holder()?
    );
    Ok(())
}

const CLAIMED_RANGE: &str = "10.25.0.0/24";
const CLAIMS: usize = 50;

/// IPAMClaim `name` in `default`, for net1 on `wb-claim`.
fn claim(name: &str) -> String {
    format!(
        r#"
apiVersion: k8s.cni.cncf.io/v1alpha1
kind: IPAMClaim
metadata:
  name: {name}
  namespace: default
spec:
  network: wb-claim
  interface: net1
"#
    )
}

/// A "VM" pod `name` whose net1 on `wb-claim` is claim `claim`'s.
fn claimed_pod(name: &str, claim: &str) -> String {
    let networks =
        format!(r#"[{{"name":"wb-claim","interface":"net1","ipam-claim-reference":"{claim}"}}]"#);
    e2e::sleeping_pod(name, Some(&networks))
}

/// The claim's status: its addresses and its owner pod's name.
fn claim_status(node: &Node, name: &str) -> Result<(Vec<String>, String)> {
    let c = node.get("default", &format!("ipamclaims.k8s.cni.cncf.io/{name}"))?;
    let ips = c["status"]["ips"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let owner = c["status"]["ownerPod"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok((ips, owner))
}

/// A VM's pod deleted and made again, under its name and under another, gets its claim's
/// address back, with the claim's status naming it; a reconciler pass while no pod holds it
/// frees nothing. 50 claims at once get 50 addresses, each its claim's; the reconciler keeps
/// them all once their pods are gone, and deleting the claims frees them (the controller
/// watches claims).
#[test]
fn claimed_addresses_outlive_their_pods_until_the_claims_go() -> Result<()> {
    let node = up("whereabouts")?;
    let nad = nad("wb-claim", CLAIMED_RANGE);
    node.apply(&nad)?;
    node.apply(&claim("vm1"))?;
    let mut first = None;
    for pod in ["virt-launcher-a", "virt-launcher-a", "virt-launcher-b"] {
        node.apply(&claimed_pod(pod, "vm1"))?;
        node.wait_ready("default", pod, Duration::from_secs(120))?;
        let ip = node.ipv4(pod, "net1")?;
        let first = first.get_or_insert_with(|| ip.clone());
        ensure!(ip == *first, "{pod} got {ip}, the claim's is {first}");
        let (ips, owner) = claim_status(&node, "vm1")?;
        ensure!(
            ips == [format!("{ip}/24")] && owner == pod,
            "the claim's status: {ips:?}, {owner}"
        );
        node.delete(&claimed_pod(pod, "vm1"))?;
        if pod == "virt-launcher-a" {
            // No pod holds the claim's address now: a pass keeps it.
            let logs = reconcile_now(&node)?;
            ensure!(pool(&node, CLAIMED_RANGE)?.2.len() == 1, "{logs}");
        }
    }

    // 50 claims and their pods at once.
    let names: Vec<String> = (0..CLAIMS).map(|i| format!("vm-{i}")).collect();
    let all = |f: &dyn Fn(&str) -> String| -> String {
        names.iter().map(|n| f(n)).collect::<Vec<_>>().join("---\n")
    };
    let claims = all(&|n| claim(n));
    let pods = all(&|n| claimed_pod(&format!("launcher-{n}"), n));
    node.apply(&claims)?;
    node.apply(&pods)?;
    let mut held = BTreeSet::new();
    for n in &names {
        let pod = format!("launcher-{n}");
        node.wait_ready("default", &pod, Duration::from_secs(180))?;
        let ip = node.ipv4(&pod, "net1")?;
        let (ips, owner) = claim_status(&node, n)?;
        ensure!(
            ips == [format!("{ip}/24")] && owner == pod,
            "{n}: {pod} has {ip}, the claim's status {ips:?} {owner}"
        );
        held.insert(ip);
    }
    ensure!(held.len() == CLAIMS, "{} distinct addresses", held.len());
    node.delete(&pods)?;
    let logs = reconcile_now(&node)?;
    let kept = pool(&node, CLAIMED_RANGE)?.2.len();
    ensure!(
        kept == CLAIMS + 1,
        "{kept} addresses kept after a pass: {logs}"
    );

    node.delete(&claims)?;
    node.delete(&claim("vm1"))?;
    node.eventually(
        "the claims' addresses freed",
        Duration::from_secs(60),
        || Ok(pool(&node, CLAIMED_RANGE)?.2.is_empty()),
    )?;
    node.delete(&nad)?;
    Ok(())
}
