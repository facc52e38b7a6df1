//! The CNI commands: ADD takes one address from each range, DEL frees what the container's
//! interface holds, CHECK compares the pools with the previous result, STATUS lists the pools.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use cni::in_use::InUse;
use cni::{CmdArgs, CniError, CniResult, Plugin};
use ipam::whereabouts::{
    claim_podref, claimed_by, cut, hold, pool_name, reservation_name, statefulset_member,
    Allocation, Choice, Config, NodeSlicePool, NodeSlices, Pool, Range, Record, Sources,
};
use ipnet::IpNet;

use crate::error::Error;
use crate::store::Store;

/// How often one range's pool is read and written before ADD or DEL gives up, and for how
/// long: the reference's 100 rounds, with a deadline well inside the runtime's.
const MAX_ROUNDS: u32 = 100;
const DEADLINE: Duration = Duration::from_secs(60);
/// GC leaves an attachment whose ADD began less than this ago: the runtime's list of valid
/// attachments does not hold the ADDs still running. Longer than any runtime waits for one.
const GC_GRACE: Duration = Duration::from_secs(600);
/// The Lease the reference's ADDs and DELs hold, outside node-slice mode (the only name the
/// plugin's RBAC lets it read and update).
const REFERENCE_LEASE: &str = "whereabouts";

/// The plugin, reading the node's flat file from `sources`.
pub struct Whereabouts {
    pub sources: Sources,
}

impl Whereabouts {
    /// The reference's search path. From the runtime's environment (never a tenant's),
    /// `WHEREABOUTS_CONFIG_DIR` names one more CNI config directory, searched first and
    /// trusted, and `WHEREABOUTS_STATE_DIR` where the node records its attachments.
    pub fn node() -> Whereabouts {
        let mut sources = Sources::node();
        let var = |name| {
            std::env::var_os(name)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
        };
        if let Some(dir) = var("WHEREABOUTS_CONFIG_DIR") {
            sources
                .flat_files
                .insert(0, dir.join("whereabouts.d/whereabouts.conf"));
            sources.trusted_dirs.push(dir);
        }
        if let Some(dir) = var("WHEREABOUTS_STATE_DIR") {
            sources.state_dir = dir;
        }
        Whereabouts { sources }
    }

    fn config(&self, args: &CmdArgs) -> Result<Config, Error> {
        Ok(Config::load(&args.stdin, &args.args, &self.sources)?)
    }

