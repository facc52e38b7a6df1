//! multus killed in the middle of ADD (SIGKILL, delegates and all), at different points: the
//! DEL or GC that follows leaves nothing behind, temporary files included. And temporary file
//! names that are taken by a symlink are skipped, never written through.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{multus_bin, Sandbox, CONTAINER_ID};
use serde_json::{json, Value};

const VERSION: &str = "1.1.0";

/// The cluster network, then two defaultNetworks: a bridge, and `sleeper`, whose ADD takes
/// 200 ms, so a kill can land while multus waits for a delegate.
fn networks(sb: &Sandbox) -> String {
    sb.write_conf(
        "10-extra1.conf",
        &sb.bridge("extra1", "br1", "10.20.0.0/24", VERSION),
    );
    sb.write_conf(
        "20-sleeper.conf",
        &json!({"cniVersion": VERSION, "name": "sleeper", "type": "sleeper"}),
    );
    sb.script(
        "sleeper",
        &format!(
            r#"if [ "$CNI_COMMAND" = ADD ]; then sleep 0.2; echo '{{"cniVersion":"{VERSION}"}}'; fi
exit 0"#
        ),
    );
    sb.multus(
        VERSION,
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", VERSION)],
        json!({"defaultNetworks": ["extra1", "sleeper"]}),
    )
}

/// The temporary files a kill in the middle of a cache write leaves: the delegate cache's in
/// cniDir, the result cache's in results/.
fn plant_temp_files(sb: &Sandbox, container_id: &str) -> Vec<PathBuf> {
    let results = sb.cni_dir().join("results");
    std::fs::create_dir_all(&results).expect("creates a test directory");
    let files = [
        sb.cni_dir().join(format!(".{container_id}.tmp-4194300-0")),
        results.join(format!(".cluster-{container_id}-eth0.tmp-4194300-1")),
        results.join(format!(".extra1-{container_id}-net1.tmp-4194301-0")),
    ];
    for f in &files {
        std::fs::write(f, b"[{\"half\":").expect("writes a test file");
    }
    files.to_vec()
}

const DELAYS_MS: [u64; 11] = [0, 2, 5, 10, 15, 20, 40, 80, 150, 250, 400];

#[test]
fn del_after_an_add_killed_at_any_point_leaves_nothing() {
    let sb = Sandbox::new();
    let conf = networks(&sb);
    for ms in DELAYS_MS {
        sb.call("ADD", &conf).run_killed_after(
            &multus_bin(),
            Some(&sb.node),
            Duration::from_millis(ms),
        );
        plant_temp_files(&sb, CONTAINER_ID);
        let out = sb.cmd("DEL", &conf);
        out.ok();
        sb.assert_clean(&format!("DEL after a kill at {ms} ms"));
    }
    // And an ADD after all that works as the first would.
    let result = sb.cmd("ADD", &conf).ok();
    assert_eq!(sb.pod_links(), ["eth0", "net1"], "{result}");
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after the last DEL");
}

#[test]
fn gc_after_an_add_killed_at_any_point_leaves_nothing_of_that_container() {
    let sb = Sandbox::new();
    let conf = networks(&sb);
    sb.cmd("ADD", &conf).ok();
    let kept = sb.cache_files();
    let kept_reservations = sb.reservations();
    let mut gc_conf: Value = serde_json::from_str(&conf).unwrap();
    gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": "eth0"}]);
    let mut gc = sb.call("GC", &gc_conf.to_string());
    gc.container_id = String::new();
    gc.netns = String::new();
    gc.ifname = String::new();
    for ms in DELAYS_MS {
        let pod2 = testkit::Netns::new("pod2");
        let mut add = sb.call("ADD", &conf);
        add.container_id = "c0ffee02".into();
        add.netns = pod2.path().display().to_string();
        add.run_killed_after(&multus_bin(), Some(&sb.node), Duration::from_millis(ms));
        plant_temp_files(&sb, "c0ffee02");
        // The runtime removes the pod's namespace, then collects what is left.
        drop(pod2);
        sb.run(&gc).ok();
        let what = format!("GC after a kill at {ms} ms");
        assert_eq!(sb.cache_files(), kept, "{what}");
        assert_eq!(sb.reservations(), kept_reservations, "{what}");
    }
    assert_eq!(sb.pod_links(), ["eth0", "net1"]);
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
}

/// multus as PID 1 of a PID namespace of its own, so the names of its temporary files
/// (`.<name>.tmp-<pid>-<n>`) are known beforehand.
fn as_pid_one(sb: &Sandbox) -> PathBuf {
    let wrapper = "multus-as-pid-1";
    sb.script(
        wrapper,
        &format!(
            "exec unshare --pid --fork --kill-child {}",
            multus_bin().display()
        ),
    );
    sb.plugins.path().join(wrapper)
}

fn plant_links(dir: &Path, target_name: &str, victim: &Path) {
    std::fs::create_dir_all(dir).expect("creates a test directory");
    for n in 0..4 {
        let at = dir.join(format!(".{target_name}.tmp-1-{n}"));
        std::os::unix::fs::symlink(victim, at).expect("creates a symlink");
    }
}

#[test]
fn symlinks_at_the_cache_temporary_file_names_are_skipped_and_never_written_through() {
    let sb = Sandbox::new();
    let conf = sb.multus(
        VERSION,
        vec![sb.cluster("cluster", "br0", "10.10.0.0/24", VERSION)],
        json!({}),
    );
    let victim = sb.dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    plant_links(&sb.cni_dir(), CONTAINER_ID, &victim);
    plant_links(
        &sb.cni_dir().join("results"),
        &format!("cluster-{CONTAINER_ID}-eth0"),
        &victim,
    );
    let out = sb.call("ADD", &conf).run(&as_pid_one(&sb), Some(&sb.node));
    let result = out.ok();
    assert_eq!(result["ips"][0]["address"], "10.10.0.2/24");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for file in [
        sb.cni_dir().join(CONTAINER_ID),
        sb.cni_dir()
            .join(format!("results/cluster-{CONTAINER_ID}-eth0")),
    ] {
        let meta = std::fs::symlink_metadata(&file).unwrap();
        assert!(meta.is_file(), "{} is not a plain file", file.display());
    }
    // DEL removes the container's files, the planted links with them (not their target).
    sb.cmd("DEL", &conf).ok();
    sb.assert_clean("after DEL");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}
