//! Hot-plug's plans: a network added to a running sandbox, or one of its networks removed,
//! planned against the sandbox's delegate cache, with the checks ADD makes.

use cni::CniResult;
use npwg::selection::Selection;

use super::{admission, attachment, policy, Attachment, Role};
use crate::api::Pod;
use crate::cache;
use crate::delegate::Delegate;
use crate::error::{Error, Result};
use crate::invocation::Invocation;

/// A running sandbox as its delegate cache has it.
pub struct Sandbox {
    /// Every attachment, in the cache's order, each with the interface it has; a secondary
    /// one's name is its request, so that the cache written again keeps every name.
    pub attachments: Vec<Attachment>,
    /// The cluster network's result, from the result cache: what a secondary network must not
    /// take. Empty when the result cache has none.
    pub cluster_result: CniResult,
}

impl Sandbox {
    /// The index of the attachment on `ifname`.
    pub fn position(&self, ifname: &str) -> Result<usize> {
        self.attachments
            .iter()
            .position(|a| a.ifname == ifname)
            .ok_or_else(|| Error::Request {
                network: String::from("(none)"),
                ifname: ifname.to_owned(),
                msg: format!(
                    "the sandbox has no network on this interface (it has {})",
                    self.attachments
                        .iter()
                        .map(|a| a.ifname.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }
}

/// The sandbox of the call's container. One without a delegate cache was not added by multus
/// on this node: an interface added to it would be left behind by its DEL.
pub fn sandbox(inv: &Invocation) -> Result<Sandbox> {
    let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
    let delegates = cache::load(dir, id, &inv.conf.cni_version)?.ok_or_else(|| Error::Cache {
        path: cache::path(dir, id).display().to_string(),
        msg: "no delegate cache: this sandbox was not added by multus on this node, so \
              nothing is hot-plugged into it"
            .to_owned(),
    })?;
    // A delegate cache that loads has the cluster network first.
    let cluster_network = delegates[0].network.name.clone();
    let mut attachments: Vec<Attachment> = delegates
        .into_iter()
        .enumerate()
        .map(|(index, delegate)| {
            let role = if index == 0 {
                Role::Cluster
            } else {
                Role::Secondary
            };
            attachment(inv, index, delegate, role)
        })
        .collect();
    for a in attachments.iter_mut().skip(1) {
        a.delegate.ifname_request = Some(a.ifname.clone());
    }
    // The cluster network's interface is the runtime's, which the delegate cache does not
    // keep: its result is looked for on the call's interface (hot-plug by annotation names
    // the runtime's), else found among the container's.
    let cached = match cni::cache::read(dir, &cluster_network, id, &inv.args.ifname)? {
        Some(c) => Some(c),
        None => cni::cache::list(dir)?
            .into_iter()
            .flatten()
            .find(|c| c.container_id == *id && c.network_name == cluster_network),
    };
    let cluster_result = cached
        .and_then(|c| c.result)
        .map(|r| CniResult::from_value(&r))
        .transpose()?
        .unwrap_or_default();
    if let Some(cluster) = attachments.first_mut() {
        if let Some(iface) = cluster_result
            .interfaces
            .iter()
            .find(|i| !i.sandbox.is_empty())
        {
            cluster.ifname.clone_from(&iface.name);
        }
    }
    Ok(Sandbox {
        attachments,
        cluster_result,
    })
}

/// The attachment that adds `config` (a NAD's config) to `sandbox` with what `selection`
/// asks: its interface is the selection's, else `net<N>` by position, as at ADD (the next
/// free one when that is taken). Refused as ADD would refuse it: a request the policy
/// forbids, a network the admission policy denies, multus itself, a name the pod has.
pub fn add(
    inv: &Invocation,
    sandbox: &Sandbox,
    config: &str,
    selection: &Selection,
) -> Result<Attachment> {
    let index = sandbox.attachments.len();
    let taken: Vec<&str> = sandbox
        .attachments
        .iter()
        .map(|a| a.ifname.as_str())
        .collect();
    let delegate = Delegate::for_selection(config, selection, None)?;
    checked(inv, sandbox, index, delegate, &taken)
}

/// The result of `config`'s network where the sandbox has it already, on the selection's
/// interface when it names one: the second caller of one change (built-in hot-plug and a
/// `/delegate` caller both follow the annotation) gets what the first did, as a repeated ADD.
pub fn already(
    inv: &Invocation,
    sandbox: &Sandbox,
    config: &str,
    selection: &Selection,
) -> Result<Option<CniResult>> {
    let d = Delegate::for_selection(config, selection, None)?;
    let found = sandbox.attachments.iter().skip(1).find(|a| {
        a.delegate.network.name == d.network.name
            && selection.interface.as_ref().is_none_or(|n| *n == a.ifname)
    });
    let Some(a) = found else {
        return Ok(None);
    };
    let (dir, id) = (&inv.conf.cni_dir, &inv.args.container_id);
    let cached = cni::cache::read(dir, &a.delegate.network.name, id, &a.ifname)?;
    Ok(cached
        .and_then(|c| c.result)
        .map(|r| CniResult::from_value(&r))
        .transpose()?)
}

/// The interface `delegate` gets at position `index`: its request, else `net<index>`, else
/// the first `net<N>` not `taken`.
fn ifname(delegate: &Delegate, index: usize, taken: &[&str]) -> String {
    if let Some(name) = &delegate.ifname_request {
        return name.clone();
    }
    std::iter::once(index)
        .chain(1..)
        .map(|n| format!("net{n}"))
        .find(|name| !taken.contains(&name.as_str()))
        .unwrap_or_default()
}

/// `delegate` as the attachment at `index` beside the interfaces `taken`, with ADD's checks.
fn checked(
    inv: &Invocation,
    sandbox: &Sandbox,
    index: usize,
    mut delegate: Delegate,
    taken: &[&str],
) -> Result<Attachment> {
    delegate.ifname_request = Some(ifname(&delegate, index, taken));
    let a = attachment(inv, index, delegate, Role::Secondary);
    if taken.len() > npwg::selection::MAX_NETWORKS {
        return Err(Error::Request {
            network: a.delegate.name.clone(),
            ifname: a.ifname.clone(),
            msg: format!(
                "the pod has {} networks besides the cluster network already, the most a pod \
                 may have",
                taken.len() - 1
            ),
        });
    }
    policy::check(&inv.conf.policy, &inv.node, std::slice::from_ref(&a))?;
    admission::check(
        &inv.conf.policy,
        &inv.k8s.namespace,
        std::slice::from_ref(&a),
        false,
    )?;
    a.delegate.refuse_this_binary(&inv.path)?;
    a.delegate.check_capabilities(&a.ifname)?;
    if taken.contains(&a.ifname.as_str()) {
        let other = sandbox.attachments.iter().find(|o| o.ifname == a.ifname);
        return Err(Error::Request {
            network: a.delegate.name.clone(),
            ifname: a.ifname.clone(),
            msg: format!(
                "network {} has this interface already",
                other.map_or("another", |o| o.delegate.name.as_str())
            ),
        });
    }
    Ok(a)
}

/// What brings a sandbox to the networks its pod's annotation selects now.
pub struct Sync {
    pub pod: Pod,
    /// The sandbox's attachments to remove, by index, highest first: those the annotation no
    /// longer selects, and those whose interface is gone (a change cut short), which are added
    /// again.
    pub remove: Vec<usize>,
    /// The networks to add, in the annotation's order, each or why it cannot be.
    pub add: Vec<Result<Attachment>>,
}

/// The sync of `sandbox` with its pod's annotation (`None`: the pod is gone). A selection
/// keeps the attachment of its network (and of its interface, when it names one) that is
/// there, so an interface that stays keeps its name and address. The cluster network, the
/// `defaultNetworks` and the auxiliary chain stay as they are. `present` tells whether an
/// attachment is wholly there (a change cut short may have left one half-made).
pub fn sync(
    inv: &Invocation,
    sandbox: &Sandbox,
    present: impl Fn(&Attachment) -> bool,
) -> Result<Option<Sync>> {
    let Some(pod) = inv.pod()? else {
        return Ok(None);
    };
    let networks = super::networks(inv, Some(&pod), true);
    let mut fixed: Vec<String> = networks
        .cluster_networks()?
        .into_iter()
        .skip(1)
        .map(|d| d.name)
        .collect();
    // At ADD the selected networks come after the cluster network and `defaultNetworks`.
    let first_selected = fixed.len() + 1;
    fixed.extend(inv.conf.auxiliary_cni_chain_name.clone());
    let current = &sandbox.attachments;
    let mut kept: Vec<bool> = current
        .iter()
        .enumerate()
        .map(|(i, a)| i == 0 || fixed.contains(&a.delegate.name))
        .collect();
    let selected = networks.selected()?;
    let mut matched = vec![false; selected.len()];
    // First by NAD; then by the network's own name, for what a `/delegate` caller added
    // (named by the pod's namespace and the config's name).
    for by_nad in [true, false] {
        for (s, (selection, delegate)) in selected.iter().enumerate() {
            if matched[s] {
                continue;
            }
            let nad = format!("{}/{}", selection.namespace, selection.name);
            let network = delegate.as_ref().ok().map(|d| d.network.name.as_str());
            let there = (1..current.len()).find(|&i| {
                let a = &current[i];
                let same = match by_nad {
                    true => a.delegate.name == nad,
                    false => Some(a.delegate.network.name.as_str()) == network,
                };
                !kept[i]
                    && same
                    && selection.interface.as_ref().is_none_or(|n| *n == a.ifname)
                    && present(a)
            });
            if let Some(i) = there {
                kept[i] = true;
                matched[s] = true;
            }
        }
    }
    let wanted = selected
        .into_iter()
        .enumerate()
        .filter(|(s, _)| !matched[*s])
        .map(|(position, (_, delegate))| (first_selected + position, delegate));
    let mut taken: Vec<String> = (0..current.len())
        .filter(|&i| kept[i])
        .map(|i| current[i].ifname.clone())
        .collect();
    let mut add = Vec::new();
    for (index, delegate) in wanted {
        let names: Vec<&str> = taken.iter().map(String::as_str).collect();
        let a = delegate.and_then(|d| checked(inv, sandbox, index, d, &names));
        if let Ok(a) = &a {
            taken.push(a.ifname.clone());
        }
        add.push(a);
    }
    let remove = (1..current.len()).rev().filter(|&i| !kept[i]).collect();
    Ok(Some(Sync { pod, remove, add }))
}

/// What a hot-plug DEL removes.
pub enum Removal {
    /// The sandbox's attachment at this index.
    Cached(usize),
    /// An interface the delegate cache does not record (one another daemon hot-plugged):
    /// deleted with the caller's config, as that daemon would.
    Uncached(Box<Attachment>),
}

/// What a hot-plug DEL of `ifname` removes: the cached attachment on it, else `config` on it.
/// The cluster network's interface goes only with its sandbox.
pub fn del(
    inv: &Invocation,
    sandbox: &Sandbox,
    ifname: &str,
    config: &str,
    selection: &Selection,
) -> Result<Removal> {
    match sandbox.position(ifname).ok() {
        Some(0) => Err(Error::Request {
            network: sandbox.attachments[0].delegate.name.clone(),
            ifname: ifname.to_owned(),
            msg: "this is the cluster network's interface, which goes only with its sandbox"
                .to_owned(),
        }),
        Some(index) => Ok(Removal::Cached(index)),
        None => {
            let mut delegate = Delegate::for_selection(config, selection, None)?;
            delegate.ifname_request = Some(ifname.to_owned());
            delegate.refuse_this_binary(&inv.path)?;
            let index = sandbox.attachments.len();
            let a = attachment(inv, index, delegate, Role::Secondary);
            Ok(Removal::Uncached(Box::new(a)))
        }
    }
}
