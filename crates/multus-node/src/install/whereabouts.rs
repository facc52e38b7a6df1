//! whereabouts' flat file, `whereabouts.d/whereabouts.conf` in the CNI config directory. It
//! names multus's kubeconfig, so the `whereabouts` link multus installs reaches the API as
//! multus does. A flat file already there, such as the one the reference's DaemonSet writes, is
//! kept: it is the node's. Beside it, `nodename` holds the node's name for node-slice mode, as
//! the reference's installer writes it.

use std::path::Path;

use cni::dir::Dir;

use super::{log, InstallError, Options};

const DIR: &str = "whereabouts.d";
const FLAT_FILE: &str = "whereabouts.conf";
const NODENAME_FILE: &str = "nodename";

pub fn write_flat_file(opts: &Options) -> Result<(), InstallError> {
    let conf =
        Dir::open(&opts.cni_conf_dir).map_err(InstallError::io("open", &opts.cni_conf_dir))?;
    let path = conf.join(DIR);
    // A symlink in its place is refused, not followed.
    let dir = conf
        .open_or_create_dir(DIR, 0o755)
        .map_err(InstallError::io("make", &path))?;
    if let Some(node) = &opts.whereabouts_node_name {
        write_node_name(&dir, node)?;
    }
    let file = dir.join(FLAT_FILE);
    let body = serde_json::json!({
        "datastore": "kubernetes",
        "kubernetes": {"kubeconfig": opts.multus_kubeconfig_file_host},
    });
    let bytes = format!("{:#}\n", body).into_bytes();
    match dir.metadata(FLAT_FILE) {
        Ok(_) if dir.read(FLAT_FILE).is_ok_and(|b| b == bytes) => Ok(()),
        Ok(_) => {
            log(&format!("{} is the node's own: kept", file.display()));
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            cni::atomic_file::write_in(&dir, FLAT_FILE.as_ref(), &bytes, 0o644)
                .map_err(InstallError::io("write", &file))?;
            log(&format!(
                "wrote {} (kubeconfig {})",
                file.display(),
                Path::new(&opts.multus_kubeconfig_file_host).display()
            ));
            Ok(())
        }
        Err(e) => Err(InstallError::io("stat", &file)(e)),
    }
}

/// A node's name is a DNS subdomain: whereabouts puts it into object names.
pub fn check_node_name(node: &str) -> Result<(), InstallError> {
    let ok = !node.is_empty()
        && node.len() <= 253
        && node
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !ok {
        return Err(InstallError::Invalid(format!(
            "--whereabouts-node-name {}: not a Kubernetes node name",
            cni::quote::quote(node)
        )));
    }
    Ok(())
}

/// The node's name, without a newline, as the reference's installer writes it; rewritten only
/// when it differs.
fn write_node_name(dir: &Dir, node: &str) -> Result<(), InstallError> {
    let file = dir.join(NODENAME_FILE);
    if dir.read(NODENAME_FILE).is_ok_and(|b| b == node.as_bytes()) {
        return Ok(());
    }
    cni::atomic_file::write_in(dir, NODENAME_FILE.as_ref(), node.as_bytes(), 0o644)
        .map_err(InstallError::io("write", &file))?;
    log(&format!("wrote {} ({node})", file.display()));
    Ok(())
}