    /// Frees the attachment's address in every range's pool, then its record. A claim's
    /// address stays with the claim, and one in `in_use` is held back
    /// ([`ipam::whereabouts::hold`]).
    fn free(
        &self,
        store: &Store,
        conf: &Config,
        (id, ifname): (&str, &str),
        in_use: &[InUse],
    ) -> Result<(), Error> {
        let deadline = Instant::now() + DEADLINE;
        let targets = match targets(store, conf, false, deadline) {
            Ok(targets) => targets,
            // A NodeSlicePool that cannot be read, or gives this node a slice outside the
            // range, is no reason to block teardown for good: the address is left for the
            // reconciler, which frees those of pods that are gone.
            Err(e @ (Error::SliceMismatch(_) | Error::Object { .. })) => {
                eprintln!("whereabouts: container {id} interface {ifname}: no address freed: {e}");
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        for target in &targets {
            release(
                store,
                conf,
                target,
                (id, ifname),
                Release::Teardown(in_use),
                deadline,
            )?;
        }
        if let Some(record) = Record::open_existing(&self.sources.state_dir, &conf.name)? {
            record.remove(id, ifname)?;
        }
        Ok(())
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
        let cni_args = cni::args::CniArgs::parse(&args.args)?;
        let claim = cni_args.ipam_claim()?;
        if let (Some(claim), Some(slices)) = (claim, &conf.node_slices) {
            return Err(Error::ClaimRefused(format!(
                "CNI_ARGS {}: IPAMClaim {claim}'s address cannot follow its pod to another \
                 node: in node-slice mode each node hands out its own slice \
                 (NodeSlicePool {}); use a network without node_slice_size",
                cni::args::IPAM_CLAIM_REFERENCE,
                slices.pool
            ))
            .into());
        }
        let store = Store::connect(&conf.kubeconfig)?;
        let claim = match claim {
            Some(name) => {
                let obj = store
                    .claim(&pod.namespace, name)?
                    .ok_or_else(|| Error::NoClaim(format!("{}/{name}", pod.namespace)))?;
                // One claim's addresses are one network's: a claim made for another network
                // would hand this one an address of that one's.
                let network = obj.pointer("/spec/network").and_then(|n| n.as_str());
                if let Some(network) = network.filter(|n| !n.is_empty() && *n != conf.name) {
                    return Err(Error::ClaimRefused(format!(
                        "IPAMClaim {}/{name} is for network {}, and this is network {}: \
                         give each network's interface a claim of its own",
                        pod.namespace,
                        cni::quote::quote(network),
                        cni::quote::quote(&conf.name)
                    ))
                    .into());
                }
                Some((name, obj))
            }
            None => None,
        };
        // Recorded before any pool is written, so that GC finds whatever a killed ADD left.
        Record::open(&self.sources.state_dir, &conf.name)?.add(&args.container_id, &args.ifname)?;
        let owner = Allocation {
            id: args.container_id.clone(),
            podref: match &claim {
                Some((name, _)) => claim_podref(&pod.namespace, name),
                None if conf.keep_statefulset_addresses => store.statefulset_podref(pod)?,
                None => pod.to_string(),
            },
            ifname: args.ifname.clone(),
        };
        let deadline = Instant::now() + DEADLINE;
        let targets = targets(&store, &conf, true, deadline)?;
        // `held`: whether the reference's Lease, when taken, is still ours.
        let allocate_each = |held: &dyn Fn() -> bool| {
            let mut taken: Vec<(IpAddr, &Target, bool)> = Vec::new();
            for target in &targets {
                match allocate(&store, &conf, target, &owner, deadline, held) {
                    Ok((ip, new)) => taken.push((ip, target, new)),
                    Err(e) => {
                        give_back(&store, &conf, &taken, &owner, deadline);
                        return Err(e);
                    }
                }
            }
            Ok(taken)
        };
        // The reference checks a reservation under its Lease and creates it later: while a
        // node of the reference shares the API, a reservation of ours created in between
        // would fail its ADD, and its DEL would then delete ours by name. So ADDs that
        // reserve take the same Lease, when there is one (the reference makes it on first
        // use), under an identity of their own. In node-slice mode the reference takes a Lease
        // per node's slice, which serializes only one node's ADDs: nodes of either kind never
        // share one, so ours take none there.
        let taken = if conf.overlapping_ranges && conf.node_slices.is_none() {
            let identity = format!("{}/{}", owner.podref, owner.id);
            store.with_reference_lease(REFERENCE_LEASE, &identity, deadline, allocate_each)??
        } else {
            allocate_each(&|| true)?
        };
        let allocated: Vec<(IpAddr, &Range)> =
            taken.iter().map(|(ip, t, _)| (*ip, &t.range)).collect();
        if let Some((name, obj)) = &claim {
            let ips: Vec<IpNet> = allocated
                .iter()
                .filter_map(|(ip, range)| IpNet::new(*ip, range.prefix_len).ok())
                .collect();
            if let Err(e) = store.write_claim_status(&pod.namespace, name, obj, &ips, &pod.name) {
                give_back(&store, &conf, &taken, &owner, deadline);
                return Err(e.into());
            }
        }
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
    /// address allocated until a reconciler pass. The addresses the interface plugin's
    /// conflict probe found in use (`IPAM_ADDRESSES_IN_USE`) are held back, not freed.
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = self.config(args)?;
        let store = Store::connect(&conf.kubeconfig)?;
        let in_use = cni::in_use::from_env();
        let attachment = (args.container_id.as_str(), args.ifname.as_str());
        Ok(self.free(&store, &conf, attachment, &in_use)?)
    }

    /// Frees what this node's attachments that are not in `cni.dev/valid-attachments` hold:
    /// the node's record says which attachments are its own (a pool is shared by every node),
    /// and leaves those whose ADD began within [`GC_GRACE`].
    /// Each one is freed as DEL frees it; a failure is reported after the others are done.
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = self.config(args)?;
        let valid = cni::config::parse_plugin_config::<cni::NetConf>(&args.stdin)?
            .valid_attachments
            .ok_or_else(|| {
                Error::Config(ipam::Error::config(
                    "cni.dev/valid-attachments: required by GC (an empty list frees every \
                     attachment of this node on this network)",
                ))
            })?;
        let Some(record) = Record::open_existing(&self.sources.state_dir, &conf.name)? else {
            return Ok(());
        };
        let mut stale = Vec::new();
        for (id, ifname) in record.attachments()? {
            let valid = valid
                .iter()
                .any(|v| v.container_id == id && v.ifname == ifname);
            if !valid && record.age(&id, &ifname)?.is_some_and(|age| age >= GC_GRACE) {
                stale.push((id, ifname));
            }
        }
        if stale.is_empty() {
            return Ok(());
        }
        let store = Store::connect(&conf.kubeconfig)?;
        let mut first = None;
        for (id, ifname) in &stale {
            if let Err(e) = self.free(&store, &conf, (id, ifname), &[]) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), |e| Err(e.into()))
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
        let targets = targets(&store, &conf, false, Instant::now() + DEADLINE)?;
        if let (Some(slices), true) = (&conf.node_slices, targets.is_empty()) {
            return Err(Error::NotAllocated(format!(
                "node {} holds no slice in NodeSlicePool {}, so no address for container {} \
                 interface {}",
                slices.node, slices.pool, args.container_id, args.ifname
            ))
            .into());
        }
        for Target { pool: name, range } in &targets {
            let held = store
                .pool(name)?
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

/// Where one range allocates: its IPPool, and the range that pool hands out from.
struct Target {
    pool: String,
    range: Range,
}

/// The config's ranges and their pools. In node-slice mode, the range's slice this node holds,
/// claimed first when `claim` (ADD) and the node holds none; without a slice (DEL, CHECK)
/// there is nothing to do, and no target.
fn targets(
    store: &Store,
    conf: &Config,
    claim: bool,
    deadline: Instant,
) -> Result<Vec<Target>, Error> {
    let Some(slices) = &conf.node_slices else {
        return Ok(conf
            .ranges
            .iter()
            .map(|range| Target {
                pool: pool_name(&conf.network_name, None, &range.subnet),
                range: range.clone(),
            })
            .collect());
    };
    // The config holds exactly one range in node-slice mode.
    let Some(range) = conf.ranges.first() else {
        return Ok(Vec::new());
    };
    Ok(node_slice(store, range, slices, claim, deadline)?
        .map(|slice| Target {
            pool: pool_name(&conf.network_name, Some(&slices.node), &slice),
            range: range.within_slice(slice),
        })
        .into_iter()
        .collect())
}

/// The slice of `range` this node holds in the NodeSlicePool. With `claim`, the NodeSlicePool
/// is made when there is none, and the node takes the lowest free slice, in a write
/// conditioned on the version read and on the slice being free, so that two nodes never take
/// the same one. The reference's controller, where it runs, gives nodes slices the same way.
fn node_slice(
    store: &Store,
    range: &Range,
    slices: &NodeSlices,
    claim: bool,
    deadline: Instant,
) -> Result<Option<IpNet>, Error> {
    let name = &slices.pool;
    let mut round = 0;
    loop {
        let Some(pool) = store.node_slice_pool(name)? else {
            if !claim {
                return Ok(None);
            }
            let cuts = cut(range.subnet, slices.size).unwrap_or_default();
            let obj = NodeSlicePool::new_object(name, range.subnet, &slices.size_text, &cuts);
            store.create_node_slice_pool(&obj)?;
            if let Some(e) = give_up(format!("NodeSlicePool {name}"), round, deadline) {
                return Err(e);
            }
            round += 1;
            continue;
        };
        if claim && !pool.cuts(range.subnet, slices.size) {
            return Err(Error::SliceMismatch(format!(
                "NodeSlicePool {}/{name} cuts {:?} into {:?} slices, but this network asks for \
                 {} in /{} slices: a NodeSlicePool serves one range and size (pods of the old \
                 cut may still hold addresses); change the network back, or give it another \
                 network_name",
                store.namespace(),
                pool.range,
                pool.slice_size,
                range.subnet,
                slices.size
            )));
        }
        if let Some(slice) = pool.slice_of(&slices.node) {
            // What the API says is checked: a slice outside the range, or of another size,
            // would hand out addresses the network does not own.
            let fits = slice.prefix_len() == slices.size
                && range.subnet.contains(&slice.network())
                && range.subnet.contains(&slice.broadcast());
            if !fits {
                return Err(Error::SliceMismatch(format!(
                    "NodeSlicePool {}/{name} gives node {} the slice {slice}, which is not a /{} \
                     slice of {}: fix or delete the NodeSlicePool",
                    store.namespace(),
                    slices.node,
                    slices.size,
                    range.subnet
                )));
            }
            return Ok(Some(slice));
        }
        if !claim {
            return Ok(None);
        }
        let Some((slice, patch)) = pool.claim_patch(&slices.node) else {
            return Err(Error::NoSlice {
                node: slices.node.clone(),
                pool: format!("{}/{name}", store.namespace()),
                slices: pool.slices.len(),
            });
        };
        if store.patch_node_slice_pool(name, &patch)? {
            return Ok(Some(slice));
        }
        if let Some(e) = give_up(format!("NodeSlicePool {name}"), round, deadline) {
            return Err(e);
        }
        back_off(round);
        round += 1;
    }
}

fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A pause after losing a write: random, and up to twice as long after each of the first
/// losses (2 ms, 4 ms, then 8 ms), so that writers who collided spread out instead of colliding
/// again in step. Longer pauses only leave the pool idle: a lost write costs the API server a
/// read from its cache, not an etcd write.
fn back_off(round: u32) {
    let ceiling = 2u64 << round.min(2);
    std::thread::sleep(Duration::from_millis(1 + random() % ceiling));
}

/// Which free address to try after `round` lost writes: the lowest at first, then one of the
/// lowest 2, 4, ... 32, at random, so that writers who collided take different addresses.
fn spread(round: u32) -> usize {
    let window = 1u64 << round.min(5);
    usize::try_from(random() % window).unwrap_or(0)
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
    target: &Target,
    owner: &Allocation,
    deadline: Instant,
    held: &dyn Fn() -> bool,
) -> Result<(IpAddr, bool), Error> {
    let Target { pool: name, range } = target;
    // Offsets whose address another pod holds through an overlapping range.
    let mut skip = std::collections::HashSet::new();
    let mut round = 0;
    // Writes lost to other writers of the pool: after one, writers spread out.
    let mut lost = 0;
    loop {
        let pool = store.pool_or_create(name, range)?;
        let ended = pool.ended_holds(SystemTime::now());
        if !ended.is_empty() {
            // Freed before choosing, so the choice is the one the pool makes without them.
            free_ended_holds(store, conf, target, &pool, &ended)?;
            if let Some(e) = give_up(format!("pool {name}"), round, deadline) {
                return Err(e);
            }
            round += 1;
            continue;
        }
        let choice = loop {
            match pool.choose(range, &owner.podref, &owner.ifname, &skip, spread(lost)) {
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
                    pool: name.clone(),
                })
            }
            Choice::Reuse { offset, ip } => {
                let same = pool
                    .allocations
                    .get(&offset)
                    .is_some_and(|a| a.id == owner.id);
                if same || store.patch_pool(name, &pool.set_id_patch(offset, &owner.id))? {
                    if conf.overlapping_ranges {
                        let rname = reservation_name(&conf.network_name, ip);
                        match store.reservation(&rname)? {
                            None => {
                                lease_still_held(held)?;
                                store.reserve(&rname, owner)?;
                            }
                            Some(r) if r.podref == owner.podref => {
                                store.adopt(&rname, owner)?;
                            }
                            Some(_) => {}
                        }
                    }
                    return Ok((ip, false));
                }
                lost += 1;
                false
            }
            Choice::New { offset, ip } => {
                if store.patch_pool(name, &pool.assign_patch(offset, owner))? {
                    if !conf.overlapping_ranges {
                        return Ok((ip, true));
                    }
                    let rname = reservation_name(&conf.network_name, ip);
                    if let Err(e) = lease_still_held(held) {
                        let attachment = (owner.id.as_str(), owner.ifname.as_str());
                        release(store, conf, target, attachment, TakenBack(offset), deadline)?;
                        return Err(e);
                    }
                    // The pod's own reservation (an earlier sandbox's) is adopted.
                    if store.reserve(&rname, owner)?
                        || (store
                            .reservation(&rname)?
                            .is_some_and(|r| r.podref == owner.podref)
                            && store.adopt(&rname, owner)?)
                    {
                        return Ok((ip, true));
                    }
                    // Another pool gave the address away first: give it back, try the next.
                    let attachment = (owner.id.as_str(), owner.ifname.as_str());
                    release(store, conf, target, attachment, TakenBack(offset), deadline)?;
                    skip.insert(offset);
                } else {
                    lost += 1;
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

/// A reservation is created only while the reference's Lease, if taken, is still ours.
fn lease_still_held(held: &dyn Fn() -> bool) -> Result<(), Error> {
    if held() {
        Ok(())
    } else {
        Err(Error::LeaseLost)
    }
}

/// Holds whose time is over, freed in one write if the pool is still as read, with their
/// reservations. A lost write is no failure: the caller reads the pool again.
fn free_ended_holds(
    store: &Store,
    conf: &Config,
    target: &Target,
    pool: &Pool,
    ended: &[u128],
) -> Result<(), Error> {
    if !store.patch_pool(&target.pool, &pool.release_all_patch(ended))? || !conf.overlapping_ranges
    {
        return Ok(());
    }
    for offset in ended {
        if let (Some(ip), Some(a)) = (target.range.ip_at(*offset), pool.allocations.get(offset)) {
            store.unreserve(&reservation_name(&conf.network_name, ip), &a.podref)?;
        }
    }
    Ok(())
}

/// Gives back the addresses an ADD that failed took new ([`allocate`]'s `true`); what the pod
/// or its claim held before stays theirs.
fn give_back(
    store: &Store,
    conf: &Config,
    taken: &[(IpAddr, &Target, bool)],
    owner: &Allocation,
    deadline: Instant,
) {
    let attachment = (owner.id.as_str(), owner.ifname.as_str());
    for (ip, target, _) in taken.iter().filter(|t| t.2) {
        if let Some(offset) = target.range.offset_of(*ip) {
            let _ = release(store, conf, target, attachment, TakenBack(offset), deadline);
        }
    }
}

/// Why an attachment's address is released.
#[derive(Clone, Copy)]
enum Release<'a> {
    /// An ADD gives back the offset it took: freed, whoever it was for.
    TakenBack(u128),
    /// DEL or GC: a claim's address stays with the claim, a StatefulSet pod's kept one with
    /// the pod's name; one in the list, which another host answered the conflict probe for,
    /// is held back.
    Teardown(&'a [InUse]),
}
use Release::TakenBack;

/// Frees the address `container_id`'s `ifname` holds in the range's pool, and its reservation
/// while that names the same pod, as `why` says.
fn release(
    store: &Store,
    conf: &Config,
    target: &Target,
    (container_id, ifname): (&str, &str),
    why: Release,
    deadline: Instant,
) -> Result<(), Error> {
    let Target { pool: name, range } = target;
    let mut round = 0;
    // A write that seemed lost may have landed: its reply lost on the way, the client's retry
    // then failed the write's test. The pool read next tells; the reservation follows it.
    let mut unsure: Option<Unsure> = None;
    loop {
        let Some(pool) = store.pool(name)? else {
            return Ok(());
        };
        let Some(offset) = pool
            .find_container(container_id, ifname)
            .filter(|o| !matches!(why, TakenBack(only) if only != *o))
        else {
            if let Some(u) = unsure {
                let landed = u
                    .held
                    .filter(|h| pool.allocations.get(&u.offset) == Some(h));
                settle_reservation(store, conf, u.ip, &u.podref, landed.as_ref())?;
            }
            return Ok(());
        };
        let podref = pool.allocations.get(&offset).map(|a| a.podref.clone());
        // A claim's address, and a StatefulSet pod's kept one, outlive the pod.
        let outlives_pod = podref
            .as_deref()
            .is_some_and(|p| claimed_by(p).is_some() || statefulset_member(p).is_some());
        let in_use = match why {
            Release::Teardown(_) if outlives_pod => return Ok(()),
            Release::Teardown(in_use) => in_use,
            TakenBack(_) => &[],
        };
        let ip = range.ip_at(offset);
        let held = ip
            .and_then(|ip| in_use.iter().find(|u| u.address == ip))
            .map(|u| hold(&u.mac, SystemTime::now()));
        let patch = match &held {
            Some(held) => pool.hold_patch(offset, held),
            None => pool.release_patch(offset),
        };
        if store.patch_pool(name, &patch)? {
            if let (Some(ip), Some(podref)) = (ip, &podref) {
                settle_reservation(store, conf, ip, podref, held.as_ref())?;
            }
            if let (Some(held), Some(ip)) = (&held, ip) {
                eprintln!(
                    "whereabouts: {ip} held in pool {name} for {} s: {}",
                    ipam::whereabouts::HOLD.as_secs(),
                    held.podref
                );
            }
            return Ok(());
        }
        unsure = ip.zip(podref).map(|(ip, podref)| Unsure {
            offset,
            ip,
            podref,
            held,
        });
        if let Some(e) = give_up(format!("pool {name}"), round, deadline) {
            return Err(e);
        }
        back_off(round);
        round += 1;
    }
}

/// A release's pool write that may have landed.
struct Unsure {
    offset: u128,
    ip: IpAddr,
    podref: String,
    /// The hold it wrote in place of the allocation, if it held the address.
    held: Option<Allocation>,
}

/// After a release's pool write: `ip`'s reservation becomes the hold's when the address is
/// `held`, and goes otherwise, while it still names `podref`.
fn settle_reservation(
    store: &Store,
    conf: &Config,
    ip: IpAddr,
    podref: &str,
    held: Option<&Allocation>,
) -> Result<(), Error> {
    if !conf.overlapping_ranges {
        return Ok(());
    }
    let rname = reservation_name(&conf.network_name, ip);
    match held {
        Some(held) => store.hold_reservation(&rname, podref, held),
        None => store.unreserve(&rname, podref),
    }
}
