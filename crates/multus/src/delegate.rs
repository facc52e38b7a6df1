//! A delegate: one network multus attaches (a conf or a conflist, exec'd like a runtime would),
//! with what the pod asked of it.

use std::net::IpAddr;
use std::path::PathBuf;

use cni::network::Network;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use npwg::selection::Selection;

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
    /// The IPAMClaim the selection names, handed on in `CNI_ARGS`.
    pub ipam_claim: Option<String>,
}

/// multus under its upstream binary names: never a delegate, nor a delegate's IPAM.
const MULTUS_TYPES: &[&str] = &["multus", "multus-shim", "multus-daemon"];

/// The one name of the multus binary that a network may run: the whereabouts IPAM plugin,
/// which reads only its own keys.
const WHEREABOUTS: &str = "whereabouts";

/// Keys only the runtime (or multus, for it) puts in a plugin's config: a network that sets
/// them itself would choose its own host ports, addresses or previous result.
const RUNTIME_KEYS: &[&str] = &["runtimeConfig", "prevResult", "cni.dev/valid-attachments"];

/// Refuses a network that would run multus: as one of its plugins, or as a plugin's IPAM.
/// Its own multus settings (`logFile`, `binDir`, `cniDir`, `kubeconfig`, ...) would apply on
/// the node as root, and it could select itself again without end. `is_multus` tells a type
/// that is multus under another name.
fn refuse_multus(network: &Network, origin: &str, is_multus: impl Fn(&str) -> bool) -> Result<()> {
    for (index, plugin) in network.plugins().iter().enumerate() {
        let ipam_type = plugin
            .get("ipam")
            .and_then(|ipam| ipam.get("type"))
            .and_then(Value::as_str);
        let runs = [
            (
                format!("plugin {index}"),
                plugin.get("type").and_then(Value::as_str),
            ),
            (format!("plugin {index}'s ipam"), ipam_type),
        ];
        for (role, plugin_type) in runs {
            let Some(plugin_type) = plugin_type else {
                continue;
            };
            let is_it = MULTUS_TYPES.contains(&plugin_type)
                || (plugin_type != WHEREABOUTS && is_multus(plugin_type));
            if is_it {
                return Err(refused(
                    origin,
                    format!(
                        "{role} is {plugin_type:?}, which runs multus itself: a network cannot \
                         delegate to multus (its multus settings would apply on the node, and it \
                         could call itself without end)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a network whose plugins set what only the runtime sets (see [`RUNTIME_KEYS`]).
fn refuse_runtime_keys(network: &Network, origin: &str) -> Result<()> {
    for (index, plugin) in network.plugins().iter().enumerate() {
        if let Some(key) = RUNTIME_KEYS.iter().find(|k| plugin.contains_key(**k)) {
            return Err(refused(
                origin,
                format!(
                    "plugin {index} sets {key:?}, which only the runtime sets: multus fills \
                     runtimeConfig from the pod's annotation for the capabilities a plugin \
                     declares, and the previous result from the plugins before it; remove it \
                     from the network's config"
                ),
            ));
        }
    }
    Ok(())
}

fn refused(origin: &str, msg: String) -> Error {
    Error::Network {
        network: origin.to_owned(),
        source: Box::new(cni::CniError::invalid_config(msg)),
    }
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
            ipam_claim: None,
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
        refuse_runtime_keys(&delegate.network, &origin)?;
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
        delegate.ipam_claim = selection.ipam_claim_reference.clone();
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
        self.device_id.is_some() || self.network.has_capability(npwg::devinfo::CAPABILITY)
    }

    /// Fails when the selection asks for `ips` or `mac` and nothing in this delegate would
    /// receive it: no plugin declares the capability, and (for `ips`) no plugin's IPAM reads
    /// the `IP` that CNI_ARGS also carries (static and host-local do; upstream's own
    /// default-route case relies on static reading it).
    pub fn check_capabilities(&self, ifname: &str) -> Result<()> {
        let ipam_reads_ip_arg = self.network.plugins().iter().any(|p| {
            matches!(
                p.get("ipam")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str),
                Some("static" | "host-local")
            )
        });
        for (asked, capability, received) in [
            (!self.ips.is_empty(), "ips", ipam_reads_ip_arg),
            (self.mac.is_some(), "mac", false),
        ] {
            if asked && !received && !self.network.has_capability(capability) {
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
