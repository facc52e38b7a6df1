//! The pools and reservations in the Kubernetes API: reads, conditional writes, and the
//! namespace they live in.

use std::path::Path;
use std::time::{Duration, Instant};

use ipam::whereabouts::{
    adopt_patch, claim_status_patch, hold_reservation_patch, owning_statefulset,
    reservation_object, reservation_owner, statefulset_podref, Allocation, NodeSlicePool, PodRef,
    Pool, Range,
};
use k8s::{ClientOptions, Created, Deleted, KubeClient, Leased, Resource, Written};
use serde_json::Value;

use crate::error::Error;

pub(crate) const IPPOOLS: Resource = Resource {
    group: "whereabouts.cni.cncf.io",
    version: "v1alpha1",
    plural: "ippools",
};

pub(crate) const RESERVATIONS: Resource = Resource {
    group: "whereabouts.cni.cncf.io",
    version: "v1alpha1",
    plural: "overlappingrangeipreservations",
};

pub(crate) const NODE_SLICE_POOLS: Resource = Resource {
    group: "whereabouts.cni.cncf.io",
    version: "v1alpha1",
    plural: "nodeslicepools",
};

/// IPAMClaims ([`ipam::whereabouts::claim_podref`]), in the pods' namespaces.
pub(crate) const IPAM_CLAIMS: Resource = Resource {
    group: "k8s.cni.cncf.io",
    version: "v1alpha1",
    plural: "ipamclaims",
};

/// StatefulSets, for `keep_statefulset_addresses`.
pub(crate) const STATEFULSETS: Resource = Resource {
    group: "apps",
    version: "v1",
    plural: "statefulsets",
};

/// Where the objects live when the kubeconfig's context names no namespace, as in the
/// reference.
const DEFAULT_NAMESPACE: &str = "kube-system";

/// One API attempt's deadline; with the client's retries a call takes at most about 20 s.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Store {
    client: KubeClient,
    namespace: String,
}

/// A reservation as read: the pod it names, and its version.
pub struct Reservation {
    pub podref: String,
    pub resource_version: Option<String>,
}

impl Store {
    pub fn connect(kubeconfig: &Path) -> Result<Store, Error> {
        let client = KubeClient::new(&ClientOptions {
            kubeconfig: Some(kubeconfig.to_owned()),
            timeout: CALL_TIMEOUT,
            retries: 3,
            keep_alive: k8s::KeepAlive::Call,
        })?;
        let namespace = client
            .context_namespace()
            .unwrap_or(DEFAULT_NAMESPACE)
            .to_owned();
        Ok(Store { client, namespace })
    }

    /// The pool, or `None` when it does not exist.
    pub fn pool(&self, name: &str) -> Result<Option<Pool>, Error> {
        match self.client.get_object(IPPOOLS, &self.namespace, name)? {
            Some(obj) => Ok(Some(read_pool(name, &obj)?)),
            None => Ok(None),
        }
    }

    /// The pool, created empty on first use (a create that loses the race is fine).
    pub fn pool_or_create(&self, name: &str, range: &Range) -> Result<Pool, Error> {
        if let Some(pool) = self.pool(name)? {
            return Ok(pool);
        }
        match self
            .client
            .create_object(IPPOOLS, &self.namespace, &Pool::new_object(name, range))?
        {
            Created::Created(obj) => read_pool(name, &obj),
            Created::AlreadyExists => self
                .pool(name)?
                .ok_or_else(|| Error::Vanished(name.to_owned())),
        }
    }

    /// Applies a conditional patch: false when the pool changed since it was read.
    pub fn patch_pool(&self, name: &str, patch: &Value) -> Result<bool, Error> {
        Ok(matches!(
            self.client
                .json_patch_object(IPPOOLS, &self.namespace, name, patch)?,
            Written::Done(_)
        ))
    }

    pub fn reservation(&self, name: &str) -> Result<Option<Reservation>, Error> {
        Ok(self
            .client
            .get_object(RESERVATIONS, &self.namespace, name)?
            .map(|obj| {
                let (podref, resource_version) = reservation_owner(&obj);
                Reservation {
                    podref,
                    resource_version,
                }
            }))
    }

    /// Creates the reservation: false when one of that name exists already.
    pub fn reserve(&self, name: &str, owner: &Allocation) -> Result<bool, Error> {
        let obj = reservation_object(name, &owner.podref, &owner.ifname, &owner.id);
        Ok(matches!(
            self.client
                .create_object(RESERVATIONS, &self.namespace, &obj)?,
            Created::Created(_)
        ))
    }

