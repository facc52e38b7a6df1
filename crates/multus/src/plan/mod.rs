//! Plan: the pod, its NADs and the multus config become the complete list of attachments a
//! command runs, each delegate with its interface name, `CNI_ARGS`, runtime config and
//! device-info files. Nothing here changes the node: the only I/O is reading the API, the
//! kubelet's device records, network config files and the delegate cache.

mod admission;
mod devices;
pub mod hotplug;
mod networks;
pub mod policy;

use std::cell::RefCell;
use std::path::PathBuf;

use netkit::Family;
use serde_json::{Map, Value};

use crate::api::Pod;
use crate::cache;
use crate::delegate::Delegate;
use crate::error::{Error, Result};
use crate::invocation::Invocation;
use devices::PodDevices;
use networks::Networks;
use npwg::devinfo;

pub use networks::inline_delegates;

/// What an attachment is to the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The cluster network (or the pod's default-network): the runtime's interface, the
    /// pod's default route, `default` in network-status.
    Cluster,
    /// A `defaultNetworks` entry or a network the pod's annotation selects.
    Secondary,
    /// `auxiliaryCNIChainName`: runs last, and makes no interface of its own.
    Auxiliary,
}

/// One delegate call with everything it is called with.
pub struct Attachment {
    pub delegate: Delegate,
    pub role: Role,
    pub ifname: String,
    pub cni_args: Vec<(String, String)>,
    /// The runtime config the delegate is offered.
    pub capability_args: Map<String, Value>,
    /// The device-info file the delegate gets, when it uses one.
    pub device_info_file: Option<PathBuf>,
    /// The device plugin's file copied there before ADD.
    pub device_plugin_file: Option<PathBuf>,
}

impl Attachment {
    /// The families whose default route this attachment must not lead: a secondary
    /// network's, unless the pod asks `default-route` of it for that family. (When another
    /// network asks, the delegate's `filter_v4_gateway`/`filter_v6_gateway` remove them, as
    /// upstream does.)
    pub fn keep_defaults_behind(&self) -> Vec<Family> {
        if self.role != Role::Secondary {
            return Vec::new();
        }
        [Family::V4, Family::V6]
            .into_iter()
            .filter(|&f| {
                !self
                    .delegate
                    .default_route
                    .iter()
                    .any(|gw| Family::of(gw) == f)
            })
            .collect()
    }
}

pub struct Plan {
    /// The pod from the API, when there is one.
    pub pod: Option<Pod>,
    pub attachments: Vec<Attachment>,
}

/// What resolves the pod's networks. With `devices_required`, a network whose NAD names a
/// resource and that gets no device of it fails (ADD); without, it goes without (DEL).
fn networks<'a>(inv: &'a Invocation, pod: Option<&'a Pod>, devices_required: bool) -> Networks<'a> {
    Networks {
        conf: &inv.conf,
        api: inv.api,
        pod,
        pod_namespace: &inv.k8s.namespace,
        devices: pod.map(|pod| {
            // The kubelet's UID: a static pod's differs from its mirror's in the API.
            let uid = if inv.k8s.uid.is_empty() {
                &pod.uid
            } else {
                &inv.k8s.uid
            };
            PodDevices::new(&inv.conf, pod, uid, devices_required)
        }),
        read: RefCell::default(),
    }
}

/// The attachments of `delegates`, in order; those from `auxiliary` on are the auxiliary
/// chain's.
fn attachments(inv: &Invocation, delegates: Vec<Delegate>, auxiliary: usize) -> Vec<Attachment> {
    delegates
        .into_iter()
        .enumerate()
        .map(|(index, delegate)| {
            let role = match index {
                0 => Role::Cluster,
                i if i >= auxiliary => Role::Auxiliary,
                _ => Role::Secondary,
            };
            attachment(inv, index, delegate, role)
        })
        .collect()
}

/// The attachment of `delegate` at position `index` of the pod's networks.
fn attachment(inv: &Invocation, index: usize, delegate: Delegate, role: Role) -> Attachment {
    let ifname = delegate.ifname(&inv.args.ifname, index);
    let device_info_file = delegate.uses_device_info().then(|| {
        devinfo::cni_path(
            &inv.conf.device_info_dir,
            &delegate.name,
            &inv.args.container_id,
            &ifname,
        )
    });
    let device_plugin_file = match (&device_info_file, &delegate.resource_name) {
        (Some(_), Some(resource)) => delegate
            .device_id
            .as_ref()
            .map(|id| devinfo::dp_path(&inv.conf.device_info_dir, resource, id)),
        _ => None,
    };
    let mut capability_args = delegate.capability_args(index, &inv.conf.runtime_config);
    if let Some(file) = &device_info_file {
        capability_args.insert(
            devinfo::CAPABILITY.into(),
            file.to_string_lossy().into_owned().into(),
        );
    }
    Attachment {
        cni_args: inv.k8s.for_delegate(&delegate),
        delegate,
        role,
        ifname,
        capability_args,
        device_info_file,
        device_plugin_file,
    }
}

