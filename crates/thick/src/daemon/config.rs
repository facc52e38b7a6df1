//! The daemon's config file (`-config`, upstream's `daemon-config.json`): upstream's keys with
//! upstream's defaults, and ours for the request queue. Every top-level key is also copied over
//! each request's network config, as upstream does: that is how `binDir`, `cniDir` and the
//! rest reach the calls.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cni::quote::quote;
use multus::config::{path, text, KeyError, LogKeys, LogSettings};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::wire;

/// Upstream's default path of the config file.
pub const DEFAULT_PATH: &str = "/etc/cni/net.d/multus.d/daemon-config.json";
/// The file is a few hundred bytes.
const MAX_FILE: u64 = 1 << 20;

/// CNI calls served at once when `connectionLimit` is not set (upstream serves any number).
const DEFAULT_IN_FLIGHT: usize = 16;
/// Calls waiting for a worker, at most (`maxQueuedRequests`, ours).
const DEFAULT_QUEUE: usize = 1024;
/// How long a call may wait for a worker (`requestTimeoutSeconds`, ours): well inside the
/// kubelet's two minutes for a sandbox.
const DEFAULT_QUEUE_WAIT: Duration = Duration::from_secs(60);
/// How long one delegate may run (`delegateTimeoutSeconds`, ours): a hung plugin would
/// otherwise hold a worker, and its container, for good.
const DEFAULT_DELEGATE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// Every key as written, copied over each request's config.
    pub keys: Map<String, Value>,
    /// `socketDir`: where the daemon listens.
    pub socket_dir: PathBuf,
    /// `chrootDir`: delegates run chrooted there (the host's root, mounted in the pod).
    pub chroot_dir: Option<PathBuf>,
    pub log: LogSettings,
    /// `connectionLimit`: CNI calls served at once.
    pub in_flight: usize,
    pub queue_length: usize,
    pub queue_wait: Duration,
    /// `metricsPort`: `/metrics` also on this TCP port.
    pub metrics_port: Option<u16>,
    /// `multusConfigFile`: `auto` writes `00-multus.conf` from the cluster network's config.
    pub auto_config: bool,
    /// `cniConfigDir`: where `00-multus.conf` goes.
    pub cni_config_dir: PathBuf,
    /// `multusAutoconfigDir`: where the cluster network's config is found.
    pub autoconfig_dir: PathBuf,
    /// `multusMasterCNI`: that config's file name, instead of the first by name.
    pub master_cni: Option<String>,
    pub cni_version: Option<String>,
    pub force_cni_version: bool,
    /// `readinessindicatorfile`: the daemon is ready once it exists.
    pub readiness_file: Option<PathBuf>,
    /// `kubeconfig` (ours): the API's credentials; in-cluster ones without it.
    pub kubeconfig: Option<PathBuf>,
    /// `perNodeCertificate`, when enabled.
    pub per_node_certificate: Option<PerNodeCertificateKeys>,
    /// `delegateTimeoutSeconds` (ours): how long one delegate may run before it is killed.
    pub delegate_timeout: Duration,
    /// `deletePodsMissingNetworks` (ours): a pod of the node found running without networks
    /// it asked for is deleted, when a workload controller owns it (docs/thick.md).
    pub delete_pods_missing_networks: bool,
    /// `missingNetworksCheckSeconds` (ours): how often the node's pods are looked at for
    /// networks they lack.
    pub missing_networks_check: Duration,
    /// `hotPlug` (ours, on unless `false`): a running pod's networks follow its annotation
    /// (docs/hotplug.md).
    pub hot_plug: bool,
    /// `systemNamespaces`: multus writes no network-status for their pods.
    pub system_namespaces: Vec<String>,
    /// What the daemon logs once its log is set up: keys it reads and ignores.
    pub warnings: Vec<String>,
}

