//! deploy/admission/<tree> on the real node, for the tests and the benchmark: installed with
//! the changes the caller makes to its objects, and taken away again whatever happens, since a
//! webhook configuration left without its webhook refuses every later NAD.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result};
use serde_json::{json, Value};
use testkit::manifests::deploy_objects;

use super::Node;

/// A `kind: List` of `items`, for `kubectl apply -f -`.
pub fn list(items: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// The webhook on the node; dropped, it is gone and the tree without it is back.
pub struct Admission<'a> {
    node: &'a Node,
    added: Vec<Value>,
    base: Vec<Value>,
}

/// Installs deploy/admission/`tree` (base or thick, whose namespace is `multus`) with
/// `change` applied to each object, and waits until the webhook answers.
pub fn install<'a>(
    node: &'a Node,
    tree: &str,
    change: impl Fn(&mut Value),
) -> Result<Admission<'a>> {
    let mut objects = deploy_objects(&format!("admission/{tree}"))?;
    objects.iter_mut().for_each(change);
    let base = deploy_objects(tree)?;
    let key = |o: &Value| format!("{}/{}", o["kind"], o["metadata"]["name"]);
    let in_base: BTreeSet<String> = base.iter().map(key).collect();
    let added = objects
        .iter()
        .filter(|o| !in_base.contains(&key(o)))
        .cloned()
        .collect();
    let admission = Admission { node, added, base };
    node.apply(&list(&objects))?;
    for what in ["deployment/multus-admission", "daemonset/multus"] {
        node.kubectl(&["rollout", "status", "-n", "multus", what, "--timeout=180s"])?;
    }
    let probe = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"config": r#"{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-probe"}"#}});
    node.eventually(
        "the webhook answering",
        std::time::Duration::from_secs(60),
        || {
            let out = node.kubectl_output(
                &["apply", "--dry-run=server", "-f", "-"],
                Some(&list(std::slice::from_ref(&probe))),
            )?;
            Ok(out.status.success())
        },
    )?;
    Ok(admission)
}

impl Admission<'_> {
    /// The certificate the webhook serves now, as its Secret says.
    pub fn served_certificate(&self) -> Result<String> {
        self.node
            .kubectl(&[
                "get",
                "secret",
                "-n",
                "multus",
                "multus-admission-tls",
                "-o",
                "jsonpath={.data.tls\\.crt}",
            ])
            .context("the webhook's Secret")
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let node = self.node;
        let _ = node.kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            "multus-admission",
            "--ignore-not-found",
        ]);
        let _ = node.apply(&list(&self.base));
        let _ = node.kubectl(&[
            "rollout",
            "status",
            "-n",
            "multus",
            "daemonset/multus",
            "--timeout=120s",
        ]);
        let _ = node.delete(&list(&self.added));
        let _ = node.kubectl(&[
            "delete",
            "secret",
            "-n",
            "multus",
            "multus-admission-tls",
            "--ignore-not-found",
        ]);
    }
}
