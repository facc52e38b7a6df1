//! Errors of the Kubernetes client: which call failed, and why.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One API call: verb, resource and the object it was about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: String,
    /// `None` for a list or a create.
    pub name: Option<String>,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(
                f,
                "{} {} {}/{}",
                self.verb, self.resource, self.namespace, name
            ),
            None => write!(
                f,
                "{} {} in namespace {}",
                self.verb, self.resource, self.namespace
            ),
        }
    }
}

/// What a transport or decoding failure came from, shared so that a [`Cause`] stays `Clone`.
pub type Source = Arc<dyn std::error::Error + Send + Sync>;

/// Why a call failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Cause {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("unauthorized (the API server refused the credentials): {0}")]
    Unauthorized(String),
    #[error("forbidden (check the RBAC rules of multus's service account): {0}")]
    Forbidden(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("API server replied {code} {reason}: {message}")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    #[error("connection to the API server failed: {text}")]
    Transport {
        /// The source and its own sources, on one line.
        text: String,
        #[source]
        source: Source,
    },
    #[error("the reply is larger than {} MiB, more than any Kubernetes object", super::MAX_REPLY_BYTES >> 20)]
    ReplyTooLarge,
    #[error("unreadable reply: {text}")]
    Decode {
        text: String,
        #[source]
        source: Option<Source>,
    },
    #[error("bearer token file {}: {error}", path.display())]
    Token { path: PathBuf, error: String },
    /// Refused before sending: the name would not stay one path segment.
    #[error("{0}")]
    BadName(String),
}

impl Cause {
    /// Whether another attempt may succeed. 404, 401, 403 and other client errors are final;
    /// a conflict is retried only where the caller says it is safe.
    pub(super) fn retryable(&self, conflict_ok: bool) -> bool {
        match self {
            Cause::Timeout(_) | Cause::Transport { .. } => true,
            // A failed UID precondition is also a 409, but it will not pass later.
            Cause::Conflict(message) => conflict_ok && !message.contains("Precondition failed"),
            Cause::Api { code, .. } => *code >= 500 || *code == 429,
            Cause::NotFound(_)
            | Cause::Unauthorized(_)
            | Cause::Forbidden(_)
            | Cause::Decode { .. }
            | Cause::ReplyTooLarge
            | Cause::Token { .. }
            | Cause::BadName(_) => false,
        }
    }

    /// The CNI error code a plugin answers with when a call fails this way. Credentials, RBAC
    /// and names that are wrong do not get better by trying again: the config must change.
    pub fn cni_code(&self) -> cni::Code {
        match self {
            Cause::Unauthorized(_) | Cause::Forbidden(_) | Cause::BadName(_) => {
                cni::Code::InvalidConfig
            }
            Cause::Token { .. } => cni::Code::Io,
            Cause::NotFound(_)
            | Cause::Conflict(_)
            | Cause::Timeout(_)
            | Cause::Api { .. }
            | Cause::Transport { .. }
            | Cause::ReplyTooLarge
            | Cause::Decode { .. } => cni::Code::TryAgainLater,
        }
    }

    /// What a failed reply's status code and `Status` say.
    pub(super) fn from_status(code: u16, reason: String, message: String) -> Cause {
        match code {
            404 => Cause::NotFound(message),
            401 => Cause::Unauthorized(message),
            403 => Cause::Forbidden(message),
            409 => Cause::Conflict(message),
            code => Cause::Api {
                code,
                reason,
                message,
            },
        }
    }

    /// A connection that failed, with what it failed on.
    pub(super) fn transport(err: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause::Transport {
            text: chain(&err),
            source: Arc::new(err),
        }
    }

    /// A reply that cannot be what it should: `text` says how.
    pub(super) fn decode(text: impl Into<String>) -> Cause {
        Cause::Decode {
            text: text.into(),
            source: None,
        }
    }

    /// A reply that does not parse: `text` says what, `err` is the parser's.
    pub(super) fn unparsed(text: String, err: serde_json::Error) -> Cause {
        Cause::Decode {
            text,
            source: Some(Arc::new(err)),
        }
    }

    pub(super) fn from_kube(err: kube::Error) -> Cause {
        match err {
            kube::Error::Api(status) => {
                Cause::from_status(status.code, status.reason.clone(), status.message.clone())
            }
            // serde_json quotes a misplaced string whole: cut it.
            kube::Error::SerdeError(e) => Cause::unparsed(cni::quote::shorten(&e.to_string()), e),
            other if is_too_large(&other) => Cause::ReplyTooLarge,
            other => Cause::transport(other),
        }
    }
}

