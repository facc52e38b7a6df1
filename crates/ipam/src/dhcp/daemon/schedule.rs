//! When a lease is renewed, rebound and given up: a pure function of the lease and the time,
//! so every case is tested with plain numbers instead of a clock.
//!
//! Times are milliseconds since the epoch, as the lease files keep them. The arithmetic
//! saturates: no value a server sends can overflow it.

use crate::dhcp::message::Lease;

/// The least time between binding (or a failed attempt) and the next attempt, so a server that
/// sends T1 = 0 cannot make the daemon renew in a loop. RFC 2131 4.4.5 says 60 s; short leases
/// need less.
const MIN_PAUSE_MS: u64 = 1000;

/// What a lease's timers depend on: when its last ACK came, and what the server said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimes {
    pub bound_ms: u64,
    pub lease_secs: u32,
    /// Options 58 and 59, when the server sent them.
    pub t1_secs: Option<u32>,
    pub t2_secs: Option<u32>,
}

impl LeaseTimes {
    pub fn new(bound_ms: u64, lease: &Lease) -> LeaseTimes {
        LeaseTimes {
            bound_ms,
            lease_secs: lease.lease_secs,
            t1_secs: lease.t1_secs,
            t2_secs: lease.t2_secs,
        }
    }

    /// When renewing starts, when rebinding starts, and when the lease is over. T2 defaults to
    /// 7/8 of the lease and T1 to half of it (RFC 2131 4.4.5), and so does a value past the
    /// next timer (T2 after the expiry, T1 after T2). Attempts start no sooner than
    /// [`MIN_PAUSE_MS`] after binding.
    fn timers(&self) -> (u64, u64, u64) {
        let lease = u64::from(self.lease_secs);
        let t2 = self.t2_secs.map(u64::from).filter(|t2| *t2 <= lease);
        let t2 = t2.unwrap_or(lease * 7 / 8);
        let t1 = self.t1_secs.map(u64::from).filter(|t1| *t1 <= t2);
        let t1 = t1.unwrap_or((lease / 2).min(t2));
        let at = |secs: u64| self.bound_ms.saturating_add(secs.saturating_mul(1000));
        let expiry = at(lease);
        let earliest = self.bound_ms.saturating_add(MIN_PAUSE_MS).min(expiry);
        (at(t1).max(earliest), at(t2).max(earliest), expiry)
    }
}

/// The next thing to do for a lease, and when (a time already past means now).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Ask the server that granted the lease to extend it; the attempt may last until `until`
    /// (T2).
    Renew { at: u64, until: u64 },
    /// Ask any server to extend it (broadcast); the attempt may last until `until` (expiry).
    Rebind { at: u64, until: u64 },
    /// The lease is over: its address comes off the interface.
    Expire { at: u64 },
}

impl Step {
    pub fn at(&self) -> u64 {
        match *self {
            Step::Renew { at, .. } | Step::Rebind { at, .. } | Step::Expire { at } => at,
        }
    }
}

/// What to do next for `lease` at `now`, starting no attempt before `not_before` (see
/// [`retry_at`]; 0 when the last attempt succeeded).
pub fn next_step(lease: &LeaseTimes, now: u64, not_before: u64) -> Step {
    let (renew, rebind, expiry) = lease.timers();
    let when = now.max(not_before);
    // The phases in which an attempt may run, as (start, end); either may be empty.
    let mut open = [(renew, rebind), (rebind, expiry)]
        .into_iter()
        .enumerate()
        .filter(|(_, (start, end))| start < end && when < *end);
    match open.next() {
        Some((0, (start, end))) => Step::Renew {
            at: not_before.max(start),
            until: end,
        },
        Some((_, (start, end))) => Step::Rebind {
            at: not_before.max(start),
            until: end,
        },
        None => Step::Expire { at: expiry },
    }
}

