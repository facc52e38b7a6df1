//! The on-disk reservation store, file for file what the reference writes, so a node can switch
//! between implementations with reservations intact. This is the only module that touches it.
//!
//! `<dataDir>/<network>/`:
//! - `<ip>` (e.g. `10.1.2.3`, `fd00::3`): `<containerID>\r\n<ifname>`; an older format held only
//!   the container ID, and is still matched;
//! - `last_reserved_ip.<range set index>`: the address last reserved from that set;
//! - `lock`: `flock`ed for the whole of an operation, by us and by the reference alike.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::net::IpAddr;
use std::path::Path;

use cni::dir::{self, Dir};
use cni::path_roots::PathRoots;

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

    /// A reservation file without content: an ADD was killed between creating and writing it.
    /// Seen under the store's lock, no ADD is still writing it.
    pub fn is_unwritten(&self) -> bool {
        self.content.is_empty()
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
///
/// `dataDir` comes from the network config, a tenant's: it is opened beneath the node's path
/// roots, never through a symlink ([`cni::path_roots`]). The network's directory is opened
/// once, and every file is opened, made and removed relative to it, never through a symlink:
/// nothing outside the store is ever written.
pub struct Store {
    dir: Dir,
    _lock: File,
}

impl Store {
    /// Opens the network's store, creating it if needed, and waits for its lock.
    pub fn open(roots: &PathRoots, data_dir: &Path, network: &str) -> Result<Store> {
        cni::config::validate_network_name(network)?;
        let parent = roots.dir("dataDir", data_dir, Some(DIR_MODE))?;
        let dir = parent
            .open_or_create_dir(network, DIR_MODE)
            .map_err(|e| Error::io(format!("cannot open {}", parent.join(network).display()), e))?;
        Store::locked(dir)
    }

    /// Opens the network's store if it exists: DEL, CHECK and GC have nothing to do otherwise.
    pub fn open_existing(
        roots: &PathRoots,
        data_dir: &Path,
        network: &str,
    ) -> Result<Option<Store>> {
        cni::config::validate_network_name(network)?;
        let path = data_dir.join(network);
        let parent = match roots.dir("dataDir", data_dir, None) {
            Err(e) if e.is_not_found() => return Ok(None),
            opened => opened?,
        };
        let dir = match parent.open_dir(network) {
            Ok(dir) => dir,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), e)),
        };
        Store::locked(dir).map(Some)
    }

    fn locked(dir: Dir) -> Result<Store> {
        let path = dir.join(LOCK_FILE);
        let lock = dir
            .open_write(LOCK_FILE, FILE_MODE)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        lock.lock()
            .map_err(|e| Error::io(format!("cannot lock {}", path.display()), e))?;
        Ok(Store { dir, _lock: lock })
    }

    /// Creates `<ip>` for `holder` unless it exists, and records `ip` as the set's last
    /// reserved address. Returns false when the address is taken. On error nothing is reserved.
    pub fn reserve(&self, ip: IpAddr, holder: &Holder, set_index: usize) -> Result<bool> {
        let name = ip.to_string();
        let mut file = match self.dir.create_new(&name, FILE_MODE) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(self.error("cannot create", &name, e)),
        };
        if let Err(e) = file.write_all(holder.content().as_bytes()) {
            let _ = self.dir.remove(&name);
            return Err(self.error("cannot write", &name, e));
        }
        let last = format!("{LAST_RESERVED_PREFIX}{set_index}");
        let written = self
            .dir
            .open_truncate(&last, FILE_MODE)
            .and_then(|mut f| f.write_all(name.as_bytes()));
        if let Err(e) = written {
            // The ADD fails, as the reference's does; unlike the reference's, it leaves no
            // reservation behind that no result names and only GC would free.
            let _ = self.dir.remove(&name);
            return Err(self.error("cannot write", &last, e));
        }
        Ok(true)
    }

    /// The address last reserved from range set `set_index`, if recorded and readable (a
    /// symlink there is not).
    pub fn last_reserved(&self, set_index: usize) -> Option<IpAddr> {
        let bytes = self
            .dir
            .read(format!("{LAST_RESERVED_PREFIX}{set_index}"))
            .ok()?;
        String::from_utf8_lossy(&bytes)
            .trim()
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical())
    }

    /// Deletes the reservation of `ip`; one that is already gone is fine.
    pub fn release(&self, ip: IpAddr) -> Result<()> {
        let name = ip.to_string();
        match self.dir.remove(&name) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(self.error("cannot remove", &name, e)),
            _ => Ok(()),
        }
    }

    /// The reserved addresses (file names that parse as IP addresses), without reading the
    /// files.
    pub fn reserved_ips(&self) -> Result<Vec<IpAddr>> {
        let names = self
            .dir
            .names()
            .map_err(|e| Error::io(format!("cannot list {}", self.dir.path().display()), e))?;
        Ok(names
            .iter()
            .filter_map(|n| n.to_str().and_then(|n| n.parse::<IpAddr>().ok()))
            .collect())
    }

    /// Every reservation, read in one pass over the directory. A symlink named like an address
    /// is not one: we never make one, and it is not followed.
    pub fn reservations(&self) -> Result<Vec<Reservation>> {
        let mut out = Vec::new();
        for ip in self.reserved_ips()? {
            let name = ip.to_string();
            // A file removed meanwhile by hand is simply not a reservation.
            match self.dir.read(&name) {
                Ok(bytes) => out.push(Reservation {
                    ip,
                    content: String::from_utf8_lossy(&bytes).into_owned(),
                }),
                Err(e) if e.kind() == ErrorKind::NotFound || dir::is_symlink_refusal(&e) => {}
                Err(e) => return Err(self.error("cannot read", &name, e)),
            }
        }
        Ok(out)
    }

    fn error(&self, what: &str, name: &str, e: std::io::Error) -> Error {
        Error::io(format!("{what} {}", self.dir.join(name).display()), e)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// The test's directory as the node's only path root.
    pub fn test_roots(dir: &Path) -> PathRoots {
        PathRoots::new(vec![dir.to_owned()], "the test".into())
    }

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
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "net").unwrap();
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
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "net").unwrap();
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
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "net").unwrap();
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
            let e = Store::open(&test_roots(tmp.path()), tmp.path(), name)
                .err()
                .unwrap();
            assert!(matches!(e, Error::Cni(_)), "{name}: {e}");
            assert_eq!(cni::CniError::from(e).code, 7, "{name}");
        }
        assert!(
            Store::open_existing(&test_roots(tmp.path()), tmp.path(), "absent")
                .unwrap()
                .is_none()
        );
        assert!(!tmp.path().join("absent").exists());
    }

    /// A store `net` in a temp dir, and a file outside it that nothing may write.
    fn with_victim() -> (tempfile::TempDir, Store, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let store = Store::open(&test_roots(tmp.path()), tmp.path(), "net").unwrap();
        (tmp, store, victim)
    }

    #[test]
    fn a_symlink_at_last_reserved_is_refused_and_nothing_is_reserved() {
        let (tmp, store, victim) = with_victim();
        let last = tmp.path().join("net/last_reserved_ip.0");
        std::os::unix::fs::symlink(&victim, &last).unwrap();
        let e = store.reserve(ip("10.1.2.2"), &HOLDER, 0).unwrap_err();
        assert!(e.to_string().contains(&last.display().to_string()), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(cni::CniError::from(e).code, 5);
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(store.reserved_ips().unwrap().is_empty());
        // Nor is it read.
        fs::write(&victim, b"10.1.2.9").unwrap();
        assert_eq!(store.last_reserved(0), None);
    }

    #[test]
    fn a_symlink_at_a_reservation_is_refused_and_not_a_reservation() {
        let (tmp, store, victim) = with_victim();
        let planted = tmp.path().join("net/10.1.2.2");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let e = store.reserve(ip("10.1.2.2"), &HOLDER, 0).unwrap_err();
        assert!(
            e.to_string().contains(&planted.display().to_string()),
            "{e}"
        );
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        fs::write(&victim, b"c1\r\neth0").unwrap();
        assert!(store.reservations().unwrap().is_empty());
        // Releasing the address removes the link, not its target.
        store.release(ip("10.1.2.2")).unwrap();
        assert!(victim.exists() && fs::symlink_metadata(&planted).is_err());
    }

    #[test]
    fn a_symlinked_network_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join("net")).unwrap();
        for e in [
            Store::open(&test_roots(tmp.path()), tmp.path(), "net")
                .err()
                .unwrap(),
            Store::open_existing(&test_roots(tmp.path()), tmp.path(), "net")
                .err()
                .unwrap(),
        ] {
            assert!(e.to_string().contains("symbolic link"), "{e}");
            assert!(e.to_string().contains("/net"), "{e}");
            assert_eq!(cni::CniError::from(e).code, 5);
        }
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
