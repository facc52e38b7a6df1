//! The manifests of deploy/ as a user applies them (`kubectl kustomize`, preinstalled on these
//! machines), and Kubernetes objects checked against Kubernetes' own schemas, offline:
//! kubernetes-validate in strict mode (no unknown fields), from the virtualenv scripts/deps.sh
//! makes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

/// The repository's deploy/ directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// `kubectl kustomize deploy/<tree>`: the YAML a user would apply.
pub fn render(tree: &str) -> Result<String> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join(tree))
        .output()
        .context("running kubectl (preinstalled on these machines)")?;
    ensure!(
        out.status.success(),
        "kubectl kustomize deploy/{tree}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The objects of a multi-document YAML text.
pub fn objects(yaml: &str) -> Result<Vec<Value>> {
    let mut all = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            all.push(value);
        }
    }
    Ok(all)
}

/// The objects of deploy/`tree`, rendered.
pub fn deploy_objects(tree: &str) -> Result<Vec<Value>> {
    objects(&render(tree)?)
}

/// Installed by scripts/deps.sh.
pub const VALIDATOR: &str = "/var/cache/multus-rs/venv/bin/kubernetes-validate";
/// The oldest Kubernetes the manifests are checked against.
pub const KUBERNETES_VERSION: &str = "1.32.0";

/// Ok(what the validator printed) when every object in `yaml` passed.
pub fn validate(yaml: &str) -> Result<String> {
    ensure!(
        Path::new(VALIDATOR).exists(),
        "{VALIDATOR} is missing: run scripts/deps.sh"
    );
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, yaml)?;
    let out = Command::new(VALIDATOR)
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .arg(&file)
        .stdin(Stdio::null())
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("kubernetes-validate rejected the objects:\n{text}");
    }
    Ok(text)
}
