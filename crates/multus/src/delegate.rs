//! A delegate: one network multus attaches (a conf or a conflist, exec'd like a runtime would),
//! with what the pod asked of it; and the delegate cache `<cniDir>/<containerID>`, in the file
//! format upstream multus writes, so DEL works from either implementation's file.

use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::net::IpAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cni::network::Network;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::container_lock;
use crate::error::{Error, Result};
use crate::selection::Selection;

#[derive(Clone, Debug, PartialEq)]
pub struct Delegate {
    /// The name network-status shows: `<namespace>/<nad>` for a NAD, else the network's own.
    pub name: String,
    pub network: Network,
    pub ifname_request: Option<String>,
    pub mac: Option<String>,
    pub ips: Vec<String>,
    pub infiniband_guid: Option<String>,
    pub device_id: Option<String>,
    /// The device plugin resource of the NAD (`k8s.v1.cni.cncf.io/resourceName`).
    pub resource_name: Option<String>,
    pub port_mappings: Option<Value>,
    pub bandwidth: Option<Value>,
    /// `default-route`: the gateways this network's interface is to carry.
    pub default_route: Vec<IpAddr>,
    /// Remove this interface's IPv4/IPv6 default routes (another network has `default-route`).
    pub filter_v4_gateway: bool,
    pub filter_v6_gateway: bool,
}

/// multus under its upstream binary names: never a delegate.
const MULTUS_TYPES: &[&str] = &["multus", "multus-shim"];

/// Refuses a network one of whose plugins is multus: its own multus settings (`logFile`,
/// `cniDir`, `kubeconfig`, ...) would run with the node's privileges, and it could select
/// itself again without end. `is_multus` tells a type that is multus under another name.
fn refuse_multus(network: &Network, origin: &str, is_multus: impl Fn(&str) -> bool) -> Result<()> {
    for (index, plugin) in network.plugins().iter().enumerate() {
        let plugin_type = plugin
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if MULTUS_TYPES.contains(&plugin_type) || is_multus(plugin_type) {
            return Err(Error::Network {
                network: origin.to_owned(),
                source: Box::new(cni::CniError::invalid_config(format!(
                    "plugin {index} is {plugin_type:?}, which runs multus itself: a network \
                     cannot delegate to multus (its multus settings would apply on the node, \
                     and it could call itself without end)"
                ))),
            });
        }
    }
    Ok(())
}

impl Delegate {
    /// A delegate from a config (conf or conflist). `origin` says where it came from, for errors.
    pub fn from_config(bytes: &[u8], origin: &str) -> Result<Delegate> {
        let network = Network::parse(bytes).map_err(|source| Error::Network {
            network: origin.to_owned(),
            source: Box::new(source),
        })?;
        refuse_multus(&network, origin, |_| false)?;
        Ok(Delegate {
            name: network.name.clone(),
            network,
            ifname_request: None,
            mac: None,
            ips: Vec::new(),
            infiniband_guid: None,
            device_id: None,
            resource_name: None,
            port_mappings: None,
            bandwidth: None,
            default_route: Vec::new(),
            filter_v4_gateway: false,
            filter_v6_gateway: false,
        })
    }

