//! `multus lint` run as a person runs it: NAD (and pod) files on disk, the real `multus` and
//! `cni-plugins` binaries, the exit status and the report read back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

const MULTUS: &str = env!("CARGO_BIN_EXE_multus");

/// The plugins binary beside `multus`, where lint looks first.
fn cni_plugins() -> PathBuf {
    testkit::workspace_binary("cni-plugins", "plugins")
}

/// Copies an executable by way of `cp`: a copy this process wrote could still be open in a
/// child another test thread is forking, and executing it would then fail (ETXTBSY).
fn copy_executable(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .expect("runs the command");
    assert!(status.success(), "cp {} {}", from.display(), to.display());
}

/// A NetworkAttachmentDefinition document with `config` as its spec.config.
fn nad(name: &str, config: &Value) -> String {
    format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: \
         {name}\n  namespace: lab\nspec:\n  config: '{}'\n",
        config.to_string().replace('\'', "''")
    )
}

/// A pod in namespace lab whose networks annotation is `networks`.
fn pod(name: &str, networks: &Value) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: lab\n  annotations:\n    \
         k8s.v1.cni.cncf.io/networks: '{}'\nspec:\n  containers: []\n",
        networks.to_string().replace('\'', "''")
    )
}

/// What a run printed, and its exit status.
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }

    /// The findings of a `--output json` run.
    fn findings(&self) -> Vec<Value> {
        self.json()["findings"]
            .as_array()
            .expect("an array")
            .clone()
    }

    /// The one finding of `check` (there must be exactly one).
    fn only(&self, check: &str) -> Value {
        let found: Vec<Value> = self
            .findings()
            .into_iter()
            .filter(|f| f["check"] == check)
            .collect();
        assert_eq!(found.len(), 1, "{check} in {}", self.stdout);
        found[0].clone()
    }

    fn checks(&self) -> Vec<String> {
        self.findings()
            .iter()
            .map(|f| f["check"].as_str().expect("a string").to_owned())
            .collect()
    }
}

/// The finding's problem mentions `needle`.
/// The finding's problem says `needle`; its words, and the fix's, are spaced once.
fn says(finding: &Value, needle: &str) {
    let problem = finding["problem"].as_str().expect("a string");
    assert!(problem.contains(needle), "{problem:?} lacks {needle:?}");
    for text in [problem, finding["fix"].as_str().unwrap_or_default()] {
        assert!(!text.contains("  "), "a run of spaces in {text:?}");
    }
}

fn output(out: Output) -> Run {
    Run {
        status: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 output"),
    }
}

/// `multus lint <args>` with the node's uplink given as eth0 and, unless `args` name one, no
/// bin dir.
fn lint(args: &[&str]) -> Run {
    cni_plugins();
    let mut cmd = Command::new(MULTUS);
    cmd.args(["lint", "--default-route-interface", "eth0"]);
    if !args.contains(&"--cni-bin-dir") {
        cmd.args(["--cni-bin-dir", "/nonexistent"]);
    }
    output(cmd.args(args).output().expect("runs the command"))
}

/// Files in a temporary directory.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("has a parent directory"))
            .expect("creates a test directory");
        std::fs::write(&path, text).expect("writes a test file");
        path.to_str().expect("a UTF-8 path").to_owned()
    }

    fn path(&self) -> &str {
        self.dir.path().to_str().expect("a UTF-8 path")
    }
}

/// Lints one NAD with `config` as JSON.
fn lint_config(config: &Value, flags: &[&str]) -> Run {
    let files = Files::new();
    let file = files.write("nad.yaml", &nad("net1", config));
    let mut args = vec!["--output", "json", file.as_str()];
    args.extend_from_slice(flags);
    lint(&args)
}

fn macvlan(master: &str, ipam: Value) -> Value {
    json!({"cniVersion": "1.0.0", "type": "macvlan", "master": master, "ipam": ipam})
}

fn host_local(subnet: &str) -> Value {
    json!({"type": "host-local", "ranges": [[{"subnet": subnet}]]})
}

#[test]
fn a_clean_directory_exits_0() {
    let files = Files::new();
    files.write(
        "bridge.yaml",
        &nad(
            "br",
            &json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-lab", "isGateway": true,
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": "192.168.50.0/24", "gateway": "192.168.50.1"}]],
                             "routes": [{"dst": "192.168.60.0/24"}]}}),
        ),
    );
    files.write(
        "more/macvlan.yaml",
        &nad(
            "mv",
            &json!({"cniVersion": "1.1.0", "name": "mv", "plugins": [
                {"type": "macvlan", "master": "eth1", "mode": "bridge",
                 "capabilities": {"ips": true},
                 "ipam": {"type": "static", "addresses": [{"address": "192.168.70.5/24", "gateway": "192.168.70.1"}]}}]}),
        ),
    );
    let run = lint(&[files.path()]);
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        "0 errors, 0 warnings, 0 notes in 2 NetworkAttachmentDefinitions and 0 pods\n"
    );
}

#[test]
fn warnings_only_exit_1_and_errors_exit_2() {
    let warning = lint_config(&macvlan("eth0", host_local("192.168.50.0/24")), &[]);
    assert_eq!(warning.status, 1, "{}", warning.stdout);
    assert_eq!(warning.checks(), ["master-default-route"]);
    assert_eq!(warning.only("master-default-route")["severity"], "warning");

    let error = lint_config(&macvlan("eth0", host_local("10.42.7.0/24")), &[]);
    assert_eq!(error.status, 2, "{}", error.stdout);
    assert_eq!(error.checks(), ["master-default-route", "reserved-overlap"]);
}

