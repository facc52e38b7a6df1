//! The kubeconfig multus uses on the host, `multus.d/multus.kubeconfig`, with the service
//! account's token and CA as files beside it. The kubeconfig names the token file instead of
//! holding the token, so a rotated token needs only the token file rewritten, and multus reads
//! the new one on its next call.

use std::path::Path;

use cni::dir::Dir;

use super::{log, InstallError, Options};

const DIR: &str = "multus.d";
const KUBECONFIG: &str = "multus.kubeconfig";
const TOKEN: &str = "token";
const CA: &str = "ca.crt";

pub struct Kubeconfig<'a> {
    opts: &'a Options,
}

impl<'a> Kubeconfig<'a> {
    pub fn new(opts: &'a Options) -> Kubeconfig<'a> {
        Kubeconfig { opts }
    }

    /// Brings the token, the CA and the kubeconfig up to date; files already current are not
    /// touched.
    pub fn refresh(&mut self) -> Result<(), InstallError> {
        let dir = self.dir()?;
        let sa = &self.opts.service_account_dir;
        if self.opts.per_node_certificate_dir.is_some() {
            // The certificate is the credential: no token is left on the host.
            match dir.remove(TOKEN) {
                Ok(()) => log(&format!(
                    "removed {}: the per-node certificate replaces it",
                    dir.join(TOKEN).display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(InstallError::io("remove", &dir.join(TOKEN))(e)),
            }
        } else {
            update(&dir, TOKEN, &read(&sa.join(TOKEN))?, 0o600)?;
        }
        if !self.opts.skip_tls_verify {
            update(&dir, CA, &read(&sa.join(CA))?, 0o644)?;
        }
        update(&dir, KUBECONFIG, self.render()?.as_bytes(), 0o600)
    }

    fn dir(&self) -> Result<Dir, InstallError> {
        multus_d(self.opts)
    }

    fn render(&self) -> Result<String, InstallError> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
            InstallError::Invalid(
                "KUBERNETES_SERVICE_HOST is not set: the installer runs in a pod, where \
                 Kubernetes sets it"
                    .into(),
            )
        })?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let scheme =
            std::env::var("KUBERNETES_SERVICE_PROTOCOL").unwrap_or_else(|_| "https".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        // Paths as the host sees them: multus runs there, called by the runtime.
        let host_dir = self
            .opts
            .multus_kubeconfig_file_host
            .parent()
            .unwrap_or(Path::new("/"));
        let quoted = |s: &str| serde_json::Value::from(s).to_string();
        let path = |name: &str| quoted(&host_dir.join(name).to_string_lossy());
        let tls = if self.opts.skip_tls_verify {
            "insecure-skip-tls-verify: true".to_owned()
        } else {
            format!("certificate-authority: {}", path(CA))
        };
        Ok(format!(
            "# Kubeconfig for multus, written by `multus install`. The token and CA are the files
# beside it, rewritten when the service account's change.
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: {server}
    {tls}
users:
- name: multus
  user:
    {user}
contexts:
- name: multus-context
  context:
    cluster: local
    user: multus
current-context: multus-context
",
            server = quoted(&format!("{scheme}://{host}:{port}")),
            user = match &self.opts.per_node_certificate_dir {
                Some(certs) => {
                    let current = quoted(
                        &certs
                            .join(k8s::client_certificate::CURRENT_FILE)
                            .to_string_lossy(),
                    );
                    format!("client-certificate: {current}\n    client-key: {current}")
                }
                None => format!("tokenFile: {}", path(TOKEN)),
            },
        ))
    }
}

/// `multus.d`, made when missing. It holds the node's credentials: a symlink in its place is
/// refused, not followed.
pub fn multus_d(opts: &Options) -> Result<Dir, InstallError> {
    let conf_dir = &opts.cni_conf_dir;
    let path = conf_dir.join(DIR);
    Dir::open(conf_dir)
        .map_err(InstallError::io("open", conf_dir))?
        .open_or_create_dir(DIR, 0o755)
        .map_err(InstallError::io("open", &path))
}

/// Where a file of `multus.d` is on the host, where multus reads it.
pub fn host_path(opts: &Options, name: &str) -> std::path::PathBuf {
    opts.multus_kubeconfig_file_host
        .parent()
        .unwrap_or(Path::new("/"))
        .join(name)
}

fn read(path: &Path) -> Result<Vec<u8>, InstallError> {
    std::fs::read(path).map_err(InstallError::io("read the service account's", path))
}

/// Replaces `name` in `dir` with `bytes` unless it is a file holding them already.
pub fn update(dir: &Dir, name: &str, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    if super::holds(dir, name, bytes) {
        return Ok(());
    }
    let path = dir.join(name);
    cni::atomic_file::write_in(dir, name.as_ref(), bytes, mode)
        .map_err(InstallError::io("write", &path))?;
    log(&format!("wrote {}", path.display()));
    Ok(())
}
