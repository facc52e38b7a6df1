//! whereabouts' configuration: the `ipam` object merged over the node's flat file, with the
//! reference's keys, defaults and search path, and our checks on what a tenant may name.

use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use cni::args::CniArgs;
use cni::keys::Keys;
use cni::path_roots::{PathError, PathRoots};
use cni::quote::quote;
use cni::{Dns, IpConfig, Route};
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::range::{parse_exclude, parse_range, Range};
use crate::common::{
    check_addresses_per_family, cni_args_ips, parse_address, require_ipam, RawAddress,
};
use crate::error::{Error, Result};
use crate::json::{null_default, opt_ip};

/// Where the flat file may be, and which directories a NAD may name files in.
#[derive(Clone, Debug)]
pub struct Sources {
    /// Tried in order after `configuration_path`; the first that exists is read.
    pub flat_files: Vec<PathBuf>,
    /// The node admin's directories: `configuration_path` and `kubernetes.kubeconfig` written
    /// in a NAD must lie under one of these.
    pub trusted_dirs: Vec<PathBuf>,
    /// Where the node records its attachments (see [`super::Record`]).
    pub state_dir: PathBuf,
}

impl Sources {
    /// The reference's search path, and the CNI config directories that hold it.
    pub fn node() -> Sources {
        let dirs = [
            "/etc/kubernetes/cni/net.d",
            "/etc/cni/net.d",
            "/host/etc/cni/net.d",
        ];
        Sources {
            flat_files: dirs
                .iter()
                .map(|d| Path::new(d).join("whereabouts.d/whereabouts.conf"))
                .collect(),
            trusted_dirs: dirs.iter().map(PathBuf::from).collect(),
            state_dir: PathBuf::from(super::STATE_DIR),
        }
    }

    /// The admin's directories as the roots a NAD's paths are opened beneath.
    fn roots(&self) -> PathRoots {
        PathRoots::new(
            self.trusted_dirs.clone(),
            "the CNI configuration directories, and WHEREABOUTS_CONFIG_DIR from the runtime's \
             environment"
                .into(),
        )
    }
}

/// A flat file bigger than this is refused: the reference's is a few lines.
const MAX_FLAT_FILE: u64 = 64 * 1024;

/// The pod an allocation belongs to: its `podref` is `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Node-slice mode: the range is cut into slices of `size`, recorded in the NodeSlicePool
/// `pool`, and this node allocates from the slice it holds there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSlices {
    /// The NodeSlicePool's name: `network_name`, else the network's `name`, as in the
    /// reference.
    pub pool: String,
    /// The slices' prefix length.
    pub size: u8,
    /// `node_slice_size` as written, for a NodeSlicePool made here.
    pub size_text: String,
    /// This node's name: the reference's `NODENAME`, `<configuration_path>/nodename`, then
    /// `/etc/hostname` (empty while only checking a config).
    pub node: String,
}

/// A nodename file bigger than this is not one: the reference reads at most 1024 bytes.
const MAX_NODENAME_FILE: u64 = 1024;

/// A loaded, checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub cni_version: String,
    /// The network's `name`.
    pub name: String,
    /// One address is taken from each, in order.
    pub ranges: Vec<Range>,
    /// Put on every allocated address of its family.
    pub gateway: Option<IpAddr>,
    pub routes: Vec<Route>,
    pub dns: Dns,
    /// Static addresses (`addresses`, CNI_ARGS `IP`/`GATEWAY`), after the allocated ones.
    pub addresses: Vec<IpConfig>,
    /// The prefix of the pool and reservation names.
    pub network_name: String,
    pub kubeconfig: PathBuf,
    /// Whether OverlappingRangeIPReservations guard addresses across pools (inline only).
    pub overlapping_ranges: bool,
    /// From CNI_ARGS; DEL may go without.
    pub pod: Option<PodRef>,
    /// Node-slice mode (`node_slice_size`): the node allocates from its slice of the range.
    pub node_slices: Option<NodeSlices>,
    /// `keep_statefulset_addresses`: a StatefulSet's pod keeps its address across restarts.
    pub keep_statefulset_addresses: bool,
    /// The flat file the defaults came from.
    pub flat_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNet {
    #[serde(default)]
    cni_version: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    ipam: Option<RawIpam>,
}

#[derive(Deserialize)]
struct RawRange {
    #[serde(default)]
    range: String,
    #[serde(default, deserialize_with = "opt_ip")]
    range_start: Option<IpAddr>,
    #[serde(default, deserialize_with = "opt_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "null_default")]
    exclude: Vec<String>,
}

/// `k8s_api_root` is read by nobody, here as in the reference.
#[derive(Deserialize, Default)]
struct RawKubernetes {
    #[serde(default)]
    kubeconfig: String,
}