#[test]
fn master_on_the_uplink_named_or_implied() {
    let run = lint_config(&macvlan("eth0", host_local("192.168.50.0/24")), &[]);
    let f = run.only("master-default-route");
    assert_eq!(f["path"], "spec.config.master");
    assert_eq!(f["object"], "lab/net1");
    assert_eq!(f["kind"], "NetworkAttachmentDefinition");
    says(&f, "\"eth0\" carries the node's default route");
    assert!(f["fix"].as_str().unwrap().contains("set \"master\""));

    // No master: the plugin takes the uplink.
    let config =
        json!({"cniVersion": "1.0.0", "type": "ipvlan", "ipam": host_local("192.168.50.0/24")});
    let run = lint_config(&config, &[]);
    let f = run.only("master-default-route");
    says(&f, "uses the interface of the node's default route (eth0)");

    // Another master, or a master inside the pod, is fine.
    assert_eq!(
        lint_config(&macvlan("eth1", host_local("192.168.50.0/24")), &[]).status,
        0
    );
    let mut in_pod = macvlan("eth0", host_local("192.168.50.0/24"));
    in_pod["linkInContainer"] = json!(true);
    assert_eq!(lint_config(&in_pod, &[]).status, 0);
}

#[test]
fn the_uplink_is_read_from_the_hosts_routes() {
    // A node namespace of the test's own, with its default route on "uplink0".
    let node = testkit::Netns::new("lintnode");
    node.veth_pair("uplink0", "peer0");
    node.ip(&["addr", "add", "192.0.2.10/24", "dev", "uplink0"]);
    node.ip(&["route", "add", "default", "via", "192.0.2.1"]);
    let files = Files::new();
    let file = files.write(
        "nad.yaml",
        &nad("net1", &macvlan("", host_local("192.168.50.0/24"))),
    );
    cni_plugins();
    let run = output(
        node.command(MULTUS)
            .args(["lint", "--output", "json", &file])
            .output()
            .unwrap(),
    );
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    let f = run.only("master-default-route");
    says(&f, "(uplink0)");

    // Without a default route the comparison is a note, not a pass or a failure.
    node.ip(&["route", "del", "default"]);
    let run = output(
        node.command(MULTUS)
            .args(["lint", "--output", "json", &file])
            .output()
            .unwrap(),
    );
    assert_eq!(run.status, 0, "{}", run.stdout);
    let f = run.only("not-checked");
    says(&f, "no default route");
}

#[test]
fn ranges_and_routes_in_cluster_or_link_local_space() {
    // A range in the pod network.
    let run = lint_config(&macvlan("eth1", host_local("10.42.7.0/24")), &[]);
    assert_eq!(run.status, 2);
    let f = run.only("reserved-overlap");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["path"], "spec.config.ipam.ranges[0][0].subnet");
    says(
        &f,
        "range 10.42.7.0/24 overlaps the cluster's pod network 10.42.0.0/16",
    );

    // A route covering the service network.
    let ipam = json!({"type": "host-local", "ranges": [[{"subnet": "192.168.50.0/24"}]], "routes": [{"dst": "10.0.0.0/8"}]});
    let run = lint_config(&macvlan("eth1", ipam.clone()), &[]);
    let found: Vec<Value> = run.findings();
    assert_eq!(found.len(), 2, "{}", run.stdout);
    assert!(found
        .iter()
        .all(|f| f["path"] == "spec.config.ipam.routes[0].dst"));
    says(&found[1], "the cluster's service network 10.43.0.0/16");

    // The flags name the cluster's own CIDRs.
    let run = lint_config(
        &macvlan("eth1", host_local("10.42.7.0/24")),
        &[
            "--pod-cidr",
            "10.128.0.0/14",
            "--service-cidr",
            "172.30.0.0/16",
        ],
    );
    assert_eq!(run.status, 0, "{}", run.stdout);
    let run = lint_config(
        &macvlan("eth1", host_local("10.129.0.0/24")),
        &["--pod-cidr", "10.128.0.0/14"],
    );
    assert_eq!(run.status, 2);

    // Static addresses, and link-local space (a warning).
    let ipam = json!({"type": "static", "addresses": [{"address": "169.254.9.5/24"}]});
    let run = lint_config(&macvlan("eth1", ipam), &[]);
    assert_eq!(run.status, 1);
    let f = run.only("reserved-overlap");
    assert_eq!(f["path"], "spec.config.ipam.addresses[0].address");
    says(&f, "link-local space 169.254.0.0/16");
}

#[test]
fn a_default_route_in_ipam() {
    for dst in ["0.0.0.0/0", "::/0"] {
        let ipam = json!({"type": "host-local", "ranges": [[{"subnet": "192.168.50.0/24"}]], "routes": [{"dst": "192.168.60.0/24"}, {"dst": dst}]});
        let run = lint_config(&macvlan("eth1", ipam), &[]);
        assert_eq!(run.status, 1, "{}", run.stdout);
        let f = run.only("ipam-default-route");
        assert_eq!(f["path"], "spec.config.ipam.routes[1].dst");
        assert!(f["fix"].as_str().unwrap().contains("default-route"), "{f}");
    }
}

