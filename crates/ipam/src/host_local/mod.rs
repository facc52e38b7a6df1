//! host-local: addresses from configured ranges, reservations kept in files on the node.

mod allocator;
mod config;
mod range;
mod resolv;
mod store;

pub use config::keys;

use std::collections::HashSet;

use cni::path_roots::PathRoots;
use cni::{CmdArgs, CniError, CniResult, Plugin};

use self::config::{Config, StoreConfig};
use self::store::{Holder, Match, Reservation, Store};
use crate::error::{Error, Result};

/// The host-local IPAM plugin.
pub struct HostLocal;

impl Plugin for HostLocal {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        cni::args::CniArgs::parse(&args.args)?.refuse_ipam_claim("host-local")?;
        Ok(add(args)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(del(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(status(args)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(gc(args)?)
    }

    /// The ranges, routes and requested addresses, as ADD reads them; the store and
    /// `resolvConf` are on the node and are not looked at.
    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        Config::load(config, "")?;
        Ok(())
    }
}

fn holder(args: &CmdArgs) -> Holder<'_> {
    Holder {
        container_id: &args.container_id,
        ifname: &args.ifname,
    }
}

fn add(args: &CmdArgs) -> Result<CniResult> {
    let conf = Config::load(&args.stdin, &args.args)?;
    let dns = match &conf.resolv_conf {
        Some(path) => resolv::load(path)?,
        None => Default::default(),
    };
    let store = Store::open(&PathRoots::for_call(args)?, &conf.data_dir, &conf.name)?;
    let ips = allocator::allocate(&store, &conf.range_sets, &conf.requested, &holder(args))?;
    Ok(CniResult {
        ips,
        routes: conf.routes,
        dns,
        ..CniResult::default()
    })
}

/// Releases the attachment's addresses, reading the directory once (the reference reads it once
/// per range set). Only the store's location is needed, so a config that no longer validates
/// can still be torn down. Nothing reserved is success.
fn del(args: &CmdArgs) -> Result<()> {
    // A config that names no store could not reserve anything at ADD either.
    let conf = match StoreConfig::load(&args.stdin) {
        Ok(conf) => conf,
        Err(e) => {
            eprintln!("DEL releases nothing: {}", CniError::from(e).msg);
            return Ok(());
        }
    };
    let store = match Store::open_existing(&PathRoots::for_call(args)?, &conf.data_dir, &conf.name)
    {
        Ok(Some(store)) => store,
        Ok(None) => return Ok(()),
        // A dataDir this node refuses (outside its path roots, through a symlink): ADD never
        // reserved anything there, and DEL touches nothing there.
        Err(Error::Config(msg)) => {
            eprintln!("DEL releases nothing: {msg}");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let holder = holder(args);
    let reservations = store.reservations()?;
    // Files in the old ID-only format are released only when none are in the current format,
    // as in the reference: another interface of the container may own them.
    let wanted = if reservations
        .iter()
        .any(|r| r.matches(&holder) == Match::Exact)
    {
        Match::Exact
    } else {
        Match::IdOnly
    };
    // The store is locked: an unwritten reservation is a killed ADD's, maybe this one's.
    release_all(
        &store,
        reservations
            .iter()
            .filter(|r| r.matches(&holder) == wanted || r.is_unwritten()),
    )
}

/// Succeeds when the attachment holds an address in this network.
fn check(args: &CmdArgs) -> Result<()> {
    let conf = Config::load(&args.stdin, &args.args)?;
    let holder = holder(args);
    let found = match Store::open_existing(&PathRoots::for_call(args)?, &conf.data_dir, &conf.name)?
    {
        Some(store) => store
            .reservations()?
            .iter()
            .any(|r| r.matches(&holder) != Match::No),
        None => false,
    };
    if found {
        Ok(())
    } else {
        Err(Error::NoReservation {
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
            network: conf.name,
        })
    }
}

/// Fails when ADD cannot succeed: the store cannot be used, or a range set has no free address
/// left (ADD needs one from every set).
fn status(args: &CmdArgs) -> Result<()> {
    let conf = Config::load(&args.stdin, &args.args)?;
    let unusable = |e: Error| Error::NotAvailable(format!("host-local store unusable: {e}"));
    let store =
        Store::open(&PathRoots::for_call(args)?, &conf.data_dir, &conf.name).map_err(unusable)?;
    let reserved = store.reserved_ips().map_err(unusable)?;
    for (index, set) in conf.range_sets.iter().enumerate() {
        let used = reserved
            .iter()
            .filter(|ip| set.range_for(**ip).is_some_and(|r| r.is_allocatable(**ip)))
            .count() as u128;
        if used >= set.capacity() {
            return Err(Error::NotAvailable(format!(
                "no IP addresses available in range set {index}: {set}"
            )));
        }
    }
    Ok(())
}

/// Releases every reservation in this network's directory that no valid attachment holds.
fn gc(args: &CmdArgs) -> Result<()> {
    let conf = StoreConfig::load(&args.stdin)?;
    // Without the list, everything would look stale: refuse rather than wipe the network.
    let valid = conf.valid_attachments.ok_or_else(|| {
        Error::config("GC needs cni.dev/valid-attachments (an empty list releases everything)")
    })?;
    let Some(store) =
        Store::open_existing(&PathRoots::for_call(args)?, &conf.data_dir, &conf.name)?
    else {
        return Ok(());
    };
    let keep: HashSet<(&str, &str)> = valid
        .iter()
        .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
        .collect();
    let reservations = store.reservations()?;
    let stale = reservations.iter().filter(|r| match r.holder() {
        (id, Some(ifname)) => !keep.contains(&(id, ifname)),
        // The old format has no ifname: keep it while any attachment of the container lives.
        (id, None) => !keep.iter().any(|(kept, _)| *kept == id),
    });
    release_all(&store, stale)
}

/// Releases each reservation, going on after a failure; reports the first failure.
fn release_all<'a>(
    store: &Store,
    reservations: impl Iterator<Item = &'a Reservation>,
) -> Result<()> {
    let mut first: Option<Error> = None;
    let mut failed = 0;
    for r in reservations {
        if let Err(e) = store.release(r.ip) {
            failed += 1;
            first.get_or_insert(e);
        }
    }
    match first {
        None => Ok(()),
        Some(Error::Io { what, source }) if failed > 1 => Err(Error::Io {
            what: format!("{what} (and {} more)", failed - 1),
            source,
        }),
        Some(e) => Err(e),
    }
}
