//! Why the daemon could not start: each names what it was doing.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A command line upstream's daemon would not take either.
    #[error("{0}: use -config PATH")]
    Usage(String),
    /// The daemon config: its path and what is wrong.
    #[error("{}: {source}", path.display())]
    Config {
        path: std::path::PathBuf,
        #[source]
        source: super::config::ConfigError,
    },
    #[error("cannot block SIGTERM and SIGINT: {0}")]
    Signals(#[source] io::Error),
    /// `chrootDir` or the delegates' time limit could not be set up.
    #[error("{}", .0.msg)]
    Delegates(cni::CniError),
    #[error(transparent)]
    Kube(#[from] k8s::K8sError),
    #[error("perNodeCertificate: MULTUS_NODE_NAME is not set: the certificate is the node's, so its pod must pass spec.nodeName")]
    NoNodeName,
    #[error("perNodeCertificate: {0}")]
    Certificate(#[from] k8s::client_certificate::CertificateError),
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The socket, or its directory, cannot be used.
    #[error(transparent)]
    Socket(#[from] super::server::SocketError),
    #[error("metricsPort {port}: {source}")]
    MetricsPort {
        port: u16,
        #[source]
        source: io::Error,
    },
}

impl StartError {
    pub fn thread(what: &'static str) -> impl FnOnce(io::Error) -> StartError {
        move |source| StartError::Thread { what, source }
    }
}
