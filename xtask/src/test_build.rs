//! The workspace's test binaries, built by `cargo test --no-run` and found by package and
//! target, for the tasks that run them somewhere else: in a VM of either architecture
//! (`vm-test`), or with the aarch64 binaries in place of the ones they call (`aarch64-test`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::Arch;

/// What one `cargo test --no-run` built.
pub struct TestBuild {
    /// (package directory, target) to executable; a crate's unit tests are its `lib` target,
    /// its integration tests `suite`.
    tests: HashMap<(String, String), PathBuf>,
    /// The binaries the integration tests call, by name, at the absolute paths they name them.
    bins: HashMap<String, PathBuf>,
}

impl TestBuild {
    pub fn test(&self, package: &str, target: &str) -> Result<PathBuf> {
        self.tests
            .get(&(package.to_owned(), target.to_owned()))
            .cloned()
            .with_context(|| format!("cargo built no {package} target {target}"))
    }

    pub fn bin(&self, name: &str) -> Result<PathBuf> {
        self.bins
            .get(name)
            .cloned()
            .with_context(|| format!("cargo built no {name} binary"))
    }
}

/// Builds the test binaries of `packages` for `arch`, with what they call: x86_64's where
/// `cargo test` puts them, aarch64's under its target's directory (static, as
/// .cargo/config.toml builds that target).
pub fn build(arch: Arch, packages: &[&str]) -> Result<TestBuild> {
    let mut cargo = Command::new(crate::cargo());
    cargo.args(["test", "--no-run", "--message-format=json"]);
    if arch != Arch::X86_64 {
        cargo.args(["--target", &arch.triple()]);
    }
    for package in packages {
        cargo.args(["-p", package]);
    }
    let mut child = cargo
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test --no-run")?;
    let stdout = child.stdout.take().context("cargo stdout")?;
    let mut built = TestBuild {
        tests: HashMap::new(),
        bins: HashMap::new(),
    };
    for line in BufReader::new(stdout).lines() {
        let msg: Value = serde_json::from_str(&line?)?;
        match msg["reason"].as_str() {
            Some("compiler-message") => {
                if let Some(text) = msg["message"]["rendered"].as_str() {
                    eprint!("{text}");
                }
            }
            Some("compiler-artifact") => {
                let Some(exe) = msg["executable"].as_str() else {
                    continue;
                };
                let name = msg["target"]["name"].as_str().unwrap_or_default();
                let kind = msg["target"]["kind"][0].as_str().unwrap_or_default();
                if msg["profile"]["test"] == true {
                    let package = Path::new(msg["manifest_path"].as_str().unwrap_or_default())
                        .parent()
                        .and_then(Path::file_name)
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let target = if kind == "lib" { "lib" } else { name };
                    built
                        .tests
                        .insert((package, target.to_owned()), PathBuf::from(exe));
                } else if kind == "bin" {
                    built.bins.insert(name.to_owned(), PathBuf::from(exe));
                }
            }
            _ => {}
        }
    }
    ensure!(child.wait()?.success(), "cargo test --no-run failed");
    Ok(built)
}

/// Where cargo puts build output (honours CARGO_TARGET_DIR and config).
pub fn target_dir() -> Result<PathBuf> {
    let out = Command::new(crate::cargo())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("running cargo metadata")?;
    ensure!(out.status.success(), "cargo metadata failed");
    let meta: Value = serde_json::from_slice(&out.stdout)?;
    let dir = meta["target_directory"]
        .as_str()
        .context("cargo metadata: no target_directory")?;
    Ok(PathBuf::from(dir))
}