/// Why the daemon config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Unreadable(#[source] std::io::Error),
    #[error("larger than {MAX_FILE} bytes")]
    TooLarge,
    /// Not JSON, or a key whose value is not of the type it takes.
    #[error(transparent)]
    Decode(#[from] cni::decode::DecodeError),
    /// A key of the right type whose value cannot be served.
    #[error(transparent)]
    Key(#[from] KeyError),
}

fn refused(key: &'static str, msg: impl Into<String>) -> ConfigError {
    ConfigError::Key(KeyError {
        key,
        msg: msg.into(),
    })
}

/// The keys the daemon reads, each of the type it takes; absent, `null` and `""` are the same.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Keys {
    socket_dir: Option<String>,
    chroot_dir: Option<String>,
    connection_limit: Option<u64>,
    max_queued_requests: Option<u64>,
    request_timeout_seconds: Option<u64>,
    metrics_port: Option<u64>,
    multus_config_file: Option<String>,
    per_node_certificate: Option<PerNodeCertificate>,
    cni_config_dir: Option<String>,
    multus_autoconfig_dir: Option<String>,
    #[serde(rename = "multusMasterCNI")]
    multus_master_cni: Option<String>,
    cni_version: Option<String>,
    #[serde(rename = "forceCNIVersion")]
    force_cni_version: Option<bool>,
    #[serde(rename = "readinessindicatorfile")]
    readiness_indicator_file: Option<String>,
    kubeconfig: Option<String>,
    delegate_timeout_seconds: Option<u64>,
    delete_pods_missing_networks: Option<bool>,
    missing_networks_check_seconds: Option<u64>,
    hot_plug: Option<bool>,
    system_namespaces: Option<multus::config::StringList>,
    enable_pprof: Option<Value>,
}

/// Upstream's `perNodeCertificate`: the daemon talks to the API server with a client
/// certificate of its node's own, asked for with the bootstrap kubeconfig's credential and
/// renewed before it expires (`k8s::client_certificate`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PerNodeCertificate {
    enabled: Option<bool>,
    bootstrap_kubeconfig: Option<String>,
    cert_dir: Option<String>,
    cert_duration: Option<String>,
}

/// `perNodeCertificate`, enabled: everything but the node's name, which the daemon's
/// environment gives (`MULTUS_NODE_NAME`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerNodeCertificateKeys {
    pub bootstrap_kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    pub lifetime: Duration,
}

