//! The multus configuration (the runtime's stdin, usually `00-multus.conf`): every upstream
//! option with upstream's defaults. A value of the wrong type or an unknown value is an error
//! that names the key; keys multus does not know are left alone, as upstream does.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni::quote::quote;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub const DEFAULT_CONF_DIR: &str = "/etc/cni/multus/net.d";
pub const DEFAULT_CNI_DIR: &str = "/var/lib/cni/multus";
pub const DEFAULT_BIN_DIR: &str = "/opt/cni/bin";
pub const DEFAULT_MULTUS_NAMESPACE: &str = "kube-system";
/// `systemNamespaces` when not set: their pods get their networks, and no network-status.
pub const DEFAULT_SYSTEM_NAMESPACES: [&str; 1] = ["kube-system"];

/// Refuses a config that is not multus's own, before any other key of it is read: multus
/// acts only on a config whose `type` is the name it was run under (`multus`, `multus-shim`)
/// and, for ADD, that no plugin ran before. Run as another plugin's IPAM, the config's `type`
/// is that plugin's; run as a chained plugin's ADD, it carries a `prevResult` (the runtime
/// passes one to every CHECK and DEL). Either way a network is trying to run multus, as root,
/// with settings of its own (a log file, a plugin directory).
pub fn require_own_config(
    config: &[u8],
    called_as: &str,
    command: cni::Command,
) -> std::result::Result<(), cni::CniError> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "type", default)]
        plugin_type: String,
        #[serde(rename = "prevResult", default)]
        prev_result: Option<serde::de::IgnoredAny>,
    }
    let head: Head = cni::decode::from_slice(config)
        .map_err(|e| cni::CniError::decoding(format!("error parsing multus config: {e}")))?;
    let refuse = |why: String| {
        Err(cni::CniError::invalid_config(format!(
            "{called_as} runs only on its own config: {why}; a network cannot run multus"
        )))
    };
    if head.plugin_type != called_as {
        return refuse(format!(
            "this config's type is {}, not {called_as:?}, so {called_as} was run as another \
             plugin's IPAM or under another name",
            quote(&head.plugin_type)
        ));
    }
    if command == cni::Command::Add && head.prev_result.is_some() {
        return refuse(format!(
            "this config has a prevResult, so {called_as} was run as a chained plugin"
        ));
    }
    Ok(())
}

/// How much multus logs (upstream's levels, in increasing order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Panic,
    Error,
    Verbose,
    Debug,
}

impl LogLevel {
    pub fn parse(text: &str) -> Option<LogLevel> {
        Some(match text.to_ascii_lowercase().as_str() {
            "panic" => LogLevel::Panic,
            "error" => LogLevel::Error,
            "verbose" => LogLevel::Verbose,
            "debug" => LogLevel::Debug,
            _ => return None,
        })
    }
}

pub use nodelog::LogOptions;

/// Where a process logs, and how much: the multus config's log keys, and the thick daemon's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    pub level: LogLevel,
    pub file: Option<PathBuf>,
    pub to_stderr: bool,
    pub options: LogOptions,
}

/// The log keys, as the multus config and the thick daemon's config both take them:
/// `logLevel`, `logFile`, `logToStderr`, `logOptions`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogKeys {
    log_level: Option<String>,
    log_file: Option<String>,
    log_to_stderr: Option<bool>,
    log_options: Option<LogOptions>,
}

/// A key whose value has the right type and still cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {msg}")]
pub struct KeyError {
    pub key: &'static str,
    pub msg: String,
}

impl LogKeys {
    /// The settings; `to_stderr` is what `logToStderr` is when absent (multus logs to stderr
    /// by default, the daemon, as upstream's, does not).
    pub fn settings(self, to_stderr: bool) -> std::result::Result<LogSettings, KeyError> {
        let level = match self.log_level.as_deref() {
            None | Some("") => LogLevel::Panic,
            Some(s) => LogLevel::parse(s).ok_or_else(|| KeyError {
                key: "logLevel",
                msg: format!(
                    "{} is not a level: use panic, error, verbose or debug",
                    quote(s)
                ),
            })?,
        };
        Ok(LogSettings {
            level,
            file: path(self.log_file),
            to_stderr: self.log_to_stderr.unwrap_or(to_stderr),
            options: self.log_options.unwrap_or_default(),
        })
    }
}

