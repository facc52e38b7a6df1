//! `device-info` in network-status, end to end: the real `multus` binary against testkit's API
//! server, with small delegates that write the device-info file they are given (as SR-IOV or
//! userspace CNI plugins do), a device plugin's file for the NAD's resource, and `deviceInfoDir`
//! pointing into the test's own directory; and device IDs from the kubelet's device
//! checkpoint (`kubeletCheckpointFile`, also in the test's directory) or its pod-resources API
//! (testkit's fake on `podResourcesSocket`) for NADs naming a resource.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{Sandbox, CONTAINER_ID, POD_NAME, POD_NS, POD_UID};
use serde_json::{json, Value};
use testkit::kube_api::{pod_manifest, KubeApiServer, Scheme};
use testkit::pod_resources::{Allocation, Answer, PodResourcesServer};
use testkit::CniOutput;

const STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const RESOURCE: &str = "example.com/sriov_vf";

/// What the `writer` delegate reports about its device.
fn vhost_user() -> Value {
    json!({"type": "vhost-user", "version": "1.1.0",
           "vhost-user": {"mode": "server", "path": "/var/run/vhost/sock0"}})
}

/// A delegate that logs the device-info file it was given (`none` without one), keeps its
/// stdin config as `stdin-<plugin>-<command>-<ifname>.json`, writes `content` to the file on
/// ADD (making the directory, as plugins do), and returns its interface with one address.
fn device_delegate(content: &str) -> String {
    format!(
        r#"conf=$(cat)
printf '%s' "$conf" > "$(dirname "$0")/stdin-$(basename "$0")-$CNI_COMMAND-$CNI_IFNAME.json"
file=$(printf '%s' "$conf" | sed -n 's/.*"CNIDeviceInfoFile":"\([^"]*\)".*/\1/p')
echo "$CNI_COMMAND $CNI_IFNAME ${{file:-none}}" >> "$(dirname "$0")/devinfo.log"
[ "$CNI_COMMAND" = ADD ] || exit 0
if [ -n "$file" ]; then mkdir -p "$(dirname "$file")"; printf '%s' '{content}' > "$file"; fi
# The cluster network's address on eth0, one of another subnet per secondary interface.
case "$CNI_IFNAME" in eth0) address=10.77.0.2 ;; *) address="10.78.${{CNI_IFNAME#net}}.2" ;; esac
printf '{{"cniVersion":"1.0.0","interfaces":[{{"name":"%s","sandbox":"%s"}}],"ips":[{{"address":"%s/24","interface":0}}]}}' "$CNI_IFNAME" "$CNI_NETNS" "$address""#
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
        sb.script("chained", &device_delegate(&vhost_user().to_string()));
        let server =
            KubeApiServer::start_in(Scheme::Https, &sb.node).expect("starts the test server");
        common::cluster::enforce_rbac(&server, "base");
        let kubeconfig = sb.dir.path().join("multus.kubeconfig");
        server
            .write_kubeconfig(&kubeconfig, common::cluster::multus_account())
            .expect("writes the kubeconfig");
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
                "kubeletCheckpointFile": sb.dir.path().join("kubelet_internal_checkpoint"),
                // Not there unless a test starts the API: the checkpoint is read.
                "podResourcesSocket": sb.dir.path().join("kubelet.sock"),
                "apiTimeoutSeconds": 2,
                "apiRetries": 1,
            }),
        );
        let s = Setup { sb, server, conf };
        // The kubelet allocated the pod nothing.
        s.checkpoint(json!([]));
        s
    }

    fn checkpoint_path(&self) -> PathBuf {
        self.sb.dir.path().join("kubelet_internal_checkpoint")
    }

    /// The kubelet's device checkpoint with `entries` as its `PodDeviceEntries`, and another
    /// pod's device of every resource.
    fn checkpoint(&self, entries: Value) {
        let mut entries = entries.as_array().expect("an array").clone();
        entries.push(json!({"PodUID": "another-pod", "ContainerName": "app",
                            "ResourceName": RESOURCE, "DeviceIDs": {"0": ["0000:03:02.0"]},
                            "AllocResp": "CgA="}));
        let file = json!({"Data": {"PodDeviceEntries": entries,
                                   "RegisteredDevices": {RESOURCE: ["0000:03:02.0"]}},
                          "Checksum": 1_234_567});
        fs::write(self.checkpoint_path(), file.to_string()).expect("writes a test file");
    }

    /// The kubelet's pod-resources API on `podResourcesSocket`, answering `answer`.
    fn pod_resources(&self, answer: Answer) -> PodResourcesServer {
        PodResourcesServer::start(&self.sb.dir.path().join("kubelet.sock"), answer)
            .expect("starts the test server")
    }

    /// The config a delegate got on stdin.
    fn stdin(&self, plugin: &str, command: &str, ifname: &str) -> Value {
        let file = format!("stdin-{plugin}-{command}-{ifname}.json");
        read_json(&self.sb.plugins.path().join(file))
    }

    /// A device plugin's device-info file for `device` of [`RESOURCE`]; returns its content.
    fn dp_file(&self, device: &str) -> Value {
        let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": device}});
        let file = self
            .devinfo_dir()
            .join(format!("dp/example.com-sriov_vf-{device}-device.json"));
        fs::create_dir_all(file.parent().expect("has a parent directory"))
            .expect("creates a test directory");
        fs::write(&file, info.to_string()).expect("writes a test file");
        info
    }

    fn devinfo_dir(&self) -> PathBuf {
        self.sb.dir.path().join("devinfo")
    }

    /// The file of the pod's `net1` on network `default/<nad>`, named as the reference does.
    fn cni_file(&self, nad: &str) -> PathBuf {
        self.cni_file_on(nad, "net1")
    }

    fn cni_file_on(&self, nad: &str, ifname: &str) -> PathBuf {
        self.devinfo_dir()
            .join("cni")
            .join(format!("{POD_NS}-{nad}-{CONTAINER_ID}_{ifname}"))
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
        let pod = self
            .server
            .pod(POD_NS, POD_NAME)
            .expect("the pod is on the server");
        serde_json::from_str(
            pod["metadata"]["annotations"][STATUS]
                .as_str()
                .expect("a string"),
        )
        .expect("valid JSON")
    }

    /// The delegates' calls: `<command> <ifname> <device-info file or none>`.
    fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.sb.plugins.path().join("devinfo.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// DEL succeeds and leaves no device-info file, link, or cache.
    fn del_leaves_nothing(&self) {
        self.cmd("DEL").ok();
        assert_eq!(self.cni_files(), Vec::<String>::new());
        self.sb.assert_clean("after DEL");
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
    serde_json::from_slice(&fs::read(path).expect("reads a test file")).expect("valid JSON")
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
            {"name": "default/dev", "interface": "net1", "ips": ["10.78.1.2"], "dns": {},
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
    let s = Setup::new(r#"[{"name": "sriov"}]"#);
    // A plugin that does not write device-info: what shows is the device plugin's.
    s.nad(
        "sriov",
        "writer",
        false,
        json!({"k8s.v1.cni.cncf.io/resourceName": RESOURCE}),
    );
    s.checkpoint(
        json!([{"PodUID": POD_UID, "ContainerName": "a", "ResourceName": RESOURCE,
                         "DeviceIDs": {"0": ["0000:03:02.1"]}}]),
    );
    let pci = s.dp_file("0000:03:02.1");
    let dp_file = s
        .devinfo_dir()
        .join("dp/example.com-sriov_vf-0000:03:02.1-device.json");

    s.cmd("ADD").ok();
    // The delegate has no capability: it gets no path (nor would the reference pass one).
    assert_eq!(s.calls(), ["ADD eth0 none", "ADD net1 none"]);
    assert_eq!(read_json(&s.cni_file("sriov")), pci);
    assert_eq!(s.network_status()[1]["device-info"], pci);
    assert!(s.network_status()[0].get("device-info").is_none());

    s.del_leaves_nothing();
    // The device plugin's own file is the device plugin's to remove.
    assert_eq!(read_json(&dp_file), pci);
}

#[test]
fn a_pods_annotation_cannot_pick_the_device_of_a_nads_resource() {
    // Another pod's device (the checkpoint gives 0000:03:02.0 to "another-pod"), named in
    // this pod's annotation: neither it nor its device-info file is this pod's.
    let s = Setup::new(r#"[{"name": "sriov", "deviceID": "0000:03:02.0"}]"#);
    s.nad(
        "sriov",
        "writer",
        false,
        json!({"k8s.v1.cni.cncf.io/resourceName": RESOURCE}),
    );
    s.dp_file("0000:03:02.0");
    s.checkpoint(json!([]));
    let out = s.cmd("ADD");
    assert_eq!(out.err_code(), 7, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("the kubelet allocated the pod"), "{msg}");
    assert_eq!(s.calls(), Vec::<String>::new());
    s.cmd("DEL").ok();
    s.sb.assert_clean("after DEL");
    // With a device of its own, the pod gets that one, whatever its annotation says.
    s.checkpoint(
        json!([{"PodUID": POD_UID, "ContainerName": "a", "ResourceName": RESOURCE,
                         "DeviceIDs": {"0": ["0000:03:02.1"]}}]),
    );
    let own = s.dp_file("0000:03:02.1");
    s.cmd("ADD").ok();
    assert_eq!(s.stdin("writer", "ADD", "net1")["deviceID"], "0000:03:02.1");
    assert_eq!(s.network_status()[1]["device-info"], own);
    s.del_leaves_nothing();
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

    s.del_leaves_nothing();
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

/// A pod selecting `networks`, NADs `nads` naming [`RESOURCE`], and the kubelet's allocation of
/// `devices` of it to the pod's container.
fn sriov_pod(networks: &str, nads: &[&str], devices: &[&str]) -> Setup {
    let s = Setup::new(networks);
    for name in nads {
        s.nad(
            name,
            "writer",
            false,
            json!({"k8s.v1.cni.cncf.io/resourceName": RESOURCE}),
        );
    }
    s.checkpoint(
        json!([{"PodUID": POD_UID, "ContainerName": "app", "ResourceName": RESOURCE,
                         "DeviceIDs": {"0": devices}, "AllocResp": "CgA="}]),
    );
    s
}

/// ADD fails with `code` and a message starting with `prefix`, before any delegate runs, and
/// leaves nothing behind; returns the message.
fn assert_refused(s: &Setup, code: u64, prefix: &str) -> String {
    let out = s.cmd("ADD");
    assert_eq!(out.err_code(), code, "{out:?}");
    let msg = out.json()["msg"].as_str().expect("a string").to_owned();
    assert!(msg.starts_with(prefix), "{msg}");
    assert_eq!(s.calls(), Vec::<String>::new());
    assert_eq!(s.cni_files(), Vec::<String>::new());
    s.sb.assert_clean("after the refused ADD");
    msg
}

#[test]
fn a_nad_naming_a_resource_gets_the_pods_device_from_the_kubelet() {
    let s = sriov_pod("sriov", &["sriov"], &["0000:03:02.1"]);
    let info = s.dp_file("0000:03:02.1");

    s.cmd("ADD").ok();
    // Injected into the delegate's config under upstream's keys.
    let stdin = s.stdin("writer", "ADD", "net1");
    assert_eq!(stdin["deviceID"], "0000:03:02.1", "{stdin}");
    assert_eq!(stdin["pciBusID"], "0000:03:02.1", "{stdin}");
    assert!(s.stdin("writer", "ADD", "eth0").get("deviceID").is_none());
    // The device plugin's file of that device is the network's device-info.
    assert_eq!(read_json(&s.cni_file("sriov")), info);
    assert_eq!(s.network_status()[1]["device-info"], info);
    let cache = read_json(&s.sb.cni_dir().join(CONTAINER_ID));
    assert_eq!(cache[1]["deviceID"], "0000:03:02.1", "{cache}");
    assert_eq!(cache[1]["resourceName"], RESOURCE, "{cache}");

    // DEL works from the cache: the same device, even once the kubelet has forgotten it.
    fs::remove_file(s.checkpoint_path()).unwrap();
    s.del_leaves_nothing();
    assert_eq!(s.stdin("writer", "DEL", "net1")["deviceID"], "0000:03:02.1");
}

#[test]
fn networks_of_one_resource_get_distinct_devices_in_order() {
    // The second selection asks for a device itself: the kubelet's wins, as upstream.
    let s =
        Setup::new(r#"[{"name": "sriov"}, {"name": "sriov-chain", "deviceID": "0000:09:00.0"}]"#);
    s.nad(
        "sriov",
        "writer",
        false,
        json!({"k8s.v1.cni.cncf.io/resourceName": RESOURCE}),
    );
    // A conflist: every plugin gets the device.
    let chain = json!({"cniVersion": "1.0.0", "name": "sriov-chain",
                       "plugins": [{"type": "writer"}, {"type": "chained"}]});
    s.server.add_annotated_nad(
        POD_NS,
        "sriov-chain",
        json!({"k8s.v1.cni.cncf.io/resourceName": RESOURCE}),
        json!({"config": chain.to_string()}),
    );
    // Two containers, listed out of order; an init container's device listed again.
    s.checkpoint(json!([
        {"PodUID": POD_UID, "ContainerName": "b", "ResourceName": RESOURCE,
         "DeviceIDs": {"0": ["0000:03:02.4"]}},
        {"PodUID": POD_UID, "ContainerName": "a", "ResourceName": RESOURCE,
         "DeviceIDs": {"0": ["0000:03:02.2"]}},
        {"PodUID": POD_UID, "ContainerName": "init", "ResourceName": RESOURCE,
         "DeviceIDs": {"0": ["0000:03:02.2"]}},
    ]));
    let first = s.dp_file("0000:03:02.2");
    let second = s.dp_file("0000:03:02.4");

    s.cmd("ADD").ok();
    assert_eq!(s.stdin("writer", "ADD", "net1")["deviceID"], "0000:03:02.2");
    for plugin in ["writer", "chained"] {
        let stdin = s.stdin(plugin, "ADD", "net2");
        assert_eq!(stdin["deviceID"], "0000:03:02.4", "{plugin}: {stdin}");
        assert_eq!(stdin["pciBusID"], "0000:03:02.4", "{plugin}: {stdin}");
    }
    let status = s.network_status();
    assert_eq!(status[1]["name"], "default/sriov");
    assert_eq!(status[1]["device-info"], first);
    assert_eq!(status[2]["name"], "default/sriov-chain");
    // The chain's plugins declare no CNIDeviceInfoFile: the device plugin's file shows.
    assert_eq!(read_json(&s.cni_file_on("sriov-chain", "net2")), second);
    assert_eq!(status[2]["device-info"], second);

    s.del_leaves_nothing();
}

#[test]
fn a_network_without_a_device_from_the_kubelet_fails_before_anything_runs() {
    // One device of the resource for two networks that need one each.
    let s = sriov_pod("sriov, sriov2", &["sriov", "sriov2"], &["0000:03:02.1"]);
    let msg = assert_refused(&s, 7, "network default/sriov2: ");
    assert_eq!(
        msg,
        format!(
            "network default/sriov2: its NetworkAttachmentDefinition names the resource \"{RESOURCE}\" (k8s.v1.cni.cncf.io/resourceName), but the 1 device(s) of it the kubelet allocated the pod (UID {POD_UID}) are taken by the pod's networks before this one (per {}): request one {RESOURCE} per network that uses it in the resources of one of the pod's containers",
            s.checkpoint_path().display()
        )
    );

    // None at all: the other pod's device is not this pod's.
    s.checkpoint(json!([]));
    let msg = assert_refused(
        &s,
        7,
        "network default/sriov: its NetworkAttachmentDefinition names the resource",
    );
    let none = format!("the kubelet allocated the pod (UID {POD_UID}) no device of it");
    assert!(msg.contains(&none), "{msg}");
}

#[test]
fn a_corrupt_or_missing_checkpoint_is_an_error_naming_the_file() {
    let s = sriov_pod("sriov", &["sriov"], &[]);
    let checkpoint = s.checkpoint_path();
    fs::write(
        &checkpoint,
        "{\"Data\": {\"PodDeviceEntries\": [{\"PodUID\": 7}]}",
    )
    .unwrap();
    let file = format!(
        "network default/sriov: kubelet device checkpoint {}: ",
        checkpoint.display()
    );
    assert_refused(
        &s,
        5,
        &format!("{file}is not a kubelet device checkpoint: "),
    );
    fs::remove_file(&checkpoint).unwrap();
    assert_refused(&s, 5, &format!("{file}cannot read: "));
}

#[test]
fn del_without_a_cache_deletes_a_network_whose_device_the_kubelet_forgot() {
    let s = sriov_pod("sriov", &["sriov"], &["0000:03:02.1"]);
    s.cmd("ADD").ok();
    fs::remove_file(s.sb.cni_dir().join(CONTAINER_ID)).unwrap();
    s.checkpoint(json!([]));
    s.cmd("DEL").ok();
    assert_eq!(s.calls()[2..], ["DEL net1 none", "DEL eth0 none"]);
    assert!(s.stdin("writer", "DEL", "net1").get("deviceID").is_none());
    s.sb.assert_clean("after DEL");
}

fn allocation(namespace: &str, pod: &str, container: &str, device_ids: &[&str]) -> Allocation {
    Allocation {
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        container: container.to_owned(),
        resource: RESOURCE.to_owned(),
        device_ids: device_ids.iter().map(|id| (*id).to_owned()).collect(),
    }
}

#[test]
fn the_pod_resources_api_is_asked_when_its_socket_is_there() {
    // The checkpoint would give one device; the API, which wins, two.
    let s = sriov_pod("sriov, sriov2", &["sriov", "sriov2"], &["0000:03:02.1"]);
    let api = s.pod_resources(Answer::Allocations(vec![
        allocation(POD_NS, POD_NAME, "b", &["0000:03:02.6"]),
        allocation("other", POD_NAME, "app", &["0000:03:02.3"]),
        allocation(POD_NS, POD_NAME, "a", &["0000:03:02.5"]),
    ]));
    let first = s.dp_file("0000:03:02.5");
    s.cmd("ADD").ok();
    assert_eq!(api.calls(), ["/v1.PodResourcesLister/List"]);
    assert_eq!(s.stdin("writer", "ADD", "net1")["deviceID"], "0000:03:02.5");
    assert_eq!(s.stdin("writer", "ADD", "net2")["deviceID"], "0000:03:02.6");
    assert_eq!(s.network_status()[1]["device-info"], first);
    s.del_leaves_nothing();
    // DEL works from the cache and asks nothing.
    assert_eq!(api.calls().len(), 1);
    assert_eq!(s.stdin("writer", "DEL", "net2")["deviceID"], "0000:03:02.6");
}

#[test]
fn a_failing_pod_resources_api_fails_add_naming_it() {
    let s = sriov_pod("sriov", &["sriov"], &["0000:03:02.1"]);
    let socket = s.sb.dir.path().join("kubelet.sock");
    let api = s.pod_resources(Answer::Error(14, "the kubelet is shutting down".into()));
    let msg = assert_refused(
        &s,
        11,
        &format!(
            "network default/sriov: kubelet pod-resources API {}: ",
            socket.display()
        ),
    );
    assert!(
        msg.ends_with("List failed with gRPC status 14: the kubelet is shutting down"),
        "{msg}"
    );
    drop(api);

    // A socket file nothing listens on.
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    drop(listener);
    let msg = assert_refused(
        &s,
        11,
        &format!(
            "network default/sriov: kubelet pod-resources API {}: cannot connect: ",
            socket.display()
        ),
    );
    assert!(msg.contains("refused"), "{msg}");
    fs::remove_file(&socket).unwrap();
}
