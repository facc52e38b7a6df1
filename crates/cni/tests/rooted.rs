//! Delegates in another root, as the thick daemon runs the node's plugins (`chrootDir`). A test
//! binary of its own: the root and the deadline are set once for the whole process. Needs root
//! (chroot).

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni::invoke::{self, DelegateEnv};
use cni::Command;

fn env(path: &[PathBuf]) -> DelegateEnv<'_> {
    DelegateEnv {
        container_id: "ctr1",
        netns: "/var/run/netns/pod",
        ifname: "eth0",
        args: "K8S_POD_NAME=a",
        path,
        addresses_in_use: "",
    }
}

/// Field `n` (1-based, as proc(5) counts) of /proc/PID/stat.
fn stat_field(pid: u32, n: usize) -> String {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("the delegate's stat");
    let after_name = stat.rsplit_once(") ").expect("stat's name").1;
    after_name
        .split_whitespace()
        .nth(n - 3)
        .expect("the field")
        .to_owned()
}

fn status_line(pid: u32, key: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the delegate's status")
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned()))
        .expect("the status line")
}

#[test]
fn delegates_run_in_the_root_without_this_process_state() {
    let root = tempfile::tempdir().expect("root");
    let plugins = tempfile::tempdir().expect("plugin dir");
    let path = [plugins.path().to_owned()];
    // The root: a shell, a file only it has, and the plugin directory at the same path as in
    // this process's view, where the plugin is found before it runs.
    let inside = |p: &Path| root.path().join(p.strip_prefix("/").expect("absolute"));
    fs::create_dir_all(root.path().join("bin")).expect("bin");
    fs::copy("/bin/busybox", root.path().join("bin/busybox")).expect("busybox");
    for applet in ["sh", "cat", "sleep"] {
        std::os::unix::fs::symlink("busybox", root.path().join("bin").join(applet)).expect(applet);
    }
    fs::write(root.path().join("marker"), "inside the root\n").expect("marker");
    fs::create_dir_all(inside(plugins.path())).expect("the plugin dir inside");
    let plugin = |name: &str, body: &str| {
        for dir in [plugins.path().to_owned(), inside(plugins.path())] {
            let file = dir.join(name);
            fs::write(&file, format!("#!/bin/sh\n{body}\n")).expect("plugin");
            fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    };

    invoke::run_delegates_in(root.path()).expect("the root");
    invoke::limit_delegates_to(Duration::from_secs(30)).expect("the deadline");

    // This thread blocks a signal, and the process ignores SIGPIPE (Rust's runtime does):
    // neither reaches the delegate.
    // SAFETY: sigset_t is a plain C bitmask, valid all-zero; pthread_sigmask changes this
    // test thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }

    // Its view, environment and input; it waits to be looked at.
    let go = root.path().join("go");
    plugin(
        "looks",
        "echo $$ > /pid\nwhile [ ! -e /go ]; do sleep 0.05; done\n\
         read -r input\ncat /marker\npwd\necho \"$CNI_COMMAND $CNI_IFNAME $CNI_ARGS $input\"",
    );
    let call = {
        let path = path.clone();
        std::thread::spawn(move || {
            let bin = path[0].join("looks");
            invoke::exec_output(
                &bin,
                Command::Add,
                &env(&path),
                b"{\"cniVersion\":\"1.0.0\"}\n",
            )
        })
    };
    let pid_file = root.path().join("pid");
    let by = Instant::now() + Duration::from_secs(10);
    let pid: u32 = loop {
        if let Some(pid) = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < by, "the delegate did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let blocked = status_line(pid, "SigBlk:");
    let ignored = u64::from_str_radix(&status_line(pid, "SigIgn:"), 16).expect("SigIgn");
    let group = stat_field(pid, 5);
    fs::write(&go, "").expect("go");
    let printed = call.join().expect("the call").expect("the delegate's ADD");
    assert_eq!(
        String::from_utf8_lossy(&printed),
        "inside the root\n/\nADD eth0 K8S_POD_NAME=a {\"cniVersion\":\"1.0.0\"}\n"
    );
    assert_eq!(
        blocked, "0000000000000000",
        "signals blocked in the delegate"
    );
    assert_eq!(
        ignored & (1 << (libc::SIGPIPE - 1)),
        0,
        "the delegate ignores SIGPIPE: {ignored:x}"
    );
    assert_eq!(group, pid.to_string(), "the delegate leads its own group");

    // More than a pipe holds, both ways.
    plugin("echoes", "cat");
    let big: Vec<u8> = (0..400_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let back = invoke::exec_output(&path[0].join("echoes"), Command::Add, &env(&path), &big)
        .expect("echoes");
    assert!(back == big, "{} bytes back of {}", back.len(), big.len());

    // A binary this process sees but the root has not: the exec's own error.
    let outside = plugins.path().join("outside");
    fs::write(&outside, "#!/bin/sh\necho {}\n").expect("outside");
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o755)).expect("chmod");
    let err = invoke::exec_output(&outside, Command::Add, &env(&path), b"{}").expect_err("ran");
    assert!(
        err.msg.contains("cannot run plugin") && err.msg.contains("No such file"),
        "{err}"
    );

    // A delegate that fails says so with its status, from inside the root as from outside.
    plugin("fails", "echo 'no luck' >&2\nexit 3");
    let err = invoke::exec_output(&path[0].join("fails"), Command::Add, &env(&path), b"{}")
        .expect_err("succeeded");
    assert!(
        err.msg.contains("exit status: 3") && err.details.contains("no luck"),
        "{err}"
    );
}
