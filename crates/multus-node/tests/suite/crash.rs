//! Crash consistency: a multus ADD of a pod with the cluster network and two NADs, SIGKILLed at
//! evenly spread points among its file writes (multus's own, or a delegate's: whichever process
//! makes that syscall dies), then the runtime's DEL. DEL must succeed and leave no interface,
//! veth, reservation, cache, lock or temporary file.

use crate::common;

use common::cluster::{Cluster, NETWORKS};
use serde_json::json;

/// At least this many of the runs must really have been killed.
const KILLS: usize = 30;

#[test]
fn add_killed_at_any_file_write_is_cleaned_up_by_del() {
    // With debug logging every step writes a line: kill points all along the ADD.
    let c = Cluster::new(json!({NETWORKS: "a,b"}), json!({}));
    c.bridge_nad("default", "a", "10.20.0.0/24");
    c.bridge_nad("default", "b", "10.30.0.0/24");
    let multus = common::multus_bin();
    // The fewest of three runs: a run slowed by a busy machine waits and logs more, and kill
    // points beyond what a quick run writes would kill nothing.
    let total = (0..3)
        .map(|_| {
            let n = testkit::count_file_changes(&c.call("ADD"), &multus, Some(&c.sb.node));
            c.cmd("DEL").ok();
            c.sb.assert_clean("after a counting run");
            n
        })
        .min()
        .unwrap_or(0);
    assert!(total >= KILLS, "only {total} file changes in an ADD");
    let step = (total / (2 * KILLS)).max(1);
    let mut kills = 0;
    for n in (1..=total).step_by(step) {
        let (out, killed) = c.call("ADD").run_killed_at(&multus, Some(&c.sb.node), n);
        kills += usize::from(killed);
        let del = c.cmd("DEL");
        assert_eq!(
            del.code, 0,
            "DEL after a kill at write {n} of {total}: {del:?}\nADD: {out:?}"
        );
        c.sb.assert_clean(&format!("after a kill at write {n} of {total}"));
    }
    assert!(kills >= KILLS, "only {kills} of the runs were killed");
}
