//! What can go wrong in multus, each mapped to a CNI error code at the binary edge.

use cni::{CniError, Code};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad multus configuration: `key` names the option.
    #[error("multus config: {key}: {msg}")]
    Config { key: String, msg: String },
    /// A key of the multus config whose value is not of the type it takes.
    #[error("multus config: {0}")]
    ConfigValue(#[source] cni::decode::DecodeError),
    /// A pod annotation that cannot be used.
    #[error(transparent)]
    Annotation(#[from] npwg::selection::AnnotationError),
    /// A network the pod asks for that does not exist.
    #[error("{0}")]
    NetworkNotFound(String),
    /// A network as a whole: its config (a NAD's spec.config or a file) cannot be used, or its
    /// STATUS or GC failed.
    #[error("network {network}: {source}")]
    Network {
        network: String,
        #[source]
        source: Box<CniError>,
    },
    /// Namespace isolation refuses a reference to another namespace.
    #[error("namespace isolation: pod in namespace {pod_ns:?} may not use {what} from namespace {target_ns:?} (allowed: its own namespace and {allowed:?})")]
    Isolation {
        pod_ns: String,
        target_ns: String,
        what: String,
        allowed: Vec<String>,
    },
    /// A delegate failed: the network, the interface, and the delegate's own error.
    #[error("network {network} on interface {ifname}: {source}")]
    Delegate {
        network: String,
        ifname: String,
        #[source]
        source: Box<CniError>,
    },
    /// A request the delegate cannot honour (`ips`/`mac` without the capability, an interface
    /// name already taken).
    #[error("network {network} on interface {ifname}: {msg}")]
    Request {
        network: String,
        ifname: String,
        msg: String,
    },
    /// A network the admission policy denies, refused on the node.
    #[error("network {network} on interface {ifname}: refused by the admission policy {}: {msg}", policy.display())]
    Refused {
        network: String,
        ifname: String,
        policy: std::path::PathBuf,
        msg: String,
    },
    /// The kubelet's device checkpoint, read for a network whose NAD names a resource.
    #[error("network {network}: {source}")]
    Checkpoint {
        network: String,
        #[source]
        source: kubelet::checkpoint::CheckpointError,
    },
    /// The kubelet's pod-resources API, asked for a network whose NAD names a resource.
    #[error("network {network}: {source}")]
    PodResources {
        network: String,
        #[source]
        source: kubelet::pod_resources::PodResourcesError,
    },
    /// A network whose NAD names a device plugin resource, with no device of it for the pod.
    #[error("network {network}: {msg}")]
    NoDevice { network: String, msg: String },
    /// The delegate cache in cniDir.
    #[error("delegate cache {path}: {msg}")]
    Cache { path: String, msg: String },
    /// Kubernetes API calls, as the client reported them.
    #[error("kubernetes: {0}")]
    Kube(Box<k8s::K8sError>),
    /// The pod the runtime names is not in the API.
    #[error("kubernetes: pod {0} not found")]
    PodNotFound(String),
    /// The pod the runtime names is not the one the API has.
    #[error("pod {pod}: the runtime says UID {expected:?} but the API has {actual:?}")]
    UidMismatch {
        pod: String,
        expected: String,
        actual: String,
    },
    /// Another multus call on the same container did not finish in time.
    #[error("{0}")]
    Busy(String),
    /// The readiness indicator file did not appear in time.
    #[error("the cluster network is not ready: {0}")]
    NotReady(String),
    /// Kernel state in the pod's namespace (interfaces, default routes); the errno is kept.
    #[error("{context}: {source}")]
    Netlink {
        context: String,
        #[source]
        source: netkit::Error,
    },
    /// The pod's namespace is not as multus left it.
    #[error("{0}")]
    PodState(String),
    /// Several failures of one command (DEL, GC), all reported.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(" / "))]
    Many(Vec<Error>),
    /// A protocol-level failure (environment, version, result conversion).
    #[error(transparent)]
    Cni(Box<CniError>),
}

impl From<k8s::K8sError> for Error {
    fn from(e: k8s::K8sError) -> Error {
        Error::Kube(Box::new(e))
    }
}

impl Error {
    /// A netlink failure in the pod, with what was being done.
    pub fn netlink(context: impl Into<String>, source: netkit::Error) -> Error {
        Error::Netlink {
            context: context.into(),
            source,
        }
    }

    pub fn config(key: &str, msg: impl Into<String>) -> Error {
        Error::Config {
            key: key.to_owned(),
            msg: msg.into(),
        }
    }

    pub fn code(&self) -> u32 {
        match self {
            Error::Config { .. }
            | Error::ConfigValue(_)
            | Error::Annotation(_)
            | Error::NetworkNotFound(_)
            | Error::Isolation { .. }
            | Error::Request { .. }
            | Error::Refused { .. }
            | Error::NoDevice { .. } => Code::InvalidConfig as u32,
            Error::Network { source, .. } | Error::Delegate { source, .. } | Error::Cni(source) => {
                source.code
            }
            Error::Cache { .. } | Error::Checkpoint { .. } => Code::Io as u32,
            Error::PodNotFound(_) | Error::PodResources { .. } | Error::Busy(_) => {
                Code::TryAgainLater as u32
            }
            Error::NotReady(_) => Code::PluginNotAvailable as u32,
            Error::UidMismatch { .. } => Code::UnknownContainer as u32,
            Error::Kube(e) => e.cni_code() as u32,
            Error::Netlink { .. } | Error::PodState(_) => Code::Io as u32,
            Error::Many(errors) => errors.first().map_or(Code::Internal as u32, Error::code),
        }
    }

    /// The CNI error object the runtime gets.
    pub fn to_cni(&self) -> CniError {
        CniError {
            cni_version: String::new(),
            code: self.code(),
            msg: self.to_string(),
            details: String::new(),
        }
    }
}

impl From<CniError> for Error {
    fn from(e: CniError) -> Error {
        Error::Cni(Box::new(e))
    }
}

pub type Result<T> = std::result::Result<T, Error>;
