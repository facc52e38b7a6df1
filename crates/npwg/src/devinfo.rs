//! NPWG device-info files: what a device plugin or a CNI plugin tells about the device behind
//! an interface (PCI address, vhost-user socket, ...), which multus shows as `device-info` in
//! network-status. Paths and names are those of the reference implementation, so device
//! plugins and CNI plugins written for it work unchanged:
//!
//! - `<dir>/dp/<resourceName>-<deviceID>-device.json`, written by a device plugin;
//! - `<dir>/cni/<network>-<containerID>_<ifname>`, passed to the delegate as
//!   `runtimeConfig.CNIDeviceInfoFile`, filled from the device plugin's file or by the delegate,
//!   read after ADD and removed on DEL.
//!
//! A file that cannot be used never fails the pod: the caller warns and the entry goes without
//! `device-info`.

use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where device-info files live unless `deviceInfoDir` says otherwise.
pub const DEFAULT_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// The capability (and runtime config key) through which a delegate gets its file's path.
pub const CAPABILITY: &str = "CNIDeviceInfoFile";

/// The NAD annotation naming the device plugin resource the network's devices come from.
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";

/// A device-info file that could not be read, copied or removed.
#[derive(Debug, thiserror::Error)]
#[error("device-info file {}: {msg}", path.display())]
pub struct DeviceInfoError {
    pub path: PathBuf,
    pub msg: String,
}

fn error(path: &Path, msg: impl std::fmt::Display) -> DeviceInfoError {
    DeviceInfoError {
        path: path.to_owned(),
        msg: msg.to_string(),
    }
}

/// The file of one attachment: `<dir>/cni/<network>-<containerID>_<ifname>`, every `/` made
/// a `-` (a NAD's network is `<namespace>/<name>`).
pub fn cni_path(dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    dir.join("cni")
        .join(format!("{network}-{container_id}_{ifname}").replace('/', "-"))
}

/// The device plugin's file for one device: `<dir>/dp/<resourceName>-<deviceID>-device.json`,
/// every `/` made a `-` in both.
pub fn dp_path(dir: &Path, resource_name: &str, device_id: &str) -> PathBuf {
    dir.join("dp").join(format!(
        "{}-{}-device.json",
        resource_name.replace('/', "-"),
        device_id.replace('/', "-")
    ))
}

/// Reads a device-info file: `None` when there is none; an error when it cannot be read or
/// is not a JSON object.
pub fn load(path: &Path) -> Result<Option<Value>, DeviceInfoError> {
    let bytes = match cni::input::read_file(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(path, format!("cannot read: {e}"))),
    };
    match cni::decode::read_any(&bytes) {
        Ok(info @ Value::Object(_)) => Ok(Some(info)),
        Ok(_) => Err(error(path, "is not a JSON object")),
        Err(e) => Err(error(path, format!("is {e}"))),
    }
}

/// Copies the device plugin's file `dp` to the attachment's file `cni`, replacing one left
/// over from an earlier attempt. Returns whether there was a file to copy.
pub fn copy(dp: &Path, cni: &Path) -> Result<bool, DeviceInfoError> {
    let Some(info) = load(dp)? else {
        return Ok(false);
    };
    let bytes = serde_json::to_vec(&info).map_err(|e| error(dp, e))?;
    if let Some(parent) = cni.parent() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| error(cni, format!("cannot create its directory: {e}")))?;
    }
    // Read by the delegate during this ADD and written again by the next one, so it needs no
    // sync: a machine crash loses the pod's interfaces with it.
    cni::atomic_file::place(cni, &bytes, 0o444)
        .map_err(|e| error(cni, format!("cannot write: {e}")))?;
    Ok(true)
}

/// Removes an attachment's file; one that is not there is fine.
pub fn remove(path: &Path) -> Result<(), DeviceInfoError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(error(path, format!("cannot remove: {e}")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_reference_ones() {
        let dir = Path::new(DEFAULT_DIR);
        assert_eq!(
            cni_path(dir, "ns1/sriov-net", "c0ffee", "net1"),
            Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/ns1-sriov-net-c0ffee_net1")
        );
        assert_eq!(
            dp_path(dir, "intel.com/sriov_netdevice", "0000:03:02.0"),
            Path::new(
                "/var/run/k8s.cni.cncf.io/devinfo/dp/intel.com-sriov_netdevice-0000:03:02.0-device.json"
            )
        );
    }

    #[test]
    fn load_tells_missing_from_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("info");
        assert!(load(&path).unwrap().is_none());
        std::fs::write(&path, r#"{"type":"pci","version":"1.1.0"}"#).unwrap();
        assert_eq!(load(&path).unwrap().unwrap()["type"], "pci");
        for bad in ["not json", "[1]"] {
            std::fs::write(&path, bad).unwrap();
            let err = load(&path).unwrap_err().to_string();
            assert!(err.starts_with(&format!("device-info file {}: is not", path.display())));
        }
    }
}
