//! The admission webhook's policy on the node: the ConfigMap the DaemonSet mounts, copied to
//! `multus.d/admission-policy.yaml` whenever it changes and reads as a policy. multus reads the
//! copy at every ADD (`admissionPolicy` in its config), so the node applies the policy to NADs
//! the webhook never saw.

use std::path::{Path, PathBuf};

use super::kubeconfig::{multus_d, update};
use super::{InstallError, Options};

const FILE: &str = "admission-policy.yaml";

/// The mounted policy and the last thing said about it.
pub struct AdmissionPolicy {
    from: PathBuf,
    /// The last refusal logged, so a policy that stays wrong is said once.
    refused: Option<String>,
}

impl AdmissionPolicy {
    pub fn new(from: &Path) -> AdmissionPolicy {
        AdmissionPolicy {
            from: from.to_owned(),
            refused: None,
        }
    }

    /// Where multus reads the copy on the host.
    pub fn host_path(opts: &Options) -> PathBuf {
        super::kubeconfig::host_path(opts, FILE)
    }

    /// The first copy, before multus's config names it: a policy that does not read stops the
    /// installer unless an earlier copy is there to stay in force.
    pub fn install(&mut self, opts: &Options) -> Result<(), InstallError> {
        match self.copy(opts) {
            Err(e) if multus_d(opts)?.open_read(FILE).is_ok() => {
                nodelog::error!("multus install: {e}: the policy copied earlier stays in force");
                self.refused = Some(e.to_string());
                Ok(())
            }
            other => other,
        }
    }

    /// Copies the policy again when it changed; a policy that does not read is logged once
    /// and leaves the copy in force.
    pub fn refresh(&mut self, opts: &Options) {
        match self.copy(opts) {
            Ok(()) => self.refused = None,
            Err(e) => {
                let said = e.to_string();
                if self.refused.as_ref() != Some(&said) {
                    nodelog::error!(
                        "multus install: {said}: the policy copied earlier stays in force"
                    );
                    self.refused = Some(said);
                }
            }
        }
    }

    fn copy(&self, opts: &Options) -> Result<(), InstallError> {
        let text = std::fs::read_to_string(&self.from)
            .map_err(InstallError::io("read the admission policy", &self.from))?;
        lint::Policy::parse(&text, &self.from.display().to_string()).map_err(|e| {
            InstallError::Config {
                path: self.from.clone(),
                msg: e.to_string(),
            }
        })?;
        update(&multus_d(opts)?, FILE, text.as_bytes(), 0o644)
    }
}
