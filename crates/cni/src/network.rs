//! Running a whole network the way libcni does, for callers that act as a runtime (multus):
//! a single plugin config or a list, with `prevResult` chaining, runtime config injected only
//! for the capabilities each plugin declares, DEL in reverse order, and the result cache.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::cache::{self, CachedAttachment};
use crate::invoke::{self, DelegateEnv};
use crate::{CniError, CniResult, Code, Command, GcAttachment, NetConfList, Version};

/// A network config: one plugin, or a list of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub name: String,
    pub version: Version,
    pub disable_check: bool,
    pub disable_gc: bool,
    plugins: Vec<Map<String, Value>>,
    is_list: bool,
    /// The config as given; this is what the result cache records.
    bytes: Vec<u8>,
}

/// One attachment of a network: what libcni calls the runtime config.
#[derive(Clone, Copy, Debug)]
pub struct Attachment<'a> {
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    /// `CNI_ARGS` pairs, in order.
    pub args: &'a [(String, String)],
    /// Runtime config offered to plugins that declare the capability (`ips`, `mac`, ...).
    pub capability_args: &'a Map<String, Value>,
    pub path: &'a [PathBuf],
    pub cache_dir: &'a Path,
}

impl<'a> Attachment<'a> {
    /// For STATUS and GC, which concern the network rather than one container.
    fn network_wide(
        path: &'a [PathBuf],
        cache_dir: &'a Path,
        no_args: &'a Map<String, Value>,
    ) -> Attachment<'a> {
        Attachment {
            container_id: "",
            netns: "",
            ifname: "",
            args: &[],
            capability_args: no_args,
            path,
            cache_dir,
        }
    }

    /// The delegate's environment, `CNI_ARGS` already joined into `args`.
    fn env<'b>(&'b self, args: &'b str) -> DelegateEnv<'b> {
        DelegateEnv {
            container_id: self.container_id,
            netns: self.netns,
            ifname: self.ifname,
            args,
            path: self.path,
            addresses_in_use: "",
        }
    }
}

