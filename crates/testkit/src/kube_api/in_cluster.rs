//! A pod's view of a [`KubeApiServer`] for a program under test: `KUBERNETES_SERVICE_HOST` and
//! `KUBERNETES_SERVICE_PORT` in its environment and the service account's token, CA and
//! namespace in `/var/run/secrets/kubernetes.io/serviceaccount`.
//!
//! The program runs in a private mount namespace where `/run` is a fresh tmpfs holding those
//! files, so the machine's own `/run` is never written. `/run/netns` is carried over into it:
//! the test's network namespaces stay reachable by path.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};

use super::KubeApiServer;

/// Runs in the new mount namespace: `$1` is the credentials directory, the rest the command.
const SETUP: &str = r#"set -e
dir=$1; shift
if [ -d /run/netns ]; then
  mkdir -p "$dir/netns"
  mount --rbind /run/netns "$dir/netns"
fi
mount -t tmpfs tmpfs /run
if [ -d "$dir/netns" ]; then
  mkdir /run/netns
  mount --move "$dir/netns" /run/netns
fi
mkdir -p /run/secrets/kubernetes.io/serviceaccount
cp "$dir/token" "$dir/ca.crt" "$dir/namespace" /run/secrets/kubernetes.io/serviceaccount/
exec "$@""#;

/// In-cluster credentials of one server; the files go when this is dropped.
pub struct InCluster {
    dir: tempfile::TempDir,
    host: String,
    port: u16,
}

impl InCluster {
    /// The credentials of an HTTPS `server` for a pod in `namespace`.
    pub fn new(server: &KubeApiServer, namespace: &str) -> anyhow::Result<InCluster> {
        let ca = server
            .ca_pem()
            .context("in-cluster credentials need an HTTPS server")?;
        let dir = tempfile::tempdir()?;
        ensure!(
            !dir.path().to_string_lossy().contains('\''),
            "temporary directory {} has a quote",
            dir.path().display()
        );
        fs::write(dir.path().join("token"), server.token())?;
        fs::write(dir.path().join("ca.crt"), ca)?;
        fs::write(dir.path().join("namespace"), namespace)?;
        Ok(InCluster {
            dir,
            host: server.addr().ip().to_string(),
            port: server.addr().port(),
        })
    }

    /// An executable script that runs `program` (with the script's own arguments) as a pod
    /// would: in the private mount namespace, with the credentials and the environment. It can
    /// stand wherever a program path is taken, e.g. [`crate::CniCall::run`].
    pub fn wrap(&self, program: &Path) -> anyhow::Result<PathBuf> {
        let program = program.to_string_lossy();
        ensure!(
            !program.contains('\''),
            "program path {program} has a quote"
        );
        let name = Path::new(program.as_ref())
            .file_name()
            .context("program path without a file name")?;
        let script = self.dir.path().join(name);
        fs::write(
            &script,
            format!(
                "#!/bin/sh\nexport KUBERNETES_SERVICE_HOST={host} KUBERNETES_SERVICE_PORT={port}\nexec unshare --mount --propagation private sh -c '{SETUP}' in-cluster '{dir}' '{program}' \"$@\"\n",
                host = self.host,
                port = self.port,
                dir = self.dir.path().display(),
            ),
        )?;
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
        Ok(script)
    }
}
