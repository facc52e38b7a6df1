//! What macvlan, ipvlan and vlan share: a link on a master interface, created straight into
//! the pod under a temporary name and renamed, addressed from IPAM (or, for ipvlan, a previous
//! plugin's result), and removed again on any failure.
//!
//! DEL needs neither the master nor a default route: it releases the IPAM reservation while
//! the interface still exists, then deletes the interface if the pod still has it.

use cni::in_use::InUse;
use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, NetConf};
use netkit::netlink::Link;
use netkit::{NetNs, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::conflict;
use crate::support::conflict::Probe;
use crate::support::container::{self, ContainerIface};
use crate::support::ipam_call::{self, Ipam};
use crate::support::master;
use crate::support::sys::{open_netns, open_netns_for_del, sys, sys_ctx, with_cleanup_failures};

/// The keys macvlan, ipvlan and vlan share, as written (the common ones are a [`NetConf`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConf {
    #[serde(default)]
    master: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    link_in_container: bool,
    #[serde(default, rename = "enabledad")]
    enable_dad: bool,
    #[serde(default)]
    conflict_probe: Option<serde_json::Value>,
}

/// The keys macvlan, ipvlan and vlan share.
pub fn keys() -> Keys {
    Keys::of::<RawConf>()
}

/// The shared keys, checked.
#[derive(Debug, Clone)]
pub struct SubConf {
    pub net: NetConf,
    /// `None`: the interface of the default route.
    pub master: Option<String>,
    /// `None`: the master's MTU.
    pub mtu: Option<u32>,
    /// The master is in the pod's namespace.
    pub link_in_container: bool,
    /// Wait for IPv6 duplicate address detection instead of adding addresses with `nodad`.
    pub enable_dad: bool,
    /// `conflictProbe`'s wait for answers; `None` when off.
    pub conflict_probe: Option<std::time::Duration>,
}

impl SubConf {
    /// Decodes `config` (a JSON object), then checks the shared keys and picks the mode from
    /// the plugin's table. `own` is the plugin's own keys, decoded first so that every value of
    /// the wrong type is reported before any other problem.
    pub fn parse<M: Copy, Own: serde::de::DeserializeOwned>(
        config: &[u8],
        kind: &str,
        modes: &[(&str, M)],
    ) -> Result<(SubConf, M, Own), CniError> {
        let config = cni::decode::read(config)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: RawConf = cni::decode::from_value(&config)?;
        let own: Own = cni::decode::from_value(&config)?;
        let mode = parse_mode(kind, modes, &raw.mode)?;
        let conf = SubConf {
            master: Some(raw.master).filter(|m| !m.is_empty()),
            mtu: master::parse_mtu(raw.mtu)?,
            link_in_container: raw.link_in_container,
            enable_dad: raw.enable_dad,
            conflict_probe: conflict::parse(raw.conflict_probe.as_ref())?,
            net,
        };
        Ok((conf, mode, own))
    }
}

/// Picks a mode from a plugin's table (names and values, the default first); `""` is the
/// default. A plugin with a single nameless mode (vlan) has no `mode` key: it is ignored, as
/// the reference ignores keys it does not know.
fn parse_mode<M: Copy>(kind: &str, modes: &[(&str, M)], name: &str) -> Result<M, CniError> {
    if let [("", only)] = modes {
        return Ok(*only);
    }
    if name.is_empty() {
        if let Some((_, default)) = modes.first() {
            return Ok(*default);
        }
    }
    if let Some((_, mode)) = modes.iter().find(|(n, _)| *n == name) {
        return Ok(*mode);
    }
    let names: Vec<String> = modes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            if i == 0 {
                format!("{n} (the default)")
            } else {
                (*n).to_owned()
            }
        })
        .collect();
    Err(CniError::invalid_config(format!(
        "mode: {} is not a mode of {kind}: use one of {}",
        cni::quote::quote(name),
        names.join(", ")
    )))
}

/// CHECK: the link's mode (the kernel's value, `actual`) is `wanted`.
pub fn check_mode<M: Copy>(
    link: &Link,
    modes: &[(&str, M)],
    wanted: M,
    value: impl Fn(M) -> u32,
    actual: Option<u32>,
) -> Result<(), CniError> {
    if actual == Some(value(wanted)) {
        return Ok(());
    }
    let name = |v: Option<u32>| {
        modes
            .iter()
            .find(|(_, m)| Some(value(*m)) == v)
            .map_or("unknown", |(n, _)| *n)
    };
    Err(check::fail(format!(
        "{} {:?} is in mode {}, the config says {}",
        link.kind.as_deref().unwrap_or("link"),
        link.name,
        name(actual),
        name(Some(value(wanted)))
    )))
}