impl Network {
    /// Reads a config or a config list (a JSON object with `plugins`).
    pub fn parse(bytes: &[u8]) -> Result<Network, CniError> {
        let object = crate::decode::read_object(bytes)
            .map_err(|e| CniError::decoding(format!("error parsing network config: {e}")))?;
        if object.contains_key("plugins") {
            return Network::from_list(NetConfList::parse(bytes)?, bytes.to_vec());
        }
        let name = object
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        crate::config::validate_network_name(&name)?;
        match object.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => {}
            _ => {
                return Err(CniError::invalid_config(format!(
                    "type: network {} has no plugin type",
                    crate::quote::quote(&name)
                )))
            }
        }
        let version = Version::from_config(
            object
                .get("cniVersion")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )?;
        Ok(Network {
            name,
            version,
            disable_check: false,
            disable_gc: false,
            plugins: vec![object],
            is_list: false,
            bytes: bytes.to_vec(),
        })
    }

    /// A config list that lives in `conf_dir`, with the plugins of its plugin subdirectory
    /// (see [`NetConfList::parse_in_dir`]). The config recorded (and cached) is the whole list.
    pub fn parse_list_in_dir(bytes: &[u8], conf_dir: &Path) -> Result<Network, CniError> {
        let list = NetConfList::parse_in_dir(bytes, conf_dir)?;
        let whole = serde_json::to_vec(&list)
            .map_err(|e| CniError::internal(format!("cannot encode configuration list: {e}")))?;
        Network::from_list(list, whole)
    }

    fn from_list(list: NetConfList, bytes: Vec<u8>) -> Result<Network, CniError> {
        Ok(Network {
            name: list.name.clone(),
            version: list.effective_version()?,
            disable_check: list.disable_check,
            disable_gc: list.disable_gc,
            plugins: list.plugins,
            is_list: true,
            bytes,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn is_list(&self) -> bool {
        self.is_list
    }

    /// The plugins' own configs, in order.
    pub fn plugins(&self) -> &[Map<String, Value>] {
        &self.plugins
    }

    /// Whether any plugin declares `capability` (`"capabilities": {"<name>": true}`).
    pub fn has_capability(&self, capability: &str) -> bool {
        self.plugins.iter().any(|p| {
            p.get("capabilities")
                .and_then(|c| c.get(capability))
                .and_then(Value::as_bool)
                == Some(true)
        })
    }

    fn plugin_type(&self, index: usize) -> &str {
        self.plugins[index]
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The stdin a runtime gives plugin `index` for a command on no container (STATUS, GC):
    /// its config with the list's name and version.
    pub fn plugin_stdin(&self, index: usize) -> Result<Vec<u8>, CniError> {
        self.plugin_config(index, &Map::new(), None)
    }

    /// The stdin of plugin `index`: the list's name and version, the capability args it
    /// declared, and `prevResult`.
    fn plugin_config(
        &self,
        index: usize,
        capability_args: &Map<String, Value>,
        prev_result: Option<&Value>,
    ) -> Result<Vec<u8>, CniError> {
        encode(&self.plugin_map(index, capability_args, prev_result))
    }

    fn plugin_map(
        &self,
        index: usize,
        capability_args: &Map<String, Value>,
        prev_result: Option<&Value>,
    ) -> Map<String, Value> {
        let mut conf = self.plugins[index].clone();
        if self.is_list {
            conf.insert("name".into(), self.name.clone().into());
            conf.insert("cniVersion".into(), self.version.as_str().into());
        }
        crate::config::inject_runtime_config(&mut conf, capability_args);
        if let Some(prev) = prev_result {
            conf.insert("prevResult".into(), prev.clone());
        }
        conf
    }

    fn exec(
        &self,
        index: usize,
        command: Command,
        att: &Attachment,
        stdin: &[u8],
    ) -> Result<Option<Value>, CniError> {
        let args = join_args(att.args);
        invoke::delegate(self.plugin_type(index), command, &att.env(&args), stdin)
    }

    /// ADD: every plugin in order, each given the previous one's result; the last result is
    /// cached and returned, in the network's version.
    pub fn add(&self, att: &Attachment) -> Result<CniResult, CniError> {
        let (result, entry) = self.add_uncached(att)?;
        cache::write(att.cache_dir, &entry)?;
        Ok(result)
    }

    /// [`Network::add`] without writing the result cache: the entry is returned for the
    /// caller to write (after adjusting it, or while other work goes on).
    pub fn add_uncached(
        &self,
        att: &Attachment,
    ) -> Result<(CniResult, CachedAttachment), CniError> {
        let mut prev: Option<Value> = None;
        let mut result = CniResult::default();
        for index in 0..self.plugins.len() {
            let stdin = self.plugin_config(index, att.capability_args, prev.as_ref())?;
            let args = join_args(att.args);
            result = invoke::delegate_add(self.plugin_type(index), &att.env(&args), &stdin)?;
            prev = Some(result.to_value(self.version)?);
        }
        let entry = CachedAttachment {
            container_id: att.container_id.to_owned(),
            config: self.bytes.clone(),
            ifname: att.ifname.to_owned(),
            network_name: self.name.clone(),
            netns: att.netns.to_owned(),
            cni_args: att.args.to_vec(),
            capability_args: att.capability_args.clone(),
            result: prev,
        };
        Ok((result, entry))
    }

    /// The cached result of this attachment in the network's version, when there is one.
    pub fn cached_result(&self, att: &Attachment) -> Result<Option<Value>, CniError> {
        let Some(cached) = cache::read(att.cache_dir, &self.name, att.container_id, att.ifname)?
        else {
            return Ok(None);
        };
        let Some(result) = cached.result else {
            return Ok(None);
        };
        let result = CniResult::from_value(&result)?;
        result.to_value(self.version).map(Some)
    }

    /// DEL: every plugin in reverse order (with the cached result as `prevResult` from 0.4.0
    /// on), then the cache entry goes. Every plugin is called even when one fails; the errors
    /// are joined. A plugin whose type cannot be found in the path (or is no file name) is
    /// skipped: the returned list says why, for the caller's log.
    pub fn del(&self, att: &Attachment) -> Result<Vec<String>, CniError> {
        let prev = if self.version >= Version::V0_4_0 {
            self.cached_result(att)?
        } else {
            None
        };
        let mut errors: Vec<CniError> = Vec::new();
        let mut skipped = Vec::new();
        for index in (0..self.plugins.len()).rev() {
            // A plugin that cannot be run made nothing that it could delete now: DEL must
            // not be stuck on it (a NAD naming no real plugin, a binary since removed).
            if let Err(e) = invoke::find_in_path(self.plugin_type(index), att.path) {
                skipped.push(e.msg);
                continue;
            }
            let outcome = self
                .plugin_config(index, att.capability_args, prev.as_ref())
                .and_then(|stdin| self.exec(index, Command::Del, att, &stdin));
            if let Err(e) = outcome {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            cache::remove(att.cache_dir, &self.name, att.container_id, att.ifname)?;
            return Ok(skipped);
        }
        Err(join_errors(errors))
    }

    /// CHECK: every plugin, each with the cached result; needs 0.4.0 and a cached result.
    pub fn check(&self, att: &Attachment) -> Result<(), CniError> {
        if !self.version.has_check() {
            return Err(CniError::new(
                Code::IncompatibleVersion,
                format!(
                    "network {:?} is version {}: CHECK needs 0.4.0 or later",
                    self.name, self.version
                ),
            ));
        }
        if self.disable_check {
            return Ok(());
        }
        let prev = self.cached_result(att)?.ok_or_else(|| {
            CniError::new(
                Code::UnknownContainer,
                format!(
                    "no cached result for network {:?}, container {}, interface {}",
                    self.name, att.container_id, att.ifname
                ),
            )
        })?;
        for index in 0..self.plugins.len() {
            let stdin = self.plugin_config(index, att.capability_args, Some(&prev))?;
            self.exec(index, Command::Check, att, &stdin)?;
        }
        Ok(())
    }

    /// STATUS of every plugin; networks older than 1.1.0 have no STATUS and pass.
    pub fn status(&self, path: &[PathBuf]) -> Result<(), CniError> {
        if !self.version.has_status_and_gc() {
            return Ok(());
        }
        let empty = Map::new();
        let att = Attachment::network_wide(path, Path::new(""), &empty);
        for index in 0..self.plugins.len() {
            let stdin = self.plugin_config(index, &empty, None)?;
            self.exec(index, Command::Status, &att, &stdin)?;
        }
        Ok(())
    }

    /// GC as libcni does it: DEL each cached attachment of this network that is not in
    /// `valid`, then GC on every plugin with the valid list. Networks older than 1.1.0, or with
    /// `disableGC`, are left alone. Every step runs; the errors are joined.
    pub fn gc(
        &self,
        path: &[PathBuf],
        cache_dir: &Path,
        valid: &[GcAttachment],
    ) -> Result<(), CniError> {
        if !self.version.has_status_and_gc() || self.disable_gc {
            return Ok(());
        }
        let mut errors: Vec<CniError> = self
            .del_stale(path, cache_dir, valid)
            .err()
            .into_iter()
            .collect();
        let empty = Map::new();
        let att = Attachment::network_wide(path, cache_dir, &empty);
        let valid_json = serde_json::to_value(valid)
            .map_err(|e| CniError::internal(format!("cannot encode valid attachments: {e}")))?;
        for index in 0..self.plugins.len() {
            let mut conf = self.plugin_map(index, &empty, None);
            conf.insert("cni.dev/valid-attachments".into(), valid_json.clone());
            let outcome =
                encode(&conf).and_then(|stdin| self.exec(index, Command::Gc, &att, &stdin));
            if let Err(e) = outcome {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(join_errors(errors))
        }
    }

    /// GC's first step alone, whatever the network's version (DEL is in every one): DEL each
    /// cached attachment of this network that is not in `valid`. `disableGC` leaves it alone.
    pub fn del_stale(
        &self,
        path: &[PathBuf],
        cache_dir: &Path,
        valid: &[GcAttachment],
    ) -> Result<(), CniError> {
        if self.disable_gc {
            return Ok(());
        }
        let mut errors = Vec::new();
        for entry in cache::list(cache_dir)? {
            let cached = match entry {
                Ok(cached) => cached,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let in_use = valid
                .iter()
                .any(|v| v.container_id == cached.container_id && v.ifname == cached.ifname);
            if cached.network_name != self.name || in_use {
                continue;
            }
            let att = Attachment {
                container_id: &cached.container_id,
                netns: &cached.netns,
                ifname: &cached.ifname,
                args: &cached.cni_args,
                capability_args: &cached.capability_args,
                path,
                cache_dir,
            };
            if let Err(e) = self.del(&att) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(join_errors(errors))
        }
    }
}

fn encode(conf: &Map<String, Value>) -> Result<Vec<u8>, CniError> {
    serde_json::to_vec(conf)
        .map_err(|e| CniError::internal(format!("cannot encode plugin config: {e}")))
}

/// `CNI_ARGS` from pairs.
fn join_args(args: &[(String, String)]) -> String {
    args.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// One error for several: the first one's code, every message.
fn join_errors(mut errors: Vec<CniError>) -> CniError {
    if errors.len() == 1 {
        return errors.remove(0);
    }
    let code = errors
        .first()
        .map(|e| e.code)
        .unwrap_or(Code::Internal as u32);
    let msg = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" / ");
    CniError {
        cni_version: String::new(),
        code,
        msg,
        details: String::new(),
    }
}
