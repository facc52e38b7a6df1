//! Every deploy/ tree on the real node: it installs, its accounts may do exactly what
//! docs/security.md lists and nothing else (no secrets, no cluster-admin), pods attach through
//! it, and deleting them leaves nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::Value;

/// The trees in the order the test installs them, with cluster.sh's mode and the namespace.
/// (deploy/per-node-certificate/thick's accounts are checked by the `certificates` case, on
/// the node it installs anyway.)
const TREES: [(&str, &str, &str); 4] = [
    ("base", "thin", "multus"),
    ("thick", "thick", "multus"),
    ("whereabouts", "whereabouts", "multus"),
    ("microshift", "microshift", "openshift-multus"),
];

/// One account's rules as `kubectl auth can-i --list` prints them: `resource[names]: verbs`,
/// and `url: verbs` for non-resource URLs.
fn can_i(node: &Node, namespace: &str, account: &str) -> Result<BTreeSet<String>> {
    let user = format!("--as=system:serviceaccount:{namespace}:{account}");
    let out = node.kubectl(&["auth", "can-i", "--list", &user, "-n", namespace])?;
    let mut rules = BTreeSet::new();
    for line in out.lines().skip(1) {
        let resource = if line.starts_with(' ') {
            ""
        } else {
            line.split_whitespace().next().unwrap_or("")
        };
        // The bracketed columns: non-resource URLs, resource names, verbs.
        let groups: Vec<&str> = line
            .split('[')
            .skip(1)
            .filter_map(|g| g.split(']').next())
            .collect();
        let [urls, names, verbs] = groups.as_slice() else {
            anyhow::bail!("can-i line {line:?}");
        };
        let mut verbs: Vec<&str> = verbs.split_whitespace().collect();
        verbs.sort_unstable();
        let what = if resource.is_empty() {
            (*urls).to_owned()
        } else if names.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}[{names}]")
        };
        rules.insert(format!("{what}: {}", verbs.join(" ")));
    }
    Ok(rules)
}

/// docs/security.md's table of what each account of a tree may do, beyond what every
/// authenticated account may.
fn documented(tree: &str) -> Result<Vec<(String, BTreeSet<String>)>> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/security.md"
    ))?;
    let prefix = format!("| {tree} | ");
    let mut accounts = Vec::new();
    for row in doc.lines().filter(|l| l.starts_with(&prefix)) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let [_, _, account, may, _] = cells.as_slice() else {
            anyhow::bail!("docs/security.md row {row:?}");
        };
        let rules = may
            .split(';')
            .map(|r| r.trim().trim_matches('`').to_owned())
            .filter(|r| !r.is_empty() && r != "nothing")
            .collect();
        accounts.push((account.trim_matches('`').to_owned(), rules));
    }
    ensure!(
        !accounts.is_empty(),
        "docs/security.md lists no account of {tree}"
    );
    Ok(accounts)
}

pub(crate) fn rbac_is_what_the_docs_list(node: &Node, tree: &str, namespace: &str) -> Result<()> {
    // dhcp-daemon has no role in any tree: what it may do, every account may.
    let everyone = can_i(node, namespace, "dhcp-daemon")?;
    for (account, expected) in documented(tree)? {
        let all = can_i(node, namespace, &account)?;
        let granted: BTreeSet<String> = all.difference(&everyone).cloned().collect();
        ensure!(
            granted == expected,
            "{tree}: {namespace}:{account} may {granted:?}; docs/security.md lists {expected:?}"
        );
        for verb in ["get", "list", "watch"] {
            let answer = node.kubectl_output(
                &[
                    "auth",
                    "can-i",
                    verb,
                    "secrets",
                    "-A",
                    &format!("--as=system:serviceaccount:{namespace}:{account}"),
                ],
                None,
            )?;
            let said = String::from_utf8_lossy(&answer.stdout);
            // "no", with the reason on MicroShift's tree: its SCC role is absent here.
            ensure!(
                said.trim() == "no" || said.starts_with("no - "),
                "{tree}: {account} can {verb} secrets: {said}"
            );
        }
    }
    // No binding of the install names a built-in all-powerful role.
    let bindings = node.kubectl(&[
        "get",
        "clusterrolebindings,rolebindings",
        "-A",
        "-l",
        "app.kubernetes.io/part-of=multus-rs",
        "-o",
        "json",
    ])?;
    let bindings: Value = serde_json::from_str(&bindings)?;
    for b in bindings["items"].as_array().into_iter().flatten() {
        let role = b["roleRef"]["name"].as_str().unwrap_or_default();
        ensure!(
            !["cluster-admin", "admin", "edit"].contains(&role),
            "{tree}: {} binds {role}",
            b["metadata"]["name"]
        );
    }
    Ok(())
}