/// What differs between macvlan, ipvlan and vlan.
pub trait Flavor {
    /// The link kind, as the kernel names it.
    const KIND: &'static str;

    fn conf(&self) -> &SubConf;

    /// Creates the link `name` on `master` (an index in `nl`'s namespace) straight into `pod`.
    fn create(&self, nl: &Netlink, name: &str, master: u32, pod: &NetNs) -> netkit::Result<()>;

    /// The link has the configured mode (vlan: id and MTU).
    fn check_link(&self, link: &Link) -> Result<(), CniError>;

    /// The addresses to configure when the config has no IPAM (an empty result is layer 2
    /// only). Called before anything is created, so a refusal leaves nothing behind.
    fn without_ipam(&self) -> Result<CniResult, CniError>;

    /// The master when the config names none, before the default route is asked.
    fn implied_master(&self) -> Result<Option<String>, CniError> {
        Ok(None)
    }

    /// Refuses a master this link must not be made on; called before anything is created.
    fn check_master(&self, _master: &master::Master) -> Result<(), CniError> {
        Ok(())
    }

    /// The conflict probe goes out on the master rather than the pod's link: an ipvlan's
    /// link shares the master's MAC, and the kernel hands it no answer to a probe.
    const PROBE_ON_MASTER: bool = false;
}

/// What ADD checks before touching the system, on a parsed config (`config` is its JSON, for
/// the IPAM plugin): the addresses to use without IPAM, the master a chained plugin implies,
/// and a built-in IPAM plugin's section.
pub fn validate(f: &impl Flavor, config: &[u8]) -> Result<(), CniError> {
    let conf = f.conf();
    if conf.net.ipam_type().is_none() {
        f.without_ipam()?;
    }
    if conf.master.is_none() {
        f.implied_master()?;
    }
    ipam_call::validate(&conf.net, config)
}

pub fn add<F: Flavor>(args: &CmdArgs, f: &F) -> Result<CniResult, CniError> {
    let conf = f.conf();
    // An unknown version is refused before anything is made.
    conf.net.version()?;
    let ipam = conf.net.ipam_type().map(|t| Ipam::new(t, args));
    let given = if ipam.is_none() {
        Some(f.without_ipam()?)
    } else {
        None
    };
    let pod = open_netns(&args.netns)?;
    let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
    let name = match &conf.master {
        Some(m) => Some(m.clone()),
        None => f.implied_master()?,
    };
    let master = master::resolve(name.as_deref(), &pod, conf.link_in_container)?;
    master::check_mtu(conf.mtu, &master.link)?;
    f.check_master(&master)?;
    let attachment = (args.container_id.as_str(), args.ifname.as_str());
    let link = container::create_renamed(&pod_nl, &pod, attachment, F::KIND, |temp| {
        f.create(&master.nl, temp, master.link.index, &pod)
    })?;
    let iface = ContainerIface {
        ns: &pod,
        nl: &pod_nl,
        name: &args.ifname,
        index: link.index,
    };
    let node;
    let probe = match conf.conflict_probe {
        Some(wait) if F::PROBE_ON_MASTER => Some(Probe {
            ns: if conf.link_in_container {
                &pod
            } else {
                node = NetNs::current().map_err(sys)?;
                &node
            },
            nl: &master.nl,
            index: master.link.index,
            wait,
        }),
        Some(wait) => Some(Probe {
            ns: &pod,
            nl: &pod_nl,
            index: link.index,
            wait,
        }),
        None => None,
    };
    attach(
        args,
        &conf.net,
        conf.enable_dad,
        &iface,
        ipam.as_ref(),
        given,
        probe.as_ref(),
    )
}

/// The rest of an ADD once the link `iface` exists in the pod: addresses from `ipam` (or the
/// `given` ones), probed for conflicts when `probe` is set, the link up, the result; on any
/// failure the reservation is released and the link deleted.
pub fn attach(
    args: &CmdArgs,
    net: &NetConf,
    enable_dad: bool,
    iface: &ContainerIface,
    ipam: Option<&Ipam>,
    given: Option<CniResult>,
    probe: Option<&Probe>,
) -> Result<CniResult, CniError> {
    let version = net.version()?;
    let mut ipam_reserved = false;
    let mut in_use = Vec::new();
    match configure(
        args,
        net,
        enable_dad,
        iface,
        ipam,
        given,
        probe,
        &mut ipam_reserved,
        &mut in_use,
    ) {
        Ok(mut result) => {
            result.cni_version = version.to_string();
            Ok(result)
        }
        Err(err) => {
            let mut failures = Vec::new();
            // IPAM first, while the interface still exists (a DHCP release can go out).
            if let (true, Some(ipam)) = (ipam_reserved, ipam) {
                if let Err(e) = ipam.release(&in_use) {
                    failures.push(format!("releasing the IPAM reservation: {e}"));
                }
            }
            if let Err(e) = iface.nl.del_link_if_exists(iface.index) {
                failures.push(e.to_string());
            }
            Err(with_cleanup_failures(err, &failures))
        }
    }
}

