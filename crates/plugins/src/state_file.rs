//! The small JSON files plugins keep between ADD and DEL (tuning's saved link settings,
//! host-device's record of the link it moved): written whole or not at all (temp and rename,
//! 0600, never through a symlink), not synced (they live in /run, emptied with the pods by a
//! crash), read back capped.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use cni::CniError;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub fn save<T: Serialize>(path: &Path, value: &T) -> Result<(), CniError> {
    let fail = |e: std::io::Error| CniError::io(format!("saving {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?;
    }
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| CniError::internal(e.to_string()))?;
    cni::atomic_file::place(path, &bytes, 0o600)
        .map(drop)
        .map_err(fail)
}

/// The file's value, or `None` when there is none; `what` names it in errors.
pub fn load<T: DeserializeOwned>(path: &Path, what: &str) -> Result<Option<T>, CniError> {
    match cni::input::read_file(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CniError::decoding(format!("{} is not {what}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CniError::io(format!("reading {}: {e}", path.display()))),
    }
}

/// Removes the file; one that is not there is already removed.
pub fn remove(path: &Path) -> Result<(), CniError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(CniError::io(format!("removing {}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}
