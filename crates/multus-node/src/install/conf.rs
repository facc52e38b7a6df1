//! The multus config the installer writes: `00-multus.conf` (a `.conflist` from cniVersion
//! 1.0.0 on) wrapping the node's primary network as multus's first delegate.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::{log, InstallError, Options, POLL};
use cni::Version;
use nodekit::primary::{capabilities, primary_in, MULTUS_NETWORK_NAME};
use nodekit::signals::Stop;

const CONF_NAME: &str = "00-multus.conf";
const CONFLIST_NAME: &str = "00-multus.conflist";

/// Writes the multus config from the primary network's, and rewrites it when that changes.
pub struct Generator<'a> {
    opts: &'a Options,
    /// The primary config's bytes behind the file last written, so an unchanged one is left be.
    last_primary: Option<Vec<u8>>,
    /// Logged once while the primary config is gone, not every second.
    primary_missing: bool,
    /// With --rename-conf-file, the primary's path once found: its file is then `<path>.old`.
    renamed_primary: Option<PathBuf>,
}

/// The primary network's config as read from disk, and the multus config around it.
struct Rendered {
    primary: PathBuf,
    primary_bytes: Vec<u8>,
    path: PathBuf,
    bytes: Vec<u8>,
}

impl<'a> Generator<'a> {
    pub fn new(opts: &'a Options) -> Generator<'a> {
        Generator {
            opts,
            last_primary: None,
            primary_missing: false,
            renamed_primary: None,
        }
    }

    /// Waits, up to `deadline`, for the readiness indicator file and a readable primary
    /// config, then writes the multus config. A config that is wrong, rather than missing or
    /// still being written, fails at once.
    pub fn wait_and_write(&mut self, deadline: Instant, stop: &Stop) -> Result<(), InstallError> {
        loop {
            let waiting_for = match self.ready() {
                Ok(rendered) => return self.write(&rendered),
                Err(Wait::Fatal(e)) => return Err(e),
                Err(Wait::NotYet(what)) => what,
            };
            if Instant::now() >= deadline {
                return Err(InstallError::Timeout {
                    what: waiting_for,
                    seconds: self.opts.wait_timeout,
                });
            }
            if stop.wait(POLL) {
                return Err(InstallError::Invalid(format!(
                    "stopped while waiting for {waiting_for}"
                )));
            }
        }
    }

    /// One pass of the watch loop: rewrites the multus config when the primary config changed
    /// or the multus config was removed or altered by someone else.
    pub fn refresh(&mut self) -> Result<(), InstallError> {
        let rendered = match self.ready() {
            Ok(rendered) => rendered,
            Err(Wait::Fatal(e)) => return Err(e),
            Err(Wait::NotYet(what)) => {
                if !self.primary_missing {
                    log(&format!(
                        "waiting for {what}; the multus config stays as it is meanwhile"
                    ));
                }
                self.primary_missing = true;
                return Ok(());
            }
        };
        if self.primary_missing {
            log(&format!("{} is back", rendered.primary.display()));
            self.primary_missing = false;
        }
        let on_disk = std::fs::read(&rendered.path).ok();
        if self.last_primary.as_deref() == Some(&rendered.primary_bytes[..])
            && on_disk.as_deref() == Some(&rendered.bytes[..])
        {
            return Ok(());
        }
        log(&format!(
            "{} or {} changed: rewriting it",
            rendered.primary.display(),
            rendered.path.display()
        ));
        self.write(&rendered)
    }

    /// The multus config to write, once everything it depends on is there.
    fn ready(&self) -> Result<Rendered, Wait> {
        if let Some(file) = &self.opts.readiness_indicator_file {
            let seen_at = self.opts.on_host(file);
            if !seen_at.exists() {
                return Err(Wait::NotYet(format!(
                    "the readiness indicator file {}",
                    seen_at.display()
                )));
            }
        }
        let path = self.primary_path()?;
        let read_from = self
            .renamed(&path)
            .filter(|old| !path.exists() && old.exists());
        let bytes = cni::input::read_file(read_from.as_deref().unwrap_or(&path)).map_err(|e| {
            Wait::NotYet(format!(
                "the primary network's config {}: {e}",
                path.display()
            ))
        })?;
        self.render(path, bytes)
    }

    /// The primary network's file: the one named by --multus-master-cni-file-name, or the
    /// first `.conf`/`.conflist` in the autoconfig dir by name, as libcni orders them.
    fn primary_path(&self) -> Result<PathBuf, Wait> {
        if let Some(path) = &self.renamed_primary {
            return Ok(path.clone());
        }
        let dir = &self.opts.multus_autoconfig_dir;
        if let Some(name) = &self.opts.multus_master_cni_file_name {
            return Ok(dir.join(name));
        }
        primary_in(dir).map_err(Wait::NotYet)
    }

    fn renamed(&self, primary: &Path) -> Option<PathBuf> {
        self.opts.rename_conf_file.then(|| {
            let mut name = primary.as_os_str().to_owned();
            name.push(".old");
            PathBuf::from(name)
        })
    }

    /// The multus config around the primary config `bytes` read from `primary`.
    fn render(&self, primary: PathBuf, bytes: Vec<u8>) -> Result<Rendered, Wait> {
        let bad = |msg: String| {
            Wait::Fatal(InstallError::Config {
                path: primary.clone(),
                msg,
            })
        };
        // A config another process is still writing does not parse yet: wait for it.
        let delegate: Map<String, Value> = serde_json::from_slice(&bytes).map_err(|e| {
            Wait::NotYet(format!("{} to hold a JSON object ({e})", primary.display()))
        })?;
        let primary_version = delegate
            .get("cniVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                bad("no cniVersion string: multus takes its cniVersion from it".into())
            })?;
        let version = match &self.opts.cni_version {
            Some(v) if self.opts.force_cni_version => v.clone(),
            Some(v) if v != primary_version => {
                return Err(bad(format!(
                    "cniVersion is {primary_version:?} but --cni-version is {v:?}"
                )))
            }
            _ => primary_version.to_owned(),
        };
        let parsed: Version = version
            .parse()
            .map_err(|e: cni::CniError| bad(format!("cniVersion: {}", e.msg)))?;
        let name = if self.opts.override_network_name {
            delegate
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("no network name, needed by --override-network-name".into()))?
                .to_owned()
        } else {
            MULTUS_NETWORK_NAME.to_owned()
        };

