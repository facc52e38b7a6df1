//! The shim's `00-multus.conf` (`multusConfigFile: auto`), as upstream's daemon writes it: the
//! cluster network named by path (`clusterNetwork`), `type: multus-shim`, and the daemon's
//! settings the shim and the calls need, in upstream's key order, one line, mode 0600. It is
//! written again whenever the cluster network's config changes or the file is changed or
//! removed by someone else.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::config::DaemonConfig;
use crate::install::conf::{capabilities, primary_in};

pub const FILE_NAME: &str = "00-multus.conf";

/// Keys of the daemon's config that go into the file, in upstream's order around the ones
/// written here.
const LOG_KEYS: [&str; 4] = ["logFile", "logLevel", "logToStderr", "logOptions"];
const BEFORE_TYPE: [&str; 2] = ["namespaceIsolation", "globalNamespaces"];
const AFTER_TYPE: [&str; 3] = ["cniDir", "auxiliaryCNIChainName", "daemonSocketDir"];

pub struct ShimConf<'a> {
    config: &'a DaemonConfig,
    /// What was last written, so an unchanged file is left alone.
    written: Option<Vec<u8>>,
}

impl<'a> ShimConf<'a> {
    pub fn new(config: &'a DaemonConfig) -> ShimConf<'a> {
        ShimConf {
            config,
            written: None,
        }
    }

    pub fn path(&self) -> PathBuf {
        self.config.cni_config_dir.join(FILE_NAME)
    }

    /// The file's bytes, from the cluster network's config; `Err` says what is missing or
    /// wrong.
    pub fn render(&self) -> Result<(PathBuf, Vec<u8>), String> {
        let c = self.config;
        let primary = match &c.master_cni {
            Some(name) => c.autoconfig_dir.join(name),
            None => primary_in(&c.autoconfig_dir)?,
        };
        let text = cni::input::read_file(&primary)
            .map_err(|e| format!("the cluster network's config {}: {e}", primary.display()))?;
        let delegate: Map<String, Value> = serde_json::from_slice(&text).map_err(|e| {
            format!(
                "the cluster network's config {} is not a JSON object: {e}",
                primary.display()
            )
        })?;
        let version = match (&c.cni_version, delegate.get("cniVersion")) {
            (Some(v), _) => v.clone(),
            (None, Some(Value::String(v))) => v.clone(),
            _ => {
                return Err(format!(
                    "cniVersion: set it in the daemon's config, or in {}",
                    primary.display()
                ))
            }
        };
        let mut caps = capabilities(&delegate)
            .map_err(|e| format!("the cluster network's config {}: {e}", primary.display()))?;
        if let Some(Value::Object(own)) = c.keys.get("capabilities") {
            caps.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let name = match c.keys.get("overrideNetworkName") {
            Some(Value::Bool(true)) => delegate
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or(crate::install::conf::MULTUS_NETWORK_NAME)
                .to_owned(),
            _ => crate::install::conf::MULTUS_NETWORK_NAME.to_owned(),
        };
        let mut out = Map::new();
        let copy = |out: &mut Map<String, Value>, keys: &[&str]| {
            for key in keys {
                if let Some(v) = c.keys.get(*key).filter(|v| !v.is_null()) {
                    out.insert((*key).to_owned(), v.clone());
                }
            }
        };
        copy(&mut out, &["binDir"]);
        if !caps.is_empty() {
            out.insert("capabilities".into(), Value::Object(caps));
        }
        out.insert("cniVersion".into(), json!(version));
        copy(&mut out, &LOG_KEYS);
        out.insert("name".into(), json!(name));
        out.insert(
            "clusterNetwork".into(),
            json!(primary.display().to_string()),
        );
        copy(&mut out, &BEFORE_TYPE);
        out.insert("type".into(), json!("multus-shim"));
        copy(&mut out, &AFTER_TYPE);
        let bytes = serde_json::to_vec(&Value::Object(out)).map_err(|e| e.to_string())?;
        Ok((primary, bytes))
    }

    /// Writes the file when it would change; `Ok(true)` when it was written.
    pub fn refresh(&mut self) -> Result<bool, String> {
        let (_, bytes) = self.render()?;
        let path = self.path();
        let on_disk = std::fs::read(&path).ok();
        if self.written.as_deref() == Some(&bytes[..]) && on_disk.as_deref() == Some(&bytes[..]) {
            return Ok(false);
        }
        cni::atomic_file::write(&path, &bytes, 0o600)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        self.written = Some(bytes);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_keys_in_upstreams_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("10-flannel.conflist"),
            r#"{"cniVersion": "0.3.1", "name": "cbr0",
                "plugins": [{"type": "flannel"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("00-multus.conf"), "{}").unwrap();
        let text = format!(
            r#"{{"cniVersion": "0.3.1", "logLevel": "verbose", "logToStderr": true,
                "cniConfigDir": "{0}", "multusAutoconfigDir": "{0}", "socketDir": "/host/run/multus/",
                "daemonSocketDir": "/run/multus/", "cniDir": "/var/lib/cni/multus"}}"#,
            dir.path().display()
        );
        let config = DaemonConfig::parse(text.as_bytes()).unwrap();
        let mut conf = ShimConf::new(&config);
        assert!(conf.refresh().unwrap());
        let written = std::fs::read_to_string(conf.path()).unwrap();
        assert_eq!(
            written,
            format!(
                r#"{{"capabilities":{{"portMappings":true}},"cniVersion":"0.3.1","logLevel":"verbose","logToStderr":true,"name":"multus-cni-network","clusterNetwork":"{}/10-flannel.conflist","type":"multus-shim","cniDir":"/var/lib/cni/multus","daemonSocketDir":"/run/multus/"}}"#,
                dir.path().display()
            )
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(conf.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Unchanged: not written again; removed by someone else: written again.
        assert!(!conf.refresh().unwrap());
        std::fs::remove_file(conf.path()).unwrap();
        assert!(conf.refresh().unwrap());
        // No cluster network yet: says what it waits for.
        let empty = tempfile::tempdir().unwrap();
        let text = format!(r#"{{"multusAutoconfigDir": "{}"}}"#, empty.path().display());
        let config = DaemonConfig::parse(text.as_bytes()).unwrap();
        let e = ShimConf::new(&config).render().unwrap_err();
        assert!(e.starts_with("a CNI config in"), "{e}");
    }
}
