//! Per-node certificates on the real node (deploy/per-node-certificate/thick): the daemon
//! asks for its node's certificate with the kubelet's credential, the approver approves it and
//! the controller manager signs it (for 1 minute on this cluster); the daemon renews it before
//! it expires and pods keep attaching; the certificate may touch only its own node's pods; and
//! a node asking for another node's identity is denied.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use e2e::{up, Node};
use serde_json::Value;

const CURRENT: &str = "/var/lib/multus/certs/multus-client-current.pem";
/// Where a test keeps the certificate it watches expire.
const FIRST: &str = "/run/e2e-first-certificate.pem";

/// Waits for the certificate in `file` (on the node) to expire: a minute at most here.
fn until_expired(node: &Node, file: &str) -> Result<()> {
    node.eventually("the certificate expired", Duration::from_secs(90), || {
        let check = format!("openssl x509 -checkend 0 -noout -in {file} || echo expired");
        Ok(node.exec(&["sh", "-c", &check])?.contains("expired"))
    })
}

/// A request to `/api/v1/namespaces/<path>` as the node's certificate (see [`Node::api_as`]).
fn as_certificate(node: &Node, method: &str, path: &str) -> Result<(u16, String)> {
    node.api_as(&format!("--cert {CURRENT} --key {CURRENT}"), method, path)
}

/// A pod with a bridge network, ready: its address on that network. The pod and the NAD are
/// deleted whatever happens.
fn attach_one(node: &Node, pod: &str) -> Result<String> {
    let nad = e2e::bridge_nad(
        "e2e-bridge",
        "br-e2e",
        r#"{"type": "host-local", "subnet": "10.20.0.0/24", "dataDir": "/var/lib/cni/e2e"}"#,
    );
    let pod_yaml = e2e::sleeping_pod(pod, Some("e2e-bridge"));
    node.apply(&nad)?;
    node.apply(&pod_yaml)?;
    let ready = node.wait_ready("default", pod, Duration::from_secs(120));
    let ip = node.ipv4(pod, "net1");
    node.delete(&pod_yaml)?;
    node.delete(&nad)?;
    ready?;
    let ip = ip?;
    ensure!(ip.starts_with("10.20.0."), "{pod}: net1 {ip}");
    Ok(ip)
}

/// The serial number of the node's current certificate.
fn serial(node: &Node) -> Result<String> {
    Ok(node
        .exec(&["openssl", "x509", "-noout", "-serial", "-in", CURRENT])?
        .trim()
        .to_owned())
}

/// The certificate signing requests of the cluster.
fn requests(node: &Node) -> Result<Vec<Value>> {
    let list: Value = serde_json::from_str(&node.kubectl(&["get", "csr", "-o", "json"])?)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn condition<'a>(csr: &'a Value, kind: &str) -> Option<&'a Value> {
    csr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[test]
