//! ADD's allocation: one address from each range set, all or nothing, under the store's lock.

use std::net::IpAddr;

use cni::IpConfig;
use ipnet::IpNet;

use super::range::{Range, RangeSet};
use super::store::{Holder, Match, Store};
use crate::error::{Error, Result};

/// Reserves one address per range set for `holder`: a requested address when one falls in the
/// set, else the next free one in round-robin order. On failure nothing reserved here is kept.
pub fn allocate(
    store: &Store,
    sets: &[RangeSet],
    requested: &[IpAddr],
    holder: &Holder,
) -> Result<Vec<IpConfig>> {
    refuse_duplicate(store, sets, holder)?;
    let mut unused: Vec<IpAddr> = requested.to_vec();
    let mut done: Vec<IpConfig> = Vec::with_capacity(sets.len());
    let outcome = (|| {
        for (index, set) in sets.iter().enumerate() {
            let wanted = unused
                .iter()
                .position(|ip| set.range_for(*ip).is_some())
                .map(|i| unused.remove(i));
            let (ip, range) = match wanted {
                Some(ip) => reserve_requested(store, index, set, ip, holder)?,
                None => reserve_next(store, index, set, holder)?,
            };
            done.push(IpConfig {
                address: IpNet::new(ip, range.subnet.prefix_len())
                    .map_err(|e| Error::config(format!("{ip}: {e}")))?,
                gateway: Some(range.gateway),
                interface: None,
            });
        }
        if unused.is_empty() {
            Ok(())
        } else {
            let list: Vec<String> = unused.iter().map(IpAddr::to_string).collect();
            Err(Error::config(format!(
                "failed to allocate all requested IPs: {}: no range set contains them (or two \
                 fall in one range set)",
                list.join(" ")
            )))
        }
    })();
    match outcome {
        Ok(()) => Ok(done),
        Err(e) => {
            // Undo only this call's reservations (the reference releases every address of the
            // container, including ones an earlier ADD made).
            for ip in &done {
                let _ = store.release(ip.address.addr());
            }
            Err(e)
        }
    }
}

/// A repeated ADD for an attachment that already holds an address in these sets is refused:
/// the spec forbids it, and a second address would leak.
fn refuse_duplicate(store: &Store, sets: &[RangeSet], holder: &Holder) -> Result<()> {
    let held = store.reservations()?.into_iter().find(|r| {
        r.matches(holder) != Match::No && sets.iter().any(|s| s.range_for(r.ip).is_some())
    });
    match held {
        Some(r) => Err(Error::Duplicate {
            ip: r.ip,
            container_id: holder.container_id.to_owned(),
            ifname: holder.ifname.to_owned(),
        }),
        None => Ok(()),
    }
}

fn reserve_requested<'a>(
    store: &Store,
    index: usize,
    set: &'a RangeSet,
    ip: IpAddr,
    holder: &Holder,
) -> Result<(IpAddr, &'a Range)> {
    // The caller found a range for `ip`.
    let range = set
        .range_for(ip)
        .ok_or_else(|| Error::config(format!("{ip} not in range set {set}")))?;
    if let Some(why) = range.refuse_request(ip) {
        return Err(Error::config(format!(
            "failed to allocate for range {index}: {why}"
        )));
    }
    if store.reserve(ip, holder, index)? {
        Ok((ip, range))
    } else {
        Err(Error::Taken {
            index,
            ip,
            set: set.to_string(),
        })
    }
}

