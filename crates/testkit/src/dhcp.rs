//! DHCP servers (dnsmasq, busybox udhcpd) and dhcp daemons, run as processes inside a test's
//! node namespace and stopped by their PID when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Netns;

/// A process that is killed (by PID) and reaped on drop.
pub struct Process {
    child: Child,
}

impl Process {
    pub fn spawn(mut cmd: Command) -> Process {
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Process { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the process with SIGTERM and waits for it; returns whether it exited cleanly.
    pub fn terminate(mut self) -> bool {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn signal(&self, sig: i32) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the PID of our own child, which is not reaped yet.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Waits until `path` exists (a socket a daemon creates), panicking after `limit`.
pub fn wait_for_path(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A node namespace with a bridge that carries a DHCP server, and the server's files.
pub struct DhcpNet {
    pub node: Netns,
    pub bridge: String,
    pub dir: tempfile::TempDir,
    server: Option<Process>,
}

/// Which server, and what it hands out.
pub enum Server<'a> {
    /// dnsmasq with extra arguments (`--dhcp-option...`; a `--dhcp-range=` replaces the
    /// default range).
    Dnsmasq(&'a [&'a str]),
    /// busybox udhcpd with extra config lines.
    Udhcpd(&'a str),
    /// Nothing answers.
    Silent,
}

impl DhcpNet {
    /// `10.97.0.0/24` on bridge `dbr0` in a fresh node namespace, the server at `10.97.0.1`
    /// handing out `.100` to `.199`.
    pub fn new(server: Server) -> DhcpNet {
        let node = Netns::new("dhcpnode");
        let bridge = "dbr0".to_owned();
        node.ip(&["link", "add", &bridge, "type", "bridge"]);
        node.ip(&["addr", "add", "10.97.0.1/24", "dev", &bridge]);
        node.ip(&["link", "set", &bridge, "up"]);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut net = DhcpNet {
            node,
            bridge,
            dir,
            server: None,
        };
        net.start_server(server);
        net
    }

    /// Starts `server`, in place of the one running, if any.
    pub fn start_server(&mut self, server: Server) {
        self.stop_server();
        self.server = match server {
            Server::Dnsmasq(opts) => Some(self.start_dnsmasq(opts)),
            Server::Udhcpd(conf) => Some(self.start_udhcpd(conf)),
            Server::Silent => None,
        };
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until the server's log contains `needle`; false after `limit`.
    pub fn wait_log(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server.
    pub fn stop_server(&mut self) {
        if let Some(p) = self.server.take() {
            p.terminate();
        }
    }

    fn start_dnsmasq(&self, opts: &[&str]) -> Process {
        dnsmasq(&self.node, &self.bridge, self.dir.path(), opts)
    }

    fn start_udhcpd(&self, extra: &str) -> Process {
        let d = self.dir.path();
        let conf = d.join("udhcpd.conf");
        let leases = d.join("udhcpd.leases");
        std::fs::write(&leases, "").expect("write udhcpd lease file");
        std::fs::write(
            &conf,
            format!(
                "start 10.97.0.100\nend 10.97.0.199\ninterface {}\nlease_file {}\npidfile {}\n\
                 option subnet 255.255.255.0\n{extra}\n",
                self.bridge,
                leases.display(),
                d.join("udhcpd.pid").display()
            ),
        )
        .expect("write udhcpd.conf");
        let log = std::fs::File::create(self.log_path()).expect("create server log");
        let mut cmd = self.node.command("udhcpd");
        cmd.arg("-f")
            .arg("-S")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log);
        let p = Process::spawn(cmd);
        // udhcpd has its socket bound once it logs its start line.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log().contains("started") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        p
    }
}

/// dnsmasq serving DHCP on `interface` in `node` (by default `10.97.0.100` to `.199` of a
/// /24; a `--dhcp-range=` in `opts` replaces it), with its lease, pid and log files
/// (`server.log`) in `dir`.
pub fn dnsmasq(node: &Netns, interface: &str, dir: &Path, opts: &[&str]) -> Process {
    let mut cmd = node.command("dnsmasq");
    if !opts.iter().any(|o| o.starts_with("--dhcp-range=")) {
        cmd.arg("--dhcp-range=10.97.0.100,10.97.0.199,255.255.255.0,1h");
    }
    cmd.args([
        "--conf-file=/dev/null",
        "--keep-in-foreground",
        "--port=0",
        "--bind-interfaces",
        "--except-interface=lo",
        "--no-ping",
        "--log-dhcp",
        // No user switch: the VM's initramfs has no user for dnsmasq to become.
        "--user=root",
    ])
    .arg(format!("--interface={interface}"))
    .arg(format!("--dhcp-leasefile={}", dir.join("leases").display()))
    .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
    .arg(format!(
        "--log-facility={}",
        dir.join("server.log").display()
    ))
    .args(opts)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let p = Process::spawn(cmd);
    wait_for_path(&dir.join("dnsmasq.pid"), Duration::from_secs(10));
    p
}

/// A dhcp daemon (ours or the reference) listening on a socket in its own directory.
pub struct DhcpDaemon {
    pub process: Process,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl DhcpDaemon {
    /// Starts `program args...` inside `node`, with its stderr in `log`, and waits for `socket`.
    pub fn start(
        node: &Netns,
        program: &Path,
        args: &[String],
        socket: &Path,
        log: &Path,
    ) -> DhcpDaemon {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open daemon log");
        let mut cmd = node.command(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file);
        let mut process = Process::spawn(cmd);
        // Ready once it accepts connections (a stale socket file may exist before that).
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(
                process.running(),
                "the daemon exited: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            assert!(
                Instant::now() < deadline,
                "the daemon does not listen on {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        DhcpDaemon {
            process,
            socket: socket.to_path_buf(),
            log: log.to_path_buf(),
        }
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Peak resident memory (VmHWM) in kB.
    pub fn peak_rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.pid()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}
