//! Leases on disk: one JSON file per attachment under the state directory, so a restarted
//! daemon resumes renewing them and can still release them on DEL.

use std::path::{Path, PathBuf};

use cni::dir::Dir;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::schedule::LeaseTimes;
use crate::dhcp::config::LeaseParams;
use crate::dhcp::message::Lease;
use crate::dhcp::wire::{key, Key};

/// Where leases are kept unless `-statedir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/dhcp";

/// Everything needed to renew or release a lease after a restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    pub netns: String,
    pub params: LeaseParams,
    pub lease: Lease,
    /// The MAC the server's last ACK came from, for unicast renewals and the release.
    pub server_mac: [u8; 6],
    /// When the last ACK arrived, in milliseconds since the epoch.
    pub bound_at_ms: u64,
}

impl Record {
    pub fn key(&self) -> Key {
        key(&self.container_id, &self.network, &self.ifname)
    }

    /// What the lease's renewal, rebinding and expiry times depend on.
    pub fn times(&self) -> LeaseTimes {
        LeaseTimes::new(self.bound_at_ms, &self.lease)
    }

    /// `container=... network=... interface=...` for log lines.
    pub fn who(&self) -> String {
        who(&self.container_id, &self.network, &self.ifname)
    }
}

pub fn who(container_id: &str, network: &str, ifname: &str) -> String {
    format!("container={container_id} network={network} interface={ifname}")
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// The state directory, opened once: the files are made, read and removed relative to it,
/// never through a symlink, and read capped.
pub struct Store {
    dir: Dir,
}

impl Store {
    pub fn open(dir: &Path) -> std::io::Result<Store> {
        std::fs::create_dir_all(dir)?;
        Ok(Store {
            dir: Dir::open(dir)?,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn name(container_id: &str, network: &str, ifname: &str) -> String {
        let name = [container_id, network, ifname].map(escape).join("_");
        format!("{name}.json")
    }

    /// Writes the record so that a crash leaves either version whole.
    pub fn save(&self, record: &Record) -> std::io::Result<()> {
        let name = Store::name(&record.container_id, &record.network, &record.ifname);
        let text = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        cni::atomic_file::write_in(&self.dir, name.as_ref(), &text, 0o600)
    }

    /// Removes the temp files of lease files that a daemon killed mid-write left, saying so
    /// in the log. Only the one daemon calls this, between its writes.
    pub fn remove_temp_files(&self) {
        let is_lease = |target: &std::ffi::OsStr| target.as_encoded_bytes().ends_with(b".json");
        match cni::atomic_file::remove_temp_files(self.dir.path(), is_lease) {
            Ok(removed) => {
                for path in removed {
                    nodelog::info!(
                        "dhcp daemon: removed {}, left by a daemon that was stopped mid-write",
                        path.display()
                    );
                }
            }
            Err(e) => nodelog::warn!(
                "dhcp daemon: cannot remove temporary files in {}: {e}",
                self.dir().display()
            ),
        }
    }

    pub fn remove(&self, record: &Record) -> std::io::Result<()> {
        match self.dir.remove(Store::name(
            &record.container_id,
            &record.network,
            &record.ifname,
        )) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every record, and the files that could not be read (with why).
    pub fn load_all(&self) -> (Vec<Record>, Vec<(PathBuf, String)>) {
        let mut records = Vec::new();
        let mut bad = Vec::new();
        let Ok(names) = self.dir.names() else {
            return (records, bad);
        };
        for name in names {
            if !name.as_encoded_bytes().ends_with(b".json") {
                continue;
            }
            let parsed = self
                .dir
                .read(&name)
                .map_err(|e| e.to_string())
                // serde_json quotes a misplaced string whole: cut it for the log line.
                .and_then(|b| {
                    serde_json::from_slice::<Record>(&b)
                        .map_err(|e| cni::quote::shorten(&e.to_string()))
                });
            match parsed {
                Ok(r) => records.push(r),
                Err(e) => bad.push((self.dir.join(&name), e)),
            }
        }
        (records, bad)
    }
}

/// A file-name-safe form of one key part: `%`, `_` and `/` are percent-escaped, so the three
/// parts joined by `_` name exactly one attachment.
fn escape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for c in part.chars() {
        match c {
            '%' | '_' | '/' | '\0' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A lease file as an earlier daemon wrote it: T1 and T2 always numbers.
    pub const OLDER_FILE: &str = r#"{
        "containerId": "c", "network": "n", "ifname": "eth0", "netns": "/run/netns/p",
        "params": {"clientId": [0, 99], "request": [1, 3], "provide": [], "broadcast": false,
                   "priority": null},
        "lease": {"address": "10.0.0.5/24", "server": "10.0.0.1", "leaseSecs": 60,
                  "t1Secs": 30, "t2Secs": 52, "routers": [], "dns": [], "domain": null,
                  "mtu": null, "routes": []},
        "serverMac": [2, 0, 0, 0, 0, 1], "boundAtMs": 1000
    }"#;

    #[test]
    fn older_files_are_read() {
        let rec: Record = serde_json::from_str(OLDER_FILE).unwrap();
        assert_eq!(
            rec.times(),
            LeaseTimes {
                bound_ms: 1000,
                lease_secs: 60,
                t1_secs: Some(30),
                t2_secs: Some(52),
            }
        );
    }

    #[test]
    fn names_do_not_collide() {
        assert_ne!(Store::name("a_b", "c", "d"), Store::name("a", "b_c", "d"));
        assert_eq!(
            Store::name("c0ffee", "net/1", "eth0"),
            "c0ffee_net%2F1_eth0.json"
        );
    }

    #[test]
    fn a_file_that_is_not_a_lease_file_is_reported_not_waited_on() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        let fifo =
            std::ffi::CString::new(tmp.path().join("fifo.json").as_os_str().as_encoded_bytes())
                .unwrap();
        // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("link.json")).unwrap();
        let (records, bad) = store.load_all();
        assert!(records.is_empty());
        let mut reasons: Vec<String> = bad.into_iter().map(|(_, why)| why).collect();
        reasons.sort();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].contains("symbolic link"), "{reasons:?}");
        assert_eq!(reasons[1], "not a regular file");
    }
}