fn nad(tree: &str) -> String {
    let ipam = if tree == "whereabouts" {
        r#"{"type": "whereabouts", "range": "10.20.0.0/24"}"#
    } else {
        r#"{"type": "host-local", "subnet": "10.20.0.0/24", "dataDir": "/var/lib/cni/e2e"}"#
    };
    e2e::bridge_nad("e2e-bridge", "br-e2e", ipam)
}

fn pods(n: usize) -> String {
    (0..n)
        .map(|i| e2e::sleeping_pod(&format!("e2e-{i}"), Some("e2e-bridge")))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The addresses whereabouts holds in its pools, over all of them.
fn allocations(node: &Node) -> Result<usize> {
    let pools = node.kubectl(&["get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "json"])?;
    let pools: Value = serde_json::from_str(&pools)?;
    Ok(pools["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["spec"]["allocations"].as_object().map_or(0, |a| a.len()))
        .sum())
}

fn attach_and_delete(node: &Node, tree: &str) -> Result<()> {
    let veths = node.veths()?.len();
    let state = node.cni_state()?;
    node.apply(&nad(tree))?;
    node.apply(&pods(3))?;
    let mut addresses = BTreeSet::new();
    for i in 0..3 {
        let name = format!("e2e-{i}");
        node.wait_ready("default", &name, Duration::from_secs(120))
            .with_context(|| format!("tree {tree}"))?;
        let ip = node
            .ipv4(&name, "net1")
            .with_context(|| format!("tree {tree}"))?;
        ensure!(ip.starts_with("10.20.0."), "{tree}: {name} net1 {ip}");
        addresses.insert(ip.to_owned());
    }
    ensure!(addresses.len() == 3, "{tree}: addresses {addresses:?}");
    if tree == "whereabouts" {
        ensure!(
            allocations(node)? == 3,
            "{tree}: the pools hold {}",
            allocations(node)?
        );
    }
    let runtime_log = e2e::state_dir().join("logs/containerd.log");
    let log_before = std::fs::metadata(&runtime_log).map_or(0, |m| m.len());
    node.delete(&pods(3))?;
    let deleted = Instant::now();
    node.eventually("the pods' veths gone", Duration::from_secs(60), || {
        Ok(node.veths()?.len() == veths)
    })?;
    // A DEL that fails is retried by the kubelet, a minute later or more: the state may go
    // late, and the runtime's log says why.
    let gone = node.eventually("no CNI state left", Duration::from_secs(150), || {
        Ok(node.cni_state()? == state)
    });
    let why = || teardown_errors(&runtime_log, log_before);
    gone.with_context(|| format!("{tree}: left {:?}; {}", node.cni_state(), why()))?;
    if deleted.elapsed() > Duration::from_secs(30) {
        eprintln!(
            "deploy_trees: {tree}: the pods' CNI state went {:.0} s after their deletion; {}",
            deleted.elapsed().as_secs_f64(),
            why()
        );
    }
    if tree == "whereabouts" {
        ensure!(
            allocations(node)? == 0,
            "{tree}: the pools still hold addresses"
        );
    }
    node.delete(&nad(tree))?;
    Ok(())
}

/// The runtime's errors about networks since byte `from` of its log `log`, for a test's message.
fn teardown_errors(log: &std::path::Path, from: u64) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let start = usize::try_from(from).unwrap_or(usize::MAX);
    let since = String::from_utf8_lossy(text.get(start..).unwrap_or_default());
    let errors: Vec<&str> = since
        .lines()
        .filter(|l| l.contains("level=error") && l.contains("network"))
        .collect();
    if errors.is_empty() {
        return format!("{} logged no network error", log.display());
    }
    format!("{} logged:\n{}", log.display(), errors.join("\n"))
}

#[test]
fn every_tree_installs_attaches_and_leaves_nothing() -> Result<()> {
    for (tree, mode, namespace) in TREES {
        let node = up(mode)?;
        rbac_is_what_the_docs_list(&node, tree, namespace)?;
        attach_and_delete(&node, tree).with_context(|| format!("tree {tree}"))?;
    }
    Ok(())
}

/// A PATCH of `namespace/pod`'s status with multus's own credential on the node (thin mode's
/// token and CA, as `multus install` copied them), as multus writes network-status: the
/// reply's status code, and its message when refused.
fn patch_status_as_multus(node: &Node, namespace: &str, pod: &str) -> Result<(u16, String)> {
    as_multus(node, "PATCH", &format!("{namespace}/pods/{pod}/status"))
}

/// A request as multus's credential on the node (the token `multus install` copied there)
/// on `/api/v1/namespaces/<path>` (see [`Node::api_as`]).
fn as_multus(node: &Node, method: &str, path: &str) -> Result<(u16, String)> {
    node.api_as(
        r#"-H "Authorization: Bearer $(cat /etc/cni/net.d/multus.d/token)""#,
        method,
        path,
    )
}

/// Runs `body` with a ready pod `here` on this node and a pod `elsewhere` bound to another
/// Node, `multus-rs-other`, which no kubelet runs; removes the three whatever happens.
pub(crate) fn on_two_nodes<T>(node: &Node, body: impl FnOnce() -> Result<T>) -> Result<T> {
    let other = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "multus-rs-other"}}"#;
    let elsewhere = e2e::sleeping_pod("elsewhere", None)
        .replace("spec:\n", "spec:\n  nodeName: multus-rs-other\n");
    let here = e2e::sleeping_pod("here", None);
    node.apply(other)?;
    node.apply(&elsewhere)?;
    node.apply(&here)?;
    let result = node
        .wait_ready("default", "here", Duration::from_secs(120))
        .and_then(|()| body());
    // No kubelet runs the other node's pod: only a forced delete removes it.
    node.kubectl(&["delete", "pod", "elsewhere", "--force", "--grace-period=0"])?;
    node.kubectl(&["delete", "node", "multus-rs-other"])?;
    node.delete(&here)?;
    result
}

/// A reply of 403 from deploy/'s node-scope policy.
pub(crate) fn refused_by_node_scope(reply: &(u16, String)) -> bool {
    reply.0 == 403
        && reply
            .1
            .contains("ValidatingAdmissionPolicy 'multus-own-node-pods'")
}

/// deploy/'s ValidatingAdmissionPolicy: multus's credential, issued to its DaemonSet pod on
/// this node, may write the status of this node's pods and not of a pod on another node, which
/// RBAC alone would allow.
#[test]
fn a_nodes_multus_writes_only_its_own_nodes_pods() -> Result<()> {
    let node = up("thin")?;
    let veths = node.veths()?.len();
    let (on_this_node, on_another, delete_another, delete_here) = on_two_nodes(&node, || {
        let on_this_node = patch_status_as_multus(&node, "default", "here")?;
        let on_another = patch_status_as_multus(&node, "default", "elsewhere")?;
        // Granted `delete` on pods (thick mode's deletePodsMissingNetworks), it may delete
        // the other node's pod no more than write its status.
        let grant = r#"[{"op": "add", "path": "/rules/-", "value":
                         {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}}]"#;
        node.kubectl(&["patch", "clusterrole", "multus", "--type=json", "-p", grant])?;
        let mut delete_another = (0, String::new());
        node.eventually("the grant in force", Duration::from_secs(30), || {
            delete_another = as_multus(&node, "DELETE", "default/pods/elsewhere")?;
            Ok(delete_another.0 != 403 || delete_another.1.contains("ValidatingAdmissionPolicy"))
        })?;
        // ... and its own node's pod it may (a dry run: the pod stays).
        let delete_here = as_multus(&node, "DELETE", "default/pods/here?dryRun=All")?;
        let revoke = r#"[{"op": "remove", "path": "/rules/4"}]"#;
        node.kubectl(&[
            "patch",
            "clusterrole",
            "multus",
            "--type=json",
            "-p",
            revoke,
        ])?;
        Ok((on_this_node, on_another, delete_another, delete_here))
    })?;
    node.eventually("the pod's veth gone", Duration::from_secs(60), || {
        Ok(node.veths()?.len() == veths)
    })?;
    ensure!(on_this_node.0 == 200, "this node's pod: {on_this_node:?}");
    ensure!(
        refused_by_node_scope(&on_another),
        "another node's pod: {on_another:?}"
    );
    ensure!(
        refused_by_node_scope(&delete_another),
        "another node's pod deleted: {delete_another:?}"
    );
    ensure!(
        delete_here.0 == 200,
        "this node's pod deleted: {delete_here:?}"
    );
    Ok(())
}
