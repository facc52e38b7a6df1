//! Fuzzing the lease files a restarted daemon reads back (tests/corpus/dhcp_lease), and the
//! renewal schedule over whatever times they hold: a file that cannot be read is reported
//! in a short line and skipped, one that can is saved and read back the same, and no lease
//! time, however large, makes the schedule panic.

use std::path::Path;

use proptest::prelude::*;
use testkit::fuzz::{self, check_corpus, json_mutated, junk, seeds};

use super::schedule::{next_step, retry_at, Step};
use super::store::Store;

fn corpus() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/dhcp_lease")
}

fn check_lease_file(input: &[u8], now: u64) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let planted = Store::open(&dir.path().join("planted")).unwrap();
    std::fs::write(planted.dir().join("c_n_eth0.json"), input).unwrap();
    let (records, bad) = planted.load_all();
    for (_, why) in &bad {
        fuzz::short("an unreadable lease file's reason", why, 1100)?;
    }
    if records.len() + bad.len() != 1 {
        return Err(format!(
            "{} records and {} failures",
            records.len(),
            bad.len()
        ));
    }
    let copy = Store::open(&dir.path().join("copy")).unwrap();
    for rec in &records {
        match copy.save(rec) {
            // A key longer than a file name: a runtime gives no such container ID.
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => continue,
            other => other.map_err(|e| format!("saving: {e}"))?,
        }
        let (back, bad) = copy.load_all();
        if back.as_slice() != std::slice::from_ref(rec) || !bad.is_empty() {
            return Err(format!("{rec:?} came back as {back:?} {bad:?}"));
        }
        copy.remove(rec).map_err(|e| e.to_string())?;
        let times = rec.times();
        for at in [0, now, times.bound_ms, u64::MAX] {
            let step = next_step(&times, at, now);
            let (Step::Renew { at, until } | Step::Rebind { at, until }) = step else {
                continue;
            };
            if retry_at(until, at) > until {
                return Err(format!("a retry after {until}"));
            }
        }
    }
    Ok(())
}

#[test]
fn lease_file_corpus() {
    check_corpus(&corpus(), |input| {
        check_lease_file(input, 1_764_577_467_000)
    });
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn lease_files_mutated(input in json_mutated(seeds(&corpus())), now in any::<u64>()) {
        check_lease_file(&input, now).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn lease_files_arbitrary(input in junk(256)) {
        check_lease_file(&input, 0).map_err(TestCaseError::fail)?;
    }
}
