//! The CNI commands: ADD takes one address from each range, DEL frees what the container's
//! interface holds, CHECK compares the pools with the previous result, STATUS lists the pools.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni::{CmdArgs, CniError, CniResult, Plugin};
use ipam::whereabouts::{pool_name, reservation_name, Allocation, Choice, Config, Range, Sources};

use crate::error::Error;
use crate::store::Store;

/// How often one range's pool is read and written before ADD or DEL gives up, and for how
/// long: the reference's 100 rounds, with a deadline well inside the runtime's.
const MAX_ROUNDS: u32 = 100;
const DEADLINE: Duration = Duration::from_secs(60);

/// The plugin, reading the node's flat file from `sources`.
pub struct Whereabouts {
    pub sources: Sources,
}

impl Whereabouts {
    /// The reference's search path. `WHEREABOUTS_CONFIG_DIR`, from the runtime's environment
    /// (never a tenant's), names one more CNI config directory, searched first and trusted.
    pub fn node() -> Whereabouts {
        let mut sources = Sources::node();
        if let Some(dir) = std::env::var_os("WHEREABOUTS_CONFIG_DIR").filter(|d| !d.is_empty()) {
            let dir = PathBuf::from(dir);
            sources
                .flat_files
                .insert(0, dir.join("whereabouts.d/whereabouts.conf"));
            sources.trusted_dirs.push(dir);
        }
        Whereabouts { sources }
    }

    fn config(&self, args: &CmdArgs) -> Result<Config, Error> {
        Ok(Config::load(&args.stdin, &args.args, &self.sources)?)
    }
}

impl Plugin for Whereabouts {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = self.config(args)?;
        let pod = conf.pod.as_ref().ok_or_else(|| {
            Error::Config(ipam::Error::config(
                "CNI_ARGS K8S_POD_NAME: required: whereabouts records which pod holds each \
                 address (Kubernetes runtimes set it)",
            ))
        })?;
        let store = Store::connect(&conf.kubeconfig)?;
        let owner = Allocation {
            id: args.container_id.clone(),
            podref: pod.to_string(),
            ifname: args.ifname.clone(),
        };
        let deadline = Instant::now() + DEADLINE;
        let mut taken: Vec<(IpAddr, &Range, bool)> = Vec::new();
        for range in &conf.ranges {
            match allocate(&store, &conf, range, &owner, deadline) {
                Ok((ip, new)) => taken.push((ip, range, new)),
                Err(e) => {
                    // Free what this ADD took; what the pod held before stays its.
                    for (_, range, _) in taken.iter().filter(|t| t.2) {
                        let _ = release(&store, &conf, range, &owner.id, &owner.ifname, deadline);
                    }
                    return Err(e.into());
                }
            }
        }
        let allocated: Vec<(IpAddr, &Range)> = taken.iter().map(|(ip, r, _)| (*ip, *r)).collect();
        Ok(CniResult {
            ips: conf.result_ips(&allocated),
            routes: conf.routes.clone(),
            dns: conf.dns.clone(),
            ..CniResult::default()
        })
    }

    /// Frees the container's interface's address in every range, found by container ID and
    /// interface as in the reference (so no pod name is needed). An API failure fails DEL
    /// with code 11, and the runtime tries again: the reference exits 0 and leaves the
    /// address allocated until a reconciler pass.
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = self.config(args)?;
        let store = Store::connect(&conf.kubeconfig)?;
        let deadline = Instant::now() + DEADLINE;
        for range in &conf.ranges {
            release(
                &store,
                &conf,
                range,
                &args.container_id,
                &args.ifname,
                deadline,
            )?;
        }
        Ok(())
    }

    /// Each range's pool holds an address for the container's interface, and the previous
    /// result shows it. (The reference's CHECK always fails.)
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = self.config(args)?;
        let prev = cni::decode::read_object(&args.stdin)
            .map_err(ipam::Error::from)?
            .get("prevResult")
            .map(CniResult::from_value)
            .transpose()?
            .ok_or_else(|| {
                Error::Config(ipam::Error::config(
                    "prevResult: required by CHECK, but missing",
                ))
            })?;
        let store = Store::connect(&conf.kubeconfig)?;
        for range in &conf.ranges {
            let name = pool_name(&conf.network_name, None, &range.subnet);
            let held = store
                .pool(&name)?
                .and_then(|p| p.find_container(&args.container_id, &args.ifname))
                .and_then(|offset| range.ip_at(offset));
            let Some(ip) = held else {
                return Err(Error::NotAllocated(format!(
                    "pool {name} holds no address for container {} interface {}",
                    args.container_id, args.ifname
                ))
                .into());
            };
            if !prev.ips.iter().any(|c| c.address.addr() == ip) {
                return Err(Error::Mismatch(format!(
                    "pool {name} holds {ip} for container {} interface {}, but the previous \
                     result does not show it",
                    args.container_id, args.ifname
                ))
                .into());
            }
        }
        Ok(())
    }

    /// Ready when the pools can be listed (code 50 otherwise).
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = self.config(args)?;
        Store::connect(&conf.kubeconfig)
            .and_then(|store| store.list_pools())
            .map(drop)
            .map_err(|e| {
                CniError::new(
                    cni::Code::PluginNotAvailable,
                    format!("whereabouts cannot reach its pools: {e}"),
                )
            })
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        Ok(Config::check(config, &self.sources)?)
    }
}

