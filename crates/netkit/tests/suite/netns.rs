//! Namespace handles: open, run, create/delete named namespaces.

use anyhow::Result;
use netkit::netns::NETNS_RUN_DIR;
use netkit::{Error, NetNs};

fn unique(tag: &str) -> String {
    format!("nk{}-{tag}", std::process::id())
}

/// Deletes the named namespace on drop, so a failed assertion does not leak it.
struct DeleteOnDrop<'a>(&'a str);

impl Drop for DeleteOnDrop<'_> {
    fn drop(&mut self) {
        let _ = NetNs::delete_named(self.0);
    }
}

#[test]
fn create_run_and_delete_named() -> Result<()> {
    let name = unique("named");
    let _cleanup = DeleteOnDrop(&name);
    let ns = NetNs::create_named(&name)?;
    let path = std::path::Path::new(NETNS_RUN_DIR).join(&name);
    assert_eq!(ns.path(), path);

    // `ip` sees it like one of its own.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &name, "ip", "-j", "link", "show", "lo"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let again = NetNs::open(&path)?;
    assert!(ns.is_same(&again));
    let here = NetNs::current()?;
    assert!(!ns.is_same(&here));

    // The closure runs inside; the calling thread stays where it was.
    let inside = ns.run(|| NetNs::current().map(|cur| cur.is_same(&again)))??;
    assert!(inside);
    assert!(NetNs::current()?.is_same(&here));

    // Creating the same name again fails with EEXIST.
    let err = NetNs::create_named(&name).expect_err("name is taken");
    assert_eq!(err.errno(), Some(libc::EEXIST), "{err}");

    drop((ns, again));
    NetNs::delete_named(&name)?;
    assert!(!path.exists());
    // Idempotent.
    NetNs::delete_named(&name)?;
    Ok(())
}

#[test]
fn open_errors_name_the_path() {
    let err = NetNs::open("/run/netns/definitely-not-here").expect_err("missing");
    assert_eq!(err.errno(), Some(libc::ENOENT));
    assert!(
        err.to_string().contains("/run/netns/definitely-not-here"),
        "{err}"
    );

    // A plain file, a procfs file that is no namespace, another kind of namespace.
    for path in ["/etc/hostname", "/proc/self/status", "/proc/self/ns/uts"] {
        let err = NetNs::open(path).expect_err("not a netns");
        assert!(matches!(err, Error::Invalid(_)), "{path}: {err:?}");
        assert!(
            err.to_string()
                .starts_with(&format!("{path} is not a network namespace")),
            "{err}"
        );
    }

    assert!(matches!(NetNs::create_named("a/b"), Err(Error::Invalid(_))));
}

#[test]
fn run_returns_values_and_proc_handles_open() -> Result<()> {
    let sandbox = testkit::Netns::new("run");
    let ns = NetNs::open(sandbox.path())?;
    // /proc/<pid>/ns/net works too.
    let pid_ns = NetNs::open(format!("/proc/{}/ns/net", std::process::id()))?;
    assert!(!ns.is_same(&pid_ns));
    // A socket made inside sees the sandbox's links: only lo.
    let names = ns.run(|| -> netkit::Result<Vec<String>> {
        Ok(netkit::Netlink::new()?
            .links()?
            .into_iter()
            .map(|l| l.name)
            .collect())
    })??;
    assert_eq!(names, ["lo"]);
    Ok(())
}