/// The keys the reference reads. `datastore`, the `etcd_*` keys, the leader election timings
/// and `sleep_for_race` have no effect, and are not read: there is no lease here, and no etcd.
/// Nor are `log_file` and `log_level`: every failure is in the CNI error the runtime logs, and
/// the plugin writes no file a NAD names. `reconciler_cron_expression` is the reconciler's.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
struct RawIpam {
    #[serde(default)]
    range: String,
    #[serde(default, deserialize_with = "opt_ip")]
    range_start: Option<IpAddr>,
    #[serde(default, deserialize_with = "opt_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "null_default")]
    exclude: Vec<String>,
    #[serde(default, rename = "ipRanges", deserialize_with = "null_default")]
    ip_ranges: Vec<RawRange>,
    #[serde(default, deserialize_with = "cni::decode::gateway")]
    gateway: Option<IpAddr>,
    #[serde(default, deserialize_with = "null_default")]
    routes: Vec<Route>,
    #[serde(default, deserialize_with = "null_default")]
    dns: Dns,
    #[serde(default, deserialize_with = "null_default")]
    addresses: Vec<RawAddress>,
    #[serde(default)]
    network_name: String,
    #[serde(default, deserialize_with = "null_default")]
    kubernetes: RawKubernetes,
    #[serde(default)]
    node_slice_size: String,
    #[serde(default)]
    configuration_path: String,
    #[serde(default)]
    keep_statefulset_addresses: bool,
}

/// Keys of the reference's `ipam` this whereabouts takes and ignores (see [`RawIpam`]).
const IGNORED: [&str; 14] = [
    "datastore",
    "etcd_host",
    "etcd_username",
    "etcd_password",
    "etcd_key_file",
    "etcd_cert_file",
    "etcd_ca_cert_file",
    "leader_lease_duration",
    "leader_renew_deadline",
    "leader_retry_period",
    "sleep_for_race",
    "log_file",
    "log_level",
    "reconciler_cron_expression",
];

/// The keys whereabouts reads in `ipam`, with those it takes and ignores.
pub fn keys() -> Keys {
    Keys::of::<RawIpam>()
        .named(&["enable_overlapping_ranges"])
        .named(&IGNORED)
        .with("ipRanges", Keys::of::<RawRange>())
        .with(
            "kubernetes",
            Keys::of::<RawKubernetes>().named(&["k8s_api_root"]),
        )
        .with("addresses", Keys::of::<RawAddress>())
        .with("routes", Keys::of::<Route>())
        .with("dns", Keys::of::<Dns>())
}

impl Config {
    /// Reads the network config (`stdin`) and `CNI_ARGS`, and merges the flat file under the
    /// `ipam` object as the reference does: a key the `ipam` object leaves empty takes the
    /// file's value, objects key by key, except `enable_overlapping_ranges`, which only the
    /// `ipam` object sets (default true). A flat file is required.
    pub fn load(stdin: &[u8], cni_args: &str, sources: &Sources) -> Result<Config> {
        Config::build(stdin, cni_args, sources, true)
    }

    /// What [`Config::load`] checks in the network config itself, without the node's flat
    /// file (for `validate`, which reads nothing on the node): the kubeconfig may come from it.
    pub fn check(stdin: &[u8], sources: &Sources) -> Result<()> {
        Config::build(stdin, "", sources, false).map(drop)
    }

