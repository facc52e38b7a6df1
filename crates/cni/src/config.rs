//! Network configurations: a single plugin's config and the list form (`.conflist`).
//!
//! Fields this crate does not know stay in `extra` in their original order, so a config handed on
//! to a delegate means exactly what the user wrote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{CniError, Code, Version};

/// The keys every plugin config has (SPEC.md "Plugin configuration objects").
///
/// Plugins embed it with `#[serde(flatten)]` next to their own options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    #[serde(default)]
    pub cni_version: String,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capabilities: BTreeMap<String, bool>,
    /// An object when present: a NAD whose `ipam` is a string or a list is refused, not read
    /// as having no IPAM (which would leave the pod without addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_result: Option<Value>,
    /// Set by the runtime for GC: the attachments that are still in use.
    #[serde(
        rename = "cni.dev/valid-attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_attachments: Option<Vec<GcAttachment>>,
}

impl NetConf {
    /// The parsed `cniVersion`.
    pub fn version(&self) -> Result<Version, CniError> {
        Version::from_config(&self.cni_version)
    }

    /// The IPAM plugin type, when the config names one.
    pub fn ipam_type(&self) -> Option<&str> {
        self.ipam
            .as_ref()?
            .get("type")?
            .as_str()
            .filter(|t| !t.is_empty())
    }

    /// `runtimeConfig.<key>`, when present.
    pub fn runtime_config(&self, key: &str) -> Option<&Value> {
        self.runtime_config.as_ref()?.get(key)
    }

    /// `args.cni.<key>`, when present (the CONVENTIONS.md args form).
    pub fn args_cni(&self, key: &str) -> Option<&Value> {
        self.args.as_ref()?.get("cni")?.get(key)
    }
}

/// Decodes a plugin's config from stdin bytes. Every error is code 6 and names the key, as
/// [`crate::decode`] writes it.
pub fn parse_plugin_config<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CniError> {
    crate::decode::from_slice(bytes).map_err(CniError::from)
}

impl From<crate::decode::DecodeError> for CniError {
    fn from(e: crate::decode::DecodeError) -> CniError {
        CniError::decoding(e.to_string())
    }
}

/// Checks a network name like libcni does.
pub fn validate_network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::invalid_config(
            "name: required, but missing (a network config needs a name)",
        ));
    }
    if !crate::env::is_valid_name(name) {
        return Err(CniError::invalid_config(format!(
            "name: {} has invalid characters for a network name: use letters, digits, '_', '.' \
             and '-', starting with a letter or digit",
            crate::quote::quote(name)
        )));
    }
    // The name names files and directories (the result cache, host-local's store): a longer
    // one cannot work, and its I/O errors would quote it whole in their paths.
    const NAME_MAX: usize = 255;
    if name.len() > NAME_MAX {
        return Err(CniError::invalid_config(format!(
            "name: {} is {} bytes long: a network name is at most {NAME_MAX}, as it names files",
            crate::quote::quote(name),
            name.len()
        )));
    }
    Ok(())
}

/// DNS settings, in configs and results.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self == &Dns::default()
    }

    /// Adds `other`'s entries that are not here yet; our own domain wins.
    pub fn merge(&mut self, other: &Dns) {
        fn add_missing(into: &mut Vec<String>, from: &[String]) {
            for item in from {
                if !into.contains(item) {
                    into.push(item.clone());
                }
            }
        }
        add_missing(&mut self.nameservers, &other.nameservers);
        add_missing(&mut self.search, &other.search);
        add_missing(&mut self.options, &other.options);
        if self.domain.is_empty() {
            self.domain = other.domain.clone();
        }
    }
}

/// One attachment that GC must keep.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

