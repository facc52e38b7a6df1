//! `cargo xtask aarch64-test`: the aarch64 release binaries, `cni-plugins` and `multus`, under
//! the plugins' and multus's integration suites. The suites run natively; every plugin, multus
//! and daemon process they start is the aarch64 build, run by qemu-user through binfmt_misc
//! (scripts/deps.sh registers it). Each suite runs in a mount namespace of its own in which
//! the aarch64 binaries are bind-mounted over the paths the suite calls, so nothing in the
//! target directory changes. The side-by-side cases are in the plugins' suite: the Go
//! reference plugins beside our aarch64 build.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::Arch;

/// A suite, and the tests it leaves out under qemu-user. Most of those reach a kernel
/// interface that qemu-user 7.2 does not translate for the emulated process, so the call fails
/// there whatever the binary: routing-rule messages (sbr), traffic control (bandwidth),
/// nfnetlink (nftables) and packet-socket options (the conflict probe). One needs the kernel to
/// run the binary as a program: qemu-user reads it as data, so it is never busy text. Two are
/// bursts too large for emulation beside the e2e suite on two cores: 200 thick-mode ADDs then
/// DELs at once, where one DEL waited past the per-container lock's 60 s, and 100 whereabouts
/// ADDs at once, which take half of whereabouts' 60 s alone. They all run on x86_64 in
/// `cargo test`.
struct Suite {
    package: &'static str,
    emulator_cannot: &'static [&'static str],
}

const SUITES: &[Suite] = &[
    Suite {
        package: "plugins",
        emulator_cannot: &[
            "check_drift::bandwidth_check_names_a_changed_rate_and_a_lost_redirect",
            "conflict_probe::",
            "firewall_nft::",
            "no_iptables::",
            "portmap::nftables_where_iptables_is_missing",
            "side_by_side::bandwidth_matches_the_reference",
            "side_by_side::either_implementation_deletes_what_the_other_made",
            "side_by_side::sbr_matches_the_reference",
        ],
    },
    Suite {
        package: "multus-node",
        emulator_cannot: &[
            "install::replaces_a_binary_while_a_plugin_runs_from_it",
            "multus::bridge_then_sbr_checks_and_deletes",
            "thick::two_hundred_pods_at_once_then_deleted_leave_nothing",
            "whereabouts::parallel_adds_get_distinct_addresses_and_dels_empty_the_pool",
        ],
    },
];

/// The binaries the suites call, by the name cargo builds them under.
const BINARIES: [&str; 2] = ["cni-plugins", "multus"];

/// The emulator's binfmt_misc entry, with the F flag so that it works in every mount namespace.
const BINFMT: &str = "/proc/sys/fs/binfmt_misc/qemu-aarch64";

/// `args`: none for every suite, or a suite's package and libtest filters.
pub fn run(args: &[String]) -> Result<()> {
    let binfmt = std::fs::read_to_string(BINFMT).with_context(|| {
        format!("reading {BINFMT}: scripts/deps.sh installs qemu-user-static and registers it")
    })?;
    ensure!(
        binfmt.starts_with("enabled") && binfmt.contains("flags: PF"),
        "{BINFMT} is not enabled with flags PF: {binfmt}"
    );
    let aarch64_plugins = crate::build_release_for(Arch::Aarch64)?;
    let aarch64_dir = aarch64_plugins.parent().context("release dir")?;
    let built = crate::test_build::build(
        Arch::X86_64,
        &SUITES.iter().map(|s| s.package).collect::<Vec<_>>(),
    )?;
    let mut binds = Vec::new();
    for name in BINARIES {
        let arm = aarch64_dir.join(name);
        ensure_aarch64(&arm)?;
        binds.push((arm, built.bin(name)?));
    }

    let (chosen, filters) = match args.split_first() {
        Some((package, rest)) => {
            ensure!(
                SUITES.iter().any(|s| s.package == package),
                "aarch64-test: no suite {package:?}"
            );
            (Some(package.as_str()), rest)
        }
        None => (None, &[][..]),
    };
    let mut failed = Vec::new();
    for suite in SUITES {
        if chosen.is_some_and(|c| c != suite.package) {
            continue;
        }
        let exe = built.test(suite.package, "suite")?;
        let mut libtest: Vec<String> = vec!["--test-threads=2".into()];
        libtest.extend(filters.iter().cloned());
        for name in suite.emulator_cannot {
            libtest.push("--skip".into());
            libtest.push((*name).into());
        }
        let started = Instant::now();
        let ok = run_suite(&exe, &binds, &libtest)?;
        println!(
            "aarch64-test: {} suite {} in {:.0} s",
            suite.package,
            if ok { "passed" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(suite.package);
        }
    }
    if !failed.is_empty() {
        bail!("aarch64-test failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Runs a suite in a new mount namespace with each `(aarch64, native)` pair bind-mounted, the
/// aarch64 file over the native path, after checking the mounts took.
fn run_suite(exe: &Path, binds: &[(PathBuf, PathBuf)], libtest: &[String]) -> Result<bool> {
    let mut script = String::from("set -e\n");
    let mut args: Vec<&std::ffi::OsStr> = Vec::new();
    for (i, (arm, native)) in binds.iter().enumerate() {
        let (a, n) = (2 * i + 1, 2 * i + 2);
        writeln!(
            script,
            "mount --bind \"${a}\" \"${n}\" && cmp -s \"${a}\" \"${n}\""
        )?;
        args.push(arm.as_os_str());
        args.push(native.as_os_str());
    }
    writeln!(script, "shift {}\nexec \"$@\"", 2 * binds.len())?;
    let status = Command::new("unshare")
        .env(testkit::EMULATED, "qemu-user")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(&script)
        .arg("sh")
        .args(args)
        .arg(exe)
        .args(libtest)
        .status()
        .context("running unshare")?;
    Ok(status.success())
}

/// Fails unless `path` is an aarch64 ELF executable (e_machine 183).
fn ensure_aarch64(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let machine = bytes.get(18..20).map(|m| u16::from_le_bytes([m[0], m[1]]));
    if bytes.starts_with(b"\x7fELF") && machine == Some(183) {
        Ok(())
    } else {
        bail!("{} is not an aarch64 ELF file", path.display())
    }
}
