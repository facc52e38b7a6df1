//! [`Gate`]: a request held on arrival until the test lets it through, so that a test can
//! make other requests land while it waits, in a known order.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{lock, STALL};

/// A request held by [`Fault::Hold`](super::Fault::Hold).
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// (arrived, released)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Waits until the held request has arrived, `within` at most: whether it did.
    pub fn arrived(&self, within: Duration) -> bool {
        self.wait_for(within, |(arrived, _)| arrived)
    }

    /// Lets the held request be served.
    pub fn release(&self) {
        lock(&self.0.state).1 = true;
        self.0.changed.notify_all();
    }

    /// The server's side: says the request arrived, then waits until it is released, for
    /// [`STALL`] at most (a test that never releases it does not hang the server).
    pub(super) fn hold(&self) {
        lock(&self.0.state).0 = true;
        self.0.changed.notify_all();
        self.wait_for(STALL, |(_, released)| released);
    }

    fn wait_for(&self, within: Duration, done: impl Fn((bool, bool)) -> bool) -> bool {
        let deadline = Instant::now() + within;
        let mut state = lock(&self.0.state);
        while !done(*state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .0
                .changed
                .wait_timeout(state, left)
                .map(|(s, _)| s)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        true
    }
}