fn reserve_next<'a>(
    store: &Store,
    index: usize,
    set: &'a RangeSet,
    holder: &Holder,
) -> Result<(IpAddr, &'a Range)> {
    for (ip, range) in set.candidates(store.last_reserved(index)) {
        if store.reserve(ip, holder, index)? {
            return Ok((ip, range));
        }
    }
    Err(Error::Exhausted {
        index,
        set: set.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_local::store::tests::test_roots;

    fn set(subnet: &str, start: Option<&str>, end: Option<&str>) -> RangeSet {
        let r = Range::new(
            Some(subnet.parse().unwrap()),
            start.map(|s| s.parse().unwrap()),
            end.map(|s| s.parse().unwrap()),
            None,
        )
        .unwrap();
        RangeSet::new(vec![r]).unwrap()
    }

    fn holder(id: &str) -> Holder<'_> {
        Holder {
            container_id: id,
            ifname: "eth0",
        }
    }

    fn addrs(r: &[IpConfig]) -> Vec<String> {
        r.iter().map(|c| c.address.to_string()).collect()
    }

    #[test]
    fn round_robin_then_full() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "n").unwrap();
        let sets = [set("10.1.2.0/29", None, None)];
        let mut got = Vec::new();
        for i in 0..5 {
            let r = allocate(&store, &sets, &[], &holder(&format!("c{i}"))).unwrap();
            assert_eq!(r[0].gateway, Some("10.1.2.1".parse().unwrap()));
            got.extend(addrs(&r));
        }
        assert_eq!(
            got,
            [
                "10.1.2.2/29",
                "10.1.2.3/29",
                "10.1.2.4/29",
                "10.1.2.5/29",
                "10.1.2.6/29"
            ]
        );
        let e = allocate(&store, &sets, &[], &holder("c9")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to allocate for range 0: no IP addresses available in range set: \
             10.1.2.1-10.1.2.6"
        );
        // Freed addresses come back only after the rest of the range.
        store.release("10.1.2.3".parse().unwrap()).unwrap();
        store.release("10.1.2.5".parse().unwrap()).unwrap();
        let r = allocate(&store, &sets, &[], &holder("c10")).unwrap();
        assert_eq!(addrs(&r), ["10.1.2.3/29"]);
        let r = allocate(&store, &sets, &[], &holder("c11")).unwrap();
        assert_eq!(addrs(&r), ["10.1.2.5/29"]);
    }

    #[test]
    fn requested_and_rollback() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "n").unwrap();
        let sets = [set("10.1.2.0/24", None, None), set("fd00::/64", None, None)];
        let want: IpAddr = "fd00::99".parse().unwrap();
        let r = allocate(&store, &sets, &[want], &holder("a")).unwrap();
        assert_eq!(addrs(&r), ["10.1.2.2/24", "fd00::99/64"]);

        // The second set fails: the first set's new reservation is undone.
        let e = allocate(&store, &sets, &[want], &holder("b")).unwrap_err();
        assert!(matches!(e, Error::Taken { index: 1, .. }), "{e}");
        assert_eq!(store.reservations().unwrap().len(), 2);

        let e = allocate(&store, &sets, &["10.9.9.9".parse().unwrap()], &holder("c")).unwrap_err();
        assert!(e.to_string().contains("10.9.9.9"), "{e}");
        assert_eq!(store.reservations().unwrap().len(), 2);

        let e = allocate(&store, &sets, &["10.1.2.1".parse().unwrap()], &holder("d")).unwrap_err();
        assert!(e.to_string().contains("gateway"), "{e}");
    }

    #[test]
    fn duplicate_add_refused_and_nothing_leaks() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "n").unwrap();
        let sets = [set("10.1.2.0/24", None, None)];
        allocate(&store, &sets, &[], &holder("a")).unwrap();
        for requested in [vec![], vec!["10.1.2.50".parse().unwrap()]] {
            let e = allocate(&store, &sets, &requested, &holder("a")).unwrap_err();
            assert!(matches!(e, Error::Duplicate { .. }), "{e}");
            assert!(
                e.to_string().contains("10.1.2.2 has been allocated to a"),
                "{e}"
            );
        }
        assert_eq!(store.reservations().unwrap().len(), 1);
        // Another interface of the same container is a different attachment.
        let other = Holder {
            container_id: "a",
            ifname: "net1",
        };
        allocate(&store, &sets, &[], &other).unwrap();
    }
}
