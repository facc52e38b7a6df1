//! Many separate processes allocating from one network at once, ours and the Go reference mixed:
//! no address is handed out twice, and the shared `lock` keeps both implementations in step.
//!
//! Our side runs as child processes of this very test binary: `child_add` does the ADD when
//! `IPAM_CHILD_OUT` is set, and is a no-op in a normal run.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

const CHILD_OUT: &str = "IPAM_CHILD_OUT";

#[test]
fn child_add() {
    let Ok(out) = std::env::var(CHILD_OUT) else {
        return;
    };
    let mut out = File::create(out).unwrap();
    cni::skel::dispatch(
        &ipam::host_local::HostLocal,
        "test child",
        |k| std::env::var(k).ok(),
        &mut std::io::stdin().lock(),
        &mut out,
        &mut std::io::sink(),
    );
}

fn spawn(ours: bool, id: &str, stdin: &str, out: &Path) -> Child {
    let mut cmd = if ours {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_add", "--quiet", "--test-threads=1"])
            .env(CHILD_OUT, out);
        c
    } else {
        let mut c = Command::new(Path::new(common::REFERENCE_DIR).join("host-local"));
        c.stdout(File::create(out).unwrap());
        c
    };
    if ours {
        cmd.stdout(Stdio::null());
    }
    let mut child = cmd
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", "/nonexistent/netns")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", common::REFERENCE_DIR)
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child
}

#[test]
fn sixty_four_processes_never_share_an_address() {
    let tmp = tempfile::tempdir().unwrap();
    // .1 is the gateway: exactly 64 addresses, .2 to .65.
    let stdin = json!({
        "cniVersion": "1.0.0", "name": "race", "type": "bridge",
        "ipam": {"type": "host-local", "dataDir": tmp.path(),
                 "ranges": [[{"subnet": "10.7.0.0/24", "rangeEnd": "10.7.0.65"}]]},
    })
    .to_string();
    let outs = tmp.path().join("out");
    std::fs::create_dir(&outs).unwrap();

    let children: Vec<(String, Child)> = (0..64)
        .map(|i| {
            // Every fourth one is the Go reference, sharing the store and its lock.
            let ours = i % 4 != 0;
            let id = format!("{}{i:02}", if ours { "rs" } else { "go" });
            let child = spawn(ours, &id, &stdin, &outs.join(&id));
            (id, child)
        })
        .collect();

    let mut seen = BTreeSet::new();
    let dir = tmp.path().join("race");
    for (id, mut child) in children {
        child.wait().unwrap();
        let text = std::fs::read_to_string(outs.join(&id)).unwrap();
        let result: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{id}: {text:?}: {e}"));
        let address = result["ips"][0]["address"]
            .as_str()
            .unwrap_or_else(|| panic!("{id} failed: {result}"));
        let ip = address.split('/').next().unwrap().to_owned();
        assert_eq!(
            std::fs::read_to_string(dir.join(&ip)).unwrap(),
            format!("{id}\r\neth0"),
            "{ip} on disk belongs to someone else than {id}"
        );
        assert!(seen.insert(ip.clone()), "{ip} handed out twice");
    }
    assert_eq!(seen.len(), 64);
    assert_eq!(common::reservations(&dir).len(), 64);

    // The range is now full, for both implementations.
    let full = common::Env::new("ADD", "late").ours(&ipam::host_local::HostLocal, &stdin);
    assert_eq!(full.code(), 11);
    assert_ne!(
        common::Env::new("ADD", "late")
            .reference("host-local", &stdin)
            .status,
        0
    );
}