/// Whether the reply was cut at [`super::MAX_REPLY_BYTES`].
fn is_too_large(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// An error and its sources on one line ("a: b: c"), without repeating a source that its
/// parent already printed.
fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

/// The Kubernetes client's error.
#[derive(Clone, Debug, thiserror::Error)]
pub enum K8sError {
    /// The client could not be set up from the kubeconfig or the in-cluster credentials.
    #[error("Kubernetes client setup from {from}: {message}")]
    Setup { from: String, message: String },
    /// The client's credential is still being made (a per-node certificate not signed yet, or
    /// being asked for by another process): worth another try, unlike a setup error.
    #[error("Kubernetes client setup from {from}: {message}")]
    NotYet { from: String, message: String },
    /// An API call failed, after `attempts` tries.
    #[error("{call}: {cause}{}", attempts_note(*attempts))]
    Request {
        call: Box<Call>,
        attempts: u32,
        cause: Cause,
    },
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (gave up after {attempts} attempts)")
    } else {
        String::new()
    }
}

impl K8sError {
    pub(super) fn setup(from: impl Into<String>, err: &dyn std::error::Error) -> K8sError {
        K8sError::Setup {
            from: from.into(),
            // kube and the YAML library quote the kubeconfig's values whole and raw.
            message: cni::quote::shorten(&chain(err)),
        }
    }

    pub(super) fn not_yet(from: impl Into<String>, err: &dyn std::error::Error) -> K8sError {
        K8sError::NotYet {
            from: from.into(),
            message: cni::quote::shorten(&chain(err)),
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self.cause(), Some(Cause::NotFound(_)))
    }

    /// Why the call failed (`None` for a setup error).
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            K8sError::Request { cause, .. } => Some(cause),
            K8sError::Setup { .. } | K8sError::NotYet { .. } => None,
        }
    }

    /// The CNI error code for this failure; a client that cannot be set up is a config to fix.
    pub fn cni_code(&self) -> cni::Code {
        match self {
            K8sError::NotYet { .. } => cni::Code::TryAgainLater,
            _ => self
                .cause()
                .map_or(cni::Code::InvalidConfig, Cause::cni_code),
        }
    }

    /// The call that failed (`None` for a setup error).
    pub fn call(&self) -> Option<&Call> {
        match self {
            K8sError::Request { call, .. } => Some(call),
            K8sError::Setup { .. } | K8sError::NotYet { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni::Code;

    fn failed(cause: Cause) -> K8sError {
        K8sError::Request {
            call: Box::new(Call {
                verb: "get",
                resource: "pods",
                namespace: "default".into(),
                name: Some("p".into()),
            }),
            attempts: 1,
            cause,
        }
    }

    /// One map for multus and whereabouts: what waiting cannot fix is the config's (7), an
    /// unreadable token is I/O (5), the rest is worth another try (11).
    #[test]
    fn each_failure_has_one_cni_code() {
        let setup = K8sError::Setup {
            from: "kubeconfig".into(),
            message: "no server".into(),
        };
        let not_yet = K8sError::NotYet {
            from: "the per-node certificate in /d".into(),
            message: "not signed within 20s".into(),
        };
        let cases = [
            (setup, Code::InvalidConfig),
            (not_yet, Code::TryAgainLater),
            (failed(Cause::Forbidden("rbac".into())), Code::InvalidConfig),
            (
                failed(Cause::Unauthorized("token".into())),
                Code::InvalidConfig,
            ),
            (failed(Cause::BadName("a/b".into())), Code::InvalidConfig),
            (
                failed(Cause::Token {
                    path: "/token".into(),
                    error: "gone".into(),
                }),
                Code::Io,
            ),
            (failed(Cause::NotFound("p".into())), Code::TryAgainLater),
            (failed(Cause::Conflict("p".into())), Code::TryAgainLater),
            (
                failed(Cause::Timeout(Duration::from_secs(1))),
                Code::TryAgainLater,
            ),
            (
                failed(Cause::transport(std::io::Error::other("reset"))),
                Code::TryAgainLater,
            ),
            (failed(Cause::ReplyTooLarge), Code::TryAgainLater),
            (failed(Cause::decode("eof")), Code::TryAgainLater),
        ];
        for (e, code) in cases {
            assert_eq!(e.cni_code(), code, "{e}");
        }
    }
}