/// The node admin's policy for what a tenant's NAD or pod annotation may ask of the node
/// (ours; docs/security.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPolicy {
    /// `hostPortRanges`: the host ports a pod's annotation may map (default `1024-65535`). A
    /// port the node listens on is never mapped.
    pub host_ports: Vec<std::ops::RangeInclusive<u16>>,
    /// `clusterCIDRs`: the cluster's pod and service networks. What the cluster network's
    /// result shows (its addresses' subnets, its routes) counts too.
    pub cluster_cidrs: Vec<ipnet::IpNet>,
    /// `allowClusterRoutes`: keep a secondary network's routes into the cluster's networks.
    pub allow_cluster_routes: bool,
    /// `allowClusterAddresses`: let a secondary network's address be in the cluster's
    /// networks, or one the node holds.
    pub allow_cluster_addresses: bool,
    /// `allowClusterInterfaces`: let a secondary network attach to the cluster network's own
    /// bridge or host interfaces.
    pub allow_cluster_interfaces: bool,
    /// `admissionPolicy`: the admission webhook's policy file, applied again at ADD to every
    /// network from a NAD (one created before the webhook, or while it was down).
    pub admission_policy: Option<PathBuf>,
}

/// The host ports a pod's annotation may map without a `hostPortRanges`: none of the
/// privileged ones, which the node's own services use.
pub const DEFAULT_HOST_PORTS: std::ops::RangeInclusive<u16> = 1024..=65535;