    /// Takes over the reservation for `owner`'s container while it still names `owner`'s pod
    /// ([`adopt_patch`]): false when it names another pod, or is gone.
    pub fn adopt(&self, name: &str, owner: &Allocation) -> Result<bool, Error> {
        let patch = adopt_patch(&owner.podref, &owner.id);
        match self
            .client
            .json_patch_object(RESERVATIONS, &self.namespace, name, &patch)
        {
            Ok(written) => Ok(matches!(written, Written::Done(_))),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The `podref` of `pod`'s allocations under `keep_statefulset_addresses`: a
    /// StatefulSet's pod's names it by the pod's name ([`statefulset_podref`]); any other pod's,
    /// and one the API no longer has, is the pod's own.
    pub fn statefulset_podref(&self, pod: &PodRef) -> Result<String, Error> {
        let obj = match self.client.get_pod(&pod.namespace, &pod.name) {
            Ok(obj) => serde_json::to_value(obj).unwrap_or_default(),
            Err(e) if e.is_not_found() => return Ok(pod.to_string()),
            Err(e) => return Err(e.into()),
        };
        Ok(match owning_statefulset(&obj) {
            Some(_) => statefulset_podref(&pod.namespace, &pod.name),
            None => pod.to_string(),
        })
    }

    /// The IPAMClaim `name` in `namespace` (the pod's), or `None` when there is none.
    pub fn claim(&self, namespace: &str, name: &str) -> Result<Option<Value>, Error> {
        Ok(self.client.get_object(IPAM_CLAIMS, namespace, name)?)
    }

    /// Writes `ips`, held by `pod`, into the claim's status, unless `claim` (as read) shows
    /// them already.
    pub fn write_claim_status(
        &self,
        namespace: &str,
        name: &str,
        claim: &Value,
        ips: &[ipnet::IpNet],
        pod: &str,
    ) -> Result<(), Error> {
        if let Some(patch) = claim_status_patch(claim, ips, pod) {
            self.client
                .merge_patch_status(IPAM_CLAIMS, namespace, name, &patch)?;
        }
        Ok(())
    }

    /// Turns the reservation into `held`'s hold while it still names `podref`; a reservation
    /// that is gone or names another pod is left as it is.
    pub fn hold_reservation(
        &self,
        name: &str,
        podref: &str,
        held: &Allocation,
    ) -> Result<(), Error> {
        let patch = hold_reservation_patch(podref, held);
        match self
            .client
            .json_patch_object(RESERVATIONS, &self.namespace, name, &patch)
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the reservation if it still names `podref`.
    pub fn unreserve(&self, name: &str, podref: &str) -> Result<(), Error> {
        for _ in 0..3 {
            let Some(r) = self.reservation(name)? else {
                return Ok(());
            };
            if r.podref != podref {
                return Ok(());
            }
            let deleted = self.client.delete_object(
                RESERVATIONS,
                &self.namespace,
                name,
                r.resource_version.as_deref(),
            )?;
            if deleted != Deleted::Stale {
                return Ok(());
            }
        }
        Err(Error::Contention {
            object: format!("reservation {name}"),
            rounds: 3,
        })
    }

    pub fn node_slice_pool(&self, name: &str) -> Result<Option<NodeSlicePool>, Error> {
        self.client
            .get_object(NODE_SLICE_POOLS, &self.namespace, name)?
            .map(|obj| {
                NodeSlicePool::from_object(&obj).map_err(|source| Error::Object {
                    object: format!("NodeSlicePool {name}"),
                    source,
                })
            })
            .transpose()
    }

    /// Creates the NodeSlicePool (one of that name existing already is fine).
    pub fn create_node_slice_pool(&self, obj: &Value) -> Result<(), Error> {
        self.client
            .create_object(NODE_SLICE_POOLS, &self.namespace, obj)?;
        Ok(())
    }

    /// Applies a conditional patch: false when the object changed since it was read.
    pub fn patch_node_slice_pool(&self, name: &str, patch: &Value) -> Result<bool, Error> {
        Ok(matches!(
            self.client
                .json_patch_object(NODE_SLICE_POOLS, &self.namespace, name, patch)?,
            Written::Done(_)
        ))
    }

    /// Runs `work` holding the reference's Lease `name` in the pools' namespace as
    /// `identity`, when that Lease exists; without it when it does not. `work` is told
    /// whether the Lease is still held.
    pub fn with_reference_lease<T>(
        &self,
        name: &str,
        identity: &str,
        deadline: Instant,
        work: impl FnOnce(&dyn Fn() -> bool) -> T,
    ) -> Result<T, Error> {
        match self
            .client
            .with_lease(&self.namespace, name, identity, deadline, work)?
        {
            Leased::Held(out) | Leased::Absent(out) => Ok(out),
            Leased::Busy { holder } => Err(Error::LeaseBusy {
                lease: format!("{}/{name}", self.namespace),
                holder,
            }),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether the pools can be listed: the STATUS check, as the reference's connectivity
    /// check.
    pub fn list_pools(&self) -> Result<usize, Error> {
        Ok(self.client.list_objects(IPPOOLS, &self.namespace)?.len())
    }
}

fn read_pool(name: &str, obj: &Value) -> Result<Pool, Error> {
    Pool::from_object(obj)
        .map(|(pool, _unreadable)| pool)
        .map_err(|source| Error::Object {
            object: format!("pool {name}"),
            source,
        })
}
