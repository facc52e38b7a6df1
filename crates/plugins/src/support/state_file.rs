//! The small JSON files plugins keep between ADD and DEL (tuning's saved link settings,
//! host-device's record of the link it moved): written whole or not at all (temp and rename,
//! 0600, never through a symlink), not synced (they live in /run, emptied with the pods by a
//! crash), read back capped. Each lives in a directory opened once: the node's own, or one a
//! config names, opened beneath the node's path roots.

use std::ffi::OsString;
use std::path::Path;

use cni::dir::Dir;
use cni::path_roots::PathRoots;
use cni::CniError;
use serde::de::DeserializeOwned;
use serde::Serialize;

const DIR_MODE: u32 = 0o700;

/// One state file: its open directory and its name there.
pub struct StateFile {
    dir: Dir,
    name: OsString,
}

impl StateFile {
    /// The file `name` in the directory `path` that config key `key` names, opened beneath the
    /// node's path `roots` (made when missing, with `create`). `None`: the directory does not
    /// exist, so neither does the file.
    pub fn beneath(
        roots: &PathRoots,
        key: &str,
        path: &Path,
        name: String,
        create: bool,
    ) -> Result<Option<StateFile>, CniError> {
        match roots.dir(key, path, create.then_some(DIR_MODE)) {
            Ok(dir) => Ok(Some(StateFile {
                dir,
                name: name.into(),
            })),
            Err(e) if e.is_not_found() && !create => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The file `name` in the node's own directory `path` (not a config's), made when missing.
    pub fn in_node_dir(path: &Path, name: String) -> Result<StateFile, CniError> {
        let roots = PathRoots::new(vec![path.to_owned()], "the plugin's own".into());
        StateFile::beneath(&roots, "state", path, name, true)?
            .ok_or_else(|| CniError::internal(format!("{} was not made", path.display())))
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.join(&self.name)
    }

    pub fn save<T: Serialize>(&self, value: &T) -> Result<(), CniError> {
        let bytes =
            serde_json::to_vec_pretty(value).map_err(|e| CniError::internal(e.to_string()))?;
        cni::atomic_file::place_in(&self.dir, &self.name, &bytes, 0o600)
            .map_err(|e| CniError::io(format!("saving {}: {e}", self.path().display())))
    }

    /// The file's value, or `None` when there is none; `what` names it in errors.
    pub fn load<T: DeserializeOwned>(&self, what: &str) -> Result<Option<T>, CniError> {
        match self.dir.read(&self.name) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                CniError::decoding(format!("{} is not {what}: {e}", self.path().display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CniError::io(format!(
                "reading {}: {e}",
                self.path().display()
            ))),
        }
    }

    /// Removes the file; one that is not there is already removed.
    pub fn remove(&self) -> Result<(), CniError> {
        match self.dir.remove(&self.name) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CniError::io(format!(
                "removing {}: {e}",
                self.path().display()
            ))),
            _ => Ok(()),
        }
    }
}
