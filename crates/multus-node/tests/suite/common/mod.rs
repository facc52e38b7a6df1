//! A node and a pod namespace, a CNI_PATH with our plugins, and the directories multus uses,
//! for running the real `multus` binary as a runtime does.
pub mod cluster;

use std::fs;
use std::ops::Deref;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use testkit::{CniCall, CniOutput, PluginDir};

pub const CONTAINER_ID: &str = "c0ffee01";
pub const POD_NS: &str = "default";
pub const POD_NAME: &str = "web";
pub const POD_UID: &str = "7d1c3a52-0000-4000-8000-000000000001";

pub fn multus_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_multus"))
}

/// The `cni-plugins` binary of this workspace.
pub fn plugins_bin() -> PathBuf {
    testkit::workspace_binary("cni-plugins", "plugins")
}

/// testkit's sandbox (node, pod, scratch directory) with this workspace's plugins as
/// `CNI_PATH`, and the multus binary run for each call.
pub struct Sandbox {
    base: testkit::Sandbox,
    pub plugins: PluginDir,
}

impl Deref for Sandbox {
    type Target = testkit::Sandbox;

    fn deref(&self) -> &testkit::Sandbox {
        &self.base
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let plugins = PluginDir::new(
            &plugins_bin(),
            &[
                "bridge",
                "macvlan",
                "host-local",
                "static",
                "host-device",
                "tuning",
                "sbr",
            ],
        );
        let sb = Sandbox {
            base: testkit::Sandbox::new(plugins.path(), CONTAINER_ID),
            plugins,
        };
        for d in ["net.d", "cni", "ipam"] {
            fs::create_dir_all(sb.dir.path().join(d)).expect("mkdir");
        }
        // A delegate that fails ADD with a CNI error and succeeds otherwise; it logs each call.
        sb.script(
            "fail",
            r#"echo "$CNI_COMMAND $CNI_IFNAME" >> "$(dirname "$0")/fail.log"
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{"code":11,"msg":"fail: the delegate refuses on purpose"}'; exit 1
fi
exit 0"#,
        );
        sb
    }

    /// Writes an executable `#!/bin/sh` plugin into CNI_PATH.
    pub fn script(&self, name: &str, body: &str) {
        let path = self.plugins.path().join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write plugin");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    pub fn conf_dir(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }

    pub fn cni_dir(&self) -> PathBuf {
        self.dir.path().join("cni")
    }

    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    /// A bridge + host-local network config, without a default route.
    pub fn bridge(&self, name: &str, bridge: &str, subnet: &str, version: &str) -> Value {
        let mut conf = self.cluster(name, bridge, subnet, version);
        conf["ipam"]["routes"] = json!([]);
        conf
    }

    /// A bridge + host-local network config with a default route via the bridge.
    pub fn cluster(&self, name: &str, bridge: &str, subnet: &str, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": name,
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "subnet": subnet,
                "dataDir": self.ipam_dir(),
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        })
    }

    /// Writes `conf` into confDir as `<file>`.
    pub fn write_conf(&self, file: &str, conf: &Value) {
        fs::write(self.conf_dir().join(file), conf.to_string()).expect("write conf");
    }

    /// A multus config with inline delegates; `extra` keys are merged in.
    pub fn multus(&self, version: &str, delegates: Vec<Value>, extra: Value) -> String {
        let mut conf = json!({
            "cniVersion": version,
            "name": "multus-cni-network",
            "type": "multus",
            "confDir": self.conf_dir(),
            "cniDir": self.cni_dir(),
            "binDir": self.plugins.path(),
            "logLevel": "debug",
            "delegates": delegates,
        });
        if let (Value::Object(c), Value::Object(e)) = (&mut conf, extra) {
            c.extend(e);
        }
        conf.to_string()
    }

    pub fn call(&self, command: &str, conf: &str) -> CniCall {
        let mut call = self.base.call(command, conf);
        call.args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={POD_NS};K8S_POD_NAME={POD_NAME};K8S_POD_INFRA_CONTAINER_ID={CONTAINER_ID};K8S_POD_UID={POD_UID}"
        );
        call
    }

    pub fn run(&self, call: &CniCall) -> CniOutput {
        self.run_in_node(&multus_bin(), call)
    }

    pub fn cmd(&self, command: &str, conf: &str) -> CniOutput {
        self.run(&self.call(command, conf))
    }

    /// The addresses (without prefix) of a pod interface.
    pub fn pod_addrs(&self, ifname: &str) -> Vec<String> {
        let v = self.pod.ip_json(&["addr", "show", "dev", ifname]);
        v[0]["addr_info"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|i| i["scope"] == "global")
                    .filter_map(|i| i["local"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Default routes in the pod as `dev via` pairs.
    pub fn pod_default_routes(&self, family: &str) -> Vec<(String, String)> {
        let v = self.pod.ip_json(&[family, "route", "show", "default"]);
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        (
                            r["dev"].as_str().unwrap_or_default().to_owned(),
                            r["gateway"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The pod's default routes of `family` (`-4`, `-6`) in the kernel's order, each as
    /// `dev via metric`.
    pub fn pod_default_route_metrics(&self, family: &str) -> Vec<String> {
        let v = self.pod.ip_json(&[family, "route", "show", "default"]);
        let mut out = Vec::new();
        for r in v.as_array().into_iter().flatten() {
            let hops = match r["nexthops"].as_array() {
                Some(hops) => hops.clone(),
                None => vec![r.clone()],
            };
            for h in hops {
                out.push(format!(
                    "{} via {} metric {}",
                    h["dev"].as_str().unwrap_or_default(),
                    h["gateway"].as_str().unwrap_or_default(),
                    r["metric"].as_u64().unwrap_or(0)
                ));
            }
        }
        out
    }

    /// Files in cniDir (the delegate cache), cniDir/results (the libcni cache) and
    /// cniDir/locks (a container's lock, until its DEL).
    pub fn cache_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        for dir in [
            self.cni_dir(),
            self.cni_dir().join("results"),
            self.cni_dir().join("locks"),
        ] {
            if let Ok(entries) = fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.path().is_file() {
                        out.push(
                            e.path()
                                .strip_prefix(self.cni_dir())
                                .unwrap_or(&e.path())
                                .display()
                                .to_string(),
                        );
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// host-local reservations left anywhere under the IPAM data dir.
    pub fn reservations(&self) -> Vec<String> {
        testkit::reservation_files(&self.ipam_dir())
    }

    /// Asserts that nothing of an attachment is left: no pod interface, no veth in the node,
    /// no reservation, no cache file.
    pub fn assert_clean(&self, what: &str) {
        self.assert_pod_clean(what);
        self.assert_no_node_veths(what);
    }

    /// [`Sandbox::assert_clean`] for tests whose delegates run outside the node namespace.
    pub fn assert_pod_clean(&self, what: &str) {
        self.assert_no_pod_links(what);
        assert_eq!(
            self.reservations(),
            Vec::<String>::new(),
            "{what}: reservations"
        );
        assert_eq!(
            self.cache_files(),
            Vec::<String>::new(),
            "{what}: cache files"
        );
    }

    /// The MAC address of a pod interface.
    pub fn mac(&self, ifname: &str) -> String {
        self.pod.ip_json(&["link", "show", ifname])[0]["address"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn fail_log(&self) -> String {
        fs::read_to_string(self.plugins.path().join("fail.log")).unwrap_or_default()
    }
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}
