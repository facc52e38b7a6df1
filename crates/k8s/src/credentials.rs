//! Where the client's credentials come from: a kubeconfig (YAML, relative paths taken from its
//! directory) or the pod's service account, and a bearer token file read before every attempt.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use http::HeaderValue;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;

use crate::{Cause, K8sError};

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
pub(crate) fn read_kubeconfig(
    path: &Path,
) -> Result<Kubeconfig, Box<dyn std::error::Error + Send + Sync>> {
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

/// How a kubeconfig's current user proves who it is, as the file says (`multus doctor`
/// reads the files it names itself, under the node's root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserCredential {
    /// A bearer token in the file, or in the named file.
    Token {
        inline: Option<String>,
        file: Option<PathBuf>,
    },
    /// A client certificate: PEM in the file (`client-certificate-data`, base64 decoded), or
    /// in the named file.
    Certificate {
        inline: Option<String>,
        file: Option<PathBuf>,
    },
    /// A command that prints a credential.
    Exec { command: String },
    /// Something else (`auth-provider`, a user name and password), or nothing.
    Other(&'static str),
}

/// The current context's server and user credential of a kubeconfig file.
pub fn kubeconfig_user(path: &Path) -> Result<(Option<String>, UserCredential), K8sError> {
    let from = format!("kubeconfig {}", path.display());
    let config = read_kubeconfig(path).map_err(|e| K8sError::setup(&from, &*e))?;
    let current = config.current_context.as_deref().unwrap_or_default();
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref());
    let server = context
        .and_then(|c| config.clusters.iter().find(|n| n.name == c.cluster))
        .and_then(|n| n.cluster.as_ref())
        .and_then(|c| c.server.clone());
    let user = context
        .and_then(|c| c.user.as_deref())
        .and_then(|name| config.auth_infos.iter().find(|a| a.name == name))
        .and_then(|a| a.auth_info.as_ref());
    let Some(user) = user else {
        return Ok((server, UserCredential::Other("no user")));
    };
    // The token is a secret in kube's type: its serialised form is the one way to it.
    let inline = serde_json::to_value(user)
        .ok()
        .and_then(|v| v.get("token").and_then(|t| t.as_str()).map(str::to_owned));
    let credential = if inline.is_some() || user.token_file.is_some() {
        UserCredential::Token {
            inline,
            file: user.token_file.as_ref().map(PathBuf::from),
        }
    } else if user.client_certificate.is_some() || user.client_certificate_data.is_some() {
        use base64::Engine as _;
        UserCredential::Certificate {
            inline: user.client_certificate_data.as_ref().and_then(|d| {
                let bytes = base64::engine::general_purpose::STANDARD.decode(d).ok()?;
                String::from_utf8(bytes).ok()
            }),
            file: user.client_certificate.as_ref().map(PathBuf::from),
        }
    } else if let Some(exec) = &user.exec {
        UserCredential::Exec {
            command: exec.command.clone().unwrap_or_default(),
        }
    } else if user.auth_provider.is_some() {
        UserCredential::Other("an auth-provider")
    } else if user.username.is_some() {
        UserCredential::Other("a user name and password")
    } else {
        UserCredential::Other("no credential")
    };
    Ok((server, credential))
}
