//! host-local's store under a `dataDir` others can write: a symlink planted where the store's
//! directory or one of its files goes is refused with an error naming it, and nothing outside
//! the store is written. (The Go reference follows such a symlink and overwrites its target.)

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::json;
use testkit::{CniCall, CniOutput, PluginDir};

struct Store {
    plugins: PluginDir,
    tmp: tempfile::TempDir,
    /// A file outside the store that must keep its content.
    victim: PathBuf,
}

const PRECIOUS: &str = "precious\n";

impl Store {
    fn new() -> Store {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, PRECIOUS).expect("victim");
        let data = tmp.path().join("data");
        std::fs::create_dir(&data).expect("dataDir");
        Store {
            plugins: PluginDir::new(
                Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
                &["host-local"],
            ),
            tmp,
            victim,
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    /// `<dataDir>/<network>`, made as the first ADD makes it.
    fn net_dir(&self) -> PathBuf {
        let dir = self.data_dir().join("net");
        std::fs::create_dir_all(&dir).expect("network dir");
        dir
    }

    fn run(&self, command: &str, id: &str) -> CniOutput {
        let conf = json!({
            "cniVersion": "1.1.0", "name": "net", "type": "host-local",
            "ipam": {"type": "host-local", "dataDir": self.data_dir(),
                     "ranges": [[{"subnet": "10.9.0.0/29"}]]},
            "cni.dev/valid-attachments": [],
        });
        let mut call = CniCall::new(command, &conf.to_string());
        call.container_id = id.into();
        call.netns = "/nonexistent/netns".into();
        call.path = self.plugins.path().display().to_string();
        if command == "GC" {
            call.container_id = String::new();
            call.ifname = String::new();
        }
        call.run(&self.plugins.path().join("host-local"), None)
    }

    fn assert_victim_unchanged(&self) {
        let content = std::fs::read_to_string(&self.victim).expect("victim");
        assert_eq!(content, PRECIOUS, "the victim was written");
    }

    /// An ADD that must fail with code 5, naming `file`.
    fn assert_add_refused(&self, file: &Path) {
        let out = self.run("ADD", "c1");
        assert_eq!(out.err_code(), 5, "{out:?}");
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains("symbolic link"), "{msg}");
        self.assert_victim_unchanged();
    }

    fn reservations(&self) -> Vec<String> {
        testkit::reservation_files(&self.data_dir().join("net"))
    }
}

#[test]
fn a_symlink_at_last_reserved_ip_is_refused_and_its_target_untouched() {
    let s = Store::new();
    let last = s.net_dir().join("last_reserved_ip.0");
    symlink(&s.victim, &last).expect("plant");
    s.assert_add_refused(&last);
    assert_eq!(
        s.reservations(),
        Vec::<String>::new(),
        "nothing is reserved"
    );
    // Once the link is gone, ADD works, and DEL releases.
    std::fs::remove_file(&last).expect("remove the link");
    let ip = s.run("ADD", "c1").ok()["ips"][0]["address"].clone();
    assert_eq!(ip, "10.9.0.2/29");
    s.run("DEL", "c1").ok();
    assert_eq!(s.reservations(), Vec::<String>::new());
}

#[test]
fn a_symlink_at_the_next_address_reservation_is_refused() {
    let s = Store::new();
    let planted = s.net_dir().join("10.9.0.2");
    symlink(&s.victim, &planted).expect("plant");
    s.assert_add_refused(&planted);
    assert!(!s.net_dir().join("last_reserved_ip.0").exists());
    // DEL and GC do not take the link for a reservation, nor read through it.
    s.run("DEL", "c1").ok();
    s.run("GC", "").ok();
    s.assert_victim_unchanged();
    assert!(
        std::fs::symlink_metadata(&planted).is_ok(),
        "not ours to remove"
    );
}

#[test]
fn a_symlinked_network_directory_is_refused_for_every_command() {
    let s = Store::new();
    let elsewhere = s.tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("elsewhere");
    let net = s.data_dir().join("net");
    symlink(&elsewhere, &net).expect("plant");
    s.assert_add_refused(&net);
    for command in ["DEL", "GC"] {
        let out = s.run(command, "c1");
        assert_eq!(out.err_code(), 5, "{command}: {out:?}");
    }
    let made: Vec<_> = std::fs::read_dir(&elsewhere).expect("list").collect();
    assert!(made.is_empty(), "written through the link: {made:?}");
}
