//! The source RPM's two sources, written by `cargo xtask package`:
//! - `multus-rs-<version>.tar.gz`: the source tree as git sees it (tracked files as they are in
//!   the work tree, and new ones not ignored), under `multus-rs-<version>/`;
//! - `multus-rs-<version>-vendor.tar.gz`: every crate Cargo.lock pins, as `cargo vendor` lays
//!   them out under `vendor/`. Those that no Linux build of x86_64 or aarch64 compiles (Windows,
//!   macOS, WASI and Android crates, and features we never turn on) are left as stubs: their
//!   Cargo.toml, which cargo reads to check the lock, an empty lib.rs and their package
//!   checksum.
//!
//! Both are tar archives of sorted names, owned by root, dated at the commit.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::{output, VERSION};

/// The file names of the two sources.
pub fn names() -> [String; 2] {
    [
        format!("multus-rs-{VERSION}.tar.gz"),
        format!("multus-rs-{VERSION}-vendor.tar.gz"),
    ]
}

/// Writes both sources into `dir`, dated `epoch`.
pub fn write(dir: &Path, epoch: &str) -> Result<()> {
    let work = tempfile::tempdir()?;
    let [tree_name, vendor_name] = names();
    let top = format!("multus-rs-{VERSION}");
    copy_source_tree(&work.path().join(&top))?;
    tar_gz(work.path(), &top, &dir.join(tree_name), epoch)?;
    let vendor = work.path().join("vendor");
    output(
        Command::new(crate::cargo())
            .current_dir(crate::workspace_root())
            .args(["vendor", "--offline", "--locked", "--versioned-dirs", "-q"])
            .arg(&vendor),
    )
    .context("cargo vendor")?;
    stub_unused(&vendor)?;
    tar_gz(work.path(), "vendor", &dir.join(vendor_name), epoch)
}

/// `dir/name` as a gzipped tar at `archive`, the same bytes for the same files.
fn tar_gz(dir: &Path, name: &str, archive: &Path, epoch: &str) -> Result<()> {
    output(Command::new("sh").args([
        "-c",
        r#"tar -C "$1" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$2" -cf - "$3" | gzip -n -6 >"$4""#,
        "tar_gz",
    ])
    .arg(dir)
    .arg(epoch)
    .arg(name)
    .arg(archive))
    .map(drop)
}

/// Every vendored crate that is not in the build graph of any workspace crate (its normal,
/// build and dev dependencies) for Linux on x86_64 or aarch64 becomes a stub.
fn stub_unused(vendor: &Path) -> Result<()> {
    let mut used = BTreeSet::new();
    for arch in crate::Arch::ALL {
        let tree = output(
            Command::new(crate::cargo())
                .current_dir(crate::workspace_root())
                .args([
                    "tree",
                    "-q",
                    "--offline",
                    "--locked",
                    "--workspace",
                    "-e",
                    "normal,build,dev",
                ])
                .args(["--prefix", "none", "--format", "{p}", "--target"])
                .arg(arch.triple()),
        )?;
        for line in tree.lines() {
            let mut words = line.split(' ');
            if let (Some(name), Some(version)) = (words.next(), words.next()) {
                used.insert(format!("{name}-{}", version.trim_start_matches('v')));
            }
        }
    }
    for entry in std::fs::read_dir(vendor)? {
        let dir = entry?.path();
        let name = dir
            .file_name()
            .context("a vendored crate's directory")?
            .to_string_lossy()
            .into_owned();
        if used.contains(&name) {
            continue;
        }
        let checksums = dir.join(".cargo-checksum.json");
        let sums: serde_json::Value = serde_json::from_slice(&std::fs::read(&checksums)?)
            .with_context(|| format!("reading {}", checksums.display()))?;
        let package = sums["package"]
            .as_str()
            .with_context(|| format!("{} has no package checksum", checksums.display()))?
            .to_owned();
        for item in std::fs::read_dir(&dir)? {
            let path = item?.path();
            if path.file_name().is_some_and(|n| n == "Cargo.toml") {
                continue;
            }
            if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        std::fs::create_dir(dir.join("src"))?;
        std::fs::write(dir.join("src/lib.rs"), "")?;
        std::fs::write(
            &checksums,
            serde_json::json!({ "files": {}, "package": package }).to_string(),
        )?;
    }
    Ok(())
}

/// A copy at `dest` of the source tree's files as git sees them: tracked ones as they are in
/// the work tree, and new ones not ignored.
fn copy_source_tree(dest: &Path) -> Result<()> {
    let root = crate::workspace_root();
    let list = output(Command::new("git").current_dir(&root).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]))?;
    for path in list.split('\0').filter(|p| !p.is_empty()) {
        let from = root.join(path);
        // A tracked file deleted in the work tree is not part of it.
        let Ok(meta) = std::fs::symlink_metadata(&from) else {
            continue;
        };
        let to = dest.join(path);
        std::fs::create_dir_all(to.parent().context("a file's directory")?)?;
        if meta.file_type().is_symlink() {
            symlink(std::fs::read_link(&from)?, &to)?;
        } else {
            std::fs::copy(&from, &to).with_context(|| format!("copying {path}"))?;
        }
    }
    Ok(())
}
