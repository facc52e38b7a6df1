//! DHCP in the sandbox: dnsmasq on the lan bridge, and our dhcp daemon in the node namespace
//! on the sandbox's own socket. Each records its PID in the sandbox directory, so a kept
//! sandbox's servers are stopped by `--clean`.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use serde_json::Value;

use super::sandbox::{self, Sandbox};
use super::state::command_in;
use super::Error;

/// The subnet dnsmasq serves on the lan, and its router.
pub const SUBNET: &str = "192.168.99.0/24";
const ROUTER: &str = "192.168.99.1";
const RANGE: &str = "192.168.99.100,192.168.99.199,255.255.255.0,1h";

/// Whether any of the networks takes its addresses from dhcp.
pub fn wanted(configs: &[&str]) -> bool {
    configs.iter().any(|c| {
        serde_json::from_str::<Value>(c).is_ok_and(|v| {
            sandbox::plugin_configs(&v)
                .iter()
                .any(|p| p["ipam"]["type"].as_str() == Some("dhcp"))
        })
    })
}

pub fn socket(dir: &Path) -> std::path::PathBuf {
    dir.join("dhcp.sock")
}

/// The dhcp daemon's lease store (compared before ADD and after DEL).
pub fn state_dir(dir: &Path) -> std::path::PathBuf {
    dir.join("dhcp")
}

/// Whether `plugins` (the cni-plugins binary) answers as `dhcp`.
pub fn plugin_available(plugins: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(plugins)
        .arg0("dhcp")
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The leases dnsmasq still holds (`<ip> <mac>` each): after DEL, none.
pub fn leases(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("dnsmasq.leases"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(format!("{} {}", f.get(2)?, f.get(1)?))
        })
        .collect()
}

/// Starts dnsmasq in the lan namespace and the dhcp daemon in the node namespace, and waits
/// until both are listening.
pub fn start(sb: &Sandbox) -> Result<Vec<Child>, Error> {
    let Some(lan) = &sb.lan else {
        return Err(Error::Sandbox("dhcp needs the simulated lan".into()));
    };
    let router: IpNet = format!("{ROUTER}/24")
        .parse()
        .map_err(|e| Error::Sandbox(format!("{ROUTER}: {e}")))?;
    sb.lan_peer(router)?;
    let dir = &sb.dir;
    let spawn = |mut cmd: std::process::Command, what: &str, log: &str| -> Result<Child, Error> {
        let log = std::fs::File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(log))
            .map_err(|e| Error::Sandbox(format!("{what} log: {e}")))?;
        let err = log
            .try_clone()
            .map_err(|e| Error::Sandbox(format!("{what} log: {e}")))?;
        cmd.stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Sandbox(format!("starting {what}: {e}")))
    };
    let mut dnsmasq = command_in(lan, "dnsmasq")?;
    dnsmasq.args([
        "--conf-file=/dev/null",
        "--keep-in-foreground",
        "--port=0",
        "--no-ping",
        "--bind-interfaces",
        "--except-interface=lo",
    ]);
    dnsmasq
        .arg(format!("--interface={}", sandbox::LAN_BRIDGE))
        .arg(format!("--dhcp-range={RANGE}"))
        // A router, as every LAN's server sends: the pod's default route stays on eth0 all
        // the same (multus puts the lease's behind it).
        .arg(format!("--dhcp-option=option:router,{ROUTER}"))
        .arg(format!(
            "--dhcp-leasefile={}",
            dir.join("dnsmasq.leases").display()
        ))
        .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()));
    let mut children = vec![spawn(dnsmasq, "dnsmasq", "dnsmasq.log")?];
    let mut daemon = command_in(&sb.node, &sb.bin_dir().join("dhcp").display().to_string())?;
    daemon
        .arg("daemon")
        .arg("-socketpath")
        .arg(socket(dir))
        .arg("-statedir")
        .arg(state_dir(dir))
        .arg("-pidfile")
        .arg(dir.join("dhcp.pid"))
        // ipvlan pods share their master's MAC: the server must broadcast its replies.
        .arg("-broadcast");
    match spawn(daemon, "the dhcp daemon", "dhcp-daemon.log") {
        Ok(child) => children.push(child),
        Err(e) => {
            stop(children);
            return Err(e);
        }
    }
    for (file, what) in [
        (dir.join("dnsmasq.pid"), "dnsmasq"),
        (socket(dir), "the dhcp daemon"),
    ] {
        if let Err(e) = wait_for(&file, what) {
            stop(children);
            return Err(e);
        }
    }
    Ok(children)
}

fn wait_for(file: &Path, what: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !file.exists() {
        if Instant::now() > deadline {
            return Err(Error::Sandbox(format!(
                "{what} did not start within 5 s ({} is missing; see its log beside it)",
                file.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Stops servers this process started, and reaps them.
pub fn stop(children: Vec<Child>) {
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Stops the servers a sandbox recorded (`*.pid` in its directory): only a process whose
/// command line names the sandbox's directory, so a reused PID is never hit.
pub fn stop_recorded(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let marker = dir.display().to_string();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "pid") {
            continue;
        }
        let Some(pid) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&marker) {
            // SAFETY: kill(2) with a PID read from our own record and checked above.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
}
