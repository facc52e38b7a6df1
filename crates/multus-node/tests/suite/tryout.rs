//! `multus try`, run as a user runs it: the bundled examples, a failing attachment, --keep and
//! --clean, --exec, bad files; after every run nothing of the sandbox is left.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use testkit::Netns;

/// `--clean` removes every sandbox: the runs of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn multus_try(args: &[&str]) -> (Output, String, String) {
    let out = Command::new(common::multus_bin())
        .arg("try")
        .arg("--plugins")
        .arg(common::plugins_bin())
        .args(args)
        .output()
        .expect("run multus try");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

fn entries(dir: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("mtry"))
                .collect()
        })
        .unwrap_or_default()
}

/// This namespace's links by name and hardware address. Flags and state are left out: a veth
/// made just before gets its carrier when the kernel gets to it, and that is no change of ours.
fn own_links() -> String {
    let out = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let name = line.split(": ").nth(1).unwrap_or(line);
            let address = line
                .split_whitespace()
                .skip_while(|w| !w.starts_with("link/"))
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            format!("{name} {address}\n")
        })
        .collect()
}

/// No sandbox namespace, no state directory, and this namespace's links unchanged.
fn assert_nothing_left(links_before: &str) {
    assert_eq!(
        entries("/run/netns"),
        Vec::<String>::new(),
        "namespaces left"
    );
    assert_eq!(
        entries("/run/multus-try"),
        Vec::<String>::new(),
        "state left"
    );
    assert_eq!(
        own_links(),
        links_before,
        "links changed outside the sandbox"
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: tester
  annotations:
    k8s.v1.cni.cncf.io/networks: net-a
"#;

fn nad(config: &str) -> String {
    let indented: String = config.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: net-a\nspec:\n  config: |\n{indented}"
    )
}

const BRIDGE_NET: &str = r#"{"cniVersion": "1.0.0", "name": "net-a", "type": "bridge",
 "bridge": "br-a", "isGateway": true,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24"}]]}}"#;

/// Whether this kernel makes ipvlan links (asked independently of multus).
fn kernel_has_ipvlan() -> bool {
    let ns = Netns::new("ipvlanprobe");
    ns.ip(&["link", "add", "d0", "type", "bridge"]);
    ns.try_ip(&[
        "link", "add", "link", "d0", "i0", "type", "ipvlan", "mode", "l2",
    ])
    .status
    .success()
}

/// Whether this workspace's cni-plugins has dhcp (asked independently of multus).
fn plugins_have_dhcp() -> bool {
    use std::os::unix::process::CommandExt;
    Command::new(common::plugins_bin())
        .arg0("dhcp")
        .env("CNI_COMMAND", "VERSION")
        .output()
        .expect("run cni-plugins")
        .status
        .success()
}

#[test]
fn bundled_examples_pass_and_leave_nothing() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = own_links();
    let (out, stdout, stderr) = multus_try(&[]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for example in ["bridge", "macvlan", "static", "whereabouts"] {
        assert!(
            stdout.contains(&format!(
                "=== example {example}: pod default/{example}-pod: PASS"
            )),
            "{example}:\n{stdout}"
        );
    }
    if kernel_has_ipvlan() {
        assert!(
            stdout.contains("=== example ipvlan: pod default/ipvlan-pod: PASS"),
            "{stdout}"
        );
    } else {
        assert!(
            stdout.contains("=== example ipvlan: SKIPPED: this kernel has no ipvlan support"),
            "{stdout}"
        );
    }
    if plugins_have_dhcp() {
        assert!(
            stdout.contains("=== example dhcp: pod default/dhcp-pod: PASS"),
            "{stdout}"
        );
        assert!(
            stdout.contains("dhcp0 (default/dhcp-net): ping gateway 192.168.99.1 (on the lan): ok")
        );
        // The server's router gives a default route, kept behind the cluster network's.
        assert!(
            stdout.contains(
                "default via 10.42.0.1 dev eth0\ndefault via 192.168.99.1 dev dhcp0 metric 1\n"
            ),
            "{stdout}"
        );
        assert!(
            stdout.contains("Warning  SecondaryDefaultRoute dhcp0 from default/dhcp-net: its default route via 192.168.99.1 got metric 1, behind the pod's default route on eth0"),
            "{stdout}"
        );
    } else {
        assert!(
            stdout
                .contains("=== example dhcp: SKIPPED: this cni-plugins binary has no dhcp plugin"),
            "{stdout}"
        );
    }
    // What the pod got, as multus writes it and as the kernel has it.
    assert!(
        stdout.contains(r#""name": "default/macvlan-net","#),
        "{stdout}"
    );
    assert!(stdout.contains(r#""interface": "lan0","#), "{stdout}");
    assert!(stdout.contains("192.168.30.10/24"), "{stdout}");
    assert!(
        stdout.contains("AddedInterface        Add net1 [10.10.0.2/24] from default/bridge-net")
    );
    assert!(
        stdout.contains("lan0 (default/macvlan-net): ping gateway 192.168.10.1 (on the lan): ok")
    );
    // whereabouts against the run's own API: the node's slice, the pool freed by DEL.
    assert!(
        stdout.contains("whereabouts: pools in a Kubernetes API of this run, http://127.0.0.1:"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("AddedInterface        Add wb0 [10.20.0.2/24] from default/whereabouts-net"),
        "{stdout}"
    );
    assert!(!stdout.contains("LEFT BEHIND"), "{stdout}");
    assert_nothing_left(&before);
}

/// A whereabouts network whose range has no free address: the plugin's code-11 message comes
/// through, and nothing is left, in the kernel or in the API's pools.
#[test]
fn a_full_whereabouts_range_is_reported_and_nothing_is_held() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = own_links();
    let dir = tempfile::tempdir().expect("tempdir");
    let full = r#"{"cniVersion": "1.0.0", "name": "net-a", "type": "bridge", "bridge": "br-a",
 "ipam": {"type": "whereabouts", "range": "10.79.0.0/30", "exclude": ["10.79.0.1", "10.79.0.2"]}}"#;
    write(dir.path(), "nad.yaml", &nad(full));
    write(dir.path(), "pod.yaml", POD);
    let (out, stdout, stderr) = multus_try(&[dir.path().to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("no free address in 10.79.0.0/30 (10.79.0.1 to 10.79.0.2, excluding 10.79.0.1/32, 10.79.0.2/32)"),
        "{stdout}"
    );
    assert!(stdout.contains("nothing: no link"), "{stdout}");
    assert!(!stdout.contains("LEFT BEHIND"), "{stdout}");
    assert_nothing_left(&before);
}

#[test]
fn a_failing_attachment_is_reported_with_the_delegates_message_and_cleaned_up() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = own_links();
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = r#"{"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan", "master": "eth0",
 "mode": "sideways", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.78.0.0/24"}]]}}"#;
    write(dir.path(), "nad.yaml", &nad(bad));
    write(dir.path(), "pod.yaml", POD);
    let (out, stdout, stderr) = multus_try(&[dir.path().to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("FAILED: network default/net-a on interface net1:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("sideways"),
        "the delegate's message: {stdout}"
    );
    assert!(stdout.contains("Warning  AddInterfaceFailed"), "{stdout}");
    // The cluster network that had been attached was rolled back.
    assert!(stdout.contains("nothing: no link"), "{stdout}");
    assert!(stdout.contains("FAIL\n"), "{stdout}");
    assert_nothing_left(&before);
}

#[test]
fn keep_leaves_the_sandbox_and_clean_removes_it() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = own_links();
    let dir = tempfile::tempdir().expect("tempdir");
    let nad_file = write(dir.path(), "nad.yaml", &nad(BRIDGE_NET));
    let pod_file = write(dir.path(), "pod.yaml", POD);
    let files = [
        nad_file.to_str().expect("utf-8"),
        pod_file.to_str().expect("utf-8"),
    ];
    let (out, stdout, stderr) = multus_try(&[files[0], files[1], "--keep"]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let kept = entries("/run/netns");
    assert_eq!(kept.len(), 3, "node, lan and pod namespaces: {kept:?}");
    let pod_ns = kept
        .iter()
        .find(|n| n.ends_with("-pod"))
        .expect("pod namespace");
    assert!(
        stdout.contains(&format!("ip netns exec {pod_ns} sh")),
        "{stdout}"
    );
    assert!(stdout.contains("multus try --clean"), "{stdout}");
    // The pod stays as ADD left it.
    let out = Command::new("ip")
        .args(["-n", pod_ns, "-o", "-4", "addr", "show", "dev", "net1"])
        .output()
        .expect("ip");
    assert!(String::from_utf8_lossy(&out.stdout).contains("inet 10.77.0.2/24"));
    assert_eq!(entries("/run/multus-try").len(), 1);

    let out = Command::new(common::multus_bin())
        .args(["try", "--clean"])
        .output()
        .expect("run multus try --clean");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("removed mtry"), "{text}");
    assert_nothing_left(&before);
}

#[test]
fn exec_runs_inside_the_pod_and_its_status_counts() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = own_links();
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "all.yaml",
        &format!("{}---{POD}", nad(BRIDGE_NET)),
    );
    let path = dir.path().to_str().expect("utf-8");
    let (out, stdout, stderr) = multus_try(&[path, "--exec", "ip -o -4 addr show dev net1"]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("net1    inet 10.77.0.2/24"), "{stdout}");
    let (out, stdout, _) = multus_try(&[path, "--exec", "exit 3"]);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("(exit status: 3)"), "{stdout}");
    // A process left in the background keeps the output open: try goes on without it.
    let (out, stdout, stderr) = multus_try(&[path, "--exec", "echo started; sleep 5 &"]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("started"), "{stdout}");
    assert!(
        stdout.contains("still holds its output: not waited for"),
        "{stdout}"
    );
    assert_nothing_left(&before);
}

#[test]
fn bad_files_are_refused_with_what_and_where_before_anything_is_built() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = own_links();
    let dir = tempfile::tempdir().expect("tempdir");
    let pod = write(dir.path(), "pod.yaml", POD);
    let cases: [(&str, String, &str); 4] = [
        (
            "json.yaml",
            nad(r#"{"cniVersion": "1.0.0", "name": "net-a", "type": "bridge",}"#),
            "NetworkAttachmentDefinition default/net-a: spec.config is not valid JSON",
        ),
        (
            "kind.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".into(),
            "kind \"ConfigMap\" is neither a Pod nor a NetworkAttachmentDefinition",
        ),
        (
            "yaml.yaml",
            "kind: [unclosed\n".into(),
            "yaml.yaml (document 1): not valid YAML",
        ),
        (
            "noname.yaml",
            "kind: NetworkAttachmentDefinition\nspec:\n  config: '{}'\n".into(),
            "metadata.name is missing",
        ),
    ];
    for (name, text, want) in cases {
        let file = write(dir.path(), name, &text);
        let (out, stdout, stderr) =
            multus_try(&[file.to_str().expect("utf-8"), pod.to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(2), "{name}: {stdout}\n{stderr}");
        assert!(stderr.contains(want), "{name}: {stderr}");
        assert!(stderr.contains(name), "{name} names the file: {stderr}");
        std::fs::remove_file(&file).expect("rm");
    }
    let (out, _, stderr) = multus_try(&[dir.path().join("missing.yaml").to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("missing.yaml"), "{stderr}");
    assert_nothing_left(&before);
}

#[test]
fn on_host_runs_lint_first_takes_only_pod_side_networks_and_changes_nothing_here() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // This test's own namespace stands in for the host: a veth pair is its "real" lan.
    let ip = |args: &[&str]| {
        let ok = Command::new("ip")
            .args(args)
            .status()
            .expect("ip")
            .success();
        assert!(ok, "ip {args:?}");
    };
    ip(&[
        "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p",
    ]);
    // No IPv6 link-local address: the kernel would add it (and its local route) a moment
    // after the link is up, perhaps between try's two looks at the host.
    ip(&["link", "set", "eth9", "addrgenmode", "none", "up"]);
    ip(&["link", "set", "eth9p", "addrgenmode", "none", "up"]);
    ip(&["addr", "add", "192.168.50.1/24", "dev", "eth9p"]);
    let before = own_links();
    let addrs = || {
        let out = Command::new("ip")
            .args(["-o", "addr"])
            .output()
            .expect("ip");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let addrs_before = addrs();
    let dir = tempfile::tempdir().expect("tempdir");
    let macvlan = r#"{"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan", "master": "eth9",
 "ipam": {"type": "static", "addresses": [{"address": "192.168.50.10/24", "gateway": "192.168.50.1"}]}}"#;
    write(dir.path(), "nad.yaml", &nad(macvlan));
    write(dir.path(), "pod.yaml", POD);
    let path = dir.path().to_str().expect("utf-8");
    let passed = |stdout: &str| {
        assert!(
            stdout.contains("net1 (default/net-a): ping gateway 192.168.50.1 (on the node): ok"),
            "{stdout}"
        );
        assert!(stdout.contains("nothing: no link"), "{stdout}");
    };

    // Lint has nothing to say: no confirmation needed.
    let (out, stdout, stderr) = multus_try(&[path, "--on-host"]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("--- multus lint (against this machine)"),
        "{stdout}"
    );
    passed(&stdout);

    // The master now carries this "host"'s default route: lint warns, --yes is needed.
    ip(&["route", "add", "default", "dev", "eth9"]);
    let (out, stdout, stderr) = multus_try(&[path, "--on-host"]);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.contains("[master-default-route]"), "{stdout}");
    assert!(stderr.contains("confirm with --yes"), "{stderr}");
    assert!(!stdout.contains("--- ADD"), "{stdout}");
    let (out, stdout, stderr) = multus_try(&[path, "--on-host", "--yes"]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("confirmed with --yes"), "{stdout}");
    passed(&stdout);
    ip(&["route", "del", "default", "dev", "eth9"]);

    // A bridge would be made on the host: refused, even with --yes.
    let bridge = tempfile::tempdir().expect("tempdir");
    write(bridge.path(), "nad.yaml", &nad(BRIDGE_NET));
    write(bridge.path(), "pod.yaml", POD);
    let (out, _, stderr) =
        multus_try(&[bridge.path().to_str().expect("utf-8"), "--on-host", "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("default/net-a: type \"bridge\": only macvlan and ipvlan"),
        "{stderr}"
    );

    assert_nothing_left(&before);
    assert_eq!(addrs(), addrs_before, "addresses here changed");
    ip(&["link", "del", "eth9"]);
}
