//! Masquerade and spoof-check rules when the firewall tools are missing or broken, and the spoof
//! check's own rules. PATH is per process, so each case re-runs this test binary as a child
//! with its own PATH, inside a namespace the test owns.

use std::path::Path;

use anyhow::{Context, Result};
use ipnet::IpNet;
use netkit::firewall::masq::{self, Backend};
use netkit::firewall::spoofcheck;
use netkit::NetNs;

/// Set in a child: the case to run.
const CASE: &str = "NETKIT_TOOLS_CASE";

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().expect("test CIDR")).collect()
}

/// Runs `test` of this binary again in `ns` with `PATH=path` and `CASE=case`; fails when the
/// child's assertions do.
fn run_child(test: &str, case: &str, path: &str, ns: &testkit::Netns) -> Result<()> {
    // The suite names a test by its module's path under the binary's root.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let out = ns
        .command(std::env::current_exe()?)
        .args([
            &format!("{module}::{test}"),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE, case)
        .env("PATH", path)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // "1 passed": a name that matched nothing would pass without running the case.
    anyhow::ensure!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "child case {case}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A script called `name` in `dir` that prints `stdout` and exits with `code`.
fn fake_tool(dir: &Path, name: &str, stdout: &str, code: i32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\nprintf '%s' '{stdout}'\necho '{name}: simulated failure' >&2\nexit {code}\n"
    );
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[test]
fn without_any_tool_teardown_succeeds_and_setup_names_nft() -> Result<()> {
    match std::env::var(CASE).as_deref() {
        Ok("no-tools") => {
            let addrs = nets(&["10.1.0.2/24", "fd00::2/64"]);
            spoofcheck::teardown("c1-eth0")?;
            masq::teardown("net", "c1", "eth0", &addrs)?;
            let e = spoofcheck::setup("veth0", &[2, 0, 0, 0, 0, 1], "c1-eth0").expect_err("no nft");
            assert!(e.to_string().contains("nft is not installed"), "{e}");
            // Without iptables the default backend is nftables, which is missing too.
            for backend in [None, Some(Backend::Nftables)] {
                let e = masq::setup(backend, "net", "c1", "eth0", &addrs).expect_err("no nft");
                assert!(e.to_string().contains("nft is not installed"), "{e}");
            }
            Ok(())
        }
        Ok(other) => anyhow::bail!("unknown case {other}"),
        Err(_) => {
            let ns = testkit::Netns::new("notools");
            run_child(
                "without_any_tool_teardown_succeeds_and_setup_names_nft",
                "no-tools",
                "/nonexistent",
                &ns,
            )
        }
    }
}

#[test]
fn broken_nft_is_no_rules_but_broken_iptables_save_is_an_error() -> Result<()> {
    match std::env::var(CASE).as_deref() {
        Ok("broken") => {
            // nft cannot list, so no nft rule of ours can exist: the v6 teardown succeeds.
            masq::teardown("net", "c1", "eth0", &nets(&["fd00::2/64"]))?;
            // A failing iptables-save would hide the rules: that is an error, naming it.
            let e = masq::teardown("net", "c1", "eth0", &nets(&["10.1.0.2/24"]))
                .expect_err("iptables-save fails");
            let text = e.to_string();
            assert!(text.contains("iptables-save: simulated failure"), "{text}");
            assert!(!text.contains("nft"), "{text}");
            Ok(())
        }
        Ok(other) => anyhow::bail!("unknown case {other}"),
        Err(_) => {
            let bin = tempfile::tempdir()?;
            fake_tool(bin.path(), "nft", "", 1)?;
            fake_tool(bin.path(), "iptables-save", "", 1)?;
            fake_tool(bin.path(), "ip6tables-save", "*nat\nCOMMIT\n", 0)?;
            let ns = testkit::Netns::new("broken");
            let path = bin.path().to_str().context("temp dir path")?;
            run_child(
                "broken_nft_is_no_rules_but_broken_iptables_save_is_an_error",
                "broken",
                path,
                &ns,
            )
        }
    }
}

#[test]
fn spoofcheck_replace_and_teardown() -> Result<()> {
    let sandbox = testkit::Netns::new("spoof");
    let ns = NetNs::open(sandbox.path())?;
    let base_rules = |id: &str| -> Result<usize> {
        let out = sandbox
            .command("nft")
            .args(["list", "chain", "bridge", "nat", "PREROUTING"])
            .output()?;
        let text = String::from_utf8(out.stdout)?;
        Ok(text
            .lines()
            .filter(|l| l.contains(&format!("\"macspoofchk-{id}\"")))
            .count())
    };
    let mac = [0x0a, 0x58, 0, 0, 0, 1];
    ns.run(|| spoofcheck::setup("veth1", &mac, "a-eth0"))??;
    ns.run(|| spoofcheck::setup("veth2", &mac, "b-eth0"))??;
    // Again for the same id: the base rule is replaced, not added.
    ns.run(|| spoofcheck::setup("veth3", &mac, "a-eth0"))??;
    assert_eq!(base_rules("a-eth0")?, 1);
    assert_eq!(base_rules("b-eth0")?, 1);

    ns.run(|| spoofcheck::teardown("a-eth0"))??;
    ns.run(|| spoofcheck::teardown("a-eth0"))??;
    let table = String::from_utf8(
        sandbox
            .command("nft")
            .args(["list", "table", "bridge", "nat"])
            .output()?
            .stdout,
    )?;
    assert!(!table.contains("a-eth0"), "{table}");
    assert!(table.contains("chain cni-br-iface-b-eth0-mac"), "{table}");
    assert_eq!(base_rules("b-eth0")?, 1);
    ns.run(|| spoofcheck::teardown("b-eth0"))??;
    Ok(())
}
