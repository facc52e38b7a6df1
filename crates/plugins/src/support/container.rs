//! The pod side of every interface plugin: creating the container interface under a temporary
//! name, its sysctls, addresses and routes (the reference's `ConfigureIface`), and its entry in
//! the result.

use std::io::Read;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use cni::{CniError, CniResult, Interface};
use netkit::netlink::{AddrOpts, Link, Route, RTN_LOCAL, RT_TABLE_LOCAL};
use netkit::{Family, NetNs, Netlink};

use crate::support::sys::{sys, sys_ctx};

/// How long to wait for IPv6 duplicate address detection when `enabledad` asks for it.
const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_POLL: Duration = Duration::from_millis(20);
/// How soon to look again whether the kernel has made the IPv6 addresses local (below), at
/// first and at most: it usually has within a millisecond, so the waits start short and double.
const LOCAL_POLL_FIRST: Duration = Duration::from_micros(50);
const LOCAL_POLL_MAX: Duration = Duration::from_millis(5);
/// Attempts at a free random host veth name before giving up.
const VETH_NAME_ATTEMPTS: usize = 10;

/// The container interface, as seen inside the pod.
pub struct ContainerIface<'a> {
    pub ns: &'a NetNs,
    pub nl: &'a Netlink,
    pub name: &'a str,
    pub index: u32,
}

