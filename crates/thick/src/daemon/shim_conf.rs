//! The shim's `00-multus.conf` (`multusConfigFile: auto`), as upstream's daemon writes it: the
//! cluster network named by path (`clusterNetwork`), `type: multus-shim`, and the daemon's
//! settings the shim and the calls need, in upstream's key order, one line, mode 0600. It is
//! written again whenever the cluster network's config changes or the file is changed or
//! removed by someone else.
//!
//! The shim runs on the node, and reads the paths in the file itself when the daemon is down
//! (its DEL): they are written as the node sees them. With `chrootDir`, the daemon's pod has
//! the node's root, and may see the node's directories elsewhere (deploy/thick, as upstream's
//! DaemonSet, mounts the node's /etc/cni/net.d at /host/etc/cni/net.d and /run at /host/run):
//! the node's path of a directory is the longest tail of the daemon's path that is the same
//! directory under the node's root. Upstream writes the daemon's paths.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::config::DaemonConfig;
use crate::wire;
use nodekit::primary::{capabilities, primary_in};

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

    /// What the node calls the daemon's directory `dir`, when the daemon can tell: its own
    /// path without `chrootDir`, the node's path found through it otherwise.
    fn on_node(&self, dir: &Path) -> Option<PathBuf> {
        let Some(root) = &self.config.chroot_dir else {
            return Some(dir.to_owned());
        };
        let identity = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        let id = identity(dir)?;
        let parts: Vec<_> = dir
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        (0..parts.len()).find_map(|skip| {
            let tail: PathBuf = parts[skip..].iter().collect();
            (identity(&root.join(&tail)) == Some(id)).then(|| Path::new("/").join(tail))
        })
    }

    /// The file's bytes, from the cluster network's config, and the daemon's directories in
    /// it whose node path could not be found (written as the daemon sees them); `Err` says
    /// what is missing or wrong.
    pub fn render(&self) -> Result<(Vec<u8>, Vec<PathBuf>), String> {
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
                .unwrap_or(nodekit::primary::MULTUS_NETWORK_NAME)
                .to_owned(),
            _ => nodekit::primary::MULTUS_NETWORK_NAME.to_owned(),
        };
        let mut unmapped = Vec::new();
        let mut on_node = |dir: &Path| {
            self.on_node(dir).unwrap_or_else(|| {
                unmapped.push(dir.to_owned());
                dir.to_owned()
            })
        };
        let cluster_network = match (primary.parent(), primary.file_name()) {
            (Some(dir), Some(file)) => on_node(dir).join(file),
            _ => primary.clone(),
        };
        let cni_dir = c
            .keys
            .get("cniDir")
            .and_then(Value::as_str)
            .map(|d| on_node(Path::new(d)));
        // Unset, the shim looks in its default: said only when the node's path is another.
        let socket_dir = match c.keys.get("daemonSocketDir") {
            None | Some(Value::Null) if c.chroot_dir.is_some() => {
                let found = self.on_node(&c.socket_dir);
                if found.is_none() {
                    unmapped.push(c.socket_dir.clone());
                }
                found.filter(|d| d.as_path() != Path::new(wire::DEFAULT_SOCKET_DIR))
            }
            _ => None,
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
            json!(cluster_network.display().to_string()),
        );
        copy(&mut out, &BEFORE_TYPE);
        out.insert("type".into(), json!("multus-shim"));
        copy(&mut out, &AFTER_TYPE);
        if let Some(dir) = cni_dir {
            out.insert("cniDir".into(), json!(dir.display().to_string()));
        }
        if let Some(dir) = socket_dir {
            out.insert("daemonSocketDir".into(), json!(dir.display().to_string()));
        }
        let bytes = serde_json::to_vec(&Value::Object(out)).map_err(|e| e.to_string())?;
        Ok((bytes, unmapped))
    }

    /// Writes the file when it would change; `Ok(true)` when it was written.
    pub fn refresh(&mut self) -> Result<bool, String> {
        let (bytes, unmapped) = self.render()?;
        let path = self.path();
        let on_disk = std::fs::read(&path).ok();
        if self.written.as_deref() == Some(&bytes[..]) && on_disk.as_deref() == Some(&bytes[..]) {
            return Ok(false);
        }
        // A runtime's own config directory under /run is gone after a reboot until this makes
        // it again (docs/install.md, "A config directory of multus's own").
        std::fs::create_dir_all(&self.config.cni_config_dir)
            .map_err(|e| format!("making {}: {e}", self.config.cni_config_dir.display()))?;
        cni::atomic_file::write(&path, &bytes, 0o600)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        for dir in unmapped {
            tracing::warn!(
                "{} is no directory of the node's under chrootDir: {} names it as this daemon \
                 sees it, which the shim cannot read with the daemon down",
                dir.display(),
                path.display()
            );
        }
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

    #[test]
    fn a_config_directory_that_is_gone_is_made_again() {
        // The runtime's own directory on a tmpfs, the cluster network's in /etc: after a
        // reboot only the second is there.
        let node = tempfile::tempdir().unwrap();
        let (etc, run) = (
            node.path().join("etc"),
            node.path().join("run/multus/cni/net.d"),
        );
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(
            etc.join("10-flannel.conf"),
            r#"{"cniVersion": "0.3.1", "name": "cbr0", "type": "flannel"}"#,
        )
        .unwrap();
        let config = DaemonConfig::parse(
            json!({"cniConfigDir": run, "multusAutoconfigDir": etc})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        let mut conf = ShimConf::new(&config);
        assert!(conf.refresh().unwrap());
        assert_eq!(conf.path(), run.join(FILE_NAME));
        std::fs::remove_dir_all(node.path().join("run")).unwrap();
        assert!(conf.refresh().unwrap());
        assert!(conf.path().is_file());
    }

    #[test]
    fn paths_are_written_as_the_node_sees_them_through_chroot_dir() {
        // The node's root, and the daemon's view of its directories elsewhere (symlinks
        // stand in for the DaemonSet's mounts here: the same directories).
        let root = tempfile::tempdir().unwrap();
        let pod = tempfile::tempdir().unwrap();
        for dir in ["etc/cni/net.d", "var/lib/cni/multus", "run/multus"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::create_dir_all(pod.path().join("host/etc/cni")).unwrap();
        std::os::unix::fs::symlink(
            root.path().join("etc/cni/net.d"),
            pod.path().join("host/etc/cni/net.d"),
        )
        .unwrap();
        std::os::unix::fs::symlink(root.path().join("run"), pod.path().join("host/run")).unwrap();
        std::fs::write(
            root.path().join("etc/cni/net.d/10-flannel.conf"),
            r#"{"cniVersion": "0.3.1", "name": "cbr0", "type": "flannel"}"#,
        )
        .unwrap();
        let pod_dir = |p: &str| pod.path().join(p).display().to_string();
        let config = DaemonConfig::parse(
            json!({"chrootDir": root.path(), "cniConfigDir": pod_dir("host/etc/cni/net.d"),
                   "socketDir": pod_dir("host/run/multus"),
                   "cniDir": root.path().join("var/lib/cni/multus")})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let (bytes, unmapped) = ShimConf::new(&config).render().unwrap();
        let written: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(written["clusterNetwork"], "/etc/cni/net.d/10-flannel.conf");
        assert_eq!(written["cniDir"], "/var/lib/cni/multus");
        // The shim's default: left out, as upstream writes it.
        assert!(written.get("daemonSocketDir").is_none(), "{written}");
        assert!(unmapped.is_empty());
        // A directory that is none of the node's is written as it is (the socket's, not at
        // all), and said.
        let elsewhere = tempfile::tempdir().unwrap();
        let mut config = config;
        config.socket_dir = elsewhere.path().to_owned();
        config.cni_config_dir = elsewhere.path().to_owned();
        config.autoconfig_dir = elsewhere.path().to_owned();
        std::fs::write(
            elsewhere.path().join("10-flannel.conf"),
            r#"{"cniVersion": "0.3.1", "name": "cbr0", "type": "flannel"}"#,
        )
        .unwrap();
        let (bytes, unmapped) = ShimConf::new(&config).render().unwrap();
        let written: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            written["clusterNetwork"],
            json!(elsewhere.path().join("10-flannel.conf"))
        );
        assert!(written.get("daemonSocketDir").is_none(), "{written}");
        assert_eq!(unmapped, [elsewhere.path(), elsewhere.path()]);
    }
}