/// A network configuration list (`.conflist`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConfList {
    #[serde(default)]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cni_versions: Vec<String>,
    #[serde(default)]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "bool_or_string"
    )]
    pub disable_check: bool,
    #[serde(
        rename = "disableGC",
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "bool_or_string"
    )]
    pub disable_gc: bool,
    #[serde(default)]
    pub plugins: Vec<Map<String, Value>>,
    /// Only the `plugins` written in the list; none from its plugin subdirectory.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "bool_or_string"
    )]
    pub load_only_inlined_plugins: bool,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NetConfList {
    /// A list with its plugins written inline, as a runtime or a NAD hands it over.
    pub fn parse(bytes: &[u8]) -> Result<NetConfList, CniError> {
        NetConfList::decode(bytes)?.checked()
    }

    /// A list that lives in the directory `conf_dir`: its inline plugins, then (CNI 1.1)
    /// those of its plugin subdirectory `<conf_dir>/<name>/`, unless `loadOnlyInlinedPlugins`.
    pub fn parse_in_dir(bytes: &[u8], conf_dir: &Path) -> Result<NetConfList, CniError> {
        let mut list = NetConfList::decode(bytes)?;
        if !list.load_only_inlined_plugins {
            list.plugins
                .extend(plugin_configs_in(&conf_dir.join(&list.name))?);
        }
        list.checked()
    }

    fn decode(bytes: &[u8]) -> Result<NetConfList, CniError> {
        let list: NetConfList = crate::decode::from_slice(bytes)?;
        validate_network_name(&list.name)?;
        Ok(list)
    }

    fn checked(self) -> Result<NetConfList, CniError> {
        if self.plugins.is_empty() {
            return Err(CniError::invalid_config(format!(
                "plugins: configuration list {} has no plugins",
                crate::quote::quote(&self.name)
            )));
        }
        for (i, plugin) in self.plugins.iter().enumerate() {
            match plugin.get("type").and_then(Value::as_str) {
                Some(t) if !t.is_empty() => {}
                _ => {
                    return Err(CniError::invalid_config(format!(
                        "plugins[{i}].type: plugin {i} of configuration list {} has no type",
                        crate::quote::quote(&self.name)
                    )))
                }
            }
        }
        Ok(self)
    }

    /// The version the list speaks. With `cniVersions`, libcni takes the highest version it
    /// supports among those and `cniVersion`; otherwise it is `cniVersion`.
    pub fn effective_version(&self) -> Result<Version, CniError> {
        let best = self
            .cni_versions
            .iter()
            .chain(std::iter::once(&self.cni_version))
            .filter_map(|v| v.parse::<Version>().ok())
            .max();
        match best {
            Some(v) if !self.cni_versions.is_empty() => Ok(v),
            _ => Version::from_config(&self.cni_version),
        }
    }

    /// The config that plugin `index` receives, built as libcni does: the list's name and
    /// version, the runtime config the plugin declared capabilities for, and `prevResult`.
    pub fn plugin_config(
        &self,
        index: usize,
        runtime_config: &Map<String, Value>,
        prev_result: Option<&Value>,
    ) -> Result<Map<String, Value>, CniError> {
        let plugin = self.plugins.get(index).ok_or_else(|| {
            CniError::internal(format!("configuration list has no plugin {index}"))
        })?;
        let version = self.effective_version()?;
        let mut conf = plugin.clone();
        conf.insert("name".into(), Value::String(self.name.clone()));
        conf.insert("cniVersion".into(), Value::String(version.to_string()));
        inject_runtime_config(&mut conf, runtime_config);
        if let Some(prev) = prev_result {
            conf.insert("prevResult".into(), prev.clone());
        }
        Ok(conf)
    }
}

/// The plugin configs of a plugin subdirectory: its `.conf` files in file-name order, each
/// one plugin's config. A directory that does not exist holds none; a file that cannot be read
/// or is not a plugin config is an error naming it.
pub fn plugin_configs_in(dir: &Path) -> Result<Vec<Map<String, Value>>, CniError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CniError::io(format!(
                "cannot list plugin configs in {}: {e}",
                dir.display()
            )))
        }
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "conf"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|file| {
            let bytes = crate::input::read_file(file)
                .map_err(|e| CniError::io(format!("cannot read {}: {e}", file.display())))?;
            let plugin: Map<String, Value> = crate::decode::from_slice(&bytes).map_err(|e| {
                CniError::decoding(format!("plugin config {}: {e}", file.display()))
            })?;
            match plugin.get("type").and_then(Value::as_str) {
                Some(t) if !t.is_empty() => Ok(plugin),
                _ => Err(CniError::invalid_config(format!(
                    "plugin config {} has no type",
                    file.display()
                ))),
            }
        })
        .collect()
}

/// libcni reads `disableCheck` and `disableGC` as a bool or as "true"/"false" in any case.
fn bool_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Text(String),
    }
    match Flag::deserialize(d)? {
        Flag::Bool(b) => Ok(b),
        Flag::Text(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Flag::Text(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        Flag::Text(s) => Err(serde::de::Error::invalid_value(
            serde::de::Unexpected::Str(&s),
            &"true or false",
        )),
    }
}

/// Adds `runtimeConfig` entries for the capabilities the plugin declares (libcni semantics:
/// only capabilities set to true, only keys the runtime supplied).
pub fn inject_runtime_config(conf: &mut Map<String, Value>, runtime_config: &Map<String, Value>) {
    let Some(caps) = conf.get("capabilities").and_then(Value::as_object) else {
        return;
    };
    let wanted: Map<String, Value> = caps
        .iter()
        .filter(|(_, on)| on.as_bool() == Some(true))
        .filter_map(|(cap, _)| runtime_config.get(cap).map(|v| (cap.clone(), v.clone())))
        .collect();
    if wanted.is_empty() {
        return;
    }
    let rc = conf
        .entry("runtimeConfig")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(rc) = rc {
        rc.extend(wanted);
    }
}

/// Whether a config's JSON is a list (has `plugins`) or a single plugin.
pub fn is_config_list(value: &Value) -> bool {
    value.get("plugins").is_some()
}

/// Returns an error for a list-only version check failure.
pub fn require_version(have: Version, need: Version, what: &str) -> Result<(), CniError> {
    if have < need {
        return Err(CniError::new(
            Code::IncompatibleVersion,
            format!("config version {have} does not allow {what}"),
        ));
    }
    Ok(())
}
