//! `multus doctor` on the real node: with multus's own credential on a thin node, with the
//! admin's to list the node's pods, and in thick mode's daemon pod. A pod that asks for a
//! network it does not have is found, named, and no longer found once it is made again.

use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::Value;

const NODE: &str = "multus-rs-node";

fn nad() -> String {
    e2e::bridge_nad(
        "checked",
        "br-doctor",
        r#"{"type": "host-local", "subnet": "10.36.0.0/24", "dataDir": "/var/lib/cni/e2e-doctor"}"#,
    )
}

/// The doctor's exit status and JSON report.
fn report(out: Output) -> Result<(i32, Value)> {
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "the doctor printed {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((out.status.code().context("an exit status")?, report))
}

/// The doctor run on the node, as an admin runs it there.
fn on_node(node: &Node, extra: &[&str]) -> Result<(i32, Value)> {
    let mut args = vec![
        "/opt/cni/bin/multus",
        "doctor",
        "--output",
        "json",
        "--node",
        NODE,
    ];
    args.extend_from_slice(extra);
    report(node.exec_command(&args).output()?)
}

/// Whether the report has a finding of `check` with `severity` whose problem says `words`.
fn has(report: &Value, check: &str, severity: &str, words: &str) -> bool {
    report["findings"].as_array().is_some_and(|f| {
        f.iter().any(|f| {
            f["check"] == check
                && f["severity"] == severity
                && f["problem"].as_str().is_some_and(|p| p.contains(words))
        })
    })
}

macro_rules! ensure_finding {
    ($report:expr, $check:expr, $severity:expr, $words:expr) => {
        ensure!(
            has(&$report, $check, $severity, $words),
            "no {} [{}] saying {:?} in {:#}",
            $severity,
            $check,
            $words,
            $report
        )
    };
}

/// Thin mode: the doctor, and the installer on its own, find a running pod that asks for a
/// network it never got.
#[test]
fn the_doctor_on_a_thin_node_finds_a_pod_missing_its_network() -> Result<()> {
    let node = up("thin")?;
    // The installer looks every 5 s rather than 30, so that the test waits less (the next `up`
    // installs the shipped DaemonSet again).
    node.kubectl(&[
        "-n",
        "multus",
        "patch",
        "ds",
        "multus",
        "--type=json",
        "-p",
        r#"[{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
             "value": "--missing-networks-check-seconds=5"}]"#,
    ])?;
    node.multus_rolled_out()?;
    let with = e2e::sleeping_pod("doctor-with", Some("checked"));
    let without = e2e::sleeping_pod("doctor-without", None);
    node.apply(&nad())?;
    node.apply(&format!("{with}---\n{without}"))?;
    for pod in ["doctor-with", "doctor-without"] {
        node.wait_ready("default", pod, Duration::from_secs(120))?;
    }
    // A running pod that asks, afterwards, for a network it never got: as a pod started
    // while multus's config was not in place.
    node.kubectl(&[
        "annotate",
        "pod",
        "doctor-without",
        "k8s.v1.cni.cncf.io/networks=checked",
    ])?;

    // multus's own credential, as the runtime-run multus uses it.
    let (status, own) = on_node(&node, &[])?;
    ensure_finding!(own, "runtime-config", "ok", "multus (thin mode)");
    ensure_finding!(
        own,
        "cluster-network",
        "ok",
        "cluster (CNI 1.0.0): bridge, host-local, portmap"
    );
    ensure_finding!(own, "binary", "ok", "multus: speaks CNI 1.1.0");
    ensure_finding!(
        own,
        "credential",
        "ok",
        "a token of system:serviceaccount:multus:multus, bound to node multus-rs-node, expires in"
    );
    ensure_finding!(own, "api", "ok", "the API server answers the credential");
    ensure_finding!(own, "rbac", "ok", "multus may do all it needs");
    ensure_finding!(
        own,
        "missing-networks",
        "error",
        "runs without default/checked"
    );
    ensure!(status == 2, "exit {status}: {own:#}");

    let admin = e2e::state_dir().join("admin.kubeconfig");
    let admin = admin.to_string_lossy();
    let (status, seen) = on_node(&node, &["--kubeconfig", &admin])?;
    ensure!(status == 2, "exit {status}: {seen:#}");
    // The admin's rights say nothing of multus's; the credential said is still multus's.
    ensure_finding!(seen, "rbac", "note", "multus's rights are not checked");
    ensure_finding!(
        seen,
        "credential",
        "ok",
        "system:serviceaccount:multus:multus"
    );
    let missing: Vec<&Value> = seen["findings"]
        .as_array()
        .context("findings")?
        .iter()
        .filter(|f| f["check"] == "missing-networks" && f["severity"] == "error")
        .collect();
    ensure!(
        missing.len() == 1
            && missing[0]["object"] == "default/doctor-without"
            && missing[0]["problem"]
                .as_str()
                .is_some_and(|p| p.contains("runs without default/checked")),
        "{missing:?}"
    );

    // The installer found it too, at two looks in a row: one event, one line in its log.
    let mut said = Vec::new();
    node.eventually(
        "the installer's MissingNetworks event",
        Duration::from_secs(90),
        || {
            said = node.events("default", "doctor-without", "MissingNetworks")?;
            Ok(!said.is_empty())
        },
    )?;
    ensure!(
        said.len() == 1 && said[0].starts_with("the pod runs without default/checked"),
        "{said:?}"
    );
    let log = node.kubectl(&["-n", "multus", "logs", "ds/multus"])?;
    ensure!(
        log.contains("pod default/doctor-without: the pod runs without default/checked"),
        "{log}"
    );

    // Made again, the pod has its network, and the doctor finds nothing.
    node.delete(&without)?;
    node.apply(&e2e::sleeping_pod("doctor-without", Some("checked")))?;
    node.wait_ready("default", "doctor-without", Duration::from_secs(120))?;
    let (_, again) = on_node(&node, &["--kubeconfig", &admin])?;
    ensure_finding!(again, "missing-networks", "ok", "each has them");

    node.delete(&format!(
        "{with}---\n{}",
        e2e::sleeping_pod("doctor-without", Some("checked"))
    ))?;
    node.delete(&nad())?;
    Ok(())
}

#[test]
fn the_doctor_in_thick_modes_daemon_pod_sees_the_node_and_its_pods() -> Result<()> {
    let node = up("thick")?;
    let pod = e2e::sleeping_pod("doctor-thick", Some("checked"));
    node.apply(&nad())?;
    node.apply(&pod)?;
    node.wait_ready("default", "doctor-thick", Duration::from_secs(120))?;
    let out = node.kubectl_output(
        &[
            "-n",
            "multus",
            "exec",
            "ds/multus",
            "-c",
            "multus-daemon",
            "--",
            "/usr/bin/multus",
            "doctor",
            "--host-root",
            "/hostroot",
            "--output",
            "json",
        ],
        None,
    )?;
    let (status, seen) = report(out)?;
    ensure_finding!(seen, "runtime-config", "ok", "multus-shim (thick mode)");
    ensure_finding!(
        seen,
        "daemon",
        "ok",
        "the multus daemon answers, and its caches are filled"
    );
    ensure_finding!(seen, "credential", "ok", "bound to node multus-rs-node");
    ensure_finding!(seen, "rbac", "ok", "multus may do all it needs");
    ensure_finding!(seen, "missing-networks", "ok", "each has them");
    ensure!(status <= 1, "{seen:#}");
    node.delete(&pod)?;
    node.delete(&nad())?;
    Ok(())
}