/// Addresses the new interface, brings it up, and builds the result.
#[allow(clippy::too_many_arguments)]
fn configure(
    args: &CmdArgs,
    net: &NetConf,
    enable_dad: bool,
    iface: &ContainerIface,
    ipam: Option<&Ipam>,
    given: Option<CniResult>,
    probe: Option<&Probe>,
    ipam_reserved: &mut bool,
    in_use: &mut Vec<InUse>,
) -> Result<CniResult, CniError> {
    let mut result = match (ipam, given) {
        (Some(ipam), _) => ipam.add_addresses(net.version()?, ipam_reserved)?,
        (None, given) => given.unwrap_or_default(),
    };
    // Before the addresses are on the link: its gratuitous ARP would announce a taken one.
    if let Some(probe) = probe {
        probe.check(&result, &args.ifname, in_use)?;
    }
    let ctx = || format!("interface {:?} in netns {}", args.ifname, args.netns);
    if result.ips.is_empty() {
        iface.nl.set_up(iface.index).map_err(sys_ctx(ctx()))?;
    } else {
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        iface.apply(&result, enable_dad, true)?;
    }
    let link = iface
        .nl
        .link_by_index(iface.index)
        .map_err(sys_ctx(ctx()))?
        .ok_or_else(|| CniError::internal(format!("{} disappeared during ADD", ctx())))?;
    result.interfaces = vec![container::result_entry(&link, &args.netns)];
    result.dns = ipam_call::result_dns(net.dns.as_ref(), &result.dns);
    Ok(result)
}

/// DEL of a link of `kind`. An interface of that name but another kind was not made here (the
/// pod had it before a refused ADD): it stays.
pub fn del(args: &CmdArgs, kind: &str) -> Result<(), CniError> {
    // Only what DEL needs: a config whose other keys no longer validate must still let the
    // attachment go.
    let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
    let pod = open_netns_for_del(&args.netns)?;
    let found = match &pod {
        Some(ns) => {
            let nl = Netlink::in_ns(ns).map_err(sys)?;
            // An ADD killed before its rename left the link under its temporary name.
            container::remove_temp_link(&nl, &args.container_id, &args.ifname, kind)?;
            nl.link_by_name(&args.ifname)
                .map_err(sys)?
                .filter(|link| link.kind.as_deref() == Some(kind))
                .map(|link| (nl, link.index))
        }
        None => None,
    };
    // A failed release stops here, leaving the interface for the runtime's retry.
    if let Some(t) = net.ipam_type() {
        Ipam::new(t, args).del()?;
    }
    if let Some((nl, index)) = found {
        nl.del_link_if_exists(index).map_err(sys_ctx(format_args!(
            "deleting interface {:?} in netns {}",
            args.ifname, args.netns
        )))?;
    }
    Ok(())
}

pub fn check<F: Flavor>(args: &CmdArgs, f: &F) -> Result<(), CniError> {
    let conf = f.conf();
    let pod = open_netns(&args.netns)?;
    if let Some(t) = conf.net.ipam_type() {
        Ipam::new(t, args).check()?;
    }
    let prev = check::prev_result(&conf.net)?;
    let entry = check::container_entry(&prev, args)?;
    let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
    if let Some(name) = &conf.master {
        // Named: it must still exist where the config says.
        master::resolve(Some(name), &pod, conf.link_in_container)?;
    }
    let link = check::pod_link(&pod_nl, args)?;
    check::kind(&link, F::KIND)?;
    f.check_link(&link)?;
    check::mac(entry, &link)?;
    check::addresses(&pod_nl, &link, &prev)?;
    check::routes(&pod_nl, &prev)
}

/// STATUS and GC are the IPAM plugin's business; a layer-2 network has nothing to report.
pub fn with_ipam(
    args: &CmdArgs,
    f: impl FnOnce(&Ipam) -> Result<(), CniError>,
) -> Result<(), CniError> {
    let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
    match net.ipam_type() {
        Some(t) => f(&Ipam::new(t, args)),
        None => Ok(()),
    }
}