#[test]
fn a_gateway_outside_its_subnet() {
    let ipam = json!({"type": "host-local", "ranges": [[{"subnet": "192.168.50.0/24"}, {"subnet": "192.168.51.0/24", "gateway": "192.168.52.1"}]]});
    let run = lint_config(&macvlan("eth1", ipam), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let f = run.only("gateway-outside-range");
    assert_eq!(f["path"], "spec.config.ipam.ranges[0][1].gateway");
    says(&f, "gateway 192.168.52.1 is outside 192.168.51.0/24");

    let ipam = json!({"type": "static", "addresses": [{"address": "192.168.50.5/24", "gateway": "192.168.9.1"}]});
    let f = lint_config(&macvlan("eth1", ipam), &[]).only("gateway-outside-range");
    assert_eq!(f["path"], "spec.config.ipam.addresses[0].gateway");
}

#[test]
fn ipvlan_with_dhcp_needs_broadcast() {
    let config = |ipam: Value| json!({"cniVersion": "1.0.0", "type": "ipvlan", "master": "eth1", "ipam": ipam});
    let run = lint_config(&config(json!({"type": "dhcp"})), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let f = run.only("ipvlan-dhcp-broadcast");
    assert_eq!(f["path"], "spec.config.ipam.type");
    assert!(f["fix"].as_str().unwrap().contains("\"broadcast\": true"));

    let with_flag = lint_config(&config(json!({"type": "dhcp", "broadcast": true})), &[]);
    assert!(!with_flag
        .checks()
        .contains(&"ipvlan-dhcp-broadcast".to_owned()));
    let daemon_flag = lint_config(&config(json!({"type": "dhcp"})), &["--dhcp-broadcast"]);
    assert!(!daemon_flag
        .checks()
        .contains(&"ipvlan-dhcp-broadcast".to_owned()));
    // macvlan has its own MAC address: DHCP works without broadcast.
    let run = lint_config(&macvlan("eth1", json!({"type": "dhcp"})), &[]);
    assert!(!run.checks().contains(&"ipvlan-dhcp-broadcast".to_owned()));
}

#[test]
fn routes_under_dhcp_are_said_to_be_unused() {
    let ipam = json!({"type": "dhcp", "routes": [{"dst": "0.0.0.0/0"}]});
    let run = lint_config(&macvlan("eth1", ipam), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let f = run.only("dhcp-ipam-routes");
    assert_eq!(f["path"], "spec.config.ipam.routes");
    says(&f, "is not installed");
    assert!(lint_config(&macvlan("eth1", json!({"type": "dhcp"})), &[])
        .checks()
        .is_empty());
}

#[test]
fn ips_and_mac_need_the_capability() {
    let files = Files::new();
    // dhcp reads no IP from CNI_ARGS: ips asked of it are lost.
    let without = macvlan("eth1", json!({"type": "dhcp"}));
    let mut with = macvlan("eth1", json!({"type": "static"}));
    with["capabilities"] = json!({"ips": true, "mac": true});
    files.write(
        "nads.yaml",
        &format!("{}---\n{}", nad("plain", &without), nad("caps", &with)),
    );
    files.write(
        "pods.yaml",
        &format!(
            "{}---\n{}",
            pod("a", &json!([{"name": "plain", "ips": ["192.168.50.9/24"], "mac": "02:00:00:00:00:09"}])),
            pod("b", &json!([{"name": "caps", "namespace": "lab", "ips": ["192.168.50.9/24"], "mac": "02:00:00:00:00:09"},
                            {"name": "elsewhere", "ips": ["192.168.50.9/24"]}])),
        ),
    );
    let run = lint(&["--output", "json", files.path()]);
    assert_eq!(run.status, 2, "{}", run.stdout);
    let caps: Vec<Value> = run
        .findings()
        .into_iter()
        .filter(|f| f["check"] == "capability")
        .collect();
    assert_eq!(caps.len(), 2, "{}", run.stdout);
    assert_eq!(caps[0]["kind"], "Pod");
    assert_eq!(caps[0]["object"], "lab/a");
    assert_eq!(
        caps[0]["path"],
        "metadata.annotations[\"k8s.v1.cni.cncf.io/networks\"][0].ips"
    );
    assert_eq!(
        caps[1]["path"],
        "metadata.annotations[\"k8s.v1.cni.cncf.io/networks\"][0].mac"
    );
    assert!(caps[0]["fix"]
        .as_str()
        .unwrap()
        .contains("\"capabilities\": {\"ips\": true}"));
    // A NAD that is not among the files is not checked, and says so.
    let note = run.only("not-checked");
    assert!(note.to_string().contains("lab/elsewhere"), "{note}");
    assert_eq!(run.json()["summary"]["pods"], 2);

    // A workload's pod template is read too.
    let files = Files::new();
    files.write("nad.yaml", &nad("plain", &without));
    files.write(
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  namespace: lab\nspec:\n  template:\n    metadata:\n      annotations:\n        k8s.v1.cni.cncf.io/networks: '[{\"name\":\"plain\",\"mac\":\"02:00:00:00:00:01\"}]'\n",
    );
    let run = lint(&["--output", "json", files.path()]);
    let f = run.only("capability");
    assert_eq!(
        f["path"],
        "spec.template.metadata.annotations[\"k8s.v1.cni.cncf.io/networks\"][0].mac"
    );

    // A broken annotation is an error of its own.
    let files = Files::new();
    files.write("pod.yaml", &pod("p", &json!([{"interface": "net1"}])));
    let run = lint(&["--output", "json", files.path()]);
    assert_eq!(run.status, 2);
    says(
        &run.only("annotation"),
        "element 0: name: required, but missing",
    );

    // Judged as multus judges it: a MAC multus would refuse is an error here too, in both
    // forms of the annotation.
    let short_form = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: lab\n  annotations:\n    k8s.v1.cni.cncf.io/networks: lab/plain@eth0.too-long-for-an-ifname\nspec:\n  containers: []\n";
    for bad in [
        pod("p", &json!([{"name": "plain", "mac": "not-a-mac"}])),
        short_form.to_owned(),
    ] {
        let files = Files::new();
        files.write("pod.yaml", &bad);
        let run = lint(&["--output", "json", files.path()]);
        assert_eq!(run.status, 2, "{bad}: {}", run.stdout);
        says(&run.only("annotation"), "element 0");
    }

    // An empty annotation selects no network, as in multus.
    let files = Files::new();
    files.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: lab\n  annotations:\n    k8s.v1.cni.cncf.io/networks: ''\nspec:\n  containers: []\n",
    );
    let run = lint(&["--output", "json", files.path()]);
    assert!(
        run.findings().iter().all(|f| f["check"] != "annotation"),
        "{}",
        run.stdout
    );
}

#[test]
fn static_without_addresses_or_ips_capability() {
    let run = lint_config(&macvlan("eth1", json!({"type": "static"})), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert_eq!(
        run.only("static-without-address")["path"],
        "spec.config.ipam.addresses"
    );

    // With the capability in any plugin of the list, pods give the addresses.
    let list = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "macvlan", "master": "eth1", "capabilities": {"ips": true}, "ipam": {"type": "static"}}]});
    assert_eq!(lint_config(&list, &[]).status, 0);
}