    fn build(stdin: &[u8], cni_args: &str, sources: &Sources, read_flat: bool) -> Result<Config> {
        let mut net = cni::decode::read_object(stdin)?;
        let mut ipam = match net.remove("ipam") {
            Some(Value::Object(m)) => m,
            Some(Value::Null) | None => return require_ipam(None),
            Some(other) => {
                return Err(cni::decode::DecodeError::expected(&other, "an object")
                    .under_key("ipam")
                    .into())
            }
        };
        if let Some(path) = ipam
            .get("configuration_path")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        {
            check_trusted("configuration_path", path, sources)?;
        }
        if let Some(path) = ipam
            .get("kubernetes")
            .and_then(|k| k.get("kubeconfig"))
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        {
            check_trusted("kubernetes.kubeconfig", path, sources)?;
            if read_flat {
                check_no_symlink("kubernetes.kubeconfig", path, sources)?;
            }
        }
        let overlapping_ranges = match ipam.get("enable_overlapping_ranges") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(cni::decode::DecodeError::expected(other, "true or false")
                    .under_key("enable_overlapping_ranges")
                    .under_key("ipam")
                    .into())
            }
        };
        let configuration_path = ipam
            .get("configuration_path")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let (flat_file, flat) = if read_flat {
            read_flat_file(configuration_path, sources)?
        } else {
            (PathBuf::new(), Map::new())
        };
        fill_empty(&mut ipam, &flat);
        net.insert("ipam".into(), Value::Object(ipam));
        let raw: RawNet = cni::decode::from_value(&Value::Object(net))?;
        let ipam = require_ipam(raw.ipam)?;
        let args = CniArgs::parse(cni_args)?;
        args.check_known(&[
            "IP",
            "GATEWAY",
            "K8S_POD_NAME",
            "K8S_POD_NAMESPACE",
            "K8S_POD_INFRA_CONTAINER_ID",
            cni::args::IPAM_CLAIM_REFERENCE,
        ])?;
        let pod = match (args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")) {
            (ns, Some(name)) if !name.is_empty() => Some(PodRef {
                namespace: ns.unwrap_or_default().to_owned(),
                name: name.to_owned(),
            }),
            _ => None,
        };
        let ranges = ranges(&ipam)?;
        let addresses = static_addresses(&ipam.addresses, &args)?;
        check_addresses_per_family(
            &raw.cni_version,
            ranges
                .iter()
                .map(Range::is_v4)
                .chain(addresses.iter().map(|a| a.address.addr().is_ipv4())),
        )?;
        if read_flat && ipam.kubernetes.kubeconfig.is_empty() {
            return Err(Error::config(format!(
                "ipam.kubernetes.kubeconfig: required, and neither the config nor the flat file \
                 {} sets it",
                flat_file.display()
            )));
        }
        check_network_name(&ipam.network_name)?;
        let node_slices = match ipam.node_slice_size.as_str() {
            "" => None,
            text => Some(node_slices(
                text,
                &ranges,
                &ipam,
                &raw.name,
                read_flat.then_some(&flat_file),
            )?),
        };
        if ipam.keep_statefulset_addresses && node_slices.is_some() {
            return Err(Error::config(
                "ipam.keep_statefulset_addresses: a StatefulSet's pod may come back on another \
                 node, and in node-slice mode each node hands out its own slice, so its address \
                 cannot be kept; remove one of keep_statefulset_addresses and node_slice_size",
            ));
        }
        Ok(Config {
            cni_version: raw.cni_version,
            name: raw.name,
            ranges,
            gateway: ipam.gateway,
            routes: ipam.routes,
            dns: ipam.dns,
            addresses,
            network_name: ipam.network_name,
            kubeconfig: PathBuf::from(ipam.kubernetes.kubeconfig),
            overlapping_ranges,
            pod,
            node_slices,
            keep_statefulset_addresses: ipam.keep_statefulset_addresses,
            flat_file,
        })
    }

    /// The `ips` of a result for the allocated addresses (one per range, in order) followed by
    /// the static ones. The gateway goes only on addresses of its own family: the reference
    /// puts an IPv4 gateway on IPv6 addresses too.
    pub fn result_ips(&self, allocated: &[(IpAddr, &Range)]) -> Vec<IpConfig> {
        allocated
            .iter()
            .filter_map(|(ip, range)| {
                let address = IpNet::new(*ip, range.prefix_len).ok()?;
                Some(IpConfig {
                    address,
                    gateway: self.gateway.filter(|g| g.is_ipv4() == ip.is_ipv4()),
                    interface: None,
                })
            })
            .chain(self.addresses.iter().cloned())
            .collect()
    }
}

/// Node-slice mode's settings. Slices take one range; `flat_file` is `None` while only
/// checking a config, which reads nothing on the node (no node name is needed then).
fn node_slices(
    text: &str,
    ranges: &[Range],
    ipam: &RawIpam,
    net_name: &str,
    flat_file: Option<&Path>,
) -> Result<NodeSlices> {
    let key = "ipam.node_slice_size";
    let [range] = ranges else {
        return Err(Error::config(format!(
            "{key}: node slices cut one range, and this config has {}: give one range (the \
             reference would take every address from the first range's slice)",
            ranges.len()
        )));
    };
    let size = super::slices::parse_slice_size(text).ok_or_else(|| {
        Error::config(format!(
            "{key}: {} is not a prefix length (write it as \"/28\" or \"28\")",
            quote(text)
        ))
    })?;
    let slices = super::slices::cut(range.subnet, size).ok_or_else(|| {
        Error::config(format!(
            "{key}: {} cannot cut {}: a slice's prefix must be at least the range's and at most \
             /{}, and make at most {} slices",
            quote(text),
            range.subnet,
            range.subnet.max_prefix_len(),
            super::slices::MAX_SLICES
        ))
    })?;
    if slices
        .first()
        .and_then(|s| super::slices::usable(*s))
        .is_none()
    {
        return Err(Error::config(format!(
            "{key}: {}: a slice that small has no address besides its network and broadcast \
             addresses",
            quote(text)
        )));
    }
    let pool = if ipam.network_name.is_empty() {
        net_name
    } else {
        &ipam.network_name
    };
    check_object_name(
        "the network's name (which names the NodeSlicePool without ipam.network_name)",
        pool,
    )?;
    let node = match flat_file {
        Some(flat_file) => node_name(&ipam.configuration_path, flat_file)?,
        None => String::new(),
    };
    Ok(NodeSlices {
        pool: pool.to_owned(),
        size,
        size_text: text.to_owned(),
        node,
    })
}

