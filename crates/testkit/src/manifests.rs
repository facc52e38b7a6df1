//! Kubernetes objects checked against Kubernetes' own schemas, offline: kubernetes-validate in
//! strict mode (no unknown fields), from the virtualenv scripts/deps.sh makes.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Result};

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
