//! Which delegates a pod gets, in order: the cluster network (or the pod's default-network
//! annotation), the `defaultNetworks`, then the networks the pod's annotation selects.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cni::network::Network;
use serde_json::Value;

use super::devices::PodDevices;
use crate::api::{Api, Nad, Pod};
use crate::config::MultusConf;
use crate::delegate::Delegate;
use crate::error::{Error, Result};
use npwg::selection::{self, Selection};

/// NADs read ahead by `(namespace, name)`: what the API answered for each.
pub type NadsRead = RefCell<BTreeMap<(String, String), Result<Option<Nad>>>>;

/// Everything the resolution reads.
pub struct Networks<'a> {
    pub conf: &'a MultusConf,
    pub api: Option<&'a dyn Api>,
    pub pod: Option<&'a Pod>,
    /// The pod's namespace from `K8S_POD_NAMESPACE` (known even without the API).
    pub pod_namespace: &'a str,
    /// The pod's devices, for NADs naming a device plugin resource; `None` where the pod is
    /// not known.
    pub devices: Option<PodDevices>,
    /// NADs read ahead, side by side, by `(namespace, name)`.
    pub read: NadsRead,
}

impl Networks<'_> {
    fn is_system_namespace(&self) -> bool {
        self.conf
            .system_namespaces
            .iter()
            .any(|ns| ns == self.pod_namespace)
    }

    /// The full delegate list for ADD (and for DEL without a cache).
    pub fn delegates(&self) -> Result<Vec<Delegate>> {
        self.read_ahead(true);
        let mut delegates = self.resolve_cluster_networks()?;
        if let Some(text) = self.annotation(selection::DEFAULT_NETWORK_ANNOTATION) {
            let sel = selection::parse_default_network(text, &self.conf.multus_namespace)?;
            self.check_isolation(&sel, "the default network", true)?;
            delegates[0] = self.nad_delegate(&sel)?;
        }
        for (_, delegate) in self.selected()? {
            delegates.push(delegate?);
        }
        mark_gateway_filters(&mut delegates)?;
        Ok(delegates)
    }

    /// The networks the pod's annotation selects, in its order, each resolved on its own: its
    /// selection, and its delegate or why it cannot be had. An annotation that does not parse
    /// is an error for them all.
    pub fn selected(&self) -> Result<Vec<(Selection, Result<Delegate>)>> {
        self.read_ahead(true);
        // An empty annotation selects nothing, as upstream reads it.
        let Some(text) = self
            .annotation(selection::NETWORKS_ANNOTATION)
            .filter(|text| !text.is_empty())
        else {
            return Ok(Vec::new());
        };
        let selections =
            selection::parse(selection::NETWORKS_ANNOTATION, text, self.pod_namespace)?;
        Ok(selections
            .into_iter()
            .map(|sel| {
                let delegate = self
                    .check_isolation(&sel, "networks", false)
                    .and_then(|()| self.nad_delegate(&sel));
                (sel, delegate)
            })
            .collect())
    }

    /// `auxiliaryCNIChainName`: a list named after the chain, `passthru` first, then the
    /// plugins of the chain's directory next to `clusterNetwork` (upstream builds it the same
    /// way). It runs after every other delegate; `None` when the directory holds no plugins.
    pub fn auxiliary_chain(&self) -> Result<Option<Delegate>> {
        let Some(chain) = &self.conf.auxiliary_cni_chain_name else {
            return Ok(None);
        };
        let cluster = &self.conf.cluster_network;
        // The directory part, as upstream takes it (a trailing `/` names the directory itself).
        let dir = match cluster.rfind('/') {
            Some(0) => "/",
            Some(end) => &cluster[..end],
            None => {
                return Err(Error::config(
                    "auxiliaryCNIChainName",
                    format!(
                        "the chain's directory is found next to clusterNetwork, so clusterNetwork must be a path, not {cluster:?}"
                    ),
                ))
            }
        };
        let list = serde_json::json!({
            "cniVersion": self.conf.cni_version,
            "name": chain,
            "plugins": [{"type": "passthru", "name": "passthru-cni"}],
        });
        let network = Network::parse_list_in_dir(
            list.to_string().as_bytes(),
            &self.conf.node_path(Path::new(dir)),
        )
        .map_err(|source| Error::Network {
            network: format!("auxiliaryCNIChainName {chain:?}"),
            source: Box::new(source),
        })?;
        if network.plugins().len() < 2 {
            tracing::debug!("auxiliary chain {chain:?}: no plugins in {dir}/{chain}");
            return Ok(None);
        }
        Delegate::from_config(network.bytes(), chain).map(Some)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.pod?.annotations.get(key).map(String::as_str)
    }

    /// Reads every NAD the resolution will ask for in one round, side by side: those the
    /// configuration names and, with `annotations`, those the pod's annotations select. A
    /// selection that does not parse or that isolation refuses is left to the resolution,
    /// which fails on it where it always did.
    fn read_ahead(&self, annotations: bool) {
        let Some(api) = self.api else { return };
        let conf = self.conf;
        let ns = &conf.multus_namespace;
        let mut names: Vec<(String, String)> = Vec::new();
        let mut by_name = |reference: &String| {
            if !reference.contains('/') {
                names.push((ns.clone(), reference.clone()));
            }
        };
        if !conf.cluster_network.is_empty() {
            by_name(&conf.cluster_network);
        }
        if !self.is_system_namespace() {
            conf.default_networks.iter().for_each(by_name);
        }
        if annotations {
            let default = self
                .annotation(selection::DEFAULT_NETWORK_ANNOTATION)
                .and_then(|text| selection::parse_default_network(text, ns).ok())
                .filter(|sel| self.check_isolation(sel, "", true).is_ok());
            let selected = self
                .annotation(selection::NETWORKS_ANNOTATION)
                .filter(|text| !text.is_empty())
                .and_then(|text| {
                    selection::parse(selection::NETWORKS_ANNOTATION, text, self.pod_namespace).ok()
                })
                .unwrap_or_default();
            let allowed = selected
                .into_iter()
                .take_while(|sel| self.check_isolation(sel, "", false).is_ok());
            for sel in default.into_iter().chain(allowed) {
                names.push((sel.namespace, sel.name));
            }
        }
        let mut read = self.read.borrow_mut();
        names.sort();
        names.dedup();
        names.retain(|name| !read.contains_key(name));
        if names.is_empty() {
            return;
        }
        let wanted: Vec<(&str, &str)> = names
            .iter()
            .map(|(namespace, name)| (namespace.as_str(), name.as_str()))
            .collect();
        let answers = api.nads(&wanted);
        read.extend(names.into_iter().zip(answers));
    }

    /// A NAD from the API, as read ahead (one read serves every selection of it).
    fn nad(&self, api: &dyn Api, namespace: &str, name: &str) -> Result<Option<Nad>> {
        let key = (namespace.to_owned(), name.to_owned());
        let mut read = self.read.borrow_mut();
        match read.remove(&key) {
            Some(Ok(nad)) => {
                read.insert(key, Ok(nad.clone()));
                Ok(nad)
            }
            Some(Err(e)) => Err(e),
            None => api.nad(namespace, name),
        }
    }

    /// The cluster network (delegate 0), the rest of the inline delegates, and the
    /// `defaultNetworks` unless the pod is in a system namespace.
    pub fn cluster_networks(&self) -> Result<Vec<Delegate>> {
        self.read_ahead(false);
        self.resolve_cluster_networks()
    }

    fn resolve_cluster_networks(&self) -> Result<Vec<Delegate>> {
        let conf = self.conf;
        let mut delegates = Vec::new();
        if conf.cluster_network.is_empty() {
            delegates = inline_delegates(conf)?;
        } else {
            delegates.push(self.network_by_reference(&conf.cluster_network, "clusterNetwork")?);
        }
        if !self.is_system_namespace() {
            for name in &conf.default_networks {
                delegates.push(self.network_by_reference(name, "defaultNetworks")?);
            }
        }
        Ok(delegates)
    }

    /// `clusterNetwork`/`defaultNetworks` entries: a path (file or directory), or a name: a
    /// NAD in `multusNamespace`, else a network in `confDir`.
    fn network_by_reference(&self, reference: &str, key: &str) -> Result<Delegate> {
        if reference.contains('/') {
            let path = &self.conf.node_path(Path::new(reference));
            let bytes = if path.is_dir() {
                first_config_in(path, None)?.ok_or_else(|| {
                    Error::config(key, format!("no .conf or .conflist file in {reference}"))
                })?
            } else {
                let bytes = cni::input::read_file(path)
                    .map_err(|e| Error::config(key, format!("cannot read {reference}: {e}")))?;
                if reference.ends_with(".conflist") {
                    // A conflist file gets the plugins of its plugin subdirectory (CNI 1.1),
                    // as upstream loads it.
                    let dir = path.parent().unwrap_or(Path::new("."));
                    let network = Network::parse_list_in_dir(&bytes, dir).map_err(|source| {
                        Error::Network {
                            network: reference.to_owned(),
                            source: Box::new(source),
                        }
                    })?;
                    return Delegate::from_config(network.bytes(), reference);
                }
                bytes
            };
            return Delegate::from_config(&bytes, reference);
        }
        let ns = &self.conf.multus_namespace;
        if let Some(api) = self.api {
            if let Some(nad) = self.nad(api, ns, reference)? {
                let sel = Selection {
                    name: reference.to_owned(),
                    namespace: ns.clone(),
                    ..Selection::default()
                };
                let mut d = self.delegate_from_nad(&nad, &sel)?;
                // The cluster network is shown under the network's own name; defaultNetworks,
                // like selected networks, as <namespace>/<nad> (as upstream shows them).
                if key == "clusterNetwork" {
                    d.name = d.network.name.clone();
                }
                return Ok(d);
            }
        }
        match first_config_in(&self.conf.node_path(&self.conf.conf_dir), Some(reference))? {
            Some(bytes) => Delegate::from_config(&bytes, reference),
            None => Err(Error::NetworkNotFound(format!(
                "{key} {reference:?}: no NetworkAttachmentDefinition {ns}/{reference}{} and no network named {reference:?} in {}",
                if self.api.is_none() { " (no Kubernetes API configured)" } else { "" },
                self.conf.conf_dir.display()
            ))),
        }
    }

    fn check_isolation(&self, sel: &Selection, what: &str, is_default: bool) -> Result<()> {
        if !self.conf.namespace_isolation || sel.namespace == self.pod_namespace {
            return Ok(());
        }
        let mut allowed = self.conf.global_namespaces.clone();
        if is_default {
            allowed.push(self.conf.multus_namespace.clone());
        }
        if allowed.contains(&sel.namespace) {
            return Ok(());
        }
        Err(Error::Isolation {
            pod_ns: self.pod_namespace.to_owned(),
            target_ns: sel.namespace.clone(),
            what: format!("{what} ({}/{})", sel.namespace, sel.name),
            allowed,
        })
    }

    /// The delegate for a selected NAD. A missing NAD is an error and a `NoNetworkFound`
    /// event on the pod.
    fn nad_delegate(&self, sel: &Selection) -> Result<Delegate> {
        let found = match self.api {
            Some(api) => self.nad(api, &sel.namespace, &sel.name)?,
            None => None,
        };
        let Some(nad) = found else {
            let msg = format!(
                "cannot find a network-attachment-definition ({}) in namespace ({}){}",
                sel.name,
                sel.namespace,
                if self.api.is_none() {
                    ": no Kubernetes API configured"
                } else {
                    ""
                }
            );
            return Err(Error::NetworkNotFound(msg));
        };
        self.delegate_from_nad(&nad, sel)
    }

    /// A NAD's delegate, with its resource name; an empty `spec.config` means the network of
    /// that name in `confDir`.
    /// A NAD naming a resource gets the pod's next device of it (upstream's precedence: over
    /// the selection's `deviceID`).
    fn delegate_from_nad(&self, nad: &Nad, sel: &Selection) -> Result<Delegate> {
        let device = match (&nad.resource_name, &self.devices) {
            (Some(resource), Some(devices)) => {
                devices.next(resource, &format!("{}/{}", sel.namespace, sel.name))?
            }
            _ => None,
        };
        let mut d = self.delegate_from_nad_config(&nad.config, sel, device.as_deref())?;
        d.resource_name.clone_from(&nad.resource_name);
        Ok(d)
    }

    fn delegate_from_nad_config(
        &self,
        config: &str,
        sel: &Selection,
        device: Option<&str>,
    ) -> Result<Delegate> {
        if !config.trim().is_empty() {
            return Delegate::for_selection(config, sel, device);
        }
        let bytes = first_config_in(&self.conf.node_path(&self.conf.conf_dir), Some(&sel.name))?.ok_or_else(|| {
            Error::NetworkNotFound(format!(
                "NetworkAttachmentDefinition {}/{} has an empty spec.config and {} holds no network named {:?}",
                sel.namespace,
                sel.name,
                self.conf.conf_dir.display(),
                sel.name
            ))
        })?;
        let text = String::from_utf8_lossy(&bytes);
        Delegate::for_selection(&text, sel, device)
    }
}

