//! Delegates under a deadline, as the thick daemon runs them. A test binary of its own: the
//! deadline is set once for the whole process.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni::invoke::{self, DelegateEnv};
use cni::Code;

fn plugin(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write plugin");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod plugin");
}

fn env(path: &[PathBuf]) -> DelegateEnv<'_> {
    DelegateEnv {
        container_id: "ctr1",
        netns: "/var/run/netns/pod",
        ifname: "eth0",
        args: "",
        path,
        addresses_in_use: "",
    }
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn a_delegate_past_the_deadline_is_killed_with_what_it_started() {
    invoke::limit_delegates_to(Duration::from_secs(1)).unwrap();
    assert!(invoke::limit_delegates_to(Duration::from_secs(2)).is_err());
    let dir = tempfile::tempdir().unwrap();
    let path = [dir.path().to_owned()];
    let started = dir.path().join("started");

    // Hangs, with a child of its own holding its stdout.
    plugin(
        dir.path(),
        "hangs",
        &format!("sleep 300 &\necho $! > {}\nwait", started.display()),
    );
    let t = Instant::now();
    let err = invoke::delegate_del("hangs", &env(&path), b"{}").unwrap_err();
    let took = t.elapsed();
    assert_eq!(err.code, Code::TryAgainLater as u32, "{err}");
    assert!(err.msg.contains("did not finish within 1 s"), "{err}");
    assert!(err.msg.contains("hangs"), "{err}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "{took:?}"
    );
    let child: u32 = fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone_by = Instant::now() + Duration::from_secs(10);
    while alive(child) && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !alive(child),
        "the delegate's own child {child} outlived it"
    );

    // Under the deadline, a delegate's whole output and input still go through: more than a
    // pipe holds either way, printed before its config is read.
    plugin(
        dir.path(),
        "loud",
        "head -c 1000000 /dev/zero | tr '\\0' ' '\n\
         test \"$(wc -c)\" = 4194304 || exit 3\n\
         echo '{\"cniVersion\":\"0.4.0\",\"code\":7,\"msg\":\"read all\"}'\nexit 1",
    );
    let err = invoke::delegate_del("loud", &env(&path), &vec![b' '; 4 << 20]).unwrap_err();
    assert_eq!((err.code, err.msg.as_str()), (7, "read all"), "{err}");
    // One that leaves a process of another group holding its stdout is not waited for past
    // the deadline: what the pipe still holds is given up.
    let escaped = dir.path().join("escaped");
    plugin(
        dir.path(),
        "leaves",
        &format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 300' &\nexit 0",
            escaped.display()
        ),
    );
    let t = Instant::now();
    let err = invoke::delegate_del("leaves", &env(&path), b"{}").unwrap_err();
    let took = t.elapsed();
    let stray: i32 = fs::read_to_string(&escaped)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) of the stray sleep this test started, by its pid.
    unsafe { libc::kill(stray, libc::SIGKILL) };
    assert_eq!(err.code, Code::TryAgainLater as u32, "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A delegate that exits on time is not killed, whatever it read.
    plugin(dir.path(), "deaf", "exit 0");
    invoke::delegate_del("deaf", &env(&path), &vec![b' '; 4 << 20]).unwrap();
    invoke::delegate_del("deaf", &env(&path), b"{}").unwrap();
}
