//! firewalld inside a test's node namespace, on a system bus of the test's own: a dbus-daemon
//! whose socket is in the test's directory, and firewalld (unpacked by scripts/deps.sh, never
//! installed as a service) in a mount namespace with an empty `/run` and its own config
//! directory. Both are stopped by their PID when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::dhcp::{wait_for_path, Process};
use crate::Netns;

/// Where scripts/deps.sh unpacks firewalld and its Python module.
pub const ROOT: &str = "/var/cache/multus-rs/firewalld";

/// How long firewalld may take to start (it is Python and loads its whole config).
const START_LIMIT: Duration = Duration::from_secs(90);

const BUS_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=SOCKET</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#;

pub struct Firewalld {
    // Dropped in this order: firewalld, then its bus.
    daemon: Process,
    _bus: Process,
    address: String,
    dir: tempfile::TempDir,
}

impl Firewalld {
    /// Starts a bus and firewalld in `node`, and waits until firewalld answers.
    pub fn start(node: &Netns) -> Firewalld {
        let root = Path::new(ROOT);
        assert!(
            root.join("usr/sbin/firewalld").exists(),
            "firewalld is not unpacked in {ROOT}: run scripts/deps.sh"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            BUS_CONFIG.replace("SOCKET", &socket.display().to_string()),
        )
        .expect("write bus config");
        let mut bus = Command::new("dbus-daemon");
        bus.arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let bus = Process::spawn(bus);
        wait_for_path(&socket, Duration::from_secs(10));
        let address = format!("unix:path={}", socket.display());

        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).expect("config dir");
        let log = std::fs::File::create(dir.path().join("firewalld.log")).expect("log");
        let mut daemon = node.command("unshare");
        daemon
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(
                "mount -t tmpfs tmpfs /run && exec /usr/bin/python3 \"$0/usr/sbin/firewalld\" --nofork \
                 --nopid --log-target console --default-config \"$0/usr/lib/firewalld\" \
                 --system-config \"$1\"",
            )
            .arg(root)
            .arg(&etc)
            .env("PYTHONPATH", root.join("usr/lib/python3/dist-packages"))
            .env("DBUS_SYSTEM_BUS_ADDRESS", &address)
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let mut fw = Firewalld {
            daemon: Process::spawn(daemon),
            _bus: bus,
            address,
            dir,
        };
        fw.wait_running();
        fw
    }

    fn wait_running(&mut self) {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let state = self.cmd(&["--state"]);
            if state.trim() == "running" {
                return;
            }
            assert!(
                self.daemon.running() && Instant::now() < deadline,
                "firewalld did not start ({state}): {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// firewalld's own output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("firewalld.log")).unwrap_or_default()
    }

    /// The bus's address, for `DBUS_SYSTEM_BUS_ADDRESS`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `firewall-cmd` with `args`, on this bus: what it printed (its errors too).
    pub fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("/usr/bin/python3")
            .arg(PathBuf::from(ROOT).join("usr/bin/firewall-cmd"))
            .args(args)
            .env(
                "PYTHONPATH",
                Path::new(ROOT).join("usr/lib/python3/dist-packages"),
            )
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.address)
            .output()
            .expect("run firewall-cmd");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text
    }

    /// The sources bound to `zone`, as firewalld lists them.
    pub fn sources(&self, zone: &str) -> Vec<String> {
        let text = self.cmd(&[&format!("--zone={zone}"), "--list-sources"]);
        text.split_whitespace().map(str::to_owned).collect()
    }
}