impl Default for TenantPolicy {
    fn default() -> TenantPolicy {
        TenantPolicy {
            host_ports: vec![DEFAULT_HOST_PORTS],
            cluster_cidrs: Vec::new(),
            allow_cluster_routes: false,
            allow_cluster_addresses: false,
            allow_cluster_interfaces: false,
            admission_policy: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MultusConf {
    pub cni_version: String,
    pub name: String,
    pub conf_dir: PathBuf,
    pub cni_dir: PathBuf,
    pub bin_dir: PathBuf,
    /// `deviceInfoDir` (ours): where device-info files live, `dp/` and `cni/`.
    pub device_info_dir: PathBuf,
    /// `kubeletCheckpointFile` (ours): the kubelet device manager's checkpoint, read for NADs
    /// that name a device plugin resource.
    pub kubelet_checkpoint_file: PathBuf,
    /// `podResourcesSocket` (ours): the kubelet's pod-resources API, preferred over the
    /// checkpoint when it exists.
    pub pod_resources_socket: PathBuf,
    /// Inline delegates: the first is the cluster network. Used when `clusterNetwork` is empty.
    pub delegates: Vec<Map<String, Value>>,
    pub cluster_network: String,
    pub default_networks: Vec<String>,
    /// The network whose plugins, from `<dir of clusterNetwork>/<name>/`, run after every
    /// other delegate behind `passthru`.
    pub auxiliary_cni_chain_name: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    /// `perNodeCertificate` (thin mode, ours): the certificate `kubeconfig` reads, asked for
    /// here when none is valid.
    pub per_node_certificate: Option<k8s::client_certificate::PerNode>,
    pub log: LogSettings,
    /// The runtime's runtime config: it goes to the cluster network only.
    pub runtime_config: Map<String, Value>,
    pub readiness_indicator_file: Option<PathBuf>,
    pub namespace_isolation: bool,
    /// `globalNamespaces`: namespaces whose NADs any pod may use under isolation.
    pub global_namespaces: Vec<String>,
    pub system_namespaces: Vec<String>,
    pub multus_namespace: String,
    pub retry_delete_on_error: bool,
    /// How long ADD and STATUS wait for the readiness indicator file (ours; upstream: 45 s).
    pub readiness_timeout: Duration,
    /// Per-request timeout and retries of Kubernetes calls (ours).
    pub api_timeout: Duration,
    pub api_retries: u32,
    /// `cni.dev/valid-attachments`, for GC.
    pub valid_attachments: Option<Vec<cni::GcAttachment>>,
    pub policy: TenantPolicy,
    /// Where this process sees the node's root, when not at `/`: thick mode's daemon, whose
    /// `chrootDir` holds it, while the config names the node's paths (`clusterNetwork`,
    /// `defaultNetworks`, `confDir`), as the shim on the node reads them. Not a key.
    pub node_root: Option<PathBuf>,
}

impl MultusConf {
    /// A path the config names, where this process sees it: under `node_root` when one is
    /// set, unless only the path as named exists (a config written with the daemon's own
    /// paths, as upstream's daemon writes them).
    pub fn node_path(&self, path: &Path) -> PathBuf {
        let (Some(root), Ok(rel)) = (&self.node_root, path.strip_prefix("/")) else {
            return path.to_owned();
        };
        let on_node = root.join(rel);
        if on_node.exists() || !path.exists() {
            on_node
        } else {
            path.to_owned()
        }
    }

    /// Reads the config: every key through [`cni::decode`], whose errors name the key, then
    /// the checks that span keys.
    pub fn parse(bytes: &[u8]) -> Result<MultusConf> {
        let map = cni::decode::read_object(bytes).map_err(|e| {
            Error::from(cni::CniError::decoding(format!(
                "error parsing multus config: {e}"
            )))
        })?;
        let value = Value::Object(map);
        let log = cni::decode::from_value::<LogKeys>(&value)
            .map_err(Error::ConfigValue)?
            .settings(true)
            .map_err(|e| Error::config(e.key, e.msg))?;
        let keys: Keys = cni::decode::from_value(&value).map_err(Error::ConfigValue)?;
        keys.into_conf(log)?.checked()
    }

    fn checked(self) -> Result<MultusConf> {
        if !self.cni_version.is_empty() {
            self.cni_version
                .parse::<cni::Version>()
                .map_err(|e| Error::config("cniVersion", e.to_string()))?;
        }
        let lists = [
            ("globalNamespaces", &self.global_namespaces[..]),
            ("systemNamespaces", &self.system_namespaces[..]),
            (
                "multusNamespace",
                std::slice::from_ref(&self.multus_namespace),
            ),
        ];
        for (key, names) in lists {
            if let Some(ns) = names
                .iter()
                .find(|ns| !npwg::selection::is_dns1123_label(ns))
            {
                return Err(Error::config(
                    key,
                    format!(
                        "{} is not a valid namespace name (a DNS-1123 label)",
                        quote(ns)
                    ),
                ));
            }
        }
        Ok(self)
    }

    /// The directories delegates are looked up in: `binDir` first, then `CNI_PATH`.
    pub fn plugin_path(&self, cni_path: &[PathBuf]) -> Vec<PathBuf> {
        let mut path = vec![self.bin_dir.clone()];
        path.extend(cni_path.iter().filter(|p| **p != self.bin_dir).cloned());
        path
    }
}

/// `80` or `1024-65535`, entry `index` of `hostPortRanges`.
fn port_range(text: &str, index: usize) -> Result<std::ops::RangeInclusive<u16>> {
    parse_port_range(text).map_err(|msg| Error::config(&format!("hostPortRanges[{index}]"), msg))
}

/// A port (`80`) or a range of ports (`1024-65535`), as `hostPortRanges` and the installer's
/// `--host-port-ranges` give them.
pub fn parse_port_range(text: &str) -> std::result::Result<std::ops::RangeInclusive<u16>, String> {
    let bad = || {
        format!(
            "{} is not a port or a range of ports like 30000-32767",
            quote(text)
        )
    };
    let (low, high) = text.split_once('-').unwrap_or((text, text));
    let low: u16 = low.trim().parse().map_err(|_| bad())?;
    let high: u16 = high.trim().parse().map_err(|_| bad())?;
    if low == 0 || low > high {
        return Err(bad());
    }
    Ok(low..=high)
}

/// The keys as written, each of the type it takes; absent and `null` are the same.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Keys {
    cni_version: Option<String>,
    name: Option<String>,
    conf_dir: Option<String>,
    cni_dir: Option<String>,
    bin_dir: Option<String>,
    device_info_dir: Option<String>,
    kubelet_checkpoint_file: Option<String>,
    pod_resources_socket: Option<String>,
    delegates: Option<Vec<NetworkObject>>,
    cluster_network: Option<String>,
    default_networks: Option<StringList>,
    #[serde(rename = "auxiliaryCNIChainName")]
    auxiliary_cni_chain_name: Option<String>,
    kubeconfig: Option<String>,
    runtime_config: Option<Map<String, Value>>,
    #[serde(rename = "readinessindicatorfile")]
    readiness_indicator_file: Option<String>,
    namespace_isolation: Option<bool>,
    global_namespaces: Option<String>,
    system_namespaces: Option<StringList>,
    multus_namespace: Option<String>,
    retry_delete_on_error: Option<bool>,
    readiness_timeout_seconds: Option<u64>,
    api_timeout_seconds: Option<u64>,
    api_retries: Option<u64>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<cni::GcAttachment>>,
    host_port_ranges: Option<StringList>,
    #[serde(rename = "clusterCIDRs")]
    cluster_cidrs: Option<StringList>,
    allow_cluster_routes: Option<bool>,
    allow_cluster_addresses: Option<bool>,
    allow_cluster_interfaces: Option<bool>,
    admission_policy: Option<String>,
    per_node_certificate: Option<PerNodeCertificateKeys>,
}

/// `perNodeCertificate` in thin mode (ours, in the daemon's keys plus the node's name): the
/// installer keeps the node's certificate current; multus asks for one itself when none is
/// valid, so that pods keep starting while the installer's pod is down.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PerNodeCertificateKeys {
    enabled: Option<bool>,
    bootstrap_kubeconfig: Option<String>,
    cert_dir: Option<String>,
    cert_duration: Option<String>,
    node_name: Option<String>,
}

impl PerNodeCertificateKeys {
    fn read(self) -> Result<Option<k8s::client_certificate::PerNode>> {
        if self.enabled != Some(true) {
            return Ok(None);
        }
        let key = "perNodeCertificate";
        let (Some(bootstrap), Some(dir), Some(node)) = (
            path(self.bootstrap_kubeconfig),
            path(self.cert_dir),
            text(self.node_name),
        ) else {
            return Err(Error::config(
                key,
                "enabled needs bootstrapKubeconfig, certDir and nodeName",
            ));
        };
        let lifetime = k8s::client_certificate::lifetime(text(self.cert_duration).as_deref())
            .map_err(|e| Error::config("perNodeCertificate.certDuration", e))?;
        Ok(Some(k8s::client_certificate::PerNode {
            node,
            bootstrap,
            dir,
            lifetime,
        }))
    }
}

/// A text key, as upstream reads it: empty is the same as absent.
pub fn text(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

/// A path key: empty is the same as absent.
pub fn path(value: Option<String>) -> Option<PathBuf> {
    text(value).map(PathBuf::from)
}

impl Keys {
    /// The config, with upstream's defaults, and the values each key's type cannot check.
    fn into_conf(self, log: LogSettings) -> Result<MultusConf> {
        let policy = self.policy()?;
        let delegates: Vec<Map<String, Value>> = self
            .delegates
            .unwrap_or_default()
            .into_iter()
            .map(|d| d.0)
            .collect();
        let auxiliary_cni_chain_name = self.auxiliary_cni_chain_name.filter(|s| !s.is_empty());
        if let Some(name) = &auxiliary_cni_chain_name {
            // It names a directory: nothing that could step out of the conf dir.
            if !cni::env::is_valid_name(name) {
                return Err(Error::config(
                    "auxiliaryCNIChainName",
                    format!(
                        "{} is not a network name: use letters, digits, '_', '.' and '-', \
                         starting with a letter or digit",
                        quote(name)
                    ),
                ));
            }
        }
        let cluster_network = self.cluster_network.unwrap_or_default();
        if delegates.is_empty() && cluster_network.is_empty() {
            return Err(Error::config(
                "clusterNetwork",
                "set clusterNetwork or at least one entry in delegates",
            ));
        }
        let global_namespaces = match self.global_namespaces {
            Some(raw) if !raw.is_empty() => raw
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            _ => vec!["default".to_owned()],
        };
        let api_retries = match self.api_retries {
            None => 3,
            Some(n) => u32::try_from(n).map_err(|_| {
                Error::config(
                    "apiRetries",
                    format!("{n} is too large: at most {}", u32::MAX),
                )
            })?,
        };
        let seconds =
            |value: Option<u64>, default: u64| Duration::from_secs(value.unwrap_or(default));
        Ok(MultusConf {
            cni_version: self.cni_version.unwrap_or_default(),
            name: self.name.unwrap_or_default(),
            conf_dir: path(self.conf_dir).unwrap_or_else(|| DEFAULT_CONF_DIR.into()),
            cni_dir: path(self.cni_dir).unwrap_or_else(|| DEFAULT_CNI_DIR.into()),
            bin_dir: path(self.bin_dir).unwrap_or_else(|| DEFAULT_BIN_DIR.into()),
            device_info_dir: path(self.device_info_dir)
                .unwrap_or_else(|| npwg::devinfo::DEFAULT_DIR.into()),
            kubelet_checkpoint_file: path(self.kubelet_checkpoint_file)
                .unwrap_or_else(|| kubelet::checkpoint::DEFAULT_PATH.into()),
            pod_resources_socket: path(self.pod_resources_socket)
                .unwrap_or_else(|| kubelet::pod_resources::DEFAULT_SOCKET.into()),
            delegates,
            cluster_network,
            default_networks: self.default_networks.unwrap_or_default().0,
            auxiliary_cni_chain_name,
            kubeconfig: path(self.kubeconfig),
            per_node_certificate: match self.per_node_certificate {
                Some(keys) => keys.read()?,
                None => None,
            },
            log,
            runtime_config: self.runtime_config.unwrap_or_default(),
            readiness_indicator_file: path(self.readiness_indicator_file),
            namespace_isolation: self.namespace_isolation.unwrap_or(false),
            global_namespaces,
            system_namespaces: self.system_namespaces.map_or_else(
                || DEFAULT_SYSTEM_NAMESPACES.map(str::to_owned).to_vec(),
                |l| l.0,
            ),
            multus_namespace: self
                .multus_namespace
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_MULTUS_NAMESPACE.to_owned()),
            retry_delete_on_error: self.retry_delete_on_error.unwrap_or(false),
            readiness_timeout: seconds(self.readiness_timeout_seconds, 45),
            api_timeout: seconds(self.api_timeout_seconds, 10),
            api_retries,
            valid_attachments: self.valid_attachments,
            node_root: None,
            policy,
        })
    }

    /// `hostPortRanges`, `clusterCIDRs`, the `allowCluster*` keys and `admissionPolicy`: what a
    /// tenant's NAD or annotation may ask of the node.
    fn policy(&self) -> Result<TenantPolicy> {
        let host_ports = match &self.host_port_ranges {
            None => vec![DEFAULT_HOST_PORTS],
            Some(ranges) => ranges
                .0
                .iter()
                .enumerate()
                .map(|(i, text)| port_range(text, i))
                .collect::<Result<_>>()?,
        };
        let no_cidrs = StringList::default();
        let cluster_cidrs = self
            .cluster_cidrs
            .as_ref()
            .unwrap_or(&no_cidrs)
            .0
            .iter()
            .enumerate()
            .map(|(i, text)| {
                cni::decode::parse_cidr(text, "a CIDR").map_err(|want| {
                    Error::config(
                        &format!("clusterCIDRs[{i}]"),
                        format!("{} is not {want}", quote(text)),
                    )
                })
            })
            .collect::<Result<_>>()?;
        Ok(TenantPolicy {
            host_ports,
            cluster_cidrs,
            allow_cluster_routes: self.allow_cluster_routes.unwrap_or(false),
            allow_cluster_addresses: self.allow_cluster_addresses.unwrap_or(false),
            allow_cluster_interfaces: self.allow_cluster_interfaces.unwrap_or(false),
            admission_policy: path(self.admission_policy.clone()),
        })
    }
}

/// A list of non-empty strings (`defaultNetworks`, `systemNamespaces`, ...).
#[derive(Default)]
/// A list of strings, as upstream's `[]string` keys take it.
pub struct StringList(pub Vec<String>);

impl<'de> Deserialize<'de> for StringList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<StringList, D::Error> {
        struct Items;
        impl<'de> Visitor<'de> for Items {
            type Value = StringList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<StringList, A::Error> {
                let mut items = Vec::new();
                while let Some(NonEmpty(s)) = seq.next_element()? {
                    items.push(s);
                }
                Ok(StringList(items))
            }
        }
        d.deserialize_seq(Items)
    }
}