/// This node's name, as the reference finds it: `NODENAME` (set by the runtime's environment,
/// never a tenant's), then the `nodename` file beside the flat file (`configuration_path` when
/// it is a directory, as the reference's installer writes it), then `/etc/hostname`.
fn node_name(configuration_path: &str, flat_file: &Path) -> Result<String> {
    if let Some(name) = std::env::var("NODENAME").ok().map(|n| n.trim().to_owned()) {
        if !name.is_empty() {
            check_object_name("NODENAME", &name)?;
            return Ok(name);
        }
    }
    let mut files: Vec<PathBuf> = Vec::new();
    if !configuration_path.is_empty() {
        files.push(Path::new(configuration_path).join("nodename"));
    }
    if let Some(dir) = flat_file.parent() {
        files.push(dir.join("nodename"));
    }
    files.push(PathBuf::from("/etc/hostname"));
    for path in &files {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => f,
            // Not there, or a directory where a file was expected: the next one.
            Err(_) => continue,
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let mut text = String::new();
        file.take(MAX_NODENAME_FILE)
            .read_to_string(&mut text)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let name = text.trim();
        if name.is_empty() {
            continue;
        }
        check_object_name(&path.display().to_string(), name)?;
        return Ok(name.to_owned());
    }
    let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    Err(Error::config(format!(
        "ipam.node_slice_size: node slices need this node's name, and neither NODENAME nor {} \
         gives one (the installer writes the nodename file)",
        list.join(", ")
    )))
}

/// A name that goes into an object's name: a Kubernetes name's letters.
fn check_object_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(Error::config(format!(
            "{what}: {} cannot be part of a Kubernetes object name: use lower-case letters, \
             digits, '-' and '.', starting with a letter or digit, at most 200",
            quote(name)
        )))
    }
}

/// `network_name` starts every object name, which is also a segment of the API path: it must
/// be a name Kubernetes allows, with room left for the range.
fn check_network_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Ok(());
    }
    check_object_name("ipam.network_name", name)
}

/// A path a NAD names must be absolute, without `..`, and under one of the admin's
/// directories: a tenant could otherwise point the plugin, which runs as root, at any file on
/// the node, such as a kubeconfig it wrote into a volume of its own.
fn check_trusted(key: &str, path: &str, sources: &Sources) -> Result<()> {
    Ok(sources
        .roots()
        .check(&format!("ipam.{key}"), Path::new(path))?)
}

/// The file a NAD names, found beneath the admin's directories without a symlink on the way
/// (or at it): what the plugin then reads by that path is the file found. One that is not
/// there is left to the reader to report.
fn check_no_symlink(key: &str, path: &str, sources: &Sources) -> Result<()> {
    let key = format!("ipam.{key}");
    let found = sources
        .roots()
        .parent(&key, Path::new(path), None)
        .and_then(|(dir, name)| {
            dir.open_path(&name).map(drop).map_err(|e| {
                if cni::dir::is_symlink_refusal(&e) {
                    PathError::Refused {
                        key: key.clone(),
                        msg: format!("{path} is a symbolic link, which is never followed here"),
                    }
                } else {
                    PathError::Io {
                        path: dir.join(&name),
                        source: e,
                    }
                }
            })
        });
    match found {
        Err(e) if e.is_not_found() => Ok(()),
        other => Ok(other?),
    }
}

