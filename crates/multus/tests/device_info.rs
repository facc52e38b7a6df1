//! `device-info` in network-status, end to end: the real `multus` binary against testkit's API
//! server, with small delegates that write the device-info file they are given (as SR-IOV or
//! userspace CNI plugins do), a device plugin's file for the NAD's resource, and `deviceInfoDir`
//! pointing into the test's own directory.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{Sandbox, CONTAINER_ID, POD_NAME, POD_NS, POD_UID};
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, KubeApiServer, KubeconfigAuth, Scheme};
use testkit::CniOutput;

const STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

/// What the `writer` delegate reports about its device.
fn vhost_user() -> Value {
    json!({"type": "vhost-user", "version": "1.1.0",
           "vhost-user": {"mode": "server", "path": "/var/run/vhost/sock0"}})
}

/// A delegate that logs the device-info file it was given (`none` without one), writes
/// `content` there on ADD (making the directory, as plugins do), and returns its interface
/// with one address.
fn device_delegate(content: &str) -> String {
    format!(
        r#"conf=$(cat)
file=$(printf '%s' "$conf" | sed -n 's/.*"CNIDeviceInfoFile":"\([^"]*\)".*/\1/p')
echo "$CNI_COMMAND $CNI_IFNAME ${{file:-none}}" >> "$(dirname "$0")/devinfo.log"
[ "$CNI_COMMAND" = ADD ] || exit 0
if [ -n "$file" ]; then mkdir -p "$(dirname "$file")"; printf '%s' '{content}' > "$file"; fi
printf '{{"cniVersion":"1.0.0","interfaces":[{{"name":"%s","sandbox":"%s"}}],"ips":[{{"address":"10.77.0.2/24","interface":0}}]}}' "$CNI_IFNAME" "$CNI_NETNS""#
    )
}

struct Setup {
    sb: Sandbox,
    server: KubeApiServer,
    conf: String,
}

impl Setup {
    /// A pod whose networks annotation is `networks`; the cluster network is a `writer`
    /// without the capability.
    fn new(networks: &str) -> Setup {
        let sb = Sandbox::new();
        sb.script("writer", &device_delegate(&vhost_user().to_string()));
        sb.script("garbage", &device_delegate("not json"));
        let server = KubeApiServer::start_in(Scheme::Https, &sb.node).unwrap();
        let kubeconfig = sb.dir.path().join("multus.kubeconfig");
        server
            .write_kubeconfig(&kubeconfig, KubeconfigAuth::Token)
            .unwrap();
        let mut pod = pod_manifest(POD_NS, POD_NAME);
        pod["metadata"]["uid"] = json!(POD_UID);
        pod["metadata"]["annotations"] = json!({ "k8s.v1.cni.cncf.io/networks": networks });
        server.add_pod(pod);
        let conf = sb.multus(
            "1.0.0",
            vec![json!({"cniVersion": "1.0.0", "name": "cluster", "type": "writer"})],
            json!({
                "kubeconfig": kubeconfig,
                "deviceInfoDir": sb.dir.path().join("devinfo"),
                "apiTimeoutSeconds": 2,
                "apiRetries": 1,
            }),
        );
        Setup { sb, server, conf }
    }

    fn devinfo_dir(&self) -> PathBuf {
        self.sb.dir.path().join("devinfo")
    }

    /// The file of the pod's `net1` on network `default/<nad>`, named as the reference does.
    fn cni_file(&self, nad: &str) -> PathBuf {
        self.devinfo_dir()
            .join("cni")
            .join(format!("{POD_NS}-{nad}-{CONTAINER_ID}_net1"))
    }

    /// A NAD in the pod's namespace whose plugin is `plugin`; `capability` declares
    /// `CNIDeviceInfoFile`.
    fn nad(&self, name: &str, plugin: &str, capability: bool, annotations: Value) {
        let mut conf = json!({"cniVersion": "1.0.0", "name": name, "type": plugin});
        if capability {
            conf["capabilities"] = json!({"CNIDeviceInfoFile": true});
        }
        self.server.add_annotated_nad(
            POD_NS,
            name,
            annotations,
            json!({"config": conf.to_string()}),
        );
    }

    fn cmd(&self, command: &str) -> CniOutput {
        self.sb.cmd(command, &self.conf)
    }

    fn network_status(&self) -> Value {
        let pod = self.server.pod(POD_NS, POD_NAME).unwrap();
        serde_json::from_str(pod["metadata"]["annotations"][STATUS].as_str().unwrap()).unwrap()
    }