#[test]
fn cni_versions_nobody_speaks() {
    let run = lint_config(&json!({"cniVersion": "1.2.0", "type": "bridge"}), &[]);
    assert_eq!(run.status, 2);
    let f = run.only("cni-version");
    assert_eq!(f["path"], "spec.config.cniVersion");
    assert!(f["fix"]
        .as_str()
        .unwrap()
        .contains("0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"));

    // A plugin that is not built in is asked which versions it speaks.
    let bin = tempfile::tempdir().unwrap();
    let plugin = bin.path().join("old-plugin");
    std::fs::write(
        &plugin,
        "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] || exit 1\ncat >/dev/null\necho '{\"cniVersion\":\"0.3.1\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\"]}'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin_dir = bin.path().to_str().unwrap();
    let list = |version: &str| {
        json!({"cniVersion": version, "name": "n", "plugins": [
        {"type": "bridge"}, {"type": "old-plugin"}]})
    };
    let run = lint_config(&list("1.0.0"), &["--cni-bin-dir", bin_dir]);
    assert_eq!(run.status, 2, "{}", run.stdout);
    let f = run.only("cni-version");
    assert_eq!(f["path"], "spec.config.plugins[1].type");
    says(&f, "speaks CNI 0.3.0, 0.3.1, not 1.0.0");
    // Its options are still not checked: a note, not a pass.
    let run = lint_config(&list("0.3.1"), &["--cni-bin-dir", bin_dir]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    assert_eq!(
        run.only("not-checked")["path"],
        "spec.config.plugins[1].type"
    );
}

/// The error message `cni-plugins validate <plugin>` gives for `config`.
fn plugin_says(plugin: &str, config: &Value) -> String {
    let (_, err, _) = testkit::validate_config(&cni_plugins(), plugin, &config.to_string());
    err.expect("validate fails")["msg"]
        .as_str()
        .expect("a string")
        .to_owned()
}

#[test]
fn every_plugins_option_errors_carry_the_plugins_own_message() {
    let cases = [
        (
            "bridge",
            json!({"cniVersion": "1.0.0", "type": "bridge", "vlan": 5000}),
        ),
        (
            "bridge",
            json!({"cniVersion": "1.0.0", "type": "bridge", "hairpinMode": true, "promiscMode": true}),
        ),
        (
            "macvlan",
            json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1", "mode": "l2", "ipam": host_local("192.168.50.0/24")}),
        ),
        (
            "ipvlan",
            json!({"cniVersion": "1.0.0", "type": "ipvlan", "master": "eth1"}),
        ),
        (
            "host-local",
            json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1", "ipam": {"type": "host-local"}}),
        ),
        (
            "host-local",
            json!({"cniVersion": "1.0.0", "type": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "192.168.50.0/24", "rangeStart": "192.168.9.1"}]]}}),
        ),
        (
            "static",
            json!({"cniVersion": "1.0.0", "type": "bridge", "ipam": {"type": "static", "addresses": [{"address": "192.168.50.5"}]}}),
        ),
    ];
    for (plugin, config) in cases {
        let mut named = config.clone();
        named["name"] = json!("net1");
        let own = plugin_says(config["type"].as_str().unwrap(), &named);
        let run = lint_config(&config, &[]);
        assert_eq!(run.status, 2, "{plugin}: {}", run.stdout);
        let f = run.only("plugin-options");
        assert_eq!(f["path"], "spec.config");
        let problem = f["problem"].as_str().unwrap();
        assert!(
            problem.ends_with(&own),
            "{plugin}: {problem:?} does not end with {own:?}"
        );
        assert!(
            problem.starts_with(config["type"].as_str().unwrap()),
            "{problem}"
        );
    }
    // In a list, the path names the plugin.
    let list = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "bridge"}, {"type": "macvlan", "master": "eth1", "mode": "nope", "ipam": host_local("192.168.50.0/24")}]});
    let f = lint_config(&list, &[]).only("plugin-options");
    assert_eq!(f["path"], "spec.config.plugins[1]");
    says(&f, r#"mode: "nope" is not a mode of macvlan"#);
}