/// The first flat file that exists, `configuration_path` first, as a JSON object, found
/// beneath the admin's directories without a symlink on the way. Its text never appears in an
/// error: the file may be any file a NAD names under the admin's directories.
fn read_flat_file(
    configuration_path: Option<PathBuf>,
    sources: &Sources,
) -> Result<(PathBuf, Map<String, Value>)> {
    let roots = sources.roots();
    let tried: Vec<PathBuf> = configuration_path
        .into_iter()
        .chain(sources.flat_files.iter().cloned())
        .collect();
    for path in &tried {
        let read = roots
            .parent("ipam.configuration_path", path, None)
            .and_then(|(dir, name)| {
                dir.read(&name).map_err(|e| PathError::Io {
                    path: path.clone(),
                    source: e,
                })
            });
        let text = match read {
            Ok(text) => text,
            Err(e) if e.is_not_found() => continue,
            Err(PathError::Io { source, .. }) => {
                return Err(Error::io(
                    format!("reading the flat file {}", path.display()),
                    source,
                ))
            }
            Err(refused) => return Err(refused.into()),
        };
        if text.len() as u64 > MAX_FLAT_FILE {
            return Err(Error::config(format!(
                "the flat file {} is larger than {MAX_FLAT_FILE} bytes",
                path.display()
            )));
        }
        return match serde_json::from_slice::<Value>(&text) {
            Ok(Value::Object(m)) => Ok((path.clone(), m)),
            Ok(_) => Err(Error::config(format!(
                "the flat file {} is not a JSON object",
                path.display()
            ))),
            Err(e) => Err(Error::config(format!(
                "the flat file {} is not JSON: {} at line {} column {}",
                path.display(),
                match e.classify() {
                    serde_json::error::Category::Eof => "it ends early",
                    _ => "a syntax error",
                },
                e.line(),
                e.column()
            ))),
        };
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    Err(Error::config(format!(
        "config file not found: whereabouts needs its flat file (the node's kubeconfig path), \
         looked at {}",
        list.join(", ")
    )))
}

/// The reference merges with mergo: a field the `ipam` object leaves at its zero value takes
/// the flat file's, and objects merge key by key.
fn fill_empty(ipam: &mut Map<String, Value>, flat: &Map<String, Value>) {
    for (key, value) in flat {
        if key == "enable_overlapping_ranges" {
            continue;
        }
        match ipam.get_mut(key) {
            Some(Value::Object(mine)) => {
                if let Value::Object(theirs) = value {
                    fill_empty(mine, theirs);
                }
            }
            Some(mine) if !is_zero(mine) => {}
            _ => {
                ipam.insert(key.clone(), value.clone());
            }
        }
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// The top-level `range` first, then `ipRanges`, each checked. The top-level `exclude` goes
/// with the top-level range only, as in the reference.
fn ranges(ipam: &RawIpam) -> Result<Vec<Range>> {
    // The top-level keys are a range of their own, without a name in the path.
    let top = RawRange {
        range: ipam.range.clone(),
        range_start: ipam.range_start,
        range_end: ipam.range_end,
        exclude: ipam.exclude.clone(),
    };
    let top = (!top.range.is_empty()).then_some(("ipam".to_owned(), &top));
    let listed = ipam
        .ip_ranges
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("ipam.ipRanges[{i}]"), r));
    let out = top
        .into_iter()
        .chain(listed)
        .map(|(key, raw)| {
            let (subnet, dash_start, dash_end) = parse_range(&raw.range)
                .map_err(|why| Error::config(format!("{key}.range: {why}")))?;
            let exclude = raw
                .exclude
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    parse_exclude(e)
                        .map_err(|why| Error::config(format!("{key}.exclude[{i}]: {why}")))
                })
                .collect::<Result<Vec<_>>>()?;
            // The dash form wins over range_start and range_end, as in the reference.
            let (start, end) = match dash_start {
                Some(_) => (dash_start, dash_end),
                None => (raw.range_start, raw.range_end),
            };
            Range::new(subnet, start, end, exclude)
                .map_err(|why| Error::config(format!("{key}.range: {why}")))
        })
        .collect::<Result<Vec<_>>>()?;
    if out.is_empty() {
        return Err(Error::config(
            "ipam.range: required, or ipam.ipRanges: give at least one range to allocate from",
        ));
    }
    Ok(out)
}