    /// The delegates' calls: `<command> <ifname> <device-info file or none>`.
    fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.sb.plugins.path().join("devinfo.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn cni_files(&self) -> Vec<String> {
        let mut files: Vec<String> = fs::read_dir(self.devinfo_dir().join("cni"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_delegate_with_the_capability_reports_its_device_in_network_status() {
    let s = Setup::new("dev");
    s.nad("dev", "writer", true, json!({}));
    s.cmd("ADD").ok();
    let file = s.cni_file("dev");
    assert_eq!(
        s.calls(),
        [
            "ADD eth0 none".to_owned(),
            format!("ADD net1 {}", file.display())
        ]
    );
    assert_eq!(read_json(&file), vhost_user());
    assert_eq!(
        s.network_status(),
        json!([
            {"name": "cluster", "interface": "eth0", "ips": ["10.77.0.2"], "default": true,
             "dns": {}},
            {"name": "default/dev", "interface": "net1", "ips": ["10.77.0.2"], "dns": {},
             "device-info": vhost_user()}
        ])
    );

    s.cmd("DEL").ok();
    assert_eq!(
        s.calls()[2..],
        [
            format!("DEL net1 {}", file.display()),
            "DEL eth0 none".to_owned()
        ]
    );
    assert_eq!(s.cni_files(), Vec::<String>::new());
    s.sb.assert_clean("after DEL");
}

#[test]
fn a_device_plugin_file_is_copied_for_the_nads_resource_and_the_pods_device() {
    let s = Setup::new(r#"[{"name": "sriov", "deviceID": "0000:03:02.0"}]"#);
    // A plugin that does not write device-info: what shows is the device plugin's.
    s.nad(
        "sriov",
        "writer",
        false,
        json!({"k8s.v1.cni.cncf.io/resourceName": "example.com/sriov_vf"}),
    );
    let pci = json!({"type": "pci", "version": "1.1.0",
                     "pci": {"pci-address": "0000:03:02.0", "pf-pci-address": "0000:03:00.0"}});
    let dp_file = s
        .devinfo_dir()
        .join("dp/example.com-sriov_vf-0000:03:02.0-device.json");
    fs::create_dir_all(dp_file.parent().unwrap()).unwrap();
    fs::write(&dp_file, pci.to_string()).unwrap();

    s.cmd("ADD").ok();
    // The delegate has no capability: it gets no path (nor would the reference pass one).
    assert_eq!(s.calls(), ["ADD eth0 none", "ADD net1 none"]);
    assert_eq!(read_json(&s.cni_file("sriov")), pci);
    assert_eq!(s.network_status()[1]["device-info"], pci);
    assert!(s.network_status()[0].get("device-info").is_none());

    s.cmd("DEL").ok();
    assert_eq!(s.cni_files(), Vec::<String>::new());
    // The device plugin's own file is the device plugin's to remove.
    assert_eq!(read_json(&dp_file), pci);
    s.sb.assert_clean("after DEL");
}

#[test]
fn an_unusable_device_info_file_is_a_warning_not_a_failed_pod() {
    let s = Setup::new("bad");
    s.nad("bad", "garbage", true, json!({}));
    s.cmd("ADD").ok();
    let status = s.network_status();
    assert_eq!(status[1]["name"], "default/bad");
    assert!(status[1].get("device-info").is_none(), "{status}");
    let warnings: Vec<String> = s
        .server
        .events()
        .iter()
        .filter(|e| e["reason"] == "DeviceInfoUnusable")
        .map(|e| format!("{} {}", e["type"], e["message"].as_str().unwrap()))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let expected = format!(
        "\"Warning\" network default/bad on interface net1: device-info file {}: is not valid JSON: ",
        s.cni_file("bad").display()
    );
    assert!(warnings[0].starts_with(&expected), "{warnings:?}");
    assert!(
        warnings[0].ends_with("; its network-status has no device-info"),
        "{warnings:?}"
    );

    s.cmd("DEL").ok();
    assert_eq!(s.cni_files(), Vec::<String>::new());
    s.sb.assert_clean("after DEL");
}

#[test]
fn a_failed_add_removes_the_device_info_files_it_made() {
    let s = Setup::new("dev, broken");
    s.nad("dev", "writer", true, json!({}));
    s.nad("broken", "fail", false, json!({}));
    let out = s.cmd("ADD");
    assert_eq!(out.err_code(), 11);
    assert!(out
        .stdout
        .contains("network default/broken on interface net2"));
    // The file was written (the delegate ran), then removed with the rollback.
    assert_eq!(
        s.calls(),
        [
            "ADD eth0 none".to_owned(),
            format!("ADD net1 {}", s.cni_file("dev").display()),
            format!("DEL net1 {}", s.cni_file("dev").display()),
            "DEL eth0 none".to_owned(),
        ]
    );
    assert_eq!(s.cni_files(), Vec::<String>::new());
    s.sb.assert_clean("after the failed ADD");
}
