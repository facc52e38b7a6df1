//! The delegate cache `<cniDir>/<containerID>`: the delegates of one container, in the file
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
use crate::delegate::Delegate;
use crate::error::{Error, Result};

/// One delegate as upstream's cache file holds it (field names are upstream's); a key that is
/// missing reads as empty.
#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct CachedDelegate {
    #[serde(rename = "Conf")]
    conf: Value,
    #[serde(rename = "ConfList")]
    conf_list: Value,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "ifnameRequest", skip_serializing_if = "Option::is_none")]
    ifname_request: Option<String>,
    #[serde(rename = "macRequest", skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
    #[serde(
        rename = "infinibandGUIDRequest",
        skip_serializing_if = "Option::is_none"
    )]
    infiniband_guid: Option<String>,
    #[serde(rename = "ipRequest", skip_serializing_if = "Vec::is_empty")]
    ips: Vec<String>,
    #[serde(rename = "default-route", skip_serializing_if = "Vec::is_empty")]
    default_route: Vec<IpAddr>,
    #[serde(rename = "IsFilterV4Gateway")]
    filter_v4_gateway: bool,
    #[serde(rename = "IsFilterV6Gateway")]
    filter_v6_gateway: bool,
    #[serde(rename = "deviceID", skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    #[serde(rename = "resourceName", skip_serializing_if = "Option::is_none")]
    resource_name: Option<String>,
    /// Ours: upstream does not keep these, so its DEL cannot pass them on.
    #[serde(rename = "portMappings", skip_serializing_if = "Option::is_none")]
    port_mappings: Option<Value>,
    #[serde(rename = "bandwidth", skip_serializing_if = "Option::is_none")]
    bandwidth: Option<Value>,
    #[serde(rename = "Bytes", with = "cni::cache::base64_bytes")]
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
            // Not in upstream's cache format, and not needed there: DEL and GC find a claimed
            // address by container ID, as any other.
            ipam_claim: None,
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
pub fn path(cni_dir: &Path, container_id: &str) -> PathBuf {
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
pub fn save<'a>(
    cni_dir: &Path,
    container_id: &str,
    delegates: impl Iterator<Item = &'a Delegate>,
) -> Result<CacheSync> {
    let path = path(cni_dir, container_id);
    let entries: Vec<CachedDelegate> = delegates.map(CachedDelegate::from_delegate).collect();
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
pub fn load(
    cni_dir: &Path,
    container_id: &str,
    cni_version: &str,
) -> Result<Option<Vec<Delegate>>> {
    let path = path(cni_dir, container_id);
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
pub fn remove(cni_dir: &Path, container_id: &str) -> Result<()> {
    let path = path(cni_dir, container_id);
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
pub fn quarantine(cni_dir: &Path, container_id: &str) -> Result<PathBuf> {
    let dir = cni_dir.join("corrupt");
    let aside = dir.join(container_id);
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .and_then(|()| std::fs::rename(path(cni_dir, container_id), &aside))
        .map_err(|e| cache_error(&aside, format!("cannot move the corrupt cache here: {e}")))?;
    Ok(aside)
}

/// Every container ID that multus holds files of in `cni_dir` (for GC): a delegate cache, the
/// temp file of one, or the lock that a killed call left in `locks/`.
pub fn containers(cni_dir: &Path) -> Result<Vec<String>> {
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
