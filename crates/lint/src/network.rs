//! The checks on one NetworkAttachmentDefinition's CNI config: the JSON, the version, every
//! plugin's options (asked of the plugins themselves), and what a valid config can still do
//! to a pod or a node: a master that is the node's uplink, addresses and routes that collide
//! with the cluster's, a default route that takes the pod away from the cluster network, a
//! gateway outside its subnet, ipvlan with DHCP replies that cannot arrive.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::OnceLock;

use cni::keys::UnknownKey;
use cni::{NetConfList, Version};
use ipnet::IpNet;
use serde_json::{json, Map, Value};

use super::plugins::Plugins;
use super::policy::Policy;
use super::report::{Place, Report, Severity};

/// The most plugins a list may chain: each is run (and, by lint, asked about its config) once
/// per pod; a longer list is no network anyone means, and would cost a check per plugin.
pub const MAX_PLUGINS: usize = 32;

/// Address space a NAD's ranges and routes must stay out of.
pub struct Reserved {
    pub net: IpNet,
    /// "the cluster's pod network", ...
    pub what: &'static str,
    pub severity: Severity,
    /// The flag that changes it, for the fix.
    pub flag: Option<&'static str>,
}

/// What the checks need to know about the node, the cluster and the admin's policy.
pub struct Context {
    pub reserved: Vec<Reserved>,
    /// The interface that carries the node's default route.
    pub uplink: Uplink,
    /// The dhcp daemon runs with `-broadcast`.
    pub dhcp_broadcast: bool,
    pub plugins: Plugins,
    /// Whether the plugins are asked about their options (an exec each): not at a pod's ADD.
    pub ask_plugins: bool,
    pub policy: Policy,
}

/// The node's uplink: given on the command line, read from this host's routes (read-only)
/// the first time a master is checked, or unknown (the admission webhook serves every node).
pub enum Uplink {
    Given(String),
    FromHost(OnceLock<Result<Option<String>, String>>),
    Unknown,
}

/// The uplink, when it can be known.
enum UplinkIs<'a> {
    Named(&'a str),
    /// This host has no default route.
    Absent,
    Unreadable(&'a str),
    /// Not this tool's to know.
    Unknown,
}

impl Uplink {
    fn get(&self) -> UplinkIs<'_> {
        match self {
            Uplink::Given(name) => UplinkIs::Named(name),
            Uplink::FromHost(cell) => match cell.get_or_init(host_uplink) {
                Ok(Some(name)) => UplinkIs::Named(name),
                Ok(None) => UplinkIs::Absent,
                Err(e) => UplinkIs::Unreadable(e),
            },
            Uplink::Unknown => UplinkIs::Unknown,
        }
    }
}

/// The interface of this host's default route, from a netlink dump of its routes.
fn host_uplink() -> Result<Option<String>, String> {
    let nl = netkit::Netlink::new().map_err(|e| e.to_string())?;
    let Some(index) = nl.default_route_iface(None).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    Ok(nl
        .link_by_index(index)
        .map_err(|e| e.to_string())?
        .map(|link| link.name))
}

/// What pods' requests are checked against.
#[derive(Debug, Default)]
pub struct Network {
    /// Capabilities some plugin of the network declares.
    pub capabilities: BTreeSet<String>,
    /// Some plugin's IPAM reads the `IP` that multus also passes in CNI_ARGS for a
    /// selection's `ips` (static and host-local), so `ips` reach it without the capability.
    pub reads_ip_arg: bool,
}

