//! The node's record of the attachments it allocated for. A pool is shared by every node, and
//! an allocation does not name its node, so GC, which knows only this node's valid
//! attachments, reads here which allocations are this node's to judge.
//!
//! `<state dir>/<network name>/<containerID>:<ifname>`: an empty file per attachment, made
//! (or touched) before ADD writes a pool and removed once DEL has freed it. Its mtime says
//! when its last ADD began: GC leaves young records alone, since the runtime's list of valid
//! attachments is made without the ADDs still running. Neither a container ID nor an
//! interface name can hold `:` or `/`. The directories are opened without following symlinks,
//! and files are made and removed relative to them.

use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use cni::dir::Dir;

use crate::error::{Error, Result};

/// Where the records are kept on a node.
pub const STATE_DIR: &str = "/var/lib/cni/whereabouts";

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// One network's records.
pub struct Record {
    dir: Dir,
}

fn file_name(container_id: &str, ifname: &str) -> Result<String> {
    cni::env::validate_container_id(container_id)?;
    cni::env::validate_ifname(ifname)?;
    Ok(format!("{container_id}:{ifname}"))
}

impl Record {
    /// The network's records, made when missing.
    pub fn open(state_dir: &Path, network: &str) -> Result<Record> {
        cni::config::validate_network_name(network)?;
        let fail = |what: &str, e| Error::io(format!("{what} {}", state_dir.display()), e);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(state_dir)
            .map_err(|e| fail("cannot create", e))?;
        let parent = Dir::open(state_dir).map_err(|e| fail("cannot open", e))?;
        let dir = parent
            .open_or_create_dir(network, DIR_MODE)
            .map_err(|e| Error::io(format!("cannot open {}", parent.join(network).display()), e))?;
        Ok(Record { dir })
    }

    /// The network's records if there are any: DEL and GC have nothing to read otherwise.
    pub fn open_existing(state_dir: &Path, network: &str) -> Result<Option<Record>> {
        cni::config::validate_network_name(network)?;
        match Dir::open(state_dir).and_then(|parent| parent.open_dir(network)) {
            Ok(dir) => Ok(Some(Record { dir })),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(
                format!("cannot open {}", state_dir.join(network).display()),
                e,
            )),
        }
    }

    pub fn add(&self, container_id: &str, ifname: &str) -> Result<()> {
        let name = file_name(container_id, ifname)?;
        self.dir
            .open_write(&name, FILE_MODE)
            .and_then(|f| f.set_modified(SystemTime::now()))
            .map_err(|e| {
                Error::io(
                    format!("cannot write {}", self.dir.join(&name).display()),
                    e,
                )
            })
    }

    /// How long ago the attachment's last ADD began; `None` once it is gone.
    pub fn age(&self, container_id: &str, ifname: &str) -> Result<Option<Duration>> {
        let name = file_name(container_id, ifname)?;
        match self.dir.metadata(&name).and_then(|m| m.modified()) {
            Ok(at) => Ok(Some(at.elapsed().unwrap_or_default())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(
                format!("cannot read {}", self.dir.join(&name).display()),
                e,
            )),
        }
    }

    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<()> {
        let name = file_name(container_id, ifname)?;
        match self.dir.remove(&name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(
                format!("cannot remove {}", self.dir.join(&name).display()),
                e,
            )),
        }
    }

    /// Every recorded `(containerID, ifname)`; names of any other form are not ours and are
    /// left alone.
    pub fn attachments(&self) -> Result<Vec<(String, String)>> {
        let names = self
            .dir
            .names()
            .map_err(|e| Error::io(format!("cannot list {}", self.dir.path().display()), e))?;
        Ok(names
            .iter()
            .filter_map(|n| n.to_str())
            .filter_map(|n| n.split_once(':'))
            .filter(|(id, ifname)| file_name(id, ifname).is_ok())
            .map(|(id, ifname)| (id.to_owned(), ifname.to_owned()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_attachments_and_refuses_what_would_escape() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        assert!(Record::open_existing(&state, "blue").unwrap().is_none());
        let r = Record::open(&state, "blue").unwrap();
        r.add("c1", "net1").unwrap();
        r.add("c1", "net1").unwrap();
        r.add("c2", "net2").unwrap();
        std::fs::write(state.join("blue/not-ours"), "").unwrap();
        let mut all = r.attachments().unwrap();
        all.sort();
        assert_eq!(
            all,
            [("c1".into(), "net1".into()), ("c2".into(), "net2".into())]
        );
        // A second ADD of an attachment makes its record young again.
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(state.join("blue/c1:net1"))
            .and_then(|f| f.set_modified(old))
            .unwrap();
        assert!(r.age("c1", "net1").unwrap().unwrap() >= Duration::from_secs(3599));
        r.add("c1", "net1").unwrap();
        assert!(r.age("c1", "net1").unwrap().unwrap() < Duration::from_secs(60));
        r.remove("c1", "net1").unwrap();
        r.remove("c1", "net1").unwrap();
        assert!(r.age("c1", "net1").unwrap().is_none());
        assert_eq!(r.attachments().unwrap().len(), 1);
        assert!(r.add("../x", "net1").is_err());
        assert!(r.add("c3", "a/b").is_err());
        assert!(Record::open(&state, "../escape").is_err());
        // A symlink where the network's directory goes is refused, never followed.
        std::os::unix::fs::symlink(tmp.path(), state.join("red")).unwrap();
        assert!(Record::open(&state, "red").is_err());
        assert!(Record::open_existing(&state, "red").is_err());
    }
}
