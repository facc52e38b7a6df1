//! A real runtime: podman with its CNI backend runs a container on a network whose plugin is
//! multus; the container gets the cluster network and a second network from
//! `defaultNetworks`, reaches both gateways, and `--rm` leaves nothing behind.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use testkit::{Netns, PluginDir};

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A busybox image made locally: no image can be pulled here.
fn import_busybox(scratch: &Path, env: &[(&str, String)]) {
    let root = scratch.join("rootfs");
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir rootfs");
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("copy busybox");
    for applet in ["sh", "ip", "ping"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).expect("applet");
    }
    let import = format!(
        "tar -C {} -c . | podman import --change 'CMD [\"/bin/sh\"]' - localhost/busybox:multus",
        root.display()
    );
    let out = Command::new("sh")
        .args(["-c", &import])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("podman import");
    assert!(
        out.status.success(),
        "podman import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn podman_runs_a_container_on_multus_with_two_networks() {
    let plugins = PluginDir::new(&common::plugins_bin(), &["bridge", "host-local"]);
    std::os::unix::fs::symlink(common::multus_bin(), plugins.path().join("multus"))
        .expect("link multus");
    let scratch = tempfile::tempdir().expect("tempdir");
    let s = scratch.path();
    for d in ["net", "tmp", "multus.d"] {
        std::fs::create_dir_all(s.join(d)).expect("mkdir");
    }
    write(
        &s.join("containers.conf"),
        &format!(
            "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1000:1000\"]\n\
             [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{}\"]\nnetwork_config_dir = \"{}\"\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\ntmp_dir = \"{}\"\n",
            plugins.path().display(),
            s.join("net").display(),
            s.join("tmp").display()
        ),
    );
    write(
        &s.join("storage.conf"),
        &format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            s.join("storage").display(),
            s.join("runroot").display()
        ),
    );
    let ipam = s.join("ipam").display().to_string();
    write(
        &s.join("multus.d/storage.conf"),
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"storage","type":"bridge","bridge":"ms1","isGateway":true,
               "ipam":{{"type":"host-local","subnet":"10.78.0.0/24","dataDir":"{ipam}"}}}}"#
        ),
    );
    write(
        &s.join("net/multus.conflist"),
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"multus-net","plugins":[{{"type":"multus",
               "confDir":"{conf}","cniDir":"{cni}","defaultNetworks":["storage"],
               "delegates":[{{"cniVersion":"1.0.0","name":"cluster","type":"bridge","bridge":"ms0",
                 "isGateway":true,"ipam":{{"type":"host-local","subnet":"10.77.0.0/24","dataDir":"{ipam}",
                 "routes":[{{"dst":"0.0.0.0/0"}}]}}}}]}}]}}"#,
            conf = s.join("multus.d").display(),
            cni = s.join("cni").display(),
        ),
    );
    let env = [
        (
            "CONTAINERS_CONF",
            s.join("containers.conf").display().to_string(),
        ),
        (
            "CONTAINERS_STORAGE_CONF",
            s.join("storage.conf").display().to_string(),
        ),
    ];
    import_busybox(s, &env);

    let node = Netns::new("podman-multus");
    // nsenter, not `ip netns exec`: the latter remounts /sys and hides the cgroup mounts runc needs.
    let out = Command::new("nsenter")
        .arg(format!("--net={}", node.path().display()))
        .args(["podman", "--network-backend", "cni", "run", "--rm"])
        .args([
            "--network",
            "multus-net",
            "localhost/busybox:multus",
            "sh",
            "-c",
        ])
        .arg("ip -4 addr show; ping -c1 -W2 10.77.0.1 && ping -c1 -W2 10.78.0.1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run podman");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "podman run failed:\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("inet 10.77.0.2/24"), "eth0: {stdout}");
    assert!(stdout.contains("inet 10.78.0.2/24"), "net1: {stdout}");
    assert_eq!(
        stdout.matches("1 packets received").count(),
        2,
        "both gateways: {stdout}"
    );

    // `--rm` tore every attachment down: no veth, no reservation, no cache.
    let links = node.links();
    assert!(
        !links.iter().any(|l| l.starts_with("veth")),
        "veth left behind: {links:?}"
    );
    assert_eq!(
        testkit::reservation_files(&s.join("ipam")),
        Vec::<String>::new()
    );
    let cached: Vec<_> = std::fs::read_dir(s.join("cni"))
        .map(|d| d.flatten().filter(|e| e.path().is_file()).collect())
        .unwrap_or_default();
    assert!(cached.is_empty(), "delegate cache left behind: {cached:?}");
    let results: Vec<_> = std::fs::read_dir(s.join("cni/results"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(results.is_empty(), "result cache left behind: {results:?}");
}