        let mut multus = Map::new();
        multus.insert("type".into(), json!("multus"));
        let capabilities = capabilities(&delegate).map_err(bad)?;
        if !capabilities.is_empty() {
            multus.insert("capabilities".into(), Value::Object(capabilities));
        }
        let o = self.opts;
        if o.namespace_isolation {
            multus.insert("namespaceIsolation".into(), json!(true));
        }
        if let Some(g) = &o.global_namespaces {
            multus.insert("globalNamespaces".into(), json!(g));
        }
        if !o.multus_log_to_stderr {
            multus.insert("logToStderr".into(), json!(false));
        }
        if let Some(level) = &o.multus_log_level {
            multus.insert("logLevel".into(), json!(level.to_lowercase()));
        }
        if let Some(file) = &o.multus_log_file {
            multus.insert("logFile".into(), json!(file));
        }
        let mut rotation = serde_json::Map::new();
        if let Some(mb) = o.multus_log_max_size {
            rotation.insert("maxSize".into(), json!(mb));
        }
        if let Some(n) = o.multus_log_max_backups {
            rotation.insert("maxBackups".into(), json!(n));
        }
        if let Some(on) = o.multus_log_compress {
            rotation.insert("compress".into(), json!(on));
        }
        if !rotation.is_empty() {
            multus.insert("logOptions".into(), json!(rotation));
        }
        if let Some(dir) = &o.additional_bin_dir {
            multus.insert("binDir".into(), json!(dir));
        }
        if let Some(dir) = &o.multus_cni_conf_dir {
            multus.insert("confDir".into(), json!(dir));
        }
        if let Some(file) = &o.readiness_indicator_file {
            multus.insert("readinessindicatorfile".into(), json!(file));
        }
        if !o.cluster_cidrs.is_empty() {
            let cidrs: Vec<String> = o.cluster_cidrs.iter().map(ToString::to_string).collect();
            multus.insert("clusterCIDRs".into(), json!(cidrs));
        }
        if !o.host_port_ranges.is_empty() {
            multus.insert("hostPortRanges".into(), json!(o.host_port_ranges));
        }
        if o.admission_policy.is_some() {
            let path = super::admission::AdmissionPolicy::host_path(o);
            multus.insert("admissionPolicy".into(), json!(path));
        }
        multus.insert("kubeconfig".into(), json!(o.multus_kubeconfig_file_host));
        if let (Some(dir), Some(node)) = (&o.per_node_certificate_dir, &o.node_name) {
            multus.insert(
                "perNodeCertificate".into(),
                json!({
                    "enabled": true,
                    "bootstrapKubeconfig": o.per_node_certificate_bootstrap_kubeconfig,
                    "certDir": dir,
                    "certDuration": o.per_node_certificate_duration,
                    "nodeName": node,
                }),
            );
        }
        let mut delegate = delegate;
        if o.force_cni_version {
            delegate.insert("cniVersion".into(), json!(version));
        }
        multus.insert("delegates".into(), json!([delegate]));

