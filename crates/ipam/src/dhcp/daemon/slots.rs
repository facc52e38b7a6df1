//! The daemon's attachments, each in a slot with its own lock.
//!
//! ADD, DEL, GC and CHECK hold an attachment's lock for their whole call, so calls on one
//! attachment never overlap. The task that keeps a lease takes the lock only to read the lease
//! and to store what an exchange brought, never while an exchange is on the wire.
//!
//! A slot without a lease leaves the table when its lock is released; whoever was waiting for
//! that slot then locks the one the table lists instead, so no lease is ever kept in a slot
//! that DEL cannot find.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio::task::AbortHandle;

use super::store::Record;
use crate::dhcp::wire::Key;

/// One attachment's lease, and the task that keeps it alive.
#[derive(Default)]
pub struct Slot {
    pub record: Option<Record>,
    pub maintainer: Option<AbortHandle>,
}

impl Slot {
    /// The lease is over (its file is handled by the caller).
    pub fn clear(&mut self) {
        self.record = None;
        self.maintainer = None;
    }
}

type Shared = Arc<tokio::sync::Mutex<Slot>>;

/// Every attachment the daemon holds a lease for, or is acquiring one for.
#[derive(Clone, Default)]
pub struct Table(Arc<Mutex<HashMap<Key, Shared>>>);

impl Table {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Shared>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks `key`'s slot, an empty one when the table has none.
    pub async fn lock(&self, key: &Key) -> Held {
        loop {
            let slot = Arc::clone(self.map().entry(key.clone()).or_default());
            let held = self.hold(key, slot).await;
            if held.listed_in(&self.map()) {
                return held;
            }
            // The slot's lease ended while we waited, and the slot left the table.
        }
    }

    /// The attachments that `pick` picks.
    pub fn keys(&self, pick: impl Fn(&Key) -> bool) -> Vec<Key> {
        self.map().keys().filter(|k| pick(k)).cloned().collect()
    }

    async fn hold(&self, key: &Key, slot: Shared) -> Held {
        Held {
            guard: slot.lock_owned().await,
            key: key.clone(),
            table: self.clone(),
        }
    }
}

/// A locked slot. Dropping it unlocks the slot, and takes it out of the table when it holds no
/// lease.
pub struct Held {
    guard: OwnedMutexGuard<Slot>,
    key: Key,
    table: Table,
}

impl Held {
    /// The same slot, for the task that keeps its lease.
    pub fn handle(&self) -> SlotHandle {
        SlotHandle {
            slot: Arc::clone(OwnedMutexGuard::mutex(&self.guard)),
            key: self.key.clone(),
            table: self.table.clone(),
        }
    }

    fn listed_in(&self, map: &HashMap<Key, Shared>) -> bool {
        let slot = OwnedMutexGuard::mutex(&self.guard);
        map.get(&self.key).is_some_and(|s| Arc::ptr_eq(s, slot))
    }
}

impl Deref for Held {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.guard
    }
}

impl DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Slot {
        &mut self.guard
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Still locked here: whoever waits for this slot sees it gone once they hold it.
        if self.guard.record.is_none() {
            let mut map = self.table.map();
            if self.listed_in(&map) {
                map.remove(&self.key);
            }
        }
    }
}

/// One slot, which its lease's task locks between exchanges. When the lease was ended by
/// someone else (DEL, a new ADD), the slot it locks holds no lease, or another one.
pub struct SlotHandle {
    slot: Shared,
    key: Key,
    table: Table,
}

impl SlotHandle {
    /// Locks the slot, whether the table still lists it or not.
    pub async fn lock(&self) -> Held {
        self.table.hold(&self.key, Arc::clone(&self.slot)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::wire::key;

    fn record() -> Record {
        serde_json::from_str(super::super::store::tests::OLDER_FILE).unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_slot_without_a_lease_leaves_the_table() {
        block_on(async {
            let table = Table::default();
            let k = key("c", "n", "eth0");
            drop(table.lock(&k).await);
            assert!(table.keys(|_| true).is_empty());
            let mut held = table.lock(&k).await;
            held.record = Some(record());
            drop(held);
            assert_eq!(table.keys(|_| true), std::slice::from_ref(&k));
            table.lock(&k).await.clear();
            assert!(table.keys(|_| true).is_empty());
        });
    }

    #[test]
    fn a_waiter_on_a_slot_that_left_takes_the_listed_one() {
        block_on(async {
            let table = Table::default();
            let k = key("c", "n", "eth0");
            let first = table.lock(&k).await;
            let handle = first.handle();
            // Someone waits for the slot while its holder ends with no lease.
            let waiter = async {
                let mut held = table.lock(&k).await;
                held.record = Some(record());
            };
            let ender = async move {
                tokio::task::yield_now().await;
                drop(first);
            };
            tokio::join!(waiter, ender);
            // The waiter's lease is in the slot the table lists, not in the one that left.
            assert!(table.lock(&k).await.record.is_some());
            let old = handle.lock().await;
            assert!(old.record.is_none());
            drop(old);
            assert_eq!(table.keys(|_| true), [k], "the old slot removes nothing");
        });
    }
}