    /// The delegate for a selection whose NAD config is `config`: the NAD's name is injected
    /// when the config has none, `cni-args` go to every plugin as `args.cni`, and a device the
    /// kubelet allocated for the NAD's resource to every plugin as `deviceID` and `pciBusID`
    /// (upstream's keys); that device wins over the selection's `deviceID`, as upstream.
    pub fn for_selection(
        config: &str,
        selection: &Selection,
        allocated_device: Option<&str>,
    ) -> Result<Delegate> {
        let origin = format!("{}/{}", selection.namespace, selection.name);
        let bad = |msg: String| Error::Network {
            network: origin.clone(),
            source: Box::new(cni::CniError::decoding(msg)),
        };
        let mut value: Map<String, Value> = match cni::decode::read_any(config.as_bytes()) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(bad("spec.config must be a JSON object".to_owned())),
            Err(e) => return Err(bad(format!("spec.config is {e}"))),
        };
        let has_name = value
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !has_name {
            value.insert("name".into(), selection.name.clone().into());
        }
        for_each_plugin(&mut value, |plugin| {
            if let Some(args) = &selection.cni_args {
                inject_cni_args(plugin, args);
            }
            if let Some(id) = allocated_device {
                plugin.insert("deviceID".into(), id.into());
                plugin.insert("pciBusID".into(), id.into());
            }
        });
        let bytes = serde_json::to_vec(&value).map_err(|e| bad(e.to_string()))?;
        let mut delegate = Delegate::from_config(&bytes, &origin)?;
        delegate.name = origin;
        delegate.ifname_request = selection.interface.clone();
        delegate.mac = selection.mac.clone();
        delegate.ips = selection.ips.clone();
        delegate.infiniband_guid = selection.infiniband_guid.clone();
        delegate.device_id = allocated_device
            .map(str::to_owned)
            .or_else(|| selection.device_id.clone());
        delegate.port_mappings = selection.port_mappings.clone();
        delegate.bandwidth = selection.bandwidth.clone();
        delegate.default_route = selection.default_route.clone();
        Ok(delegate)
    }

    /// Fails when a plugin of this delegate, looked up in `path`, is this very binary (multus
    /// linked or copied under another name).
    pub fn refuse_this_binary(&self, path: &[PathBuf]) -> Result<()> {
        refuse_multus(&self.network, &self.name, |plugin_type| {
            cni::invoke::find_in_path(plugin_type, path)
                .is_ok_and(|bin| cni::invoke::is_this_executable(&bin))
        })
    }

    /// The interface this delegate gets: its request, the runtime's for the cluster network
    /// (index 0), `net<index>` otherwise.
    pub fn ifname(&self, runtime_ifname: &str, index: usize) -> String {
        match &self.ifname_request {
            Some(name) => name.clone(),
            None if index == 0 => runtime_ifname.to_owned(),
            None => format!("net{index}"),
        }
    }

    /// What the delegate is offered as runtime config: the cluster network (index 0) gets the
    /// runtime's own; every other delegate gets only what its selection asked for.
    pub fn capability_args(
        &self,
        index: usize,
        runtime: &Map<String, Value>,
    ) -> Map<String, Value> {
        let mut args = if index == 0 {
            runtime.clone()
        } else {
            Map::new()
        };
        if let Some(p) = &self.port_mappings {
            args.insert("portMappings".into(), p.clone());
        }
        if let Some(b) = &self.bandwidth {
            args.insert("bandwidth".into(), b.clone());
        }
        if !self.ips.is_empty() {
            args.insert("ips".into(), self.ips.clone().into());
        }
        if let Some(mac) = &self.mac {
            args.insert("mac".into(), mac.clone().into());
        }
        if let Some(guid) = &self.infiniband_guid {
            args.insert("infinibandGUID".into(), guid.clone().into());
        }
        if let Some(id) = &self.device_id {
            args.insert("deviceID".into(), id.clone().into());
        }
        args
    }

    /// Whether this delegate gets a device-info file: it has a device ID (the reference's
    /// rule), or one of its plugins declares the `CNIDeviceInfoFile` capability.
    pub fn uses_device_info(&self) -> bool {
        self.device_id.is_some() || self.network.has_capability(crate::devinfo::CAPABILITY)
    }

    /// Fails when the selection asks for `ips` or `mac` and no plugin of this delegate declares
    /// the capability to receive it.
    pub fn check_capabilities(&self, ifname: &str) -> Result<()> {
        for (asked, capability) in [(!self.ips.is_empty(), "ips"), (self.mac.is_some(), "mac")] {
            if asked && !self.network.has_capability(capability) {
                return Err(Error::Request {
                    network: self.name.clone(),
                    ifname: ifname.to_owned(),
                    msg: format!(
                        "the selection asks for {capability:?} but no plugin in this network declares \"capabilities\": {{\"{capability}\": true}}"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Runs `f` on a conf, or on every plugin of a conflist.
fn for_each_plugin(config: &mut Map<String, Value>, mut f: impl FnMut(&mut Map<String, Value>)) {
    match config.get_mut("plugins") {
        Some(Value::Array(plugins)) => plugins
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .for_each(f),
        Some(_) => {}
        None => f(config),
    }
}

fn inject_cni_args(conf: &mut Map<String, Value>, args: &Map<String, Value>) {
    let outer = conf
        .entry("args")
        .or_insert_with(|| Value::Object(Map::new()));
    if !outer.is_object() {
        *outer = Value::Object(Map::new());
    }
    if let Value::Object(outer) = outer {
        let cni = outer
            .entry("cni")
            .or_insert_with(|| Value::Object(Map::new()));
        if !cni.is_object() {
            *cni = Value::Object(Map::new());
        }
        if let Value::Object(cni) = cni {
            cni.extend(args.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
}

/// One delegate as upstream's cache file holds it (field names are upstream's).
#[derive(Serialize, Deserialize)]
struct CachedDelegate {
    #[serde(rename = "Conf", default)]
    conf: Value,
    #[serde(rename = "ConfList", default)]
    conf_list: Value,
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(
        rename = "ifnameRequest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    ifname_request: Option<String>,
    #[serde(
        rename = "macRequest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    mac: Option<String>,
    #[serde(
        rename = "infinibandGUIDRequest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    infiniband_guid: Option<String>,
    #[serde(rename = "ipRequest", default, skip_serializing_if = "Vec::is_empty")]
    ips: Vec<String>,
    #[serde(
        rename = "default-route",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    default_route: Vec<IpAddr>,
    #[serde(rename = "IsFilterV4Gateway", default)]
    filter_v4_gateway: bool,
    #[serde(rename = "IsFilterV6Gateway", default)]
    filter_v6_gateway: bool,
    #[serde(rename = "deviceID", default, skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    #[serde(
        rename = "resourceName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    resource_name: Option<String>,
    /// Ours: upstream does not keep these, so its DEL cannot pass them on.
    #[serde(
        rename = "portMappings",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    port_mappings: Option<Value>,
    #[serde(rename = "bandwidth", default, skip_serializing_if = "Option::is_none")]
    bandwidth: Option<Value>,
    #[serde(rename = "Bytes", default, with = "cni::cache::base64_bytes")]
    bytes: Vec<u8>,
}

impl CachedDelegate {
    fn from_delegate(d: &Delegate) -> CachedDelegate {
        let config: Value = serde_json::from_slice(d.network.bytes()).unwrap_or_default();
        let pick = |keys: &[&str]| {
            let mut m = Map::new();
            for k in keys {
                if let Some(v) = config.get(*k) {
                    m.insert((*k).to_owned(), v.clone());
                }
            }
            Value::Object(m)
        };
        let (conf, conf_list) = if d.network.is_list() {
            (
                pick(&["cniVersion", "name"]),
                pick(&["cniVersion", "name", "plugins"]),
            )
        } else {
            (
                pick(&["cniVersion", "name", "type", "capabilities", "ipam", "dns"]),
                pick(&[]),
            )
        };
        CachedDelegate {
            conf,
            conf_list,
            name: d.name.clone(),
            ifname_request: d.ifname_request.clone(),
            mac: d.mac.clone(),
            infiniband_guid: d.infiniband_guid.clone(),
            ips: d.ips.clone(),
            default_route: d.default_route.clone(),
            filter_v4_gateway: d.filter_v4_gateway,
            filter_v6_gateway: d.filter_v6_gateway,
            device_id: d.device_id.clone(),
            resource_name: d.resource_name.clone(),
            port_mappings: d.port_mappings.clone(),
            bandwidth: d.bandwidth.clone(),
            bytes: d.network.bytes().to_vec(),
        }
    }

    fn into_delegate(self, fallback_version: &str) -> std::result::Result<Delegate, String> {
        if self.bytes.is_empty() {
            return Err(format!(
                "delegate {} has no config (Bytes)",
                cni::quote::quote(&self.name)
            ));
        }
        let bytes = with_list_version(&self.bytes, fallback_version);
        let network = Network::parse(&bytes).map_err(|e| {
            format!(
                "delegate {} has an unusable config: {e}",
                cni::quote::quote(&self.name)
            )
        })?;
        Ok(Delegate {
            name: if self.name.is_empty() {
                network.name.clone()
            } else {
                self.name
            },
            network,
            ifname_request: self.ifname_request.filter(|s| !s.is_empty()),
            mac: self.mac.filter(|s| !s.is_empty()),
            ips: self.ips,
            infiniband_guid: self.infiniband_guid.filter(|s| !s.is_empty()),
            device_id: self.device_id.filter(|s| !s.is_empty()),
            resource_name: self.resource_name.filter(|s| !s.is_empty()),
            port_mappings: self.port_mappings,
            bandwidth: self.bandwidth,
            default_route: self.default_route,
            filter_v4_gateway: self.filter_v4_gateway,
            filter_v6_gateway: self.filter_v6_gateway,
        })
    }
}

/// A conflist cached without `cniVersion` gets multus's own, as upstream's DEL does.
fn with_list_version(bytes: &[u8], version: &str) -> Vec<u8> {
    if version.is_empty() {
        return bytes.to_vec();
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(mut o))
            if o.contains_key("plugins")
                && o.get("cniVersion")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty) =>
        {
            o.insert("cniVersion".into(), version.into());
            serde_json::to_vec(&o).unwrap_or_else(|_| bytes.to_vec())
        }
        _ => bytes.to_vec(),
    }
}

/// `<cniDir>/<containerID>`.
pub fn cache_path(cni_dir: &Path, container_id: &str) -> PathBuf {
    cni_dir.join(container_id)
}

fn cache_error(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Cache {
        path: path.display().to_string(),
        msg: msg.to_string(),
    }
}

/// Puts the delegate list in place atomically, so DEL never finds a torn file; it is synced to
/// disk on a thread of its own while the delegates run, and [`CacheSync::wait`] waits for that.
pub fn save_cache(cni_dir: &Path, container_id: &str, delegates: &[Delegate]) -> Result<CacheSync> {
    let path = cache_path(cni_dir, container_id);
    let entries: Vec<CachedDelegate> = delegates
        .iter()
        .map(CachedDelegate::from_delegate)
        .collect();
    let bytes = serde_json::to_vec(&entries).map_err(|e| cache_error(&path, e))?;
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(cni_dir)
        .map_err(|e| cache_error(cni_dir, format!("cannot create: {e}")))?;
    let placed = cni::atomic_file::place(&path, &bytes, 0o600)
        .map_err(|e| cache_error(&path, format!("cannot write: {e}")))?;
    let syncing = std::thread::spawn(move || {
        placed
            .sync()
            .map_err(|e| cache_error(&path, format!("cannot sync to disk: {e}")))
    });
    Ok(CacheSync(syncing))
}

/// A delegate cache on its way to disk.
pub struct CacheSync(std::thread::JoinHandle<Result<()>>);

impl CacheSync {
    /// Returns once the cache survives a machine crash.
    pub fn wait(self) -> Result<()> {
        self.0.join().unwrap_or_else(|_| {
            Err(cni::CniError::internal("the delegate cache sync panicked").into())
        })
    }
}

/// Reads the delegate list; `None` when there is no file, or an empty one (written, but lost
/// to a machine crash before it reached the disk). A file that cannot be read or decoded is an
/// error naming it.
pub fn load_cache(
    cni_dir: &Path,
    container_id: &str,
    cni_version: &str,
) -> Result<Option<Vec<Delegate>>> {
    let path = cache_path(cni_dir, container_id);
    let bytes = match cni::input::read_file(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cache_error(&path, format!("cannot read: {e}"))),
    };
    if bytes.is_empty() {
        tracing::warn!(
            "delegate cache {} is empty: lost to a machine crash before it reached the disk",
            path.display()
        );
        return Ok(None);
    }
    // serde_json quotes a misplaced string whole: cut it.
    let entries: Vec<CachedDelegate> = serde_json::from_slice(&bytes).map_err(|e| {
        cache_error(
            &path,
            format!("corrupt: {}", cni::quote::shorten(&e.to_string())),
        )
    })?;
    if entries.is_empty() {
        return Err(cache_error(&path, "corrupt: no delegates"));
    }
    entries
        .into_iter()
        .map(|e| e.into_delegate(cni_version))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
        .map_err(|msg| cache_error(&path, format!("corrupt: {msg}")))
}

/// Removes the delegate cache, and the temp files that calls killed mid-write left for this
/// container in cniDir and in its result cache. Only a call that holds the container's lock
/// (DEL, a failed ADD, GC) calls this, so no other call is writing them.
pub fn remove_cache(cni_dir: &Path, container_id: &str) -> Result<()> {
    let path = cache_path(cni_dir, container_id);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            return Err(cache_error(&path, format!("cannot remove: {e}")));
        }
        _ => {}
    }
    let own = cni::atomic_file::remove_temp_files(cni_dir, |t| t == container_id)
        .map_err(|e| cache_error(cni_dir, format!("cannot remove temporary files: {e}")))?;
    let results = cni::cache::remove_temp_files(cni_dir, container_id)?;
    for path in own.iter().chain(&results) {
        tracing::info!("removed {}, left by a call that was killed", path.display());
    }
    Ok(())
}

/// Moves an unreadable cache file to `<cniDir>/corrupt/<containerID>`, out of the way of the
/// next DEL and of GC, and kept for whoever investigates. Returns where it went.
pub fn quarantine_cache(cni_dir: &Path, container_id: &str) -> Result<PathBuf> {
    let dir = cni_dir.join("corrupt");
    let aside = dir.join(container_id);
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .and_then(|()| std::fs::rename(cache_path(cni_dir, container_id), &aside))
        .map_err(|e| cache_error(&aside, format!("cannot move the corrupt cache here: {e}")))?;
    Ok(aside)
}

/// Every container ID that multus holds files of in `cni_dir` (for GC): a delegate cache, the
/// temp file of one, or the lock that a killed call left in `locks/`.
pub fn cached_containers(cni_dir: &Path) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for dir in [cni_dir.to_path_buf(), cni_dir.join(container_lock::DIR)] {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(cache_error(&dir, format!("cannot list: {e}"))),
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let name = entry.file_name();
            let id = cni::atomic_file::temp_target(&name).unwrap_or(&name);
            if let Some(id) = id.to_str().filter(|id| cni::env::is_valid_name(id)) {
                ids.push(id.to_owned());
            }
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}