/// When an attempt that may last until `until` and failed at `failed_at` is tried again: after
/// half the time left, at least [`MIN_PAUSE_MS`], never past `until` (RFC 2131 4.4.5). At
/// `until` the next phase begins.
pub fn retry_at(until: u64, failed_at: u64) -> u64 {
    let left = until.saturating_sub(failed_at);
    failed_at.saturating_add((left / 2).max(MIN_PAUSE_MS).min(left))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bound at 1,000 s after the epoch; times in tests are seconds after that.
    const B: u64 = 1_000_000;

    fn s(secs: u64) -> u64 {
        B + secs * 1000
    }

    fn lease(lease_secs: u32, t1: Option<u32>, t2: Option<u32>) -> LeaseTimes {
        LeaseTimes {
            bound_ms: B,
            lease_secs,
            t1_secs: t1,
            t2_secs: t2,
        }
    }

    #[test]
    fn the_phases_of_a_lease() {
        let l = lease(3600, Some(1000), Some(3000));
        let renew = Step::Renew {
            at: s(1000),
            until: s(3000),
        };
        let rebind = Step::Rebind {
            at: s(3000),
            until: s(3600),
        };
        // Before T1: renew at T1.
        assert_eq!(next_step(&l, s(0), 0), renew);
        assert_eq!(next_step(&l, s(999), 0), renew);
        // Between T1 and T2: renew now (T1 is past).
        assert_eq!(next_step(&l, s(1000), 0), renew);
        assert_eq!(next_step(&l, s(2999), 0), renew);
        // Between T2 and expiry: rebind.
        assert_eq!(next_step(&l, s(3000), 0), rebind);
        assert_eq!(next_step(&l, s(3599), 0), rebind);
        // From expiry on: expire.
        let expire = Step::Expire { at: s(3600) };
        assert_eq!(next_step(&l, s(3600), 0), expire);
        assert_eq!(next_step(&l, s(100_000), 0), expire);
    }

    #[test]
    fn omitted_timers_default_to_half_and_seven_eighths() {
        let l = lease(3600, None, None);
        assert_eq!(
            next_step(&l, s(0), 0),
            Step::Renew {
                at: s(1800),
                until: s(3150)
            }
        );
        assert_eq!(
            next_step(&l, s(3150), 0),
            Step::Rebind {
                at: s(3150),
                until: s(3600)
            }
        );
        // Only T2 sent: T1 is half the lease.
        let l = lease(3600, None, Some(3000));
        assert_eq!(next_step(&l, s(0), 0).at(), s(1800));
        // Only T1 sent: T2 is 7/8 of the lease.
        let l = lease(3600, Some(600), None);
        assert_eq!(
            next_step(&l, s(0), 0),
            Step::Renew {
                at: s(600),
                until: s(3150)
            }
        );
    }

    #[test]
    fn timers_out_of_order_are_replaced_by_the_defaults() {
        // T2 after the expiry, T1 after T2: both replaced, and both renewal and rebinding
        // happen before the lease runs out.
        let l = lease(3600, Some(u32::MAX), Some(7200));
        assert_eq!(
            next_step(&l, s(0), 0),
            Step::Renew {
                at: s(1800),
                until: s(3150)
            }
        );
        // T1 after a (valid) short T2: T1 is half the lease, but no later than T2.
        let l = lease(3600, Some(2000), Some(1000));
        assert_eq!(
            next_step(&l, s(0), 0),
            Step::Rebind {
                at: s(1000),
                until: s(3600)
            }
        );
        // T1 = T2: no renewing, straight to rebinding.
        let l = lease(3600, Some(3000), Some(3000));
        assert_eq!(next_step(&l, s(0), 0).at(), s(3000));
        assert!(matches!(next_step(&l, s(0), 0), Step::Rebind { .. }));
    }

    #[test]
    fn a_zero_lease_expires_at_once() {
        let l = lease(0, None, None);
        assert_eq!(next_step(&l, s(0), 0), Step::Expire { at: s(0) });
        let l = lease(0, Some(0), Some(0));
        assert_eq!(
            next_step(&l, s(5), retry_at(s(0), s(1))),
            Step::Expire { at: s(0) }
        );
    }

    #[test]
    fn zero_timers_wait_a_pause_after_binding() {
        // T1 = T2 = 0 would renew in a loop, each ACK binding again with the same timers.
        let l = lease(60, Some(0), Some(0));
        assert_eq!(
            next_step(&l, s(0), 0),
            Step::Rebind {
                at: B + MIN_PAUSE_MS,
                until: s(60)
            }
        );
        // A lease no longer than the pause is never extended.
        let l = lease(1, Some(0), Some(0));
        assert_eq!(next_step(&l, s(0), 0), Step::Expire { at: s(1) });
    }

    #[test]
    fn the_largest_values_do_not_overflow() {
        let l = lease(u32::MAX, Some(u32::MAX), Some(u32::MAX));
        let huge = s(u64::from(u32::MAX));
        assert_eq!(next_step(&l, s(0), 0), Step::Expire { at: huge });
        let l = lease(u32::MAX, None, None);
        assert_eq!(
            next_step(&l, s(0), 0),
            Step::Renew {
                at: s(u64::from(u32::MAX / 2)),
                until: s(u64::from(u32::MAX) * 7 / 8)
            }
        );
        let l = LeaseTimes {
            bound_ms: u64::MAX - 5,
            ..lease(u32::MAX, None, None)
        };
        assert_eq!(
            next_step(&l, u64::MAX, retry_at(u64::MAX, u64::MAX)),
            Step::Expire { at: u64::MAX }
        );
        assert_eq!(
            next_step(&l, 0, 0),
            Step::Expire { at: u64::MAX },
            "every timer saturates at the end of time"
        );
    }

    #[test]
    fn failed_renewals_are_retried_before_t2_then_rebinding_until_expiry() {
        let l = lease(3600, Some(1000), Some(3000));
        // Failed at T1: half of the 2000 s left until T2.
        let retry = retry_at(s(3000), s(1000));
        assert_eq!(retry, s(2000));
        assert_eq!(
            next_step(&l, s(1000), retry),
            Step::Renew {
                at: s(2000),
                until: s(3000)
            }
        );
        // Every retry fails at once: each is later than the failure, and none is past T2.
        let mut failed = s(1000);
        let mut pauses = Vec::new();
        let rebind = loop {
            let step = next_step(&l, failed, retry_at(s(3000), failed));
            let Step::Renew { at, until } = step else {
                break step;
            };
            assert!(at > failed && at <= until, "{step:?} after {failed}");
            pauses.push(at - failed);
            failed = at;
        };
        assert_eq!(
            rebind,
            Step::Rebind {
                at: s(3000),
                until: s(3600)
            }
        );
        // Halving, down to the least pause, and then T2.
        assert_eq!(pauses[..3], [1_000_000, 500_000, 250_000]);
        assert!(pauses.iter().all(|p| *p >= MIN_PAUSE_MS), "{pauses:?}");
        assert!(pauses.len() < 20, "{pauses:?}");
        // A rebinding failure waits half the time left until the expiry.
        assert_eq!(
            next_step(&l, s(3200), retry_at(s(3600), s(3200))),
            Step::Rebind {
                at: s(3400),
                until: s(3600)
            }
        );
        // Less than the least pause before expiry: the next step is the expiry.
        let late = s(3600) - 500;
        assert_eq!(
            next_step(&l, late, retry_at(s(3600), late)),
            Step::Expire { at: s(3600) }
        );
    }

    #[test]
    fn an_attempt_that_ends_after_its_phase_goes_on_to_the_next() {
        let l = lease(4, None, None);
        // A renewal given up at T2 (3 s), noticed 15 ms later: rebind at once.
        let failed = s(3) + 15;
        assert_eq!(
            next_step(&l, failed, retry_at(s(3), failed)),
            Step::Rebind {
                at: failed,
                until: s(4)
            }
        );
    }

    #[test]
    fn a_late_wake_up_skips_to_the_current_phase() {
        let l = lease(3600, Some(1000), Some(3000));
        // A renewal failed at 2000 (retry due at 2500), and the daemon only looks again at
        // 3100: rebinding is due since T2.
        assert_eq!(
            next_step(&l, s(3100), retry_at(s(3000), s(2000))),
            Step::Rebind {
                at: s(3000),
                until: s(3600)
            }
        );
    }
}