impl DaemonConfig {
    pub fn read(path: &Path) -> Result<DaemonConfig, ConfigError> {
        let bytes = std::fs::File::open(path)
            .and_then(|f| {
                let mut text = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_FILE + 1), &mut text)
                    .map(|_| text)
            })
            .map_err(ConfigError::Unreadable)?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(ConfigError::TooLarge);
        }
        DaemonConfig::parse(&bytes)
    }

    /// Reads every key through [`cni::decode`], whose errors name the key, and the log keys as
    /// the multus config reads them.
    pub fn parse(bytes: &[u8]) -> Result<DaemonConfig, ConfigError> {
        let keys = cni::decode::read_object(bytes)?;
        let value = Value::Object(keys.clone());
        let log = cni::decode::from_value::<LogKeys>(&value)?.settings(false)?;
        let read: Keys = cni::decode::from_value(&value)?;
        let in_flight = match read.connection_limit {
            None => DEFAULT_IN_FLIGHT,
            Some(0) => {
                return Err(refused(
                    "connectionLimit",
                    "must be greater than 0: it is how many calls are served at once",
                ))
            }
            Some(n) => usize::try_from(n.min(1024)).unwrap_or(1024),
        };
        let queue_length = read.max_queued_requests.map_or(DEFAULT_QUEUE, |n| {
            usize::try_from(n.min(65_536)).unwrap_or(65_536)
        });
        let queue_wait = read
            .request_timeout_seconds
            .map_or(DEFAULT_QUEUE_WAIT, |s| Duration::from_secs(s.clamp(1, 600)));
        let metrics_port = match read.metrics_port {
            None => None,
            Some(p) => Some(
                u16::try_from(p)
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| refused("metricsPort", format!("{p} is not a port")))?,
            ),
        };
        let multus_config_file = text(read.multus_config_file).unwrap_or_else(|| "auto".into());
        if multus_config_file != "auto" {
            // Upstream's daemon copies the file and then exits at once (a known bug): a node
            // would be left without its daemon.
            return Err(refused(
                "multusConfigFile",
                format!(
                    "{}: only \"auto\" is served: the daemon writes 00-multus.conf from the \
                     cluster network's config",
                    quote(&multus_config_file)
                ),
            ));
        }
        let per_node_certificate = match read.per_node_certificate {
            Some(c) if c.enabled == Some(true) => {
                let (Some(bootstrap_kubeconfig), Some(cert_dir)) =
                    (path(c.bootstrap_kubeconfig), path(c.cert_dir))
                else {
                    return Err(refused(
                        "perNodeCertificate",
                        "enabled needs bootstrapKubeconfig (a credential that may ask for \
                         certificates, such as the kubelet's kubeconfig) and certDir",
                    ));
                };
                let lifetime = k8s::client_certificate::lifetime(text(c.cert_duration).as_deref())
                    .map_err(|e| refused("perNodeCertificate.certDuration", e))?;
                if read.kubeconfig.is_some() {
                    return Err(refused(
                        "perNodeCertificate",
                        "kubeconfig is set too: the daemon has one credential, so remove one \
                         of the two",
                    ));
                }
                Some(PerNodeCertificateKeys {
                    bootstrap_kubeconfig,
                    cert_dir,
                    lifetime,
                })
            }
            _ => None,
        };
        let cni_config_dir = path(read.cni_config_dir).unwrap_or_else(|| "/etc/cni/net.d".into());
        let mut warnings: Vec<String> = read
            .enable_pprof
            .is_some_and(|v| v != Value::Bool(false))
            .then(|| "enablePprof is not supported by this daemon: it is ignored".to_owned())
            .into_iter()
            .collect();
        let missing_check = read.missing_networks_check_seconds.unwrap_or(30);
        let missing_networks_check = missing_check.clamp(1, 3600);
        if missing_networks_check != missing_check {
            warnings.push(format!(
                "missingNetworksCheckSeconds {missing_check} is outside 1 to 3600: \
                 {missing_networks_check} is used"
            ));
        }
        Ok(DaemonConfig {
            socket_dir: path(read.socket_dir).unwrap_or_else(|| wire::DEFAULT_SOCKET_DIR.into()),
            chroot_dir: path(read.chroot_dir),
            log,
            in_flight,
            queue_length,
            queue_wait,
            metrics_port,
            auto_config: true,
            autoconfig_dir: path(read.multus_autoconfig_dir)
                .unwrap_or_else(|| cni_config_dir.clone()),
            cni_config_dir,
            master_cni: text(read.multus_master_cni),
            cni_version: text(read.cni_version),
            force_cni_version: read.force_cni_version.unwrap_or(false),
            readiness_file: path(read.readiness_indicator_file),
            kubeconfig: path(read.kubeconfig),
            per_node_certificate,
            delegate_timeout: read
                .delegate_timeout_seconds
                .map_or(DEFAULT_DELEGATE_TIMEOUT, |s| {
                    Duration::from_secs(s.clamp(1, 600))
                }),
            delete_pods_missing_networks: read.delete_pods_missing_networks.unwrap_or(false),
            missing_networks_check: Duration::from_secs(missing_networks_check),
            hot_plug: read.hot_plug.unwrap_or(true),
            system_namespaces: read.system_namespaces.map_or_else(
                || {
                    multus::config::DEFAULT_SYSTEM_NAMESPACES
                        .map(str::to_owned)
                        .to_vec()
                },
                |l| l.0,
            ),
            warnings,
            keys,
        })
    }

    /// A request's network config with every key of this file copied over it, as upstream
    /// does. `readinessindicatorfile` goes too (upstream leaves it out): the daemon serves
    /// from its start, so each ADD waits for the file, as in thin mode. `perNodeCertificate`
    /// does not: the daemon's own client serves every request with its certificate, and the
    /// key means another thing to thin multus (which would ask for certificates itself).
    pub fn overlay(&self, config: &[u8]) -> Result<Vec<u8>, String> {
        let mut conf = match serde_json::from_slice::<Value>(config) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("the network config is not a JSON object".into()),
            Err(e) => return Err(format!("the network config is not JSON: {e}")),
        };
        for (key, value) in &self.keys {
            conf.insert(key.clone(), value.clone());
        }
        conf.remove("perNodeCertificate");
        serde_json::to_vec(&Value::Object(conf)).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_keys_and_defaults() {
        let c = DaemonConfig::parse(
            br#"{"chrootDir": "/hostroot", "cniVersion": "0.3.1", "logLevel": "verbose",
                 "logToStderr": true, "cniConfigDir": "/host/etc/cni/net.d",
                 "multusAutoconfigDir": "/host/etc/cni/net.d", "multusConfigFile": "auto",
                 "socketDir": "/host/run/multus/"}"#,
        )
        .unwrap();
        assert_eq!(c.socket_dir, Path::new("/host/run/multus/"));
        assert_eq!(c.chroot_dir.as_deref(), Some(Path::new("/hostroot")));
        assert_eq!(c.log.level, multus::config::LogLevel::Verbose);
        assert_eq!(c.in_flight, DEFAULT_IN_FLIGHT);
        assert_eq!(c.cni_version.as_deref(), Some("0.3.1"));
        // Present but not enabled, as upstream reads it: nothing to do.
        let off = DaemonConfig::parse(br#"{"perNodeCertificate": {"enabled": false}}"#).unwrap();
        assert_eq!(off.per_node_certificate, None);
        let on = DaemonConfig::parse(
            br#"{"perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": "/var/lib/kubelet/kubeconfig",
                 "certDir": "/var/lib/multus/certs", "certDuration": "1h"}}"#,
        )
        .unwrap();
        assert_eq!(
            on.per_node_certificate,
            Some(PerNodeCertificateKeys {
                bootstrap_kubeconfig: "/var/lib/kubelet/kubeconfig".into(),
                cert_dir: "/var/lib/multus/certs".into(),
                lifetime: Duration::from_secs(3600),
            })
        );
        let d = DaemonConfig::parse(b"{}").unwrap();
        assert_eq!(d.socket_dir, Path::new("/run/multus/"));
        assert_eq!(d.missing_networks_check, Duration::from_secs(30));
        assert!(d.hot_plug);
        assert!(
            !DaemonConfig::parse(br#"{"hotPlug": false}"#)
                .unwrap()
                .hot_plug
        );
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        // Out of range is served at the nearest bound, and the log says so.
        let far = DaemonConfig::parse(br#"{"missingNetworksCheckSeconds": 86400}"#).unwrap();
        assert_eq!(far.missing_networks_check, Duration::from_secs(3600));
        assert_eq!(
            far.warnings,
            ["missingNetworksCheckSeconds 86400 is outside 1 to 3600: 3600 is used"]
        );
        assert_eq!(d.cni_config_dir, Path::new("/etc/cni/net.d"));
        assert_eq!(d.autoconfig_dir, Path::new("/etc/cni/net.d"));
        for (text, want) in [
            (
                r#"{"connectionLimit": 0}"#,
                "connectionLimit: must be greater than 0",
            ),
            (
                r#"{"connectionLimit": "x"}"#,
                "connectionLimit: \"x\" is not a whole number",
            ),
            (
                r#"{"logLevel": "loud"}"#,
                "logLevel: \"loud\" is not a level",
            ),
            (
                r#"{"metricsPort": 70000}"#,
                "metricsPort: 70000 is not a port",
            ),
            (
                r#"{"multusConfigFile": "/x.conf"}"#,
                "multusConfigFile: \"/x.conf\": only",
            ),
            (r#"{"socketDir": 5}"#, "socketDir: 5 is not a string"),
            (
                r#"{"perNodeCertificate": {"enabled": true, "certDir": "/c"}}"#,
                "perNodeCertificate: enabled needs bootstrapKubeconfig",
            ),
            (
                r#"{"perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": "/b", "certDir": "/c", "certDuration": "5m"}}"#,
                "perNodeCertificate.certDuration: \"5m\": use a Go duration of 10m or more",
            ),
            (
                r#"{"perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": "/b", "certDir": "/c"}, "kubeconfig": "/k"}"#,
                "perNodeCertificate: kubeconfig is set too",
            ),
            (
                r#"{"perNodeCertificate": true}"#,
                "perNodeCertificate: true is not an object",
            ),
            ("[]", "the config: [] is not an object"),
            (
                r#"{"logOptions": {"maxAge": "x"}}"#,
                "logOptions.maxAge: \"x\" is not a whole number",
            ),
            (
                r#"{"logToStderr": "yes"}"#,
                "logToStderr: \"yes\" is not true or false",
            ),
        ] {
            let e = DaemonConfig::parse(text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }

    #[test]
    fn every_key_goes_over_the_request() {
        let c = DaemonConfig::parse(
            br#"{"binDir": "/host/opt/cni/bin", "readinessindicatorfile": "/r", "cniVersion": "1.0.0"}"#,
        )
        .unwrap();
        let out = c
            .overlay(br#"{"cniVersion": "0.3.1", "name": "multus-cni-network", "binDir": "/x"}"#)
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["binDir"], "/host/opt/cni/bin");
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["name"], "multus-cni-network");
        assert_eq!(v["readinessindicatorfile"], "/r");
        assert!(c.overlay(b"[1]").is_err());
        // The daemon's credential stays the daemon's, and a request's is not served.
        let certificate = DaemonConfig::parse(
            br#"{"perNodeCertificate": {"enabled": true, "bootstrapKubeconfig": "/b", "certDir": "/c"}}"#,
        )
        .unwrap();
        let out = certificate
            .overlay(br#"{"name": "n", "perNodeCertificate": {"enabled": true}}"#)
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v.get("perNodeCertificate"), None, "{v}");
    }
}
