//! A real runtime: podman with its CNI backend runs a container attached through our bridge and
//! host-local, inside a node namespace the test owns, and the container reaches its gateway.

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
    let list = Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let link = root.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", link).expect("applet link");
        }
    }
    let import = format!(
        "tar -C {} -c . | podman import --change 'CMD [\"/bin/sh\"]' - localhost/busybox:test",
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
fn podman_container_gets_bridge_network_and_reaches_gateway() {
    let plugins = PluginDir::new(
        Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
        &["bridge", "host-local", "static"],
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let s = scratch.path();
    std::fs::create_dir_all(s.join("net")).expect("mkdir");
    std::fs::create_dir_all(s.join("tmp")).expect("mkdir");
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
    write(
        &s.join("net/rsnet.conflist"),
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"rsnet","plugins":[{{"type":"bridge","bridge":"rs0","isGateway":true,
               "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.77.0.0/24"}}]],"dataDir":"{}"}}}}]}}"#,
            s.join("ipam").display()
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

    let node = Netns::new("podman");
    // nsenter, not `ip netns exec`: the latter remounts /sys and hides the cgroup mounts runc needs.
    let out = Command::new("nsenter")
        .arg(format!("--net={}", node.path().display()))
        .args([
            "podman",
            "--network-backend",
            "cni",
            "run",
            "--rm",
            "--network",
            "rsnet",
        ])
        .args([
            "localhost/busybox:test",
            "sh",
            "-c",
            "ip -4 addr show eth0; ping -c1 -W2 10.77.0.1",
        ])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run podman");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "podman run failed:\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("inet 10.77.0.2/24"),
        "container address: {stdout}"
    );
    assert!(
        stdout.contains("1 packets received"),
        "ping to the gateway: {stdout}"
    );

    // The bridge landed in the node namespace, and `--rm` tore the attachment down.
    let links = node.links();
    assert!(
        links.contains(&"rs0".to_owned()),
        "bridge in the node namespace: {links:?}"
    );
    assert!(
        !links.iter().any(|l| l.starts_with("veth")),
        "veth left behind: {links:?}"
    );
    let ipam_dir = s.join("ipam/rsnet");
    assert!(ipam_dir.is_dir(), "no ipam dir {}", ipam_dir.display());
    let reserved = testkit::reservation_files(&ipam_dir);
    assert!(
        reserved.is_empty(),
        "address reservation left behind: {reserved:?}"
    );
}