/// Keys no plugin reads, in a single config and in a list, at the top and inside IPAM: a
/// warning each, at the key, naming the key it resembles; the keys runtimes and multus add
/// are not among them.
#[test]
fn unknown_keys_are_warnings_at_the_key() {
    let list = json!({"cniVersion": "1.0.0", "name": "web", "plugins": [
        {"type": "bridge", "bridge": "br-lab", "isgateway": true, "deviceID": "0000:01:00.1",
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "192.168.50.0/24",
                  "rangestart": "192.168.50.10"}]], "routes": [{"dst": "192.168.60.0/24"}]}},
        {"type": "portmap", "capabilities": {"portMappings": true}, "masqall": true},
        {"type": "tuning", "sysctls": {"net.ipv4.conf.IFNAME.arp_filter": "1"}},
        {"type": "firewall", "backend": "iptables"}]});
    let run = lint_config(&list, &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let found: Vec<(String, String)> = run
        .findings()
        .iter()
        .map(|f| {
            assert_eq!(
                (&f["check"], &f["severity"]),
                (&json!("unknown-key"), &json!("warning"))
            );
            (
                f["path"].as_str().unwrap().to_owned(),
                f["problem"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.config.plugins[0].isgateway",
            "spec.config.plugins[0].ipam.ranges[0][0].rangestart",
            "spec.config.plugins[1].masqall",
            "spec.config.plugins[2].sysctls",
        ]
    );
    assert!(
        found[2]
            .1
            .starts_with(r#"portmap: unknown key "masqall" (did you mean "masqAll"?)"#),
        "{}",
        found[2].1
    );
    assert!(
        found[1].1.contains(r#"(did you mean "rangeStart"?)"#),
        "{}",
        found[1].1
    );
    assert!(
        found[3].1.contains(r#"(did you mean "sysctl"?)"#),
        "{}",
        found[3].1
    );

    // A single config, and whereabouts (which multus carries) in it.
    let config = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1", "vlanid": 5,
        "ipam": {"type": "whereabouts", "range": "192.168.2.0/24", "range_begin": "192.168.2.9",
                 "log_level": "debug"}});
    let run = lint_config(&config, &[]);
    let paths: Vec<String> = run
        .findings()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        paths,
        ["spec.config.vlanid", "spec.config.ipam.range_begin"],
        "{}",
        run.stdout
    );
    says(
        &run.findings()[1],
        r#"whereabouts: unknown key "ipam.range_begin""#,
    );
}

#[test]
fn a_config_without_a_name_gets_the_nads() {
    // As multus gives it: no "missing network name" error.
    let run = lint_config(&json!({"cniVersion": "1.0.0", "type": "bridge"}), &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
}

#[test]
fn types_that_are_not_built_in_are_noted_not_passed() {
    let config = json!({"cniVersion": "1.0.0", "type": "sriov", "ipam": {"type": "calico-ipam"}});
    let run = lint_config(&config, &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    let notes = run.findings();
    assert_eq!(notes.len(), 2, "{}", run.stdout);
    assert!(notes.iter().all(|n| n["severity"] == "note"));
    assert_eq!(notes[0]["path"], "spec.config.type");
    says(&notes[0], "no \"sriov\" binary in /nonexistent");
    assert_eq!(notes[1]["path"], "spec.config.ipam.type");
    says(&notes[1], "\"calico-ipam\" is not built into multus-rs");
    // whereabouts is carried by multus: its section is checked, and this one passes.
    let config = json!({"cniVersion": "1.0.0", "type": "sriov", "ipam": {"type": "whereabouts", "range": "192.168.2.0/24"}});
    let run = lint_config(&config, &[]);
    assert_eq!(run.findings().len(), 1, "{}", run.stdout);
}

#[test]
fn json_output_shape() {
    let run = lint_config(&macvlan("eth0", host_local("10.43.1.0/24")), &[]);
    let report = run.json();
    assert_eq!(
        report["summary"],
        json!({"nads": 1, "pods": 0, "errors": 1, "warnings": 1, "notes": 0, "exitStatus": 2})
    );
    assert_eq!(run.status, 2);
    let f = &report["findings"][1];
    let keys: Vec<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["severity", "check", "file", "document", "kind", "object", "path", "problem", "fix"]
    );
    assert!(f["file"].as_str().unwrap().ends_with("/nad.yaml"));
    assert_eq!(f["document"], 1);
}

#[test]
fn text_output_names_file_nad_path_problem_and_fix() {
    let files = Files::new();
    let file = files.write(
        "nad.yaml",
        &nad("net1", &macvlan("eth1", host_local("10.42.1.0/24"))),
    );
    let run = lint(&[&file]);
    assert_eq!(run.status, 2);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    assert!(lines[0].starts_with(&format!(
        "{file} (document 1): NetworkAttachmentDefinition lab/net1: spec.config.ipam.ranges[0][0].subnet: error [reserved-overlap]: range 10.42.1.0/24 overlaps"
    )), "{}", lines[0]);
    assert!(
        lines[1].starts_with("    fix: use a range outside 10.42.0.0/16"),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[2],
        "1 error, 0 warnings, 0 notes in 1 NetworkAttachmentDefinition and 0 pods"
    );
}

#[test]
fn multi_document_files_lists_and_directories() {
    let files = Files::new();
    let good = macvlan("eth1", host_local("192.168.50.0/24"));
    let bad = macvlan("eth1", host_local("10.42.0.0/24"));
    // Three documents (one empty), then a List with two NADs in a subdirectory.
    files.write(
        "a.yaml",
        &format!("{}---\n---\n{}", nad("one", &good), nad("two", &bad)),
    );
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "three"}, "spec": {"config": good.to_string()}},
        {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "four"}, "spec": {"config": bad.to_string()}}]});
    files.write("sub/b.json", &list.to_string());
    files.write("sub/readme.txt", "not read");
    let run = lint(&["--output", "json", files.path()]);
    assert_eq!(run.json()["summary"]["nads"], 4, "{}", run.stdout);
    let found: Vec<(String, Value, String)> = run
        .findings()
        .iter()
        .map(|f| {
            let file = f["file"].as_str().unwrap();
            (
                file[files.path().len()..].to_owned(),
                f["document"].clone(),
                f["object"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("/a.yaml".to_owned(), json!(3), "lab/two".to_owned()),
            (
                "/sub/b.json".to_owned(),
                json!(1),
                "default/four".to_owned()
            ),
        ]
    );
    // --namespace names the namespace of objects that give none.
    let run = lint(&[
        "--output",
        "json",
        "--namespace",
        "ops",
        &format!("{}/sub/b.json", files.path()),
    ]);
    assert_eq!(run.only("reserved-overlap")["object"], "ops/four");
}

#[test]
fn invalid_yaml_json_and_objects_are_clear_errors() {
    let files = Files::new();
    let yaml = files.write(
        "broken.yaml",
        "kind: NetworkAttachmentDefinition\nmetadata:\n  name: x\n   bad: indent\n",
    );
    let run = lint(&["--output", "json", &yaml]);
    assert_eq!(run.status, 2);
    let f = run.only("yaml");
    assert!(
        f["problem"]
            .as_str()
            .unwrap()
            .starts_with("not valid YAML: "),
        "{f}"
    );
    says(&f, "line 4");

    let json_bad = files.write(
        "json.yaml",
        "kind: NetworkAttachmentDefinition\nmetadata:\n  name: x\nspec:\n  config: |\n    {\"cniVersion\": \"1.0.0\",\n     \"type\": \"bridge\",}\n",
    );
    let run = lint(&["--output", "json", &json_bad]);
    assert_eq!(run.status, 2);
    let f = run.only("json");
    assert_eq!(f["path"], "spec.config");
    says(&f, "not valid JSON: trailing comma at line 2");

    let other = files.write(
        "other.yaml",
        "kind: NetworkAttachmentDefinition\nmetadata:\n  name: x\nspec:\n  config: 5\n---\nfoo: bar\n---\n[1, 2]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\nkind: NetworkAttachmentDefinition\nspec:\n  config: '{}'\n",
    );
    let run = lint(&["--output", "json", &other]);
    assert_eq!(run.status, 2);
    let found: Vec<(String, Value)> = run
        .findings()
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_owned(),
                f["document"].clone(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("nad".to_owned(), json!(1)),
            ("input".to_owned(), json!(2)),
            ("input".to_owned(), json!(3)),
            ("input".to_owned(), json!(4)),
            ("nad".to_owned(), json!(5)),
        ]
    );
    assert_eq!(run.findings()[3]["severity"], "note");

    let missing = lint(&["/nonexistent/nads.yaml"]);
    assert_eq!(missing.status, 2);
    assert!(
        missing.stdout.contains("cannot read file"),
        "{}",
        missing.stdout
    );

    let not_a_list = lint_config(
        &json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}),
        &[],
    );
    assert_eq!(not_a_list.status, 2);
    says(&not_a_list.only("config"), "has no plugins");
}