        // From 1.0.0 on, runtimes load only conflists.
        let is_list = parsed >= Version::V1_0_0;
        let mut top = Map::new();
        top.insert("cniVersion".into(), json!(version));
        top.insert("name".into(), json!(name));
        if is_list {
            top.insert("plugins".into(), json!([multus]));
        } else {
            top.extend(multus);
        }
        let mut out = serde_json::to_vec_pretty(&top)
            .map_err(|e| Wait::Fatal(InstallError::Invalid(format!("encoding config: {e}"))))?;
        out.push(b'\n');
        let file = if is_list { CONFLIST_NAME } else { CONF_NAME };
        Ok(Rendered {
            primary,
            primary_bytes: bytes,
            path: self.opts.cni_conf_dir.join(file),
            bytes: out,
        })
    }

    fn write(&mut self, rendered: &Rendered) -> Result<(), InstallError> {
        let path = &rendered.path;
        cni::atomic_file::write(path, &rendered.bytes, 0o600)
            .map_err(InstallError::io("write", path))?;
        // Only one of the two may exist, or the runtime would see two multus networks.
        let other = if path.ends_with(CONF_NAME) {
            CONFLIST_NAME
        } else {
            CONF_NAME
        };
        let _ = std::fs::remove_file(self.opts.cni_conf_dir.join(other));
        log(&format!(
            "wrote {} around {}",
            path.display(),
            rendered.primary.display()
        ));
        if let Some(old) = self.renamed(&rendered.primary) {
            if rendered.primary.exists() {
                std::fs::rename(&rendered.primary, &old)
                    .map_err(InstallError::io("rename", &rendered.primary))?;
                log(&format!(
                    "renamed {} to {}",
                    rendered.primary.display(),
                    old.display()
                ));
            }
            self.renamed_primary = Some(rendered.primary.clone());
        }
        self.last_primary = Some(rendered.primary_bytes.clone());
        Ok(())
    }
}

/// Why the config cannot be written yet, or at all.
enum Wait {
    NotYet(String),
    Fatal(InstallError),
}

/// --multus-conf-file=<path>: that file, checked to be a JSON object, copied in atomically.
pub fn copy_given(opts: &Options) -> Result<(), InstallError> {
    let src = Path::new(&opts.multus_conf_file);
    let bytes = std::fs::read(src).map_err(InstallError::io("read", src))?;
    serde_json::from_slice::<Map<String, Value>>(&bytes).map_err(|e| InstallError::Config {
        path: src.to_path_buf(),
        msg: format!("not a CNI config (a JSON object): {e}"),
    })?;
    let name = src
        .file_name()
        .ok_or_else(|| InstallError::Invalid(format!("--multus-conf-file={}", src.display())))?;
    let dest = opts.cni_conf_dir.join(name);
    cni::atomic_file::write(&dest, &bytes, 0o600).map_err(InstallError::io("write", &dest))?;
    log(&format!("copied {} to {}", src.display(), dest.display()));
    Ok(())
}

/// --cleanup-config-on-exit: removes what this installer wrote, so the runtime goes back to
/// the primary network alone.
pub fn remove(opts: &Options) {
    let names: Vec<&std::ffi::OsStr> = if opts.multus_conf_file == "auto" {
        vec![CONF_NAME.as_ref(), CONFLIST_NAME.as_ref()]
    } else {
        Path::new(&opts.multus_conf_file)
            .file_name()
            .into_iter()
            .collect()
    };
    for name in names {
        let path = opts.cni_conf_dir.join(name);
        if std::fs::remove_file(&path).is_ok() {
            log(&format!("removed {}", path.display()));
        }
    }
}
