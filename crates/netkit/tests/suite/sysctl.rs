//! sysctl reads and writes inside test namespaces.

use anyhow::Result;
use netkit::{sysctl, NetNs, Netlink};

#[test]
fn write_in_namespace_is_per_namespace_and_idempotent() -> Result<()> {
    let a = testkit::Netns::new("sysa");
    let b = testkit::Netns::new("sysb");
    let (na, nb) = (NetNs::open(a.path())?, NetNs::open(b.path())?);

    sysctl::write_in(&na, "net.ipv4.ip_forward", "1")?;
    assert_eq!(sysctl::read_in(&na, "net/ipv4/ip_forward")?, "1");
    assert_eq!(
        sysctl::read_in(&nb, "net.ipv4.ip_forward")?,
        "0",
        "other namespace untouched"
    );
    let out = a
        .command("cat")
        .arg("/proc/sys/net/ipv4/ip_forward")
        .output()?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    // Same value again: fine.
    sysctl::write_in(&na, "net.ipv4.ip_forward", "1")?;
    Ok(())
}

#[test]
fn unchanged_value_is_not_written() -> Result<()> {
    // A read-only key proves it: writing its current value succeeds without a write, writing
    // another value fails with the kernel's errno and names the file.
    let ns = testkit::Netns::new("sysro");
    let ns = NetNs::open(ns.path())?;
    let key = "net/ipv4/tcp_available_congestion_control";
    let current = sysctl::read_in(&ns, key)?;
    sysctl::write_in(&ns, key, &current)?;
    sysctl::write_in(&ns, key, &format!("{current}\n"))?;
    let err = sysctl::write_in(&ns, key, "bogus").expect_err("read-only");
    assert!(err.errno().is_some(), "{err}");
    assert!(err.to_string().contains(key), "{err}");
    assert!(
        err.to_string().contains(&ns.path().display().to_string()),
        "{err}"
    );
    Ok(())
}

#[test]
fn interface_names_with_dots_work_in_slash_form() -> Result<()> {
    let sandbox = testkit::Netns::new("sysdot");
    let ns = NetNs::open(sandbox.path())?;
    Netlink::in_ns(&ns)?.add_veth("eth0.100", "peer0", None, None, None)?;
    let key = "net/ipv6/conf/eth0.100/accept_dad";
    sysctl::write_in(&ns, key, "0")?;
    assert_eq!(sysctl::read_in(&ns, key)?, "0");
    sysctl::write_in(&ns, key, "1")?;
    assert_eq!(sysctl::read_in(&ns, key)?, "1");
    let err = sysctl::read_in(&ns, "net/ipv6/conf/missing0/accept_dad").expect_err("no such link");
    assert_eq!(err.errno(), Some(libc::ENOENT));
    Ok(())
}