impl ContainerIface<'_> {
    fn ctx(&self) -> String {
        format!(
            "container interface {:?} in netns {}",
            self.name,
            self.ns.path().display()
        )
    }

    /// Sysctls the reference sets before addressing: DAD as configured, gratuitous ARP (and,
    /// with `ndisc_notify`, unsolicited neighbour advertisements) on address changes, and IPv6
    /// enabled (with addresses kept on link down) when needed.
    fn set_sysctls(
        &self,
        enable_dad: bool,
        has_ipv6: bool,
        ndisc_notify: bool,
    ) -> Result<(), CniError> {
        let name = self.name;
        let result = self.ns.run(|| -> netkit::Result<()> {
            let key = |path: &str| format!("net/{path}");
            // Best effort like the reference: these may be missing with IPv6 disabled.
            if enable_dad {
                let _ = netkit::sysctl::write(&key(&format!("ipv6/conf/{name}/enhanced_dad")), "1");
                let _ = netkit::sysctl::write(&key(&format!("ipv6/conf/{name}/accept_dad")), "1");
            } else {
                let _ = netkit::sysctl::write(&key(&format!("ipv6/conf/{name}/accept_dad")), "0");
            }
            let _ = netkit::sysctl::write(&key(&format!("ipv4/conf/{name}/arp_notify")), "1");
            if ndisc_notify {
                let _ = netkit::sysctl::write(&key(&format!("ipv6/conf/{name}/ndisc_notify")), "1");
            }
            if has_ipv6 {
                for dev in ["lo", name] {
                    netkit::sysctl::write(&key(&format!("ipv6/conf/{dev}/disable_ipv6")), "0")?;
                }
                netkit::sysctl::write(&key(&format!("ipv6/conf/{name}/keep_addr_on_down")), "1")?;
            }
            Ok(())
        });
        result
            .and_then(|r| r)
            .map_err(sys_ctx(format_args!("enabling IPv6 on {}", self.ctx())))
    }

    /// Sets the sysctls and configures the result's addresses and routes: an IPAM result
    /// applied inside the pod.
    pub fn apply(
        &self,
        result: &CniResult,
        enable_dad: bool,
        ndisc_notify: bool,
    ) -> Result<(), CniError> {
        let has_ipv6 = result.ips.iter().any(|ip| ip.address.addr().is_ipv6());
        self.set_sysctls(enable_dad, has_ipv6, ndisc_notify)?;
        self.configure(result, enable_dad)
    }

    /// Adds the result's addresses, brings the link up, and adds the routes. Routes without a
    /// gateway go through the first gateway of their family among the addresses, else straight
    /// out of the interface. A route may sit beside the pod's own to the same destination (a
    /// second default route, say), as the reference adds it; which one leads is the caller's
    /// call (multus demotes a secondary network's default).
    fn configure(&self, result: &CniResult, enable_dad: bool) -> Result<(), CniError> {
        let (mut v4gw, mut v6gw) = (None, None);
        for ip in &result.ips {
            // IPv4 addresses do not do DAD; the flag would only show up in `ip addr`.
            let nodad = !enable_dad && ip.address.addr().is_ipv6();
            let opts = AddrOpts {
                nodad,
                noprefixroute: false,
            };
            self.nl
                .add_addr(self.index, ip.address, opts)
                .map_err(sys_ctx(self.ctx()))?;
            match ip.gateway {
                Some(gw @ IpAddr::V4(_)) => v4gw = v4gw.or(Some(gw)),
                Some(gw @ IpAddr::V6(_)) => v6gw = v6gw.or(Some(gw)),
                None => {}
            }
        }
        self.nl.set_up(self.index).map_err(sys_ctx(self.ctx()))?;
        if enable_dad && v6gw.is_some() {
            self.settle_dad()?;
        }
        if !enable_dad {
            self.settle_local(result)?;
        }
        for r in &result.routes {
            let family_gw = if r.dst.addr().is_ipv4() { v4gw } else { v6gw };
            let mut route = Route::new(r.dst).dev(self.index);
            if let Some(gw) = r.gw.or(family_gw) {
                route = route.via(gw);
            }
            if let Some(p) = r.priority {
                route = route.metric(p);
            }
            if let Some(t) = r.table {
                route = route.table(t);
            }
            if let Some(s) = r.scope {
                route = route.scope(s);
            }
            if let Some(m) = r.mtu {
                route = route.mtu(m);
            }
            if let Some(m) = r.advmss {
                route = route.advmss(m);
            }
            self.nl
                .add_route_beside(&route)
                .map_err(sys_ctx(self.ctx()))?;
        }
        Ok(())
    }

    /// Waits until every IPv6 address of `result` is local. Once the link is up, the kernel
    /// adds an address's local route from a work queue, even without DAD (and, without DAD,
    /// with no carrier too), and until then drops what is sent to the address: on a busy node
    /// a pod could lose its first packets after ADD. (The reference waits for DAD to end, which
    /// takes that step too.)
    fn settle_local(&self, result: &CniResult) -> Result<(), CniError> {
        let wanted: Vec<IpAddr> = result
            .ips
            .iter()
            .map(|ip| ip.address.addr())
            .filter(IpAddr::is_ipv6)
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + DAD_TIMEOUT;
        let mut pause = LOCAL_POLL_FIRST;
        loop {
            let local = self
                .nl
                .routes(Family::V6, Some(RT_TABLE_LOCAL))
                .map_err(sys_ctx(self.ctx()))?;
            let missing = wanted.iter().find(|a| {
                !local.iter().any(|r| {
                    r.kind == RTN_LOCAL && r.dst.addr() == **a && r.dst.prefix_len() == 128
                })
            });
            let Some(missing) = missing else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(CniError::internal(format!(
                    "{}: the kernel has not made IPv6 address {missing} local after {}s",
                    self.ctx(),
                    DAD_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(LOCAL_POLL_MAX);
        }
    }

    /// Waits until no IPv6 address of the interface is tentative (only with `enabledad`).
    fn settle_dad(&self) -> Result<(), CniError> {
        let deadline = Instant::now() + DAD_TIMEOUT;
        loop {
            let addrs = self
                .nl
                .addrs(Some(self.index), Some(Family::V6))
                .map_err(sys_ctx(self.ctx()))?;
            if let Some(a) = addrs.iter().find(|a| a.dad_failed()) {
                return Err(CniError::internal(format!(
                    "{}: duplicate address detection failed for {}: another host uses it",
                    self.ctx(),
                    a.net
                )));
            }
            if !addrs.iter().any(|a| a.is_tentative()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CniError::internal(format!(
                    "{}: IPv6 addresses still tentative after {}s of duplicate address detection",
                    self.ctx(),
                    DAD_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(DAD_POLL);
        }
    }
}

/// The container interface's entry in a result.
pub fn result_entry(link: &Link, netns: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| netkit::format_mac(&m)).unwrap_or_default(),
        sandbox: netns.to_owned(),
        ..Interface::default()
    }
}

/// Creates a veth pair: the host end under a random `vethXXXXXXXX` name in `nl`'s namespace,
/// the other end, `peer_name`, directly in `peer_ns` (or beside the host end with `None`).
/// Returns the host end.
pub fn create_veth(
    nl: &Netlink,
    peer_name: &str,
    peer_ns: Option<&NetNs>,
    mtu: Option<u32>,
) -> Result<Link, CniError> {
    let where_ = peer_ns
        .map(|ns| format!("netns {}", ns.path().display()))
        .unwrap_or_else(|| "the node's netns".to_owned());
    for _ in 0..VETH_NAME_ATTEMPTS {
        let host_name = random_veth_name()?;
        match nl.add_veth(&host_name, peer_name, peer_ns, mtu, None) {
            Ok(()) => return nl.link(&host_name).map_err(sys),
            Err(e) if e.errno() == Some(libc::EEXIST) => {
                // Either our random name is taken (try another) or the peer's name is.
                if nl.link_by_name(&host_name).map_err(sys)?.is_none() {
                    return Err(CniError::internal(format!(
                        "interface {peer_name:?} already exists in {where_}"
                    ))
                    .with_details(e.to_string()));
                }
            }
            Err(e) => return Err(sys(e)),
        }
    }
    Err(CniError::internal(format!(
        "no free host veth name found after {VETH_NAME_ATTEMPTS} random tries"
    )))
}

/// `veth` and 8 random hex digits, like the reference (NetworkManager ignores `veth*`).
pub fn random_veth_name() -> Result<String, CniError> {
    let mut bytes = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| CniError::io(format!("reading /dev/urandom for a link name: {e}")))?;
    Ok(format!(
        "veth{:02x}{:02x}{:02x}{:02x}",
        bytes[0], bytes[1], bytes[2], bytes[3]
    ))
}

/// The temporary name of attachment (`container_id`, `ifname`)'s link in the pod before it is
/// renamed: `veth` and 8 hex digits of a fixed hash of the two (NetworkManager ignores
/// `veth*`). Being the attachment's own, an ADD killed before the rename leaves a link that DEL
/// and the next ADD can find.
pub fn temp_name(container_id: &str, ifname: &str) -> String {
    // FNV-1a, fixed so that every release computes the same name.
    let mut hash: u32 = 0x811c_9dc5;
    for b in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("veth{hash:08x}")
}

/// Deletes attachment (`container_id`, `ifname`)'s temporary link of `kind` in the pod, which
/// an ADD killed before its rename leaves.
pub fn remove_temp_link(
    pod_nl: &Netlink,
    container_id: &str,
    ifname: &str,
    kind: &str,
) -> Result<(), CniError> {
    let temp = temp_name(container_id, ifname);
    if let Some(link) = pod_nl
        .link_by_name(&temp)
        .map_err(sys)?
        .filter(|l| l.kind.as_deref() == Some(kind))
    {
        pod_nl.del_link_if_exists(link.index).map_err(sys)?;
    }
    Ok(())
}

/// Creates a link of `kind` in the pod under the attachment's temporary name with `create`,
/// then renames it to `ifname`: the name the runtime asked for may exist where the kernel
/// first registers the link. What an earlier ADD of the attachment left under the temporary
/// name goes first. Returns the renamed link; on failure nothing is left behind.
pub fn create_renamed(
    pod_nl: &Netlink,
    pod: &NetNs,
    (container_id, ifname): (&str, &str),
    kind: &str,
    create: impl FnOnce(&str) -> netkit::Result<()>,
) -> Result<Link, CniError> {
    let where_ = format!("netns {}", pod.path().display());
    if pod_nl.link_by_name(ifname).map_err(sys)?.is_some() {
        return Err(CniError::internal(format!(
            "interface {ifname:?} already exists in {where_}: DEL the attachment that owns it, \
             or choose another CNI_IFNAME"
        )));
    }
    remove_temp_link(pod_nl, container_id, ifname, kind)?;
    let temp = temp_name(container_id, ifname);
    create(&temp).map_err(sys)?;
    let link = pod_nl.link(&temp).map_err(sys)?;
    match pod_nl.set_name(link.index, ifname) {
        Ok(()) => Ok(Link {
            name: ifname.to_owned(),
            ..link
        }),
        Err(e) => {
            let _ = pod_nl.del_link(link.index);
            Err(sys_ctx(format_args!(
                "renaming the new interface to {ifname:?} in {where_}"
            ))(e))
        }
    }
}