struct NonEmpty(String);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<NonEmpty, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-empty string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<NonEmpty, E> {
                if s.is_empty() {
                    return Err(E::invalid_value(de::Unexpected::Str(s), &self));
                }
                Ok(NonEmpty(s.to_owned()))
            }
        }
        d.deserialize_str(Text)
    }
}

/// An inline delegate: a network config, which multus reads whole later.
struct NetworkObject(Map<String, Value>);

impl<'de> Deserialize<'de> for NetworkObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<NetworkObject, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = NetworkObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a network config object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<NetworkObject, A::Error> {
                let mut object = Map::new();
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    object.insert(key, value);
                }
                Ok(NetworkObject(object))
            }
        }
        d.deserialize_map(Object)
    }
}

#[cfg(test)]
mod node_root_tests {
    use super::*;

    #[test]
    fn the_nodes_paths_are_read_under_the_node_root() {
        let root = tempfile::tempdir().unwrap();
        let node_conf = root.path().join("etc/cni/net.d");
        std::fs::create_dir_all(&node_conf).unwrap();
        std::fs::write(node_conf.join("10-cluster.conflist"), "{}").unwrap();
        let mut conf = MultusConf::parse(
            br#"{"cniVersion": "1.0.0", "name": "m", "type": "multus-shim",
                "clusterNetwork": "/etc/cni/net.d/10-cluster.conflist"}"#,
        )
        .unwrap();
        let named = Path::new("/etc/cni/net.d/10-cluster.conflist");
        assert_eq!(conf.node_path(named), named);
        conf.node_root = Some(root.path().to_owned());
        assert_eq!(conf.node_path(named), node_conf.join("10-cluster.conflist"));
        // A path only this process has (a config with the daemon's own paths) is read as named.
        let own = root.path().join("own.conf");
        std::fs::write(&own, "{}").unwrap();
        assert_eq!(conf.node_path(&own), own);
        // Neither exists: the node's, so that the error names where it was looked for.
        assert_eq!(
            conf.node_path(Path::new("/nowhere/x.conf")),
            root.path().join("nowhere/x.conf")
        );
    }
}

