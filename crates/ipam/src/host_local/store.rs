//! The on-disk reservation store, file for file what the reference writes, so a node can switch
//! between implementations with reservations intact. This is the only module that touches it.
//!
//! `<dataDir>/<network>/`:
//! - `<ip>` (e.g. `10.1.2.3`, `fd00::3`): `<containerID>\r\n<ifname>`; an older format held only
//!   the container ID, and is still matched;
//! - `last_reserved_ip.<range set index>`: the address last reserved from that set;
//! - `lock`: `flock`ed for the whole of an operation, by us and by the reference alike.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const LOCK_FILE: &str = "lock";
const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o755;

/// Who holds a reservation: an attachment.
#[derive(Clone, Copy, Debug)]
pub struct Holder<'a> {
    pub container_id: &'a str,
    pub ifname: &'a str,
}

impl Holder<'_> {
    /// The file content; the ID is trimmed, as the reference does.
    fn content(&self) -> String {
        format!("{}\r\n{}", self.container_id.trim(), self.ifname)
    }
}

/// How a reservation file's content relates to an attachment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    No,
    /// `<id>\r\n<ifname>`.
    Exact,
    /// The old format: the container ID only.
    IdOnly,
}

/// One reservation file.
#[derive(Clone, Debug)]
pub struct Reservation {
    pub ip: IpAddr,
    content: String,
}

impl Reservation {
    pub fn matches(&self, holder: &Holder) -> Match {
        let content = self.content.trim();
        let id = holder.container_id.trim();
        match content.split_once("\r\n") {
            Some((cid, ifname)) if cid == id && ifname == holder.ifname => Match::Exact,
            None if content == id => Match::IdOnly,
            _ => Match::No,
        }
    }

    /// The container ID and, in the current format, the interface name.
    pub fn holder(&self) -> (&str, Option<&str>) {
        let content = self.content.trim();
        match content.split_once("\r\n") {
            Some((id, ifname)) => (id, Some(ifname)),
            None => (content, None),
        }
    }
}

/// An open, locked store for one network. The lock is released when this is dropped.
pub struct Store {
    dir: PathBuf,
    _lock: File,
}

impl Store {
    /// Opens the network's store, creating it if needed, and waits for its lock.
    pub fn open(data_dir: &Path, network: &str) -> Result<Store> {
        let dir = network_dir(data_dir, network)?;
        let lock = match open_lock(&dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                DirBuilder::new()
                    .recursive(true)
                    .mode(DIR_MODE)
                    .create(&dir)
                    .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
                open_lock(&dir)
            }
            other => other,
        }
        .map_err(|e| Error::io(format!("cannot open {}/{LOCK_FILE}", dir.display()), e))?;
        Store::locked(dir, lock)
    }

    /// Opens the network's store if it exists: DEL, CHECK and GC have nothing to do otherwise.
    pub fn open_existing(data_dir: &Path, network: &str) -> Result<Option<Store>> {
        let dir = network_dir(data_dir, network)?;
        match open_lock(&dir) {
            Ok(lock) => Store::locked(dir, lock).map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound && !dir.exists() => Ok(None),
            Err(e) => Err(Error::io(
                format!("cannot open {}/{LOCK_FILE}", dir.display()),
                e,
            )),
        }
    }

    fn locked(dir: PathBuf, lock: File) -> Result<Store> {
        lock.lock()
            .map_err(|e| Error::io(format!("cannot lock {}/{LOCK_FILE}", dir.display()), e))?;
        Ok(Store { dir, _lock: lock })
    }

    /// Creates `<ip>` for `holder` unless it exists, and records `ip` as the set's last
    /// reserved address. Returns false when the address is taken. On error nothing is reserved.
    pub fn reserve(&self, ip: IpAddr, holder: &Holder, set_index: usize) -> Result<bool> {
        let path = self.dir.join(ip.to_string());
        let mut file = match new_file().create_new(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(Error::io(format!("cannot create {}", path.display()), e)),
        };
        if let Err(e) = file.write_all(holder.content().as_bytes()) {
            let _ = fs::remove_file(&path);
            return Err(Error::io(format!("cannot write {}", path.display()), e));
        }
        let last = self.dir.join(format!("{LAST_RESERVED_PREFIX}{set_index}"));
        let written = new_file()
            .create(true)
            .truncate(true)
            .open(&last)
            .and_then(|mut f| f.write_all(ip.to_string().as_bytes()));
        if let Err(e) = written {
            // The ADD fails, as the reference's does; unlike the reference's, it leaves no
            // reservation behind that no result names and only GC would free.
            let _ = fs::remove_file(&path);
            return Err(Error::io(format!("cannot write {}", last.display()), e));
        }
        Ok(true)
    }

    /// The address last reserved from range set `set_index`, if recorded and readable.
    pub fn last_reserved(&self, set_index: usize) -> Option<IpAddr> {
        let path = self.dir.join(format!("{LAST_RESERVED_PREFIX}{set_index}"));
        let text = fs::read_to_string(path).ok()?;
        text.trim()
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical())
    }

    /// Deletes the reservation of `ip`; one that is already gone is fine.
    pub fn release(&self, ip: IpAddr) -> Result<()> {
        let path = self.dir.join(ip.to_string());
        match fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                Err(Error::io(format!("cannot remove {}", path.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// The reserved addresses (file names that parse as IP addresses), without reading the
    /// files.
    pub fn reserved_ips(&self) -> Result<Vec<IpAddr>> {
        let what = || format!("cannot list {}", self.dir.display());
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| Error::io(what(), e))? {
            let entry = entry.map_err(|e| Error::io(what(), e))?;
            if let Some(ip) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<IpAddr>().ok())
            {
                out.push(ip);
            }
        }
        Ok(out)
    }

    /// Every reservation, read in one pass over the directory.
    pub fn reservations(&self) -> Result<Vec<Reservation>> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for ip in self.reserved_ips()? {
            buf.clear();
            let path = self.dir.join(ip.to_string());
            // A file removed meanwhile by hand is simply not a reservation.
            match File::open(&path).and_then(|mut f| f.read_to_end(&mut buf)) {
                Ok(_) => out.push(Reservation {
                    ip,
                    content: String::from_utf8_lossy(&buf).into_owned(),
                }),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
            }
        }
        Ok(out)
    }
}

