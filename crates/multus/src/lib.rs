//! The multus meta-plugin: the container runtime calls it as the node's CNI network; it calls
//! the cluster network for the pod's first interface and one delegate per network the pod's
//! annotation selects, writes what the pod got to its network-status annotation, and undoes
//! everything when any part fails. Also the node installer (`multus install`).

pub mod api;
pub mod cmd;
pub mod config;
pub mod delegate;
pub mod error;
pub mod install;
pub mod log;
pub mod resolve;
pub mod route;
pub mod selection;
pub mod status;
pub mod tryout;

pub use error::{Error, Result};

/// Connects to the Kubernetes API the configuration names; without a kubeconfig there is no
/// API, and multus attaches the cluster network and `defaultNetworks` only.
pub fn connect(conf: &config::MultusConf) -> Result<Option<Box<dyn api::Api>>> {
    match &conf.kubeconfig {
        None => Ok(None),
        Some(path) => Err(Error::Api(format!(
            "kubeconfig {}: this build has no Kubernetes client",
            path.display()
        ))),
    }
}