#[test]
fn cni_plugins_is_found_beside_multus_or_in_the_bin_dir() {
    let alone = tempfile::tempdir().unwrap();
    let multus = alone.path().join("multus");
    copy_executable(Path::new(MULTUS), &multus);
    let files = Files::new();
    let file = files.write(
        "nad.yaml",
        &nad(
            "net1",
            &json!({"cniVersion": "1.0.0", "type": "bridge", "vlan": 5000}),
        ),
    );
    let run_with = |bin_dir: &Path| {
        output(
            Command::new(&multus)
                .args([
                    "lint",
                    "--output",
                    "json",
                    "--cni-bin-dir",
                    bin_dir.to_str().unwrap(),
                    &file,
                ])
                .output()
                .unwrap(),
        )
    };
    // Nowhere: nothing is checked, and the report says so.
    let empty = tempfile::tempdir().unwrap();
    let run = run_with(empty.path());
    assert_eq!(run.status, 0, "{}", run.stdout);
    let notes = run.findings();
    assert!(
        notes[0]["problem"]
            .as_str()
            .unwrap()
            .starts_with("cni-plugins not found"),
        "{}",
        run.stdout
    );
    assert!(notes.iter().all(|n| n["severity"] == "note"));

    // In the bin dir, as on a node.
    let bin = tempfile::tempdir().unwrap();
    copy_executable(&cni_plugins(), &bin.path().join("cni-plugins"));
    let run = run_with(bin.path());
    assert_eq!(run.status, 2, "{}", run.stdout);
    says(&run.only("plugin-options"), "vlan: 5000");
}