/// A pause after losing a write: random, and up to twice as long after each of the first
/// losses (2 ms, 4 ms, then 8 ms), so that writers who collided spread out instead of colliding
/// again in step. Longer pauses only leave the pool idle: a lost write costs the API server a
/// read from its cache, not an etcd write.
fn back_off(round: u32) {
    use std::hash::{BuildHasher, Hasher};
    let ceiling = 2u64 << round.min(2);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    std::thread::sleep(Duration::from_millis(1 + random % ceiling));
}

fn give_up(object: String, round: u32, deadline: Instant) -> Option<Error> {
    (round + 1 >= MAX_ROUNDS || Instant::now() >= deadline).then(|| Error::Contention {
        object,
        rounds: round + 1,
    })
}

/// One range's address for `owner`: the one it holds already (with the container ID brought
/// up to date), or the lowest free one. True when it is new.
fn allocate(
    store: &Store,
    conf: &Config,
    range: &Range,
    owner: &Allocation,
    deadline: Instant,
) -> Result<(IpAddr, bool), Error> {
    let name = pool_name(&conf.network_name, None, &range.subnet);
    // Offsets whose address another pod holds through an overlapping range.
    let mut skip = std::collections::HashSet::new();
    let mut round = 0;
    loop {
        let pool = store.pool_or_create(&name, range)?;
        let choice = loop {
            match pool.choose(range, &owner.podref, &owner.ifname, &skip) {
                // Reservations are looked up first only once one was met in this range: on the
                // common path the create after the pool write tells the same, a request sooner.
                Choice::New { offset, ip } if conf.overlapping_ranges && !skip.is_empty() => {
                    let rname = reservation_name(&conf.network_name, ip);
                    match store.reservation(&rname)? {
                        Some(r) if r.podref != owner.podref => {
                            skip.insert(offset);
                            if Instant::now() >= deadline {
                                return Err(Error::Contention {
                                    object: format!("pool {name}"),
                                    rounds: round + 1,
                                });
                            }
                        }
                        _ => break Choice::New { offset, ip },
                    }
                }
                other => break other,
            }
        };
        let written = match choice {
            Choice::Full => {
                return Err(Error::Full {
                    range: range.to_string(),
                    pool: name,
                })
            }
            Choice::Reuse { offset, ip } => {
                let same = pool
                    .allocations
                    .get(&offset)
                    .is_some_and(|a| a.id == owner.id);
                if same || store.patch_pool(&name, &pool.set_id_patch(offset, &owner.id))? {
                    if conf.overlapping_ranges {
                        let rname = reservation_name(&conf.network_name, ip);
                        if store.reservation(&rname)?.is_none() {
                            store.reserve(&rname, &owner.podref, &owner.ifname)?;
                        }
                    }
                    return Ok((ip, false));
                }
                false
            }
            Choice::New { offset, ip } => {
                if store.patch_pool(&name, &pool.assign_patch(offset, owner))? {
                    if !conf.overlapping_ranges {
                        return Ok((ip, true));
                    }
                    let rname = reservation_name(&conf.network_name, ip);
                    if store.reserve(&rname, &owner.podref, &owner.ifname)?
                        || store
                            .reservation(&rname)?
                            .is_some_and(|r| r.podref == owner.podref)
                    {
                        return Ok((ip, true));
                    }
                    // Another pool gave the address away first: give it back, try the next.
                    release_offset(store, &name, offset, owner, deadline)?;
                    skip.insert(offset);
                }
                false
            }
        };
        if !written {
            if let Some(e) = give_up(format!("pool {name}"), round, deadline) {
                return Err(e);
            }
            back_off(round);
            round += 1;
        }
    }
}

/// Frees `offset` in the pool if `owner`'s container still holds it.
fn release_offset(
    store: &Store,
    name: &str,
    offset: u128,
    owner: &Allocation,
    deadline: Instant,
) -> Result<(), Error> {
    let mut round = 0;
    loop {
        let Some(pool) = store.pool(name)? else {
            return Ok(());
        };
        if pool.find_container(&owner.id, &owner.ifname) != Some(offset) {
            return Ok(());
        }
        if store.patch_pool(name, &pool.release_patch(offset))? {
            return Ok(());
        }
        if let Some(e) = give_up(format!("pool {name}"), round, deadline) {
            return Err(e);
        }
        back_off(round);
        round += 1;
    }
}

/// Frees the address `container_id`'s `ifname` holds in the range's pool, and its reservation.
fn release(
    store: &Store,
    conf: &Config,
    range: &Range,
    container_id: &str,
    ifname: &str,
    deadline: Instant,
) -> Result<(), Error> {
    let name = pool_name(&conf.network_name, None, &range.subnet);
    let mut round = 0;
    loop {
        let Some(pool) = store.pool(&name)? else {
            return Ok(());
        };
        let Some(offset) = pool.find_container(container_id, ifname) else {
            return Ok(());
        };
        let podref = pool.allocations.get(&offset).map(|a| a.podref.clone());
        if store.patch_pool(&name, &pool.release_patch(offset))? {
            if let (true, Some(ip), Some(podref)) =
                (conf.overlapping_ranges, range.ip_at(offset), podref)
            {
                store.unreserve(&reservation_name(&conf.network_name, ip), &podref)?;
            }
            return Ok(());
        }
        if let Some(e) = give_up(format!("pool {name}"), round, deadline) {
            return Err(e);
        }
        back_off(round);
        round += 1;
    }
}