/// `addresses`, then CNI_ARGS `IP`; each CNI_ARGS `GATEWAY` goes on every address that
/// contains it.
fn static_addresses(raw: &[RawAddress], args: &CniArgs) -> Result<Vec<IpConfig>> {
    let mut out = raw
        .iter()
        .enumerate()
        .map(|(i, a)| {
            parse_address(&format!("ipam.addresses[{i}].address"), &a.address).map(|n| IpConfig {
                address: n,
                gateway: a.gateway,
                interface: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let (ips, gateways) = cni_args_ips(args)?;
    out.extend(ips.into_iter().map(|n| IpConfig {
        address: n,
        gateway: None,
        interface: None,
    }));
    for gw in gateways {
        for a in out.iter_mut().filter(|a| a.address.contains(&gw)) {
            a.gateway = Some(gw);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Node {
        dir: tempfile::TempDir,
        sources: Sources,
    }

    /// A node whose admin directory is a temporary one, with `flat` as its flat file.
    fn node(flat: Option<Value>) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("net.d/whereabouts.d");
        std::fs::create_dir_all(&conf).unwrap();
        let flat_file = conf.join("whereabouts.conf");
        if let Some(v) = flat {
            std::fs::write(&flat_file, v.to_string()).unwrap();
        }
        let sources = Sources {
            flat_files: vec![flat_file],
            trusted_dirs: vec![dir.path().join("net.d")],
            state_dir: dir.path().join("state"),
        };
        Node { dir, sources }
    }

    fn kubeconfig_flat(node_dir: &Path) -> Value {
        json!({"datastore": "kubernetes", "kubernetes": {"kubeconfig": node_dir.join("net.d/whereabouts.d/whereabouts.kubeconfig")}})
    }

    fn load(n: &Node, ipam: Value, args: &str) -> Result<Config> {
        let net =
            json!({"cniVersion": "1.0.0", "name": "blue-net", "type": "macvlan", "ipam": ipam});
        Config::load(net.to_string().as_bytes(), args, &n.sources)
    }

    fn err(r: Result<Config>) -> (u32, String) {
        let e = cni::CniError::from(r.expect_err("an error"));
        (e.code, e.msg)
    }

    fn with_flat() -> Node {
        let n = node(None);
        let flat = kubeconfig_flat(n.dir.path());
        std::fs::write(&n.sources.flat_files[0], flat.to_string()).unwrap();
        n
    }

    #[test]
    fn a_flat_file_is_required() {
        let n = node(None);
        let (code, msg) = err(load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.0/24"}),
            "",
        ));
        assert_eq!(code, 7);
        assert!(msg.starts_with("config file not found"), "{msg}");
        assert!(
            msg.contains(&n.sources.flat_files[0].display().to_string()),
            "{msg}"
        );
    }

    #[test]
    fn the_flat_file_fills_what_the_ipam_object_leaves_empty() {
        let n = node(None);
        let mut flat = kubeconfig_flat(n.dir.path());
        flat["kubernetes"]["k8s_api_root"] = json!("https://api:6443");
        flat["network_name"] = json!("from-file");
        flat["gateway"] = json!("10.1.0.1");
        flat["routes"] = json!([{"dst": "10.2.0.0/16"}]);
        flat["enable_overlapping_ranges"] = json!(false);
        std::fs::write(&n.sources.flat_files[0], flat.to_string()).unwrap();
        let c = load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "network_name": "", "gateway": "10.1.0.9",
                   "routes": [], "kubernetes": {"k8s_api_root": ""}}),
            "",
        )
        .unwrap();
        assert_eq!(c.network_name, "from-file");
        // The ipam object's own value wins; an empty one takes the file's.
        assert_eq!(c.gateway, "10.1.0.9".parse().ok());
        assert_eq!(c.routes.len(), 1);
        assert!(c
            .kubeconfig
            .ends_with("whereabouts.d/whereabouts.kubeconfig"));
        // Only the ipam object turns overlapping ranges off.
        assert!(c.overlapping_ranges);
        assert_eq!(c.flat_file, n.sources.flat_files[0]);
        let c = load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "enable_overlapping_ranges": false}),
            "",
        )
        .unwrap();
        assert!(!c.overlapping_ranges);
    }

    #[test]
    fn configuration_path_is_read_first() {
        let n = with_flat();
        let other = n.dir.path().join("net.d/other.conf");
        std::fs::write(
            &other,
            json!({"kubernetes": {"kubeconfig": "/k/other"}}).to_string(),
        )
        .unwrap();
        let c = load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "configuration_path": other}),
            "",
        )
        .unwrap();
        assert_eq!(c.kubeconfig, Path::new("/k/other"));
        assert_eq!(c.flat_file, other);
    }

    #[test]
    fn a_nad_names_files_only_under_the_admins_directories() {
        let n = with_flat();
        let inside = n
            .dir
            .path()
            .join("net.d/whereabouts.d/whereabouts.kubeconfig");
        let escape = format!(
            "{}/net.d/../../../var/lib/kubelet/pods/x/kubeconfig",
            n.dir.path().display()
        );
        for (key, value) in [
            (
                "configuration_path",
                json!("/var/lib/kubelet/pods/x/volumes/flat.conf"),
            ),
            ("configuration_path", json!(escape)),
            ("configuration_path", json!("relative.conf")),
        ] {
            let mut ipam = json!({"type": "whereabouts", "range": "10.1.0.0/24"});
            ipam[key] = value.clone();
            let (code, msg) = err(load(&n, ipam, ""));
            assert_eq!(code, 7, "{key}");
            assert!(msg.starts_with(&format!("ipam.{key}: ")), "{msg}");
            assert!(
                msg.contains("is not beneath one of the node's path roots")
                    || msg.contains("must be an absolute path without . or .."),
                "{msg}"
            );
        }
        // A link planted beneath the admin's directory leads nowhere: neither for the flat
        // file nor for the kubeconfig.
        let elsewhere = n.dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(
            elsewhere.join("flat.conf"),
            kubeconfig_flat(n.dir.path()).to_string(),
        )
        .unwrap();
        std::fs::write(elsewhere.join("kubeconfig"), "").unwrap();
        std::os::unix::fs::symlink(&elsewhere, n.dir.path().join("net.d/link")).unwrap();
        let through = n.dir.path().join("net.d/link");
        for ipam in [
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "configuration_path": through.join("flat.conf")}),
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "kubernetes": {"kubeconfig": through.join("kubeconfig")}}),
        ] {
            let (code, msg) = err(load(&n, ipam, ""));
            assert_eq!(code, 7, "{msg}");
            assert!(msg.contains("net.d/link is a symbolic link"), "{msg}");
        }
        let (code, msg) = err(load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "kubernetes": {"kubeconfig": escape}}),
            "",
        ));
        assert_eq!(code, 7);
        assert!(msg.starts_with("ipam.kubernetes.kubeconfig: "), "{msg}");
        // The admin's own directory is fine.
        let c = load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.0/24", "kubernetes": {"kubeconfig": inside}}),
            "",
        )
        .unwrap();
        assert_eq!(c.kubeconfig, inside);
    }

    #[test]
    fn a_bad_flat_file_is_named_and_never_quoted() {
        let n = node(None);
        let flat = &n.sources.flat_files[0];
        std::fs::write(flat, "{\"kubernetes\": SECRET-TOKEN-abc}").unwrap();
        let ipam = json!({"type": "whereabouts", "range": "10.1.0.0/24"});
        let (code, msg) = err(load(&n, ipam.clone(), ""));
        assert_eq!(code, 7);
        assert!(
            msg.contains("is not JSON: a syntax error at line 1"),
            "{msg}"
        );
        assert!(!msg.contains("SECRET"), "{msg}");
        std::fs::write(flat, vec![b' '; 70 * 1024]).unwrap();
        assert!(err(load(&n, ipam.clone(), ""))
            .1
            .contains("larger than 65536 bytes"));
        std::fs::remove_file(flat).unwrap();
        std::fs::create_dir(flat).unwrap();
        assert!(err(load(&n, ipam.clone(), ""))
            .1
            .contains("not a regular file"));
        std::fs::remove_dir(flat).unwrap();
        // A FIFO does not hold the call.
        let c = std::ffi::CString::new(flat.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(err(load(&n, ipam, "")).1.contains("not a regular file"));
    }

    #[test]
    fn ranges_in_order_with_their_forms_and_exclusions() {
        let n = with_flat();
        let c = load(
            &n,
            json!({"type": "whereabouts", "range": "10.1.0.100-10.1.0.110/24", "exclude": ["10.1.0.104/30"],
                   "ipRanges": [{"range": "fd00:1::/64", "exclude": ["fd00:1::1"]},
                                {"range": "10.2.0.0/24", "range_start": "10.2.0.50", "range_end": "10.2.0.60"}]}),
            "",
        )
        .unwrap();
        let shown: Vec<String> = c.ranges.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "10.1.0.0/24 (10.1.0.100 to 10.1.0.110, excluding 10.1.0.104/30)",
                "fd00:1::/64 (fd00:1::1 to fd00:1::ffff:ffff:ffff:fffe, excluding fd00:1::1/128)",
                "10.2.0.0/24 (10.2.0.50 to 10.2.0.60)",
            ]
        );
        for (ipam, want) in [
            (
                json!({"type": "whereabouts"}),
                "ipam.range: required, or ipam.ipRanges",
            ),
            (
                json!({"type": "whereabouts", "ipRanges": [{"range": "10.1.0.0/24"}, {"range": "10.2.0.0"}]}),
                "ipam.ipRanges[1].range: \"10.2.0.0\" is not a CIDR",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/24", "exclude": ["10.1.0.0/24", "x"]}),
                "ipam.exclude[1]: \"x\" is neither a CIDR nor an IP address",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/24", "range_start": "nope"}),
                "ipam.range_start: \"nope\" is not an IP address",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/31"}),
                "ipam.range: 10.1.0.0/31 has no usable",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/24", "network_name": "../../secrets/x"}),
                "ipam.network_name: \"../../secrets/x\" cannot be part of a Kubernetes object name",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/16", "node_slice_size": "x"}),
                "ipam.node_slice_size: \"x\" is not a prefix length",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/24", "node_slice_size": "/22"}),
                "ipam.node_slice_size: \"/22\" cannot cut 10.1.0.0/24",
            ),
            (
                json!({"type": "whereabouts", "range": "10.0.0.0/8", "node_slice_size": "/28"}),
                "ipam.node_slice_size: \"/28\" cannot cut 10.0.0.0/8: a slice's prefix must be at least the range's and at most /32, and make at most 4096 slices",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/24", "node_slice_size": "31"}),
                "ipam.node_slice_size: \"31\": a slice that small has no address",
            ),
            (
                json!({"type": "whereabouts", "range": "10.1.0.0/16", "node_slice_size": "/24",
                       "ipRanges": [{"range": "fd00::/64"}]}),
                "ipam.node_slice_size: node slices cut one range, and this config has 2",
            ),
        ] {
            let (code, msg) = err(load(&n, ipam, ""));
            assert!(code == 7 || code == 6, "{code} {msg}");
            assert!(msg.starts_with(want), "{msg}");
        }
    }

    #[test]
    fn node_slices_name_their_pool_and_this_node() {
        let n = with_flat();
        let conf_dir = n.dir.path().join("net.d/whereabouts.d");
        std::fs::write(conf_dir.join("nodename"), "node-a\n").unwrap();
        let ipam = json!({"type": "whereabouts", "range": "10.1.0.0/16", "node_slice_size": "/28"});
        let c = load(&n, ipam.clone(), "").unwrap();
        assert_eq!(
            c.node_slices,
            Some(NodeSlices {
                pool: "blue-net".into(),
                size: 28,
                size_text: "/28".into(),
                node: "node-a".into(),
            })
        );
        let mut named = ipam.clone();
        named["network_name"] = json!("blue");
        assert_eq!(
            load(&n, named, "").unwrap().node_slices.unwrap().pool,
            "blue"
        );
        // A node name that would not stay part of an object name is refused.
        std::fs::write(conf_dir.join("nodename"), "../Node").unwrap();
        let (code, msg) = err(load(&n, ipam.clone(), ""));
        assert_eq!(code, 7);
        assert!(
            msg.contains("\"../Node\" cannot be part of a Kubernetes object name"),
            "{msg}"
        );
        // The reference's installer puts `configuration_path`, a directory, in the flat file:
        // the nodename file there comes first.
        let other = n.dir.path().join("net.d/other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("nodename"), "node-b").unwrap();
        let mut flat = kubeconfig_flat(n.dir.path());
        flat["configuration_path"] = json!(other);
        std::fs::write(&n.sources.flat_files[0], flat.to_string()).unwrap();
        assert_eq!(
            load(&n, ipam, "").unwrap().node_slices.unwrap().node,
            "node-b"
        );
    }

    #[test]
    fn cni_args_give_the_pod_and_static_addresses() {
        let n = with_flat();
        let ipam = json!({"type": "whereabouts", "range": "10.1.0.0/24", "gateway": "10.1.0.1",
                          "addresses": [{"address": "10.9.0.5/24"}],
                          "ipRanges": [{"range": "fd00:1::/64"}]});
        let c = load(
            &n,
            ipam.clone(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=blue;K8S_POD_NAME=web-0;K8S_POD_UID=x;IP=10.8.0.7/24;GATEWAY=10.8.0.1,10.9.0.1",
        )
        .unwrap();
        assert_eq!(
            c.pod.as_ref().map(ToString::to_string).as_deref(),
            Some("blue/web-0")
        );
        let ips = c.result_ips(&[
            ("10.1.0.2".parse().unwrap(), &c.ranges[0]),
            ("fd00:1::2".parse().unwrap(), &c.ranges[1]),
        ]);
        let shown: Vec<String> = ips
            .iter()
            .map(|i| format!("{} {:?}", i.address, i.gateway.map(|g| g.to_string())))
            .collect();
        assert_eq!(
            shown,
            [
                "10.1.0.2/24 Some(\"10.1.0.1\")",
                "fd00:1::2/64 None",
                "10.9.0.5/24 Some(\"10.9.0.1\")",
                "10.8.0.7/24 Some(\"10.8.0.1\")",
            ]
        );
        assert!(load(&n, ipam.clone(), "K8S_POD_NAME=x")
            .unwrap()
            .pod
            .is_some());
        assert!(load(&n, ipam.clone(), "K8S_POD_NAMESPACE=x")
            .unwrap()
            .pod
            .is_none());
        let (code, msg) = err(load(&n, ipam, "FOO=1"));
        assert_eq!(code, 7);
        assert!(msg.contains("FOO"), "{msg}");
    }

    #[test]
    fn missing_or_malformed_ipam_and_old_versions() {
        let n = with_flat();
        let (code, _) = err(Config::load(
            br#"{"cniVersion":"1.0.0","name":"x"}"#,
            "",
            &n.sources,
        ));
        assert_eq!(code, 7);
        let (code, msg) = err(Config::load(
            br#"{"cniVersion":"1.0.0","name":"x","ipam":[]}"#,
            "",
            &n.sources,
        ));
        assert_eq!(code, 6);
        assert!(msg.starts_with("ipam: "), "{msg}");
        let net = json!({"cniVersion": "0.2.0", "name": "x",
                         "ipam": {"type": "whereabouts", "range": "10.1.0.0/24", "ipRanges": [{"range": "10.2.0.0/24"}]}});
        let (code, msg) = err(Config::load(net.to_string().as_bytes(), "", &n.sources));
        assert_eq!(code, 7);
        assert!(
            msg.contains("does not support more than 1 address per family"),
            "{msg}"
        );
    }
}
