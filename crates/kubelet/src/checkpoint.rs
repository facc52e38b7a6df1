//! The kubelet device manager's checkpoint file
//! (`/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`): which device IDs of which
//! device plugin resource the kubelet allocated to which pod's containers. Multus reads it to
//! give a network whose NAD names a resource one of the pod's devices.
//!
//! The file is JSON: `{"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName",
//! "ResourceName", "DeviceIDs", ...}], ...}, "Checksum": ...}`. `DeviceIDs` maps NUMA nodes to
//! device IDs (a plain list before Kubernetes 1.20; both are read). The checksum is the
//! kubelet's own and is not checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where the kubelet keeps the file unless `kubeletCheckpointFile` says otherwise.
pub const DEFAULT_PATH: &str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";

/// A checkpoint file that cannot be read or decoded.
#[derive(Debug, thiserror::Error)]
#[error("kubelet device checkpoint {}: {msg}", path.display())]
pub struct CheckpointError {
    pub path: PathBuf,
    pub msg: String,
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<Entry>>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "PodUID")]
    pod_uid: String,
    #[serde(rename = "ResourceName")]
    resource_name: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<DeviceIds>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceIds {
    ByNumaNode(BTreeMap<String, Vec<String>>),
    Plain(Vec<String>),
}

/// The device IDs of every resource allocated to pod `pod_uid`, over all its containers.
pub fn pod_devices(
    path: &Path,
    pod_uid: &str,
) -> Result<BTreeMap<String, Vec<String>>, CheckpointError> {
    let error = |msg: String| CheckpointError {
        path: path.to_owned(),
        msg,
    };
    let bytes = cni::input::read_file(path).map_err(|e| error(format!("cannot read: {e}")))?;
    // serde_json quotes a misplaced string whole: cut it.
    let file: File = serde_json::from_slice(&bytes).map_err(|e| {
        error(format!(
            "is not a kubelet device checkpoint: {}",
            cni::quote::shorten(&e.to_string())
        ))
    })?;
    let mut devices: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in file.data.entries.into_iter().flatten() {
        if entry.pod_uid != pod_uid {
            continue;
        }
        let ids = devices.entry(entry.resource_name).or_default();
        match entry.device_ids {
            Some(DeviceIds::ByNumaNode(by_node)) => ids.extend(by_node.into_values().flatten()),
            Some(DeviceIds::Plain(list)) => ids.extend(list),
            None => {}
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "7d1c3a52-0000-4000-8000-000000000001";

    fn read(text: &str) -> Result<BTreeMap<String, Vec<String>>, CheckpointError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet_internal_checkpoint");
        std::fs::write(&path, text).unwrap();
        pod_devices(&path, POD)
    }

    #[test]
    fn the_pods_devices_by_resource_over_its_containers() {
        let text = serde_json::json!({
            "Data": {
                "PodDeviceEntries": [
                    {"PodUID": POD, "ContainerName": "app", "ResourceName": "example.com/vf",
                     "DeviceIDs": {"1": ["0000:03:02.3"], "0": ["0000:03:02.1"]},
                     "AllocResp": "CgA="},
                    {"PodUID": POD, "ContainerName": "init", "ResourceName": "example.com/vf",
                     "DeviceIDs": {"0": ["0000:03:02.1", "0000:03:02.2"]}},
                    {"PodUID": "other", "ContainerName": "app", "ResourceName": "example.com/vf",
                     "DeviceIDs": {"0": ["0000:03:02.7"]}},
                    {"PodUID": POD, "ContainerName": "app", "ResourceName": "example.com/old",
                     "DeviceIDs": ["b", "a"]}
                ],
                "RegisteredDevices": {"example.com/vf": ["0000:03:02.1"]}
            },
            "Checksum": 1234
        });
        let devices = read(&text.to_string()).unwrap();
        assert_eq!(
            devices,
            BTreeMap::from([
                ("example.com/old".to_owned(), vec!["b".into(), "a".into()]),
                (
                    "example.com/vf".to_owned(),
                    vec![
                        "0000:03:02.1".into(),
                        "0000:03:02.3".into(),
                        "0000:03:02.1".into(),
                        "0000:03:02.2".into()
                    ]
                ),
            ])
        );
    }

    #[test]
    fn a_kubelet_without_allocations_gives_none() {
        let text = r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0}"#;
        assert!(read(text).unwrap().is_empty());
    }

    #[test]
    fn an_unusable_file_is_an_error_naming_it() {
        let err = read(r#"{"Data": 3}"#).unwrap_err().to_string();
        assert!(
            err.starts_with("kubelet device checkpoint ") && err.contains(": is not a kubelet"),
            "{err}"
        );
        let missing = pod_devices(Path::new("/nonexistent/checkpoint"), POD).unwrap_err();
        assert!(missing
            .to_string()
            .starts_with("kubelet device checkpoint /nonexistent/checkpoint: cannot read: "));
    }
}