/// ADD's plan. Everything that can be refused is refused here, before anything runs: a
/// delegate that is multus, a request its plugins cannot take, two networks on one interface.
pub fn add(inv: &Invocation) -> Result<Plan> {
    let pod = inv.pod()?;
    let networks = networks(inv, pod.as_ref(), true);
    let mut delegates = networks.delegates()?;
    let auxiliary = delegates.len();
    delegates.extend(networks.auxiliary_chain()?);
    let attachments = attachments(inv, delegates, auxiliary);
    policy::check(&inv.conf.policy, &inv.node, &attachments)?;
    let pod_chose_cluster = pod.as_ref().is_some_and(|p| {
        p.annotations
            .get(npwg::selection::DEFAULT_NETWORK_ANNOTATION)
            .is_some_and(|a| !a.is_empty())
    });
    admission::check(
        &inv.conf.policy,
        &inv.k8s.namespace,
        &attachments,
        pod_chose_cluster,
    )?;
    for (index, a) in attachments.iter().enumerate() {
        a.delegate.refuse_this_binary(&inv.path)?;
        a.delegate.check_capabilities(&a.ifname)?;
        if let Some(other) = attachments[..index].iter().find(|o| o.ifname == a.ifname) {
            return Err(Error::Request {
                network: a.delegate.name.clone(),
                ifname: a.ifname.clone(),
                msg: format!(
                    "network {} gets this interface name too",
                    other.delegate.name
                ),
            });
        }
    }
    Ok(Plan { pod, attachments })
}

/// DEL's plan, and what it could not know.
pub struct DelPlan {
    pub plan: Plan,
    /// A delegate cache that could not be read, moved aside: DEL reports it once it has
    /// deleted what it could.
    pub unreadable: Option<Error>,
    /// Without a cache: why the pod's networks could not be resolved, so that only the
    /// cluster network and `defaultNetworks` are deleted.
    pub unresolved: Option<Error>,
}

/// DEL's plan: the delegate cache's, else what can be known without it.
pub fn del(inv: &Invocation) -> Result<DelPlan> {
    let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
    let ((delegates, unresolved), unreadable) = match cache::load(dir, id, &inv.conf.cni_version) {
        Ok(Some(delegates)) => ((delegates, None), None),
        // The runtime's DEL after the sandbox is gone, once an earlier DEL removed the cache.
        Ok(None) if inv.args.netns.is_empty() && !cache::path(dir, id).exists() => {
            ((from_config_only(inv), None), None)
        }
        Ok(None) => (rebuild(inv)?, None),
        Err(e) => {
            tracing::error!("{e}; deleting what can be known without it");
            let e = match (cache::quarantine(dir, id), e) {
                (Ok(aside), Error::Cache { path, msg }) => Error::Cache {
                    path,
                    msg: format!(
                        "{msg}; moved to {} and deleted what could be known without it",
                        aside.display()
                    ),
                },
                (_, e) => e,
            };
            (rebuild(inv)?, Some(e))
        }
    };
    let attachments = attachments(inv, delegates, usize::MAX);
    Ok(DelPlan {
        plan: Plan {
            pod: None,
            attachments,
        },
        unreadable,
        unresolved,
    })
}

/// The networks the configuration names without the API, for a DEL that has neither a
/// namespace nor a cache: an earlier DEL deleted the attachment, so nothing is asked of the
/// API and nothing is worth more than an info line; what a lost cache may have left of the
/// cluster network is still released.
fn from_config_only(inv: &Invocation) -> Vec<Delegate> {
    let networks = Networks {
        api: None,
        ..networks(inv, None, false)
    };
    networks.cluster_networks().unwrap_or_else(|e| {
        tracing::info!("no delegate cache and no namespace: nothing to delete ({e})");
        Vec::new()
    })
}

/// The delegates of an attachment without a cache: from the API when the pod is there,
/// otherwise only what the configuration alone names, said in the log; and why the pod's
/// networks could not be resolved, if they could not.
fn rebuild(inv: &Invocation) -> Result<(Vec<Delegate>, Option<Error>)> {
    // Only here does DEL need the pod: with a cache, DEL never waits for the API.
    let pod = match inv.pod() {
        Ok(pod) => pod,
        Err(e) => {
            tracing::info!("DEL continues without the pod: {e}");
            None
        }
    };
    let networks = networks(inv, pod.as_ref(), false);
    let mut unresolved = None;
    if pod.is_some() {
        match networks.delegates() {
            Ok(mut delegates) => {
                match networks.auxiliary_chain() {
                    Ok(chain) => delegates.extend(chain),
                    Err(e) => tracing::error!(
                        "no delegate cache, and the auxiliary chain cannot be loaded ({e}): it is not deleted"
                    ),
                }
                return Ok((delegates, None));
            }
            Err(e) => {
                tracing::error!(
                    "no delegate cache, and the pod's networks cannot be resolved ({e}): only the cluster network and defaultNetworks are deleted"
                );
                unresolved = Some(e);
            }
        }
    } else {
        tracing::error!(
            "no delegate cache in {} and no pod from the API: only the cluster network and defaultNetworks are deleted; networks from the pod's annotation cannot be known",
            inv.conf.cni_dir.display()
        );
    }
    Ok((networks.cluster_networks()?, unresolved))
}

/// CHECK's plan: the delegate cache's; a container without one was not added by multus.
pub fn check(inv: &Invocation) -> Result<Plan> {
    let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
    let delegates = cache::load(dir, id, &inv.conf.cni_version)?.ok_or_else(|| Error::Cache {
        path: cache::path(dir, id).display().to_string(),
        msg: "no delegate cache: this container was not added by multus".to_owned(),
    })?;
    Ok(Plan {
        pod: None,
        attachments: attachments(inv, delegates, usize::MAX),
    })
}

/// The networks every pod gets from the configuration alone: the cluster network first, then
/// `defaultNetworks` (STATUS and GC).
pub fn cluster_networks(inv: &Invocation) -> Result<Vec<Delegate>> {
    networks(inv, None, false).cluster_networks()
}