#[test]
fn a_chained_ipvlan_is_checked_with_an_earlier_result() {
    // Standalone, an ipvlan without ipam has no addresses: ipvlan's own check refuses it.
    let alone = lint_config(
        &json!({"cniVersion": "1.0.0", "type": "ipvlan", "master": "eth1"}),
        &[
            "--cni-bin-dir",
            cni_plugins().parent().unwrap().to_str().unwrap(),
        ],
    );
    assert_eq!(alone.status, 2, "{}", alone.stdout);
    // After another plugin it takes its master and addresses from that plugin's result.
    let chained = lint_config(
        &json!({"cniVersion": "1.0.0", "name": "chain", "plugins": [
            {"type": "macvlan", "master": "eth1", "ipam": host_local("192.168.50.0/24")},
            {"type": "ipvlan"}]}),
        &[
            "--cni-bin-dir",
            cni_plugins().parent().unwrap().to_str().unwrap(),
        ],
    );
    assert_eq!(chained.status, 0, "{}{}", chained.stdout, chained.stderr);
}

/// upstream's own default-route case: static IPAM with no capability, the pod's "ips" reach it
/// through CNI_ARGS IP. multus accepts it, and so does lint.
#[test]
fn ips_reach_static_ipam_without_the_capability() {
    let files = Files::new();
    files.write(
        "nads.yaml",
        &nad("plain", &macvlan("eth1", json!({"type": "static"}))),
    );
    files.write(
        "pods.yaml",
        &pod(
            "a",
            &json!([{"name": "plain", "ips": ["10.1.1.21/24"], "default-route": ["10.1.1.254"]}]),
        ),
    );
    let run = lint(&["--output", "json", files.path()]);
    assert!(
        run.findings().iter().all(|f| f["check"] != "capability"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.status, 1,
        "only the static-without-address warning: {}",
        run.stdout
    );
}

/// `--policy`: `@uplink` makes a master on the uplink an error; a policy of the admin's own
/// denies types, masters, default routes, subnets and other namespaces' NADs, each named as a
/// finding of its own.
#[test]
fn a_policy_turns_what_it_denies_into_errors() {
    let files = Files::new();
    let uplink_policy = files.write("uplink.yaml", "deniedMasters: [\"@uplink\"]\n");
    let on_uplink = macvlan("eth0", host_local("192.168.1.0/24"));
    let run = lint_config(&on_uplink, &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert_eq!(run.only("master-default-route")["severity"], "warning");
    let run = lint_config(&on_uplink, &["--policy", &uplink_policy]);
    assert_eq!(run.status, 2, "{}", run.stdout);
    let finding = run.only("master-default-route");
    assert_eq!(finding["severity"], "error");
    says(&finding, "the policy's deniedMasters has \"@uplink\"");

    let policy = files.write(
        "policy.yaml",
        "allowedTypes: [macvlan, bridge]\nallowedIpamTypes: [host-local]\n\
         allowedMasters: [\"eth1.*\"]\ndeniedMasters: [eth1.13]\ndefaultRoute: deny\n\
         deniedSubnets: [192.168.0.0/16]\ncrossNamespaceFrom: [infra]\n",
    );
    let config = json!({"cniVersion": "1.0.0", "type": "ipvlan", "master": "eth1.13",
        "ipam": {"type": "static", "addresses": [{"address": "192.168.3.4/24"}],
                 "routes": [{"dst": "0.0.0.0/0", "gw": "192.168.3.1"}]}});
    let run = lint_config(&config, &["--policy", &policy]);
    assert_eq!(run.status, 2, "{}", run.stdout);
    says(
        &run.only("policy-type"),
        "\"ipvlan\" is not on the policy's allowedTypes",
    );
    says(
        &run.only("policy-ipam-type"),
        "\"static\" is not on the policy's allowedIpamTypes",
    );
    says(&run.only("policy-master"), "deniedMasters has \"eth1.13\"");
    assert_eq!(run.only("ipam-default-route")["severity"], "error");
    says(&run.only("reserved-overlap"), "a subnet the policy denies");
    let other = macvlan("eth1.7", host_local("10.99.0.0/24"));
    let run = lint_config(&other, &["--policy", &policy]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    let run = lint_config(
        &macvlan("eth2", host_local("10.99.0.0/24")),
        &["--policy", &policy],
    );
    says(
        &run.only("policy-master"),
        "not on the policy's allowedMasters (eth1.*)",
    );

    let pod_file = files.write(
        "pod.yaml",
        &pod("p", &json!([{"name": "net", "namespace": "infra"}])),
    );
    let run = lint(&["--output", "json", "--policy", &policy, &pod_file]);
    assert_eq!(run.status, 2, "{}", run.stdout);
    says(&run.only("policy-cross-namespace"), "references infra/net");
}

/// A policy that cannot be read is the one finding: nothing is checked against half a policy.
#[test]
fn a_broken_policy_is_an_error_naming_it() {
    let files = Files::new();
    let policy = files.write("policy.yaml", "allowedType: [macvlan]\n");
    let run = lint_config(
        &macvlan("eth1", host_local("10.99.0.0/24")),
        &["--policy", &policy],
    );
    assert_eq!(run.status, 2, "{}", run.stdout);
    let finding = run.only("policy");
    says(&finding, "allowedType");
    assert_eq!(run.findings().len(), 1, "{}", run.stdout);
    let run = lint_config(
        &macvlan("eth1", host_local("10.99.0.0/24")),
        &["--policy", "/nonexistent/p.yaml"],
    );
    says(
        &run.only("policy"),
        "cannot read the policy /nonexistent/p.yaml",
    );
}

/// NADs from documentation, as their guides give them: upstream Multus's quickstart, MicroShift's
/// walkthrough, and upstream's e2e cases.
const DOCUMENTED_NADS: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan-conf
spec:
  config: '{"cniVersion": "0.3.0", "type": "macvlan", "master": "eth0", "mode": "bridge",
    "ipam": {"type": "host-local", "subnet": "192.168.1.0/24", "rangeStart": "192.168.1.200",
             "rangeEnd": "192.168.1.216", "routes": [{"dst": "0.0.0.0/0"}],
             "gateway": "192.168.1.1"}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: bridge-conf
spec:
  config: '{"cniVersion": "0.4.0", "type": "bridge", "bridge": "br-test", "mode": "bridge",
    "ipam": {"type": "host-local",
             "ranges": [[{"subnet": "10.10.0.0/16", "rangeStart": "10.10.1.20",
                          "rangeEnd": "10.10.3.50", "gateway": "10.10.0.254"}]],
             "dataDir": "/var/lib/cni/br-test"}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan1-config
spec:
  config: '{"cniVersion": "1.0.0", "plugins": [
      {"type": "macvlan", "capabilities": {"ips": true}, "master": "eth1", "mode": "bridge",
       "ipam": {"type": "static"}},
      {"type": "tuning"}]}'
"#;

/// The shipped policy admits what users are shown: every bundled example and the documented
/// NADs, on a node whose uplink is their master (eth0) and on one where it is not.
#[test]
fn the_shipped_policy_admits_the_examples_and_documented_nads() {
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/admission/component/policy.yaml"
    );
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let plugins = cni_plugins();
    let bin_dir = plugins
        .parent()
        .expect("a directory")
        .to_str()
        .expect("UTF-8");
    let files = Files::new();
    let documented = files.write("documented.yaml", DOCUMENTED_NADS);
    let run = |uplink: &str| {
        output(
            Command::new(MULTUS)
                .args(["lint", "--output", "json", "--policy", shipped])
                .args([
                    "--default-route-interface",
                    uplink,
                    "--cni-bin-dir",
                    bin_dir,
                ])
                .args([examples, documented.as_str()])
                .output()
                .expect("runs the command"),
        )
    };
    for uplink in ["enp1s0", "eth0"] {
        let admitted = run(uplink);
        assert!(admitted.status < 2, "{uplink}: {}", admitted.stdout);
        assert!(
            admitted.json()["summary"]["nads"].as_u64() >= Some(9),
            "{}",
            admitted.stdout
        );
    }
}

