//! The binaries in the CNI bin directory: `multus` with its `whereabouts` and `multus-shim`
//! links, `cni-plugins`, and a link named after each plugin pointing at `cni-plugins`. Each is replaced by a rename, never rewritten in place, so
//! a plugin running from the old file keeps running and the runtime never execs half a file.

use std::path::Path;
use std::process::Command;

use cni::dir::Dir;

use super::{log, InstallError, Options};

const PLUGINS_BIN: &str = "cni-plugins";

pub fn install(opts: &Options) -> Result<(), InstallError> {
    let this =
        std::env::current_exe().map_err(InstallError::io("find", Path::new("/proc/self/exe")))?;
    let plugins_src = opts
        .cni_plugins_bin_file
        .clone()
        .unwrap_or_else(|| this.with_file_name(PLUGINS_BIN));
    let bin_dir =
        Dir::open(&opts.cni_bin_dir).map_err(InstallError::io("open", &opts.cni_bin_dir))?;
    if !opts.skip_multus_binary_copy {
        let multus_src = opts.multus_bin_file.clone().unwrap_or(this);
        copy(&multus_src, &bin_dir, "multus")?;
        // The whereabouts IPAM plugin is in multus, beside its Kubernetes client, and so is
        // thick mode's shim.
        link(&bin_dir.join("whereabouts"), "multus")?;
        link(&bin_dir.join("multus-shim"), "multus")?;
    }
    copy(&plugins_src, &bin_dir, PLUGINS_BIN)?;
    for name in plugin_names(&plugins_src)? {
        link(&bin_dir.join(name), PLUGINS_BIN)?;
    }
    Ok(())
}

/// Copies `src` over `name` in `dir` unless that is a file with the same bytes already. A
/// symlink there is replaced, never written through. Streamed, never read whole: the
/// installer stays running, and memory that held a binary once would stay its own.
fn copy(src: &Path, dir: &Dir, name: &str) -> Result<(), InstallError> {
    let open = || std::fs::File::open(src).map_err(InstallError::io("read", src));
    let dest = dir.join(name);
    if super::holds(dir, name, open()?) {
        log(&format!("{} is current", dest.display()));
        return Ok(());
    }
    cni::atomic_file::copy_in(dir, name.as_ref(), &mut open()?, 0o755)
        .map_err(InstallError::io("install", &dest))?;
    log(&format!("installed {}", dest.display()));
    Ok(())
}

/// Makes `path` a link to `target` in the same directory, unless it already is one.
fn link(path: &Path, target: &str) -> Result<(), InstallError> {
    if std::fs::read_link(path).is_ok_and(|t| t == Path::new(target)) {
        return Ok(());
    }
    cni::atomic_file::symlink(Path::new(target), path).map_err(InstallError::io("link", path))?;
    log(&format!("linked {} to {target}", path.display()));
    Ok(())
}

/// The plugins `cni-plugins` implements, as it lists them itself.
fn plugin_names(bin: &Path) -> Result<Vec<String>, InstallError> {
    let out = Command::new(bin)
        .arg("--list")
        .output()
        .map_err(InstallError::io("run", bin))?;
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    if !out.status.success() || names.is_empty() {
        return Err(InstallError::Invalid(format!(
            "{} --list did not list its plugins: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    if let Some(bad) = names.iter().find(|n| n.contains('/') || n.starts_with('.')) {
        return Err(InstallError::Invalid(format!(
            "{} --list named {bad:?}, which is not a file name",
            bin.display()
        )));
    }
    Ok(names)
}