/// Checks `config` (the NAD's `spec.config`); `place` names the NAD. A config without a
/// `name` gets the NAD's, as multus gives it. `None` when the config is not there or not
/// readable enough to say what the network can do.
pub fn check(
    ctx: &Context,
    place: &Place,
    nad_name: &str,
    config: &str,
    report: &mut Report,
) -> Option<Network> {
    let root = "spec.config";
    if config.trim().is_empty() {
        report.add(
            Severity::Note,
            "config-on-node",
            place.at(root),
            "spec.config is empty: multus reads this network from a file in the node's CNI \
             config directory, which lint does not see; not checked",
            "",
        );
        return None;
    }
    let mut value: Value = match serde_json::from_str(config) {
        Ok(v) => v,
        Err(e) => {
            report.add(
                Severity::Error,
                "json",
                place.at(root),
                format!("spec.config is not valid JSON: {e} (line and column within spec.config)"),
                "correct the JSON; with a YAML block scalar (`config: |`) the JSON starts on the \
                 line after `config:`",
            );
            return None;
        }
    };
    let Value::Object(top) = &mut value else {
        report.add(
            Severity::Error,
            "json",
            place.at(root),
            "spec.config is not a JSON object",
            "write the CNI config as an object: {\"cniVersion\": ..., \"type\": ...} or a list \
             with \"plugins\"",
        );
        return None;
    };
    if top
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        top.insert("name".into(), nad_name.into());
    }
    let top = &*top;
    let (version, plugins) = if top.contains_key("plugins") {
        let list = match NetConfList::parse(value.to_string().as_bytes()) {
            Ok(list) => list,
            Err(e) => {
                report.add(
                    Severity::Error,
                    "config",
                    place.at(root),
                    format!("the configuration list is refused: {e}"),
                    "give the list a \"name\" and a non-empty \"plugins\" array whose entries \
                     each have a \"type\"",
                );
                return None;
            }
        };
        if list.plugins.len() > MAX_PLUGINS {
            report.add(
                Severity::Error,
                "config",
                place.at(format!("{root}.plugins")),
                format!(
                    "the list chains {} plugins: at most {MAX_PLUGINS}",
                    list.plugins.len()
                ),
                "split the network, or drop plugins it does not need",
            );
            return None;
        }
        let version = match list.effective_version() {
            Ok(v) => v,
            Err(e) => {
                return unsupported_version(place.at(format!("{root}.cniVersion")), &e.msg, report)
            }
        };
        // What an earlier plugin returns is only known at ADD: later plugins are checked as if
        // it were one interface with one address, so checks that depend on it (a chained
        // ipvlan's master and addresses) pass rather than fail for want of it.
        let earlier = json!({
            "cniVersion": version.as_str(),
            "interfaces": [{"name": "eth0"}],
            "ips": [{"address": "192.0.2.2/24", "interface": 0}],
        });
        let plugins: Vec<(String, Map<String, Value>)> = (0..list.plugins.len())
            .filter_map(|i| {
                let prev = (i > 0).then_some(&earlier);
                let conf = list.plugin_config(i, &Map::new(), prev).ok()?;
                Some((format!("{root}.plugins[{i}]"), conf))
            })
            .collect();
        (version, plugins)
    } else {
        let written = top.get("cniVersion").and_then(Value::as_str).unwrap_or("");
        let version = match Version::from_config(written) {
            Ok(v) => v,
            Err(e) => {
                return unsupported_version(place.at(format!("{root}.cniVersion")), &e.msg, report)
            }
        };
        (version, vec![(root.to_owned(), top.clone())])
    };

    let network = Network {
        capabilities: plugins
            .iter()
            .flat_map(|(_, conf)| declared_capabilities(conf))
            .collect(),
        reads_ip_arg: plugins.iter().any(|(_, conf)| {
            matches!(
                conf.get("ipam")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str),
                Some("static" | "host-local")
            )
        }),
    };
    for (index, (path, conf)) in plugins.iter().enumerate() {
        let plugin = Plugin {
            place: place.at(path.clone()),
            path,
            conf,
            index,
            version,
        };
        plugin.check(ctx, &network, report);
    }
    Some(network)
}

fn unsupported_version(place: Place, msg: &str, report: &mut Report) -> Option<Network> {
    let versions = Version::ALL.map(Version::as_str).join(", ");
    report.add(
        Severity::Error,
        "cni-version",
        place,
        format!("{msg}: multus and the plugins it runs would refuse this network"),
        format!("set \"cniVersion\" to one of {versions}"),
    );
    None
}

