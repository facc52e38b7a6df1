//! The plugins lint asks about a config. multus links no plugin code: the built-in plugins
//! answer through `cni-plugins validate <type>`, and any other plugin binary is asked which
//! CNI versions it speaks (the VERSION command, which changes nothing).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cni::invoke::{self, DelegateEnv};
use cni::CniError;

/// The plugins a NAD's configs are checked with.
pub struct Plugins {
    /// The `cni-plugins` binary, when found.
    multi_call: Option<PathBuf>,
    /// The plugin names `cni-plugins` answers for.
    builtin: Vec<String>,
    bin_dir: PathBuf,
}

/// A plugin's answer about one config.
pub struct Answer {
    /// The plugin's own error object, when it refuses the config.
    pub error: Option<CniError>,
    /// Its warnings: one line per key it does not read.
    pub warnings: Vec<String>,
}

impl Plugins {
    /// `cni-plugins` beside this executable, else in `bin_dir`; the error says where it was
    /// looked for.
    pub fn find(bin_dir: &Path) -> Result<Plugins, String> {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("cni-plugins")));
        let candidates: Vec<PathBuf> = beside
            .into_iter()
            .chain(std::iter::once(bin_dir.join("cni-plugins")))
            .collect();
        let Some(bin) = candidates.iter().find(|p| p.is_file()) else {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            return Err(format!(
                "cni-plugins not found (looked at {})",
                looked.join(", ")
            ));
        };
        let out = Command::new(bin)
            .arg("--list")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} --list failed: {}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Plugins {
            builtin: String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned)
                .filter(|l| !l.is_empty())
                .collect(),
            multi_call: Some(bin.clone()),
            bin_dir: bin_dir.to_owned(),
        })
    }

    /// No `cni-plugins`: every plugin is reported as not checked.
    pub fn without_builtin(bin_dir: &Path) -> Plugins {
        Plugins {
            multi_call: None,
            builtin: Vec::new(),
            bin_dir: bin_dir.to_owned(),
        }
    }

    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    pub fn is_builtin(&self, plugin_type: &str) -> bool {
        self.builtin.iter().any(|b| b == plugin_type)
    }

    /// Runs `cni-plugins validate <type>` on `config`. `Err` when it could not be asked.
    pub fn validate(&self, plugin_type: &str, config: &[u8]) -> Result<Answer, String> {
        let bin = self
            .multi_call
            .as_ref()
            .ok_or_else(|| "cni-plugins not found".to_owned())?;
        let mut child = Command::new(bin)
            .args(["validate", plugin_type])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that stops reading early answers anyway; its answer is what counts.
            let _ = stdin.write_all(config);
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("{} validate {plugin_type}: {e}", bin.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let error = match out.status.code() {
            Some(0) => None,
            Some(1) => Some(serde_json::from_slice(&out.stdout).map_err(|e| {
                format!(
                    "{} validate {plugin_type} printed no error object ({e})",
                    bin.display()
                )
            })?),
            _ => {
                return Err(format!(
                    "{} validate {plugin_type} failed: {}",
                    bin.display(),
                    stderr.trim()
                ))
            }
        };
        Ok(Answer {
            error,
            warnings: stderr.lines().map(str::to_owned).collect(),
        })
    }

    /// The CNI versions a plugin binary in the bin dir speaks; `None` when it is not there.
    pub fn supported_versions(
        &self,
        plugin_type: &str,
        version: &str,
    ) -> Option<Result<Vec<String>, CniError>> {
        let bin = invoke::find_in_path(plugin_type, std::slice::from_ref(&self.bin_dir)).ok()?;
        let env = DelegateEnv {
            container_id: "",
            netns: "",
            ifname: "",
            args: "",
            path: std::slice::from_ref(&self.bin_dir),
            addresses_in_use: "",
        };
        let stdin = serde_json::json!({ "cniVersion": version }).to_string();
        let answer = invoke::exec_plugin(&bin, cni::Command::Version, &env, stdin.as_bytes());
        Some(answer.map(|info| {
            info.and_then(|v| v.get("supportedVersions").cloned())
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default()
        }))
    }
}