/// The config's inline `delegates`; a bad one is a config error naming `delegates[<i>]`.
pub fn inline_delegates(conf: &MultusConf) -> Result<Vec<Delegate>> {
    conf.delegates
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let key = format!("delegates[{i}]");
            serde_json::to_vec(d)
                .map_err(|e| Error::config(&key, e.to_string()))
                .and_then(|bytes| {
                    Delegate::from_config(&bytes, &key)
                        .map_err(|e| Error::config(&key, e.to_string()))
                })
        })
        .collect()
}

/// The first config file in `dir` (by file name) whose network is `name` (any, with `None`):
/// `.conf`, `.json` and `.conflist` files, as libcni lists them.
fn first_config_in(dir: &Path, name: Option<&str>) -> Result<Option<Vec<u8>>> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or_default();
                match name {
                    Some(_) => matches!(ext, "conf" | "json" | "conflist"),
                    None => matches!(ext, "conf" | "conflist"),
                }
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::config(
                "confDir",
                format!("cannot list {}: {e}", dir.display()),
            ))
        }
    };
    files.sort();
    for file in files {
        let bytes = cni::input::read_file(&file).map_err(|e| {
            Error::config("confDir", format!("cannot read {}: {e}", file.display()))
        })?;
        let value: Value = cni::decode::read_any(&bytes)
            .map_err(|e| Error::config("confDir", format!("{} is {e}", file.display())))?;
        let file_name = value
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_none_or(|n| n == file_name) {
            return Ok(Some(bytes));
        }
    }
    Ok(None)
}

/// At most one gateway per family over all `default-route` requests; for each family that
/// is requested, every other delegate's default route of that family is removed.
fn mark_gateway_filters(delegates: &mut [Delegate]) -> Result<()> {
    let all: Vec<_> = delegates
        .iter()
        .flat_map(|d| d.default_route.iter())
        .collect();
    let v4 = all.iter().filter(|g| g.is_ipv4()).count();
    if v4 > 1 || all.len() - v4 > 1 {
        return Err(selection::AnnotationError {
            annotation: selection::NETWORKS_ANNOTATION.to_owned(),
            msg: "default-route: more than one gateway of one family over all networks (multus does not do ECMP)".to_owned(),
        }
        .into());
    }
    let (want_v4, want_v6) = (v4 > 0, all.len() > v4);
    for d in delegates.iter_mut() {
        d.filter_v4_gateway = want_v4 && !d.default_route.iter().any(|g| g.is_ipv4());
        d.filter_v6_gateway = want_v6 && !d.default_route.iter().any(|g| g.is_ipv6());
    }
    Ok(())
}