/// `<data_dir>/<network>`, refusing names that would point elsewhere: a valid CNI name starts
/// with a letter or digit and has no `/`, so it is never `.`, `..` or a path.
fn network_dir(data_dir: &Path, network: &str) -> Result<PathBuf> {
    cni::config::validate_network_name(network)?;
    Ok(data_dir.join(network))
}

fn open_lock(dir: &Path) -> std::io::Result<File> {
    new_file().create(true).open(dir.join(LOCK_FILE))
}

fn new_file() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).mode(FILE_MODE);
    o
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const HOLDER: Holder = Holder {
        container_id: "c1",
        ifname: "eth0",
    };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn reserve_writes_reference_format() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), "net").unwrap();
        assert!(store.reserve(ip("10.1.2.2"), &HOLDER, 0).unwrap());
        assert!(!store.reserve(ip("10.1.2.2"), &HOLDER, 0).unwrap());
        assert!(store.reserve(ip("fd00::2"), &HOLDER, 1).unwrap());
        let dir = tmp.path().join("net");
        assert_eq!(fs::read(dir.join("10.1.2.2")).unwrap(), b"c1\r\neth0");
        assert_eq!(fs::read(dir.join("fd00::2")).unwrap(), b"c1\r\neth0");
        assert_eq!(
            fs::read(dir.join("last_reserved_ip.0")).unwrap(),
            b"10.1.2.2"
        );
        assert_eq!(
            fs::read(dir.join("last_reserved_ip.1")).unwrap(),
            b"fd00::2"
        );
        for name in ["10.1.2.2", "last_reserved_ip.0", "lock"] {
            let mode = fs::metadata(dir.join(name)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        assert_eq!(store.last_reserved(0), Some(ip("10.1.2.2")));
        assert_eq!(store.last_reserved(7), None);
    }

    #[test]
    fn failed_last_reserved_write_keeps_no_reservation() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), "net").unwrap();
        // A directory in its place makes the write fail.
        fs::create_dir(tmp.path().join("net/last_reserved_ip.0")).unwrap();
        let e = store.reserve(ip("10.1.2.2"), &HOLDER, 0).unwrap_err();
        assert!(e.to_string().contains("last_reserved_ip.0"), "{e}");
        assert_eq!(cni::CniError::from(e).code, 5);
        assert!(store.reserved_ips().unwrap().is_empty());
        assert!(!tmp.path().join("net/10.1.2.2").exists());
        // Another set's file is unaffected, and the address can be reserved there.
        assert!(store.reserve(ip("10.1.2.2"), &HOLDER, 1).unwrap());
    }

    #[test]
    fn matching_both_formats() {
        let r = |c: &str| Reservation {
            ip: ip("10.0.0.2"),
            content: c.into(),
        };
        assert_eq!(r("c1\r\neth0").matches(&HOLDER), Match::Exact);
        assert_eq!(r(" c1\r\neth0\n").matches(&HOLDER), Match::Exact);
        assert_eq!(r("c1\r\neth1").matches(&HOLDER), Match::No);
        assert_eq!(r("c1").matches(&HOLDER), Match::IdOnly);
        assert_eq!(r("c2").matches(&HOLDER), Match::No);
        assert_eq!(r("c1").holder(), ("c1", None));
        assert_eq!(r("c1\r\neth0").holder(), ("c1", Some("eth0")));
    }

    #[test]
    fn reservations_skip_other_files() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), "net").unwrap();
        store.reserve(ip("10.1.2.2"), &HOLDER, 0).unwrap();
        fs::write(tmp.path().join("net/junk"), "c1\r\neth0").unwrap();
        let all = store.reservations().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].ip, ip("10.1.2.2"));
        store.release(ip("10.1.2.2")).unwrap();
        store.release(ip("10.1.2.2")).unwrap();
        assert!(store.reservations().unwrap().is_empty());
    }

    #[test]
    fn refuses_escaping_names() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["", ".", "..", "../x", "a/b", "/abs"] {
            let e = Store::open(tmp.path(), name).err().unwrap();
            assert!(matches!(e, Error::Cni(_)), "{name}: {e}");
            assert_eq!(cni::CniError::from(e).code, 7, "{name}");
        }
        assert!(Store::open_existing(tmp.path(), "absent")
            .unwrap()
            .is_none());
        assert!(!tmp.path().join("absent").exists());
    }
}
