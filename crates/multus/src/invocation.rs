//! One command's inputs, read by every stage: the multus config, the runtime's arguments, the
//! API, and the sink of the command's events.

use std::path::PathBuf;

use cni::CmdArgs;

use crate::api::{Api, Events, Pod, Reason};
use crate::config::MultusConf;
use crate::container_lock::{self, ContainerLock};
use crate::error::{Error, Result};
use crate::k8s_args::K8sArgs;

pub struct Invocation<'a> {
    pub conf: MultusConf,
    pub k8s: K8sArgs,
    pub args: &'a CmdArgs,
    /// `binDir`, then `CNI_PATH`.
    pub path: Vec<PathBuf>,
    pub api: Option<&'a dyn Api>,
    /// The command's events, recorded together at its end.
    pub events: Events,
    /// What the node has that a tenant must not take, read when first needed.
    pub node: crate::plan::policy::NodeFacts,
    /// The pod, once [`Invocation::pod`] has read it.
    pod: std::cell::OnceCell<Option<Pod>>,
}

impl<'a> Invocation<'a> {
    pub fn new(args: &'a CmdArgs, conf: MultusConf, api: Option<&'a dyn Api>) -> Result<Self> {
        Ok(Invocation {
            k8s: K8sArgs::parse(&args.args)?,
            path: conf.plugin_path(&args.path),
            conf,
            args,
            api,
            events: Events::default(),
            node: Default::default(),
            pod: std::cell::OnceCell::new(),
        })
    }

    pub fn is_system_namespace(&self) -> bool {
        self.conf.system_namespaces.contains(&self.k8s.namespace)
    }

    /// The pod from the API, checked against the runtime's UID, read once per command. `None`
    /// without an API or without a pod name (a runtime other than the kubelet).
    pub fn pod(&self) -> Result<Option<Pod>> {
        if let Some(pod) = self.pod.get() {
            return Ok(pod.clone());
        }
        let pod = self.read_pod()?;
        Ok(self.pod.get_or_init(|| pod).clone())
    }

    /// The pod as [`Invocation::pod`] read it, if it did.
    pub fn pod_read(&self) -> Option<&Pod> {
        self.pod.get().and_then(Option::as_ref)
    }

    fn read_pod(&self) -> Result<Option<Pod>> {
        let Some(api) = self.api else { return Ok(None) };
        if self.k8s.name.is_empty() {
            return Ok(None);
        }
        let pod_ref = format!("{}/{}", self.k8s.namespace, self.k8s.name);
        let pod = api
            .pod(&self.k8s.namespace, &self.k8s.name, &self.k8s.uid)?
            .ok_or_else(|| Error::PodNotFound(pod_ref.clone()))?;
        if !self.k8s.uid.is_empty() && pod.uid != self.k8s.uid && !pod.is_static() {
            return Err(Error::UidMismatch {
                pod: pod_ref,
                expected: self.k8s.uid.clone(),
                actual: pod.uid,
            });
        }
        Ok(Some(pod))
    }

    /// An event on the pod, recorded at the command's end; none without an API or a pod.
    pub fn event(&self, pod: Option<&Pod>, reason: Reason, message: &str) {
        if let (Some(_), Some(pod)) = (self.api, pod) {
            self.events.push(pod, reason, message);
        }
    }

    /// Something the pod goes on without: said in the log and as an event.
    pub fn warn(&self, pod: Option<&Pod>, reason: Reason, message: &str) {
        tracing::warn!("{message}");
        self.event(pod, reason, message);
    }

    /// The container's lock: one ADD, DEL or CHECK at a time.
    pub fn lock(&self) -> Result<ContainerLock> {
        container_lock::acquire(
            &self.conf.cni_dir,
            &self.args.container_id,
            container_lock::WAIT,
        )
    }

    /// Records the command's events, once its work is done.
    pub fn send_events(&self) {
        if let Some(api) = self.api {
            self.events.send(api);
        }
    }
}
