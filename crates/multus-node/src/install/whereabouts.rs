//! whereabouts' flat file, `whereabouts.d/whereabouts.conf` in the CNI config directory. It
//! names multus's kubeconfig, so the `whereabouts` link multus installs reaches the API as
//! multus does. A flat file already there, such as the one the reference's DaemonSet writes, is
//! kept: it is the node's.

use std::path::Path;

use cni::dir::Dir;

use super::{log, InstallError, Options};

const DIR: &str = "whereabouts.d";
const FLAT_FILE: &str = "whereabouts.conf";

pub fn write_flat_file(opts: &Options) -> Result<(), InstallError> {
    let conf =
        Dir::open(&opts.cni_conf_dir).map_err(InstallError::io("open", &opts.cni_conf_dir))?;
    let path = conf.join(DIR);
    // A symlink in its place is refused, not followed.
    let dir = conf
        .open_or_create_dir(DIR, 0o755)
        .map_err(InstallError::io("make", &path))?;
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