#[cfg(test)]
mod per_node_certificate_tests {
    use super::*;

    fn conf(certificate: &str) -> Result<MultusConf> {
        MultusConf::parse(
            format!(
                r#"{{"cniVersion": "1.0.0", "name": "m", "type": "multus",
                    "clusterNetwork": "/etc/cni/net.d/10-c.conflist",
                    "perNodeCertificate": {certificate}}}"#
            )
            .as_bytes(),
        )
    }

    #[test]
    fn the_installers_key_is_read_and_a_half_one_refused() {
        let on = conf(
            r#"{"enabled": true, "bootstrapKubeconfig": "/etc/kubernetes/kubelet.conf",
                "certDir": "/var/lib/multus/certs", "certDuration": "24h", "nodeName": "n1"}"#,
        )
        .unwrap();
        assert_eq!(
            on.per_node_certificate,
            Some(k8s::client_certificate::PerNode {
                node: "n1".into(),
                bootstrap: "/etc/kubernetes/kubelet.conf".into(),
                dir: "/var/lib/multus/certs".into(),
                lifetime: Duration::from_secs(24 * 3600),
            })
        );
        let off = conf(r#"{"enabled": false}"#).unwrap();
        assert_eq!(off.per_node_certificate, None);
        for (bad, says) in [
            (
                r#"{"enabled": true, "certDir": "/c", "nodeName": "n1"}"#,
                "enabled needs bootstrapKubeconfig, certDir and nodeName",
            ),
            (
                r#"{"enabled": true, "bootstrapKubeconfig": "/b", "certDir": "/c", "nodeName": "n1",
                    "certDuration": "1m"}"#,
                "\"1m\": use a Go duration of 10m or more",
            ),
        ] {
            let e = conf(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