fn thick_mode_talks_as_its_nodes_certificate_renews_it_and_keeps_to_its_node() -> Result<()> {
    let node = up("thick-per-node-certificate")?;
    crate::deploy_trees::rbac_is_what_the_docs_list(&node, "per-node-certificate/thick", "multus")?;
    let daemon_log = node.daemon_log()?;
    ensure!(
        daemon_log.contains("talking to the API server as system:multus:multus-rs-node"),
        "the daemon's log: {daemon_log}"
    );
    // The node asked, with the kubelet's credential, and the approver approved.
    let by_the_node: Vec<Value> = requests(&node)?
        .into_iter()
        .filter(|c| c["spec"]["username"] == "system:node:multus-rs-node")
        .collect();
    ensure!(
        by_the_node.iter().any(|c| {
            condition(c, "Approved").is_some_and(|a| a["reason"] == "MultusNodeCertificate")
                && c["status"]["certificate"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
        }),
        "no approved and signed request by the node: {by_the_node:?}"
    );

    // Another node's identity, asked for as this node: denied, saying why.
    let request = node.exec(&[
        "sh",
        "-c",
        "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
         -keyout /dev/null -subj '/O=system:multus/CN=system:multus:elsewhere' 2>/dev/null \
         | base64 -w0",
    ])?;
    let forged = format!(
        r#"{{"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
             "metadata": {{"name": "e2e-elsewhere"}},
             "spec": {{"request": "{}", "signerName": "kubernetes.io/kube-apiserver-client",
                       "usages": ["digital signature", "client auth"], "expirationSeconds": 600}}}}"#,
        request.trim()
    );
    let created = node
        .exec_command(&[
            "kubectl",
            "--kubeconfig",
            "/etc/kubernetes/kubelet.conf",
            "create",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .context("stdin")
                .map_err(std::io::Error::other)?
                .write_all(forged.as_bytes())?;
            child.wait_with_output()
        })?;
    ensure!(
        created.status.success(),
        "the node's request: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let mut denied = Value::Null;
    node.eventually("the forged request denied", Duration::from_secs(30), || {
        let csr: Value =
            serde_json::from_str(&node.kubectl(&["get", "csr", "e2e-elsewhere", "-o", "json"])?)?;
        denied = condition(&csr, "Denied").cloned().unwrap_or_default();
        Ok(!denied.is_null())
    })?;
    node.kubectl(&["delete", "csr", "e2e-elsewhere"])?;
    ensure!(
        denied["reason"] == "OtherNode"
            && denied["message"]
                .as_str()
                .is_some_and(|m| m.contains("system:multus:multus-rs-node")),
        "the forged request: {denied}"
    );

    // The approver's account may approve no request a node did not make, whatever its code
    // does: someone else's request, approved as that account, is refused by its policy.
    let someone = node.exec(&[
        "sh",
        "-c",
        "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
         -keyout /dev/null -subj '/O=ops/CN=someone' 2>/dev/null | base64 -w0",
    ])?;
    node.apply(&format!(
        r#"{{"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
             "metadata": {{"name": "e2e-someone"}},
             "spec": {{"request": "{}", "signerName": "kubernetes.io/kube-apiserver-client",
                       "usages": ["digital signature", "client auth"], "expirationSeconds": 600}}}}"#,
        someone.trim()
    ))?;
    let approved = node.kubectl_output(
        &[
            "certificate",
            "approve",
            "e2e-someone",
            "--as=system:serviceaccount:multus:multus-certificate-approver",
        ],
        None,
    )?;
    node.kubectl(&["delete", "csr", "e2e-someone"])?;
    let said = String::from_utf8_lossy(&approved.stderr);
    ensure!(
        !approved.status.success()
            && said.contains("ValidatingAdmissionPolicy 'multus-certificate-approver'"),
        "someone's request approved as the approver: {said}"
    );

    // Held to its node: a status write of a pod bound to another node is refused by the
    // node-scope policy; of this node's, allowed.
    let (on_this_node, on_another) = crate::deploy_trees::on_two_nodes(&node, || {
        Ok((
            as_certificate(&node, "PATCH", "default/pods/here/status")?,
            as_certificate(&node, "PATCH", "default/pods/elsewhere/status")?,
        ))
    })?;
    ensure!(on_this_node.0 == 200, "this node's pod: {on_this_node:?}");
    ensure!(
        crate::deploy_trees::refused_by_node_scope(&on_another),
        "another node's pod: {on_another:?}"
    );

    // Renewed before it ends, and pods attach after the first one has expired.
    let first = serial(&node)?;
    node.exec(&["cp", CURRENT, FIRST])?;
    node.eventually("a renewed certificate", Duration::from_secs(90), || {
        Ok(serial(&node)? != first)
    })?;
    let began = Instant::now();
    until_expired(&node, FIRST)?;
    node.exec(&["rm", FIRST])?;
    attach_one(&node, "after-renewal")?;
    // One certificate is kept: the older ones are removed as each new one is current.
    let mut files = String::new();
    node.eventually("one certificate kept", Duration::from_secs(10), || {
        files = node.exec(&["ls", "/var/lib/multus/certs"])?;
        Ok(files.lines().filter(|f| f.ends_with(".pem")).count() == 2)
    })
    .with_context(|| {
        format!(
            "certs: {files} ({} s after the first expired)",
            began.elapsed().as_secs()
        )
    })?;
    Ok(())
}

/// Thin mode's per-node certificate (deploy/per-node-certificate/base): no token on the host,
/// and while the DaemonSet's pod is stuck (its installer stopped, as in a hung upgrade) past
/// the end of the certificate it kept, a pod still starts with its networks: multus asks for a
/// certificate itself, with the kubelet's credential.
#[test]
fn thin_mode_starts_pods_with_its_installer_stuck_past_its_certificates_end() -> Result<()> {
    let node = up("thin-per-node-certificate")?;
    let multus_d = node.exec(&["ls", "/etc/cni/net.d/multus.d"])?;
    ensure!(
        !multus_d.lines().any(|f| f == "token"),
        "a token is on the host: {multus_d}"
    );
    let kubeconfig = node.exec(&["cat", "/etc/cni/net.d/multus.d/multus.kubeconfig"])?;
    ensure!(
        kubeconfig.contains(&format!("client-certificate: \"{CURRENT}\"")),
        "{kubeconfig}"
    );
    let installer = node
        .exec(&["pgrep", "-f", "^/usr/bin/multus install"])?
        .trim()
        .to_owned();
    ensure!(
        !installer.is_empty() && !installer.contains('\n'),
        "the installer's PID: {installer:?}"
    );
    let first = serial(&node)?;
    node.exec(&["cp", CURRENT, FIRST])?;
    node.exec(&["kill", "-STOP", &installer])?;
    let stuck = (|| -> Result<()> {
        until_expired(&node, FIRST)?;
        ensure!(
            serial(&node)? == first,
            "the certificate was renewed while the installer was stopped"
        );
        attach_one(&node, "while-stuck")?;
        ensure!(
            serial(&node)? != first,
            "the pod started, but multus asked for no certificate"
        );
        Ok(())
    })();
    node.exec(&["kill", "-CONT", &installer])?;
    node.exec(&["rm", "-f", FIRST])?;
    stuck
}