fn declared_capabilities(conf: &Map<String, Value>) -> Vec<String> {
    conf.get("capabilities")
        .and_then(Value::as_object)
        .map(|caps| {
            caps.iter()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// One plugin's config, as the runtime would hand it over.
struct Plugin<'a> {
    place: Place,
    path: &'a str,
    conf: &'a Map<String, Value>,
    /// Its position in a list (0 for a single config).
    index: usize,
    version: Version,
}

impl Plugin<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        self.conf
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    fn key(&self, key: &str) -> Place {
        self.place.at(format!("{}.{key}", self.path))
    }

    fn check(&self, ctx: &Context, network: &Network, report: &mut Report) {
        let Some(plugin_type) = self.str("type") else {
            report.add(
                Severity::Error,
                "config",
                self.key("type"),
                "the config has no \"type\": the runtime cannot tell which plugin to run",
                "set \"type\" to the plugin's binary name, e.g. \"macvlan\"",
            );
            return;
        };
        if ctx.ask_plugins {
            self.check_options(ctx, plugin_type, report);
        }
        self.check_policy(ctx, plugin_type, report);
        let ipam = self.conf.get("ipam").and_then(Value::as_object);
        let ipam_type = ipam
            .and_then(|i| i.get("type"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        if let Some(t) = ipam_type {
            if !ctx.policy.allows_ipam_type(t) {
                report.add(
                    Severity::Error,
                    "policy-ipam-type",
                    self.key("ipam.type"),
                    format!(
                        "ipam type {t:?} is not on the policy's allowedIpamTypes ({})",
                        ctx.policy.allowed_ipam_types.join(", ")
                    ),
                    "use an allowed IPAM type, or ask the cluster's admin to allow this one",
                );
            }
            // whereabouts' own checks, like every plugin's, are not run at a pod's ADD.
            if t == "whereabouts" && ctx.ask_plugins {
                self.check_whereabouts(report);
            } else if ctx.ask_plugins && !ctx.plugins.is_builtin(t) {
                report.add(
                    Severity::Note,
                    "not-checked",
                    self.key("ipam.type"),
                    format!(
                        "ipam type {t:?} is not built into multus-rs: its options were not checked"
                    ),
                    "",
                );
            }
        }
        if matches!(plugin_type, "macvlan" | "ipvlan") {
            self.check_master(ctx, plugin_type, report);
        }
        if plugin_type == "bridge"
            && self.conf.get("isDefaultGateway").and_then(Value::as_bool) == Some(true)
        {
            let (severity, denied) = ctx.policy.default_route();
            report.add(
                severity,
                "ipam-default-route",
                self.key("isDefaultGateway"),
                format!(
                    "isDefaultGateway: the bridge gives the pod a default route through it, \
                     which competes with the cluster network's.{denied}"
                ),
                "remove it, unless the pod really should use this network by default",
            );
        }
        if let (Some(ipam), Some(ipam_type)) = (ipam, ipam_type) {
            let ipam = Ipam {
                plugin: self,
                conf: ipam,
                path: format!("{}.ipam", self.path),
            };
            ipam.check(ctx, plugin_type, ipam_type, network, report);
        }
    }

    /// whereabouts is carried by multus itself: its validate runs here, on the config the
    /// interface plugin would hand it.
    fn check_whereabouts(&self, report: &mut Report) {
        let value = Value::Object(self.conf.clone());
        for key in cni::keys::unknown_in_ipam(&value, ipam::whereabouts::keys()) {
            self.unknown_key("whereabouts", &key.warning("whereabouts"), report);
        }
        let config = value.to_string();
        if let Err(e) = cni::skel::validate(&whereabouts::Whereabouts::node(), config.as_bytes()) {
            report.add(
                Severity::Error,
                "plugin-options",
                self.key("ipam"),
                format!(
                    "whereabouts refuses this ipam section (CNI error {}): {e}",
                    e.code
                ),
                "change what the ipam section names: ADD would fail with this same error",
            );
        }
    }

    /// A key `plugin` does not read, from its warning (`portmap: unknown key "masqall" (did
    /// you mean "masqAll"?)`), at the key when the warning names it whole.
    fn unknown_key(&self, plugin: &str, warning: &str, report: &mut Report) {
        let place = match UnknownKey::path_in_warning(plugin, warning) {
            Some(key) => self.key(key),
            None => self.place.clone(),
        };
        report.add(
            Severity::Warning,
            "unknown-key",
            place,
            format!(
                "{warning}: the plugin ignores it, so the network works as if it were not there"
            ),
            "correct the key's name (names are case-sensitive), or remove it",
        );
    }

    /// The plugin's own checks: `cni-plugins validate` for a built-in type, the VERSION answer
    /// for another binary in the bin dir.
    fn check_options(&self, ctx: &Context, plugin_type: &str, report: &mut Report) {
        let plugins = &ctx.plugins;
        if plugins.is_builtin(plugin_type) {
            let config = Value::Object(self.conf.clone()).to_string();
            match plugins.validate(plugin_type, config.as_bytes()) {
                Ok(answer) => {
                    for warning in &answer.warnings {
                        self.unknown_key(plugin_type, warning, report);
                    }
                    if let Some(e) = answer.error {
                        report.add(
                            Severity::Error,
                            "plugin-options",
                            self.place.clone(),
                            format!(
                                "{plugin_type} refuses this config (CNI error {}): {e}",
                                e.code
                            ),
                            "change what the plugin names: ADD would fail with this same error",
                        );
                    }
                }
                Err(e) => report.add(
                    Severity::Note,
                    "not-checked",
                    self.place.clone(),
                    format!("the {plugin_type} options were not checked: {e}"),
                    "",
                ),
            }
            return;
        }
        let version = self.version.as_str();
        let found = match plugins.supported_versions(plugin_type, version) {
            None => format!(
                " and there is no {plugin_type:?} binary in {} (a pod on this network fails \
                 unless the node has one)",
                plugins.bin_dir().display()
            ),
            Some(Ok(versions)) => {
                if !versions.iter().any(|v| v == version) {
                    report.add(
                        Severity::Error,
                        "cni-version",
                        self.key("type"),
                        format!(
                            "{plugin_type} in {} speaks CNI {}, not {version}",
                            plugins.bin_dir().display(),
                            versions.join(", ")
                        ),
                        format!("set \"cniVersion\" to a version {plugin_type} speaks"),
                    );
                }
                String::new()
            }
            Some(Err(e)) => format!(" and asking its binary for its versions failed: {e}"),
        };
        report.add(
            Severity::Note,
            "not-checked",
            self.key("type"),
            format!(
                "{plugin_type:?} is not built into multus-rs: its options were not checked{found}"
            ),
            "",
        );
    }

    /// The admin's policy on the plugin's type and the interface it takes from the node.
    fn check_policy(&self, ctx: &Context, plugin_type: &str, report: &mut Report) {
        let policy = &ctx.policy;
        if !policy.allows_type(plugin_type) {
            report.add(
                Severity::Error,
                "policy-type",
                self.key("type"),
                format!(
                    "plugin type {plugin_type:?} is not on the policy's allowedTypes ({})",
                    policy.allowed_types.join(", ")
                ),
                "use an allowed plugin type, or ask the cluster's admin to allow this one",
            );
        }
        // host-device moves `device` into the pod; the others build on `master`.
        let key = if plugin_type == "host-device" {
            "device"
        } else {
            "master"
        };
        // A missing master is the node's uplink (macvlan, ipvlan) or a device chosen another
        // way (host-device's hwaddr, pciBusID, kernelpath): neither is on a list of names.
        let takes_master = matches!(plugin_type, "macvlan" | "ipvlan" | "vlan" | "host-device");
        let chained = self.index > 0 && plugin_type == "ipvlan";
        let Some(name) = self.str(key) else {
            if takes_master && !chained && !policy.allowed_masters.is_empty() {
                report.add(
                    Severity::Error,
                    "policy-master",
                    self.key(key),
                    format!(
                        "no {key:?}: the policy's allowedMasters ({}) names the interfaces a NAD \
                         may take, so {plugin_type} must name one",
                        policy.allowed_masters.join(", ")
                    ),
                    format!("set {key:?} to an interface the policy allows"),
                );
            }
            return;
        };
        if let Some(why) = policy.refuses_master(name) {
            report.add(
                Severity::Error,
                "policy-master",
                self.key(key),
                format!("{key} {name:?} is refused: {why}"),
                format!(
                    "name an interface the policy allows as {key}, or ask the cluster's admin to \
                     allow this one"
                ),
            );
        }
        if key == "device" {
            if let UplinkIs::Named(uplink) = ctx.uplink.get() {
                if uplink == name {
                    report.add(
                        Severity::Error,
                        "device-default-route",
                        self.key(key),
                        format!(
                            "device {name:?} carries the node's default route: host-device \
                             moves it into the pod, and the node loses its network"
                        ),
                        "name a device meant for pods (a second NIC, a VF)",
                    );
                }
            }
        }
    }

    fn check_master(&self, ctx: &Context, plugin_type: &str, report: &mut Report) {
        if self.conf.get("linkInContainer").and_then(Value::as_bool) == Some(true) {
            return;
        }
        let master = self.str("master");
        // A chained ipvlan without a master takes it from the previous plugin's result.
        if master.is_none() && self.index > 0 {
            return;
        }
        let uplink = match ctx.uplink.get() {
            UplinkIs::Named(uplink) => uplink,
            UplinkIs::Absent => {
                report.add(
                    Severity::Note,
                    "not-checked",
                    self.key("master"),
                    "this host has no default route, so the master was not compared with the node's uplink",
                    "run lint on the node, or name the node's uplink with --default-route-interface",
                );
                return;
            }
            UplinkIs::Unreadable(e) => {
                report.add(
                    Severity::Note,
                    "not-checked",
                    self.key("master"),
                    format!("this host's routes could not be read ({e}), so the master was not compared with the node's uplink"),
                    "name the node's uplink with --default-route-interface",
                );
                return;
            }
            // The node checks it at ADD.
            UplinkIs::Unknown => return,
        };
        let problem = match master {
            Some(m) if m == uplink => format!(
                "master {m:?} carries the node's default route: the node cannot reach these \
                 pods through it (a {plugin_type} parent does not see its children's traffic), \
                 and the pods sit on the node's uplink network"
            ),
            Some(_) => return,
            None => format!(
                "no \"master\": {plugin_type} uses the interface of the node's default route \
                 ({uplink}), so the node cannot reach these pods through it and they sit on the \
                 node's uplink network"
            ),
        };
        let (severity, problem) = if ctx.policy.denies_uplink() {
            let why = format!(
                "{problem}; the policy's deniedMasters has \"{}\"",
                super::policy::UPLINK
            );
            (Severity::Error, why)
        } else {
            (Severity::Warning, problem)
        };
        report.add(
            severity,
            "master-default-route",
            self.key("master"),
            problem,
            "set \"master\" to an interface meant for pods (a second NIC, or a VLAN such as \
             eth0.100); keep the uplink only when the node never needs to reach these pods",
        );
    }
}

/// A plugin's `ipam` section.
struct Ipam<'a> {
    plugin: &'a Plugin<'a>,
    conf: &'a Map<String, Value>,
    path: String,
}

impl Ipam<'_> {
    fn at(&self, key: &str) -> Place {
        self.plugin.place.at(format!("{}.{key}", self.path))
    }

    fn check(
        &self,
        ctx: &Context,
        plugin_type: &str,
        ipam_type: &str,
        network: &Network,
        report: &mut Report,
    ) {
        match ipam_type {
            "host-local" => self.check_host_local(ctx, report),
            "static" => self.check_static(ctx, network, report),
            "whereabouts" => self.check_whereabouts_ranges(ctx, report),
            "dhcp" => {
                if plugin_type == "ipvlan" {
                    self.check_ipvlan_dhcp(ctx, report);
                }
                // The routes come from the server; the keys below would mislead.
                return self.check_dhcp_routes(report);
            }
            _ => {}
        }
        self.check_routes(ctx, report);
    }

    /// whereabouts' `range` and each `ipRanges[].range`, against the reserved space.
    fn check_whereabouts_ranges(&self, ctx: &Context, report: &mut Report) {
        let mut ranges = vec![("range".to_owned(), self.conf.get("range"))];
        if let Some(Value::Array(list)) = self.conf.get("ipRanges") {
            ranges.extend(
                list.iter()
                    .enumerate()
                    .map(|(i, r)| (format!("ipRanges[{i}].range"), r.get("range"))),
            );
        }
        for (key, value) in ranges {
            // `range` may carry a start: `10.0.0.10-10.0.0.20/24` is read by its subnet.
            let text = value.and_then(Value::as_str).unwrap_or_default();
            let subnet = match (text.split_once('-'), text.rsplit_once('/')) {
                (Some((start, _)), Some((_, len))) => format!("{start}/{len}"),
                _ => text.to_owned(),
            };
            if let Ok(net) = subnet.parse::<IpNet>() {
                self.check_reserved(ctx, &key, "range", net.trunc(), report);
            }
        }
    }

    fn check_dhcp_routes(&self, report: &mut Report) {
        if self.conf.get("routes").is_none() {
            return;
        }
        report.add(
            Severity::Warning,
            "dhcp-ipam-routes",
            self.at("routes"),
            "dhcp takes its routes from the server's lease (router, static and classless \
             static routes): \"routes\" here is not installed, by this dhcp plugin or the \
             reference's"
                .to_owned(),
            "remove it, and have the DHCP server send the routes (option 121), or add them \
             with another plugin in a conflist",
        );
    }

    fn check_host_local(&self, ctx: &Context, report: &mut Report) {
        let mut ranges: Vec<(String, &Map<String, Value>)> = Vec::new();
        if self.conf.contains_key("subnet") {
            ranges.push((String::new(), self.conf));
        }
        if let Some(Value::Array(sets)) = self.conf.get("ranges") {
            for (i, set) in sets.iter().enumerate() {
                let Value::Array(set) = set else { continue };
                for (j, range) in set.iter().enumerate() {
                    if let Value::Object(range) = range {
                        ranges.push((format!("ranges[{i}][{j}]."), range));
                    }
                }
            }
        }
        for (prefix, range) in ranges {
            let Some(subnet) = cidr(range.get("subnet")) else {
                continue;
            };
            let subnet = subnet.trunc();
            self.check_reserved(ctx, &format!("{prefix}subnet"), "range", subnet, report);
            if let Some(gw) = ip(range.get("gateway")) {
                self.check_gateway(&format!("{prefix}gateway"), gw, subnet, report);
            }
        }
    }

    fn check_static(&self, ctx: &Context, network: &Network, report: &mut Report) {
        let addresses = match self.conf.get("addresses") {
            Some(Value::Array(a)) => a.as_slice(),
            _ => &[],
        };
        if addresses.is_empty() && !network.capabilities.contains("ips") {
            report.add(
                Severity::Warning,
                "static-without-address",
                self.at("addresses"),
                "static IPAM with no \"addresses\", and no plugin of this network declares the \
                 \"ips\" capability: only a pod whose networks annotation gives \"ips\" (which \
                 reach static IPAM as CNI_ARGS IP) gets an address; for any other, ADD fails \
                 with no address to configure",
                "list \"addresses\", or add \"capabilities\": {\"ips\": true} to the plugin and \
                 give each pod its address in the networks annotation (\"ips\")",
            );
        }
        for (i, entry) in addresses.iter().enumerate() {
            let Some(address) = cidr(entry.get("address")) else {
                continue;
            };
            let subnet = address.trunc();
            let key = format!("addresses[{i}].address");
            self.check_reserved(ctx, &key, "address", subnet, report);
            if let Some(gw) = ip(entry.get("gateway")) {
                self.check_gateway(&format!("addresses[{i}].gateway"), gw, subnet, report);
            }
        }
    }

    fn check_ipvlan_dhcp(&self, ctx: &Context, report: &mut Report) {
        if ctx.dhcp_broadcast || self.conf.get("broadcast").and_then(Value::as_bool) == Some(true) {
            return;
        }
        report.add(
            Severity::Warning,
            "ipvlan-dhcp-broadcast",
            self.at("type"),
            "ipvlan with dhcp and no broadcast: an ipvlan shares its master's MAC address, so \
             the DHCP server's unicast replies go to the master, the lease never completes and \
             the pod stays in ContainerCreating",
            "add \"broadcast\": true to this ipam section, or run the dhcp daemon with \
             -broadcast (then pass --dhcp-broadcast to lint)",
        );
    }

    fn check_routes(&self, ctx: &Context, report: &mut Report) {
        let Some(Value::Array(routes)) = self.conf.get("routes") else {
            return;
        };
        for (i, route) in routes.iter().enumerate() {
            let Some(dst) = cidr(route.get("dst")) else {
                continue;
            };
            let key = format!("routes[{i}].dst");
            // Two halves (`0.0.0.0/1` and `128.0.0.0/1`) take the traffic a default route does.
            if dst.prefix_len() <= 1 {
                let (severity, denied) = ctx.policy.default_route();
                report.add(
                    severity,
                    "ipam-default-route",
                    self.at(&key),
                    format!(
                        "a default route ({dst}) in the IPAM config: it competes with the \
                         cluster network's default route in the pod. This multus puts it \
                         behind the cluster network's (a higher metric, with a \
                         SecondaryDefaultRoute event); under the reference multus it takes \
                         the pod's traffic to the internet and other nodes.{denied}"
                    ),
                    "remove it, and list only the subnets this network reaches; if the pod \
                     really should use this network by default, ask for it in the pod's \
                     networks annotation with \"default-route\"",
                );
                continue;
            }
            self.check_reserved(ctx, &key, "route", dst.trunc(), report);
        }
    }

    /// `net` (a range, an address's subnet or a route) must not overlap reserved space.
    fn check_reserved(
        &self,
        ctx: &Context,
        key: &str,
        what: &str,
        net: IpNet,
        report: &mut Report,
    ) {
        for r in &ctx.reserved {
            if !overlaps(&net, &r.net) {
                continue;
            }
            let effect = if what == "route" {
                "the pod's traffic for it would leave through this interface instead of the \
                 cluster network"
            } else {
                "pods would get addresses the cluster routes elsewhere, and their traffic to \
                 those addresses goes out the wrong interface"
            };
            let fix = match r.flag {
                Some(flag) => format!(
                    "use a {what} outside {} (if the cluster uses other CIDRs, give them with \
                     {flag})",
                    r.net
                ),
                None => format!("use a {what} outside {}", r.net),
            };
            report.add(
                r.severity,
                "reserved-overlap",
                self.at(key),
                format!("{what} {net} overlaps {} {}: {effect}", r.what, r.net),
                fix,
            );
        }
    }

    fn check_gateway(&self, key: &str, gw: IpAddr, subnet: IpNet, report: &mut Report) {
        // A gateway of the other family is the plugin's own error.
        if gw.is_ipv4() != subnet.addr().is_ipv4() || subnet.contains(&gw) {
            return;
        }
        report.add(
            Severity::Warning,
            "gateway-outside-range",
            self.at(key),
            format!(
                "gateway {gw} is outside {subnet}: the pod has no route to reach it unless one \
                 is added on-link, so its routes through it fail"
            ),
            format!("use a gateway inside {subnet}, or correct the subnet"),
        );
    }
}

fn cidr(v: Option<&Value>) -> Option<IpNet> {
    v?.as_str()?.parse().ok()
}

fn ip(v: Option<&Value>) -> Option<IpAddr> {
    v?.as_str()?.parse().ok()
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}
