//! Devices of device plugin resources (`k8s.v1.cni.cncf.io/resourceName`) that the kubelet
//! allocated to a pod, handed out to the pod's networks.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::api::Pod;
use crate::config::MultusConf;
use crate::error::{Error, Result};
use kubelet::checkpoint;
use kubelet::pod_resources;

/// The devices the kubelet allocated to the pod, asked of its pod-resources API when the
/// socket is there (as upstream), else read from its device checkpoint; at the first NAD that
/// names a resource only (a node without device plugins needs neither). They are handed out
/// one per such network, in the order the pod's networks resolve.
pub struct PodDevices {
    checkpoint: PathBuf,
    socket: PathBuf,
    timeout: Duration,
    pod_namespace: String,
    pod_name: String,
    /// The kubelet's UID of the pod (the checkpoint's key).
    pod_uid: String,
    /// On ADD a network that gets no device fails the pod; on DEL without a delegate cache it
    /// goes without one.
    required: bool,
    /// Per resource, once read, and what they were read from.
    allocated: RefCell<Option<(BTreeMap<String, Allocation>, String)>>,
}

/// The pod's devices of one resource.
struct Allocation {
    ids: Vec<String>,
    /// How many of `ids` networks have got.
    handed_out: usize,
}

impl PodDevices {
    /// The devices of `pod`, whose kubelet UID is `pod_uid`, read where `conf` says.
    pub fn new(conf: &MultusConf, pod: &Pod, pod_uid: &str, required: bool) -> PodDevices {
        PodDevices {
            checkpoint: conf.kubelet_checkpoint_file.clone(),
            socket: conf.pod_resources_socket.clone(),
            timeout: conf.api_timeout,
            pod_namespace: pod.namespace.clone(),
            pod_name: pod.name.clone(),
            pod_uid: pod_uid.to_owned(),
            required,
            allocated: RefCell::default(),
        }
    }

    /// The pod's devices by resource, sorted (the order upstream hands them out in) and each
    /// once: the kubelet may list an init container's device again for an app container, and
    /// one device is one network's. Also says where they came from.
    fn read(&self, network: &str) -> Result<(BTreeMap<String, Allocation>, String)> {
        let (devices, source) = if self.socket.exists() {
            let devices = pod_resources::pod_devices(
                &self.socket,
                &self.pod_namespace,
                &self.pod_name,
                self.timeout,
            )
            .map_err(|source| Error::PodResources {
                network: network.to_owned(),
                source,
            })?;
            let source = format!("the kubelet's pod-resources API {}", self.socket.display());
            (devices, source)
        } else {
            let devices =
                checkpoint::pod_devices(&self.checkpoint, &self.pod_uid).map_err(|source| {
                    Error::Checkpoint {
                        network: network.to_owned(),
                        source,
                    }
                })?;
            (devices, self.checkpoint.display().to_string())
        };
        tracing::debug!("devices of the pod per {source}: {devices:?}");
        let allocated = devices
            .into_iter()
            .map(|(resource, mut ids)| {
                ids.sort();
                ids.dedup();
                (resource, Allocation { ids, handed_out: 0 })
            })
            .collect();
        Ok((allocated, source))
    }

    /// The next device of `resource` for `network`. `None` when there is none left on DEL;
    /// on ADD that is an error, where upstream runs the network without a device, or with the
    /// `deviceID` the pod's annotation names: the device a NAD's resource stands for is the one
    /// the kubelet allocated, never one a pod picks (its device-info file would be another
    /// pod's).
    pub fn next(&self, resource: &str, network: &str) -> Result<Option<String>> {
        let mut allocated = self.allocated.borrow_mut();
        if allocated.is_none() {
            match self.read(network) {
                Ok(read) => *allocated = Some(read),
                Err(e) if self.required => return Err(e),
                Err(e) => {
                    tracing::warn!("{e}; the network goes without a device");
                    return Ok(None);
                }
            }
        }
        let Some((allocated, source)) = allocated.as_mut() else {
            return Ok(None);
        };
        let mut count = 0;
        if let Some(devices) = allocated.get_mut(resource) {
            count = devices.ids.len();
            if let Some(id) = devices.ids.get(devices.handed_out) {
                devices.handed_out += 1;
                tracing::debug!("network {network}: device {id} of {resource}");
                return Ok(Some(id.clone()));
            }
        }
        let why = if count == 0 {
            format!(
                "the kubelet allocated the pod (UID {}) no device of it",
                self.pod_uid
            )
        } else {
            format!(
                "the {count} device(s) of it the kubelet allocated the pod (UID {}) are taken by the pod's networks before this one",
                self.pod_uid
            )
        };
        let msg = format!(
            "its NetworkAttachmentDefinition names the resource {resource:?} ({}), but {why} (per {source}): request one {resource} per network that uses it in the resources of one of the pod's containers",
            npwg::devinfo::RESOURCE_NAME_ANNOTATION,
        );
        if !self.required {
            tracing::info!("network {network}: {msg}; it goes without one from the kubelet");
            return Ok(None);
        }
        Err(Error::NoDevice {
            network: network.to_owned(),
            msg,
        })
    }
}
