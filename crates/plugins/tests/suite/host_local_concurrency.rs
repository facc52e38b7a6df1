//! 64 host-local processes allocating from one network at once, our binary and the Go reference
//! mixed: no address is handed out twice, and the shared `lock` keeps both implementations in step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::json;
use testkit::{reference_dir, CniCall, PluginDir};

#[test]
fn sixty_four_processes_never_share_an_address() {
    let ours = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["host-local"],
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    // .1 is the gateway: exactly 64 addresses, .2 to .65.
    let conf = json!({
        "cniVersion": "1.0.0", "name": "race", "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": tmp.path(),
                 "ranges": [[{"subnet": "10.7.0.0/24", "rangeEnd": "10.7.0.65"}]]},
    })
    .to_string();
    let call = |id: &str, dir: &Path| {
        let mut call = CniCall::new("ADD", &conf);
        call.container_id = id.into();
        call.netns = "/nonexistent/netns".into();
        call.path = dir.display().to_string();
        call
    };
    // Every fourth process is the Go reference.
    let binary = |i: usize| -> (String, PathBuf) {
        if i.is_multiple_of(4) {
            (format!("go{i:02}"), reference_dir())
        } else {
            (format!("rs{i:02}"), ours.path().to_path_buf())
        }
    };

    let outputs: Vec<(String, testkit::CniOutput)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let (id, dir) = binary(i);
                let call = call(&id, &dir);
                s.spawn(move || {
                    let out = call.run(&dir.join("host-local"), None);
                    (id, out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });

    let store = tmp.path().join("race");
    let mut seen = BTreeSet::new();
    for (id, out) in &outputs {
        let result = out.ok();
        let address = result["ips"][0]["address"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no address in {result}"));
        let ip = address.split('/').next().unwrap_or_default().to_owned();
        let owner = std::fs::read_to_string(store.join(&ip)).expect("reservation file");
        assert_eq!(owner, format!("{id}\r\neth0"), "{ip} on disk is not {id}'s");
        assert!(seen.insert(ip.clone()), "{ip} handed out twice");
    }
    assert_eq!(seen.len(), 64);
    assert_eq!(testkit::reservation_files(&store).len(), 64);

    // The range is now full, for both implementations.
    let late = call("late", ours.path()).run(&ours.path().join("host-local"), None);
    assert_eq!(late.err_code(), 11, "ours: {late:?}");
    let late_go = call("late", &reference_dir()).run(&reference_dir().join("host-local"), None);
    assert_ne!(late_go.code, 0, "Go: {late_go:?}");
}
