//! Where the client's credentials come from: a kubeconfig (YAML, relative paths taken from its
//! directory) or the pod's service account, and a bearer token file read before every attempt.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use http::HeaderValue;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;

use crate::Cause;

/// A bearer token read from a file before every attempt.
pub(crate) struct TokenFile {
    pub(crate) path: PathBuf,
    pub(crate) header: Arc<Mutex<Option<HeaderValue>>>,
}

impl TokenFile {
    pub(crate) fn refresh(&self) -> Result<(), Cause> {
        let fail = |error: String| Cause::Token {
            path: self.path.clone(),
            error,
        };
        let token = cni::input::read_file_to_string(&self.path).map_err(|e| fail(e.to_string()))?;
        let token = token.trim();
        if token.is_empty() {
            return Err(fail("is empty".into()));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| fail("holds characters not allowed in an HTTP header".into()))?;
        value.set_sensitive(true);
        *self.header.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
        Ok(())
    }
}

/// Whether in-cluster credentials can be tried: the API server's address is in the
/// environment, as Kubernetes sets it in every pod. Without a kubeconfig and without this,
/// multus does not talk to Kubernetes at all (as the reference does).
pub fn in_cluster_available() -> bool {
    ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"]
        .iter()
        .all(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

/// The client's config, and the namespace the kubeconfig's current context names, if any
/// (kube's own `default_namespace` cannot tell "none" from `default`).
pub(crate) async fn load_config(
    kubeconfig: Option<&Path>,
) -> Result<(kube::Config, Option<String>), Box<dyn std::error::Error + Send + Sync>> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = read_kubeconfig(path)?;
            let namespace = context_namespace(&kubeconfig);
            let config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await?;
            (config, namespace)
        }
        None => (kube::Config::incluster()?, None),
    })
}

fn context_namespace(config: &Kubeconfig) -> Option<String> {
    let current = config.current_context.as_deref().unwrap_or_default();
    config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.namespace.clone())
        .filter(|ns| !ns.is_empty())
}

/// Reads a kubeconfig file: its YAML documents merged, and the files it names by relative
/// paths taken relative to its directory, as client-go does. (Parsed here with the YAML
/// library multus already carries, rather than kube's own, which would double the YAML code
/// in the binary.)
fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, Box<dyn std::error::Error + Send + Sync>> {
    let text = cni::input::read_file_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let absolute = |file: &mut Option<String>| {
        if let Some(file) = file
            .as_mut()
            .filter(|f| Path::new(f.as_str()).is_relative())
        {
            *file = dir.join(file.as_str()).display().to_string();
        }
    };
    let mut merged: Option<Kubeconfig> = None;
    for document in serde_norway::Deserializer::from_str(&text) {
        let mut config = Kubeconfig::deserialize(document)
            .map_err(|e| format!("{} is not a kubeconfig: {e}", path.display()))?;
        for cluster in config
            .clusters
            .iter_mut()
            .filter_map(|c| c.cluster.as_mut())
        {
            absolute(&mut cluster.certificate_authority);
        }
        for auth in config
            .auth_infos
            .iter_mut()
            .filter_map(|a| a.auth_info.as_mut())
        {
            absolute(&mut auth.client_certificate);
            absolute(&mut auth.client_key);
            absolute(&mut auth.token_file);
            // A bare command name is looked up in PATH.
            if let Some(exec) = auth.exec.as_mut() {
                if exec.command.as_ref().is_some_and(|c| c.contains('/')) {
                    absolute(&mut exec.command);
                }
            }
        }
        merged = Some(match merged {
            Some(earlier) => earlier.merge(config)?,
            None => config,
        });
    }
    Ok(merged.unwrap_or_default())
}