/// What an attacker's review found getting past the policy: a whereabouts range in the pod
/// network, a master left out under `allowedMasters`, a default route in two halves or as a
/// bridge's `isDefaultGateway`, a list of a thousand plugins, and another namespace's NAD as a
/// pod's default network.
#[test]
fn the_policy_is_not_sidestepped() {
    let files = Files::new();
    let policy = files.write(
        "policy.yaml",
        "allowedMasters: [eth1]\ndefaultRoute: deny\ncrossNamespaceFrom: [infra]\n",
    );
    let with = |config: &Value| lint_config(config, &["--policy", &policy]);
    let wb = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1",
        "ipam": {"type": "whereabouts", "range": "10.42.5.0/24"}});
    says(
        &with(&wb).only("reserved-overlap"),
        "range 10.42.5.0/24 overlaps the cluster's pod network",
    );
    let wb = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1",
        "ipam": {"type": "whereabouts", "ipRanges": [{"range": "10.43.0.10-10.43.0.20/24"}]}});
    let run = with(&wb);
    let found = run.only("reserved-overlap");
    assert_eq!(found["path"], "spec.config.ipam.ipRanges[0].range");
    says(&found, "the cluster's service network");

    let no_master = json!({"cniVersion": "1.0.0", "type": "macvlan",
        "ipam": {"type": "host-local", "subnet": "192.168.9.0/24"}});
    says(&with(&no_master).only("policy-master"), "no \"master\"");
    let by_pci = json!({"cniVersion": "1.0.0", "type": "host-device", "pciBusID": "0000:00:1f.6"});
    says(&with(&by_pci).only("policy-master"), "no \"device\"");

    let halves = macvlan(
        "eth1",
        json!({"type": "host-local", "subnet": "192.168.9.0/24",
        "routes": [{"dst": "0.0.0.0/1"}, {"dst": "128.0.0.0/1"}]}),
    );
    let run = with(&halves);
    assert_eq!(run.status, 2, "{}", run.stdout);
    assert_eq!(
        run.checks()
            .iter()
            .filter(|c| *c == "ipam-default-route")
            .count(),
        2
    );
    let gateway = json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": "br1",
        "isDefaultGateway": true, "ipam": {"type": "host-local", "subnet": "192.168.9.0/24"}});
    assert_eq!(
        with(&gateway).only("ipam-default-route")["severity"],
        "error"
    );

    let many: Vec<Value> = (0..1000).map(|_| json!({"type": "tuning"})).collect();
    let run = lint_config(&json!({"cniVersion": "1.0.0", "plugins": many}), &[]);
    says(
        &run.only("config"),
        "the list chains 1000 plugins: at most 32",
    );

    let pod_file = files.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: lab\n  annotations:\n    \
         v1.multus-cni.io/default-network: other/primary\nspec:\n  containers: []\n",
    );
    let run = lint(&["--output", "json", "--policy", &policy, &pod_file]);
    says(
        &run.only("policy-cross-namespace"),
        "takes other/primary as its cluster network",
    );
}
