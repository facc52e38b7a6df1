//! CNI 1.1 plugin subdirectories with the real `multus` binary. `auxiliaryCNIChainName`: after
//! every other network, a chain of `passthru` and the plugins of the chain's directory next to
//! `clusterNetwork`; the chain is cached, so DEL and CHECK reach it from the cache. And a
//! `clusterNetwork` conflist file with its own plugin subdirectory.

use crate::common;

use std::fs;

use common::{path_str, plugins_bin, Sandbox};
use serde_json::{json, Value};

const CHAIN: &str = "aux-chain";

/// A plugin for the chain: it records each call (`<command> <tag> <ifname>`) and its stdin; on
/// ADD the `first` one sets a sysctl of the pod's eth0 (as a tuning plugin would) and each
/// prints a result carrying its tag as the DNS domain.
const RECORD: &str = r#"d=$(dirname "$0")
stdin=$(cat)
case "$stdin" in *'"tag":"first"'*) tag=first;; *) tag=second;; esac
echo "$CNI_COMMAND $tag $CNI_IFNAME" >> "$d/calls"
printf '%s\n' "$stdin" >> "$d/stdin.$tag.$CNI_COMMAND"
if [ "$CNI_COMMAND" = ADD ]; then
  if [ "$tag" = first ]; then
    nsenter --net="$CNI_NETNS" sh -c 'echo 1 > /proc/sys/net/ipv4/conf/eth0/arp_filter' || exit 1
  fi
  echo "{\"cniVersion\":\"1.0.0\",\"dns\":{\"domain\":\"$tag.example\"}}"
fi
exit 0"#;

struct Chain {
    sb: Sandbox,
}

impl Chain {
    /// The cluster network in `<confDir>/10-cluster.conf`, `passthru` and the recording plugin
    /// in CNI_PATH, and the chain's directory with `files`.
    fn new(files: &[(&str, &str)]) -> Chain {
        let sb = Sandbox::new();
        sb.write_conf(
            "10-cluster.conf",
            &sb.cluster("cluster", "br0", "10.10.0.0/24", "1.0.0"),
        );
        std::os::unix::fs::symlink(plugins_bin(), sb.plugins.path().join("passthru"))
            .expect("creates a symlink");
        sb.script("record", RECORD);
        if !files.is_empty() {
            let dir = sb.conf_dir().join(CHAIN);
            fs::create_dir(&dir).expect("creates a test directory");
            for (name, text) in files {
                fs::write(dir.join(name), text).expect("writes a test file");
            }
        }
        Chain { sb }
    }

    fn conf(&self, cluster_network: &str) -> String {
        self.sb.multus(
            "1.0.0",
            vec![],
            json!({"clusterNetwork": cluster_network, "auxiliaryCNIChainName": CHAIN}),
        )
    }

    fn cluster_path(&self) -> String {
        path_str(&self.sb.conf_dir().join("10-cluster.conf"))
    }

    fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.sb.plugins.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn stdin(&self, tag: &str, command: &str) -> Value {
        let path = self
            .sb
            .plugins
            .path()
            .join(format!("stdin.{tag}.{command}"));
        serde_json::from_str(fs::read_to_string(path).expect("reads a test file").trim())
            .expect("valid JSON")
    }

    fn arp_filter(&self) -> String {
        let out = self
            .sb
            .pod
            .command("cat")
            .arg("/proc/sys/net/ipv4/conf/eth0/arp_filter")
            .output()
            .expect("runs the command");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The delegate cache: each delegate's name and, for lists, its plugin types.
    fn cached(&self) -> Vec<(String, Vec<String>)> {
        let path = self.sb.cni_dir().join(common::CONTAINER_ID);
        let entries: Vec<Value> =
            serde_json::from_slice(&fs::read(path).expect("reads a test file"))
                .expect("valid JSON");
        entries
            .iter()
            .map(|e| {
                let types = e["ConfList"]["plugins"]
                    .as_array()
                    .map(|ps| {
                        ps.iter()
                            .map(|p| p["type"].as_str().expect("a string").to_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                (e["Name"].as_str().expect("a string").to_owned(), types)
            })
            .collect()
    }
}

const FIRST: &str = r#"{"type": "record", "tag": "first"}"#;
const SECOND: &str = r#"{"type": "record", "tag": "second"}"#;

#[test]
fn the_chain_runs_last_behind_passthru_and_is_deleted_from_the_cache() {
    let chain = Chain::new(&[
        ("20-second.conf", SECOND),
        ("10-first.conf", FIRST),
        // Not plugin configs of the chain.
        ("30-ignored.json", r#"{"type": "fail"}"#),
        ("40-ignored.conflist", r#"{"type": "fail"}"#),
    ]);
    let sb = &chain.sb;
    let conf = chain.conf(&chain.cluster_path());
    assert_eq!(chain.arp_filter(), "");

    let result = sb.cmd("ADD", &conf).ok();
    // multus returns the cluster network's result.
    assert_eq!(result["ips"][0]["address"], "10.10.0.2/24", "{result}");
    assert_eq!(chain.calls(), ["ADD first net1", "ADD second net1"]);
    assert_eq!(chain.arp_filter(), "1", "the chain's effect in the pod");
    assert_eq!(sb.pod_links(), ["eth0"], "the chain makes no interface");
    // The first plugin gets passthru's empty result, the second the first's.
    let first = chain.stdin("first", "ADD");
    assert_eq!(first["name"], CHAIN);
    assert_eq!(first["cniVersion"], "1.0.0");
    assert_eq!(first["prevResult"], json!({"cniVersion": "1.0.0"}));
    let second = chain.stdin("second", "ADD");
    assert_eq!(
        second["prevResult"],
        json!({"cniVersion": "1.0.0", "dns": {"domain": "first.example"}})
    );
    assert_eq!(
        chain.cached(),
        [
            ("cluster".to_owned(), vec![]),
            (
                CHAIN.to_owned(),
                vec!["passthru".into(), "record".into(), "record".into()]
            ),
        ]
    );

    // CHECK and DEL work from the cache: the directory may change meanwhile.
    fs::remove_dir_all(sb.conf_dir().join(CHAIN)).unwrap();
    sb.cmd("CHECK", &conf).ok();
    let checked = chain.stdin("second", "CHECK");
    assert_eq!(
        checked["prevResult"],
        json!({"cniVersion": "1.0.0", "dns": {"domain": "second.example"}})
    );
    sb.cmd("DEL", &conf).ok();
    assert_eq!(
        chain.calls(),
        [
            "ADD first net1",
            "ADD second net1",
            "CHECK first net1",
            "CHECK second net1",
            // In reverse order, before the cluster network goes.
            "DEL second net1",
            "DEL first net1",
        ]
    );
    assert_eq!(
        chain.stdin("first", "DEL")["prevResult"],
        json!({"cniVersion": "1.0.0", "dns": {"domain": "second.example"}})
    );
    sb.assert_clean("after DEL");
}

#[test]
fn without_plugins_in_the_chain_directory_there_is_no_extra_delegate() {
    // No directory at all, and a directory without `.conf` files.
    for files in [&[][..], &[("10-other.json", FIRST)][..]] {
        let chain = Chain::new(files);
        let sb = &chain.sb;
        let conf = chain.conf(&chain.cluster_path());
        sb.cmd("ADD", &conf).ok();
        assert_eq!(chain.cached(), [("cluster".to_owned(), vec![])]);
        assert_eq!(chain.calls(), Vec::<String>::new());
        sb.cmd("DEL", &conf).ok();
        sb.assert_clean("after DEL");
    }
}

#[test]
fn a_cluster_network_directory_with_a_trailing_slash_holds_the_chain() {
    // clusterNetwork as a directory with a trailing `/`: the chain is in that directory.
    let chain = Chain::new(&[("10-first.conf", FIRST)]);
    let sb = &chain.sb;
    let conf = chain.conf(&format!("{}/", path_str(&sb.conf_dir())));
    sb.cmd("ADD", &conf).ok();
    assert_eq!(chain.arp_filter(), "1");
    sb.cmd("DEL", &conf).ok();
    assert_eq!(chain.calls(), ["ADD first net1", "DEL first net1"]);
    sb.assert_clean("after DEL");
}

#[test]
fn a_cluster_network_that_is_not_a_path_is_refused() {
    let chain = Chain::new(&[("10-first.conf", FIRST)]);
    let sb = &chain.sb;
    // "cluster" is found by name in confDir, but names no directory for the chain.
    let out = sb.cmd("ADD", &chain.conf("cluster"));
    assert_eq!(out.err_code(), 7, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("auxiliaryCNIChainName") && msg.contains("must be a path"),
        "{msg}"
    );
    assert_eq!(chain.calls(), Vec::<String>::new());
    sb.assert_clean("after the refused ADD");
}

#[test]
fn a_bad_plugin_file_in_the_chain_directory_is_named() {
    let chain = Chain::new(&[("10-first.conf", FIRST), ("20-broken.conf", "{\"type\":")]);
    let sb = &chain.sb;
    let out = sb.cmd("ADD", &chain.conf(&chain.cluster_path()));
    assert_eq!(out.err_code(), 6, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap().to_owned();
    let file = path_str(&sb.conf_dir().join(CHAIN).join("20-broken.conf"));
    assert!(msg.contains(&file) && msg.contains(CHAIN), "{msg}");
    assert_eq!(chain.calls(), Vec::<String>::new());
    sb.assert_clean("after the refused ADD");
}

#[test]
fn a_chain_name_that_is_no_directory_name_is_refused() {
    let chain = Chain::new(&[]);
    let sb = &chain.sb;
    let conf = sb.multus(
        "1.0.0",
        vec![],
        json!({"clusterNetwork": chain.cluster_path(), "auxiliaryCNIChainName": "../net.d"}),
    );
    let out = sb.cmd("ADD", &conf);
    assert_eq!(out.err_code(), 7, "{out:?}");
    assert!(out.stdout.contains("auxiliaryCNIChainName"), "{out:?}");
    sb.assert_clean("after the refused ADD");
}

#[test]
fn a_cluster_network_conflist_file_gets_its_plugin_subdirectory() {
    for load_only_inlined in [false, true] {
        let chain = Chain::new(&[]);
        let sb = &chain.sb;
        let mut bridge = sb.cluster("ignored", "br0", "10.10.0.0/24", "1.0.0");
        bridge.as_object_mut().unwrap().remove("name");
        let list = json!({
            "cniVersion": "1.0.0",
            "name": "cluster",
            "loadOnlyInlinedPlugins": load_only_inlined,
            "plugins": [bridge],
        });
        sb.write_conf("10-cluster.conflist", &list);
        fs::create_dir(sb.conf_dir().join("cluster")).unwrap();
        fs::write(sb.conf_dir().join("cluster/10-first.conf"), FIRST).unwrap();
        let conf = sb.multus(
            "1.0.0",
            vec![],
            json!({"clusterNetwork": path_str(&sb.conf_dir().join("10-cluster.conflist"))}),
        );
        let result = sb.cmd("ADD", &conf).ok();
        if load_only_inlined {
            assert_eq!(chain.calls(), Vec::<String>::new());
            assert_eq!(result["ips"][0]["address"], "10.10.0.2/24", "{result}");
        } else {
            // The subdirectory's plugin runs after the bridge, on eth0, with its result.
            assert_eq!(chain.calls(), ["ADD first eth0"]);
            assert_eq!(result["dns"]["domain"], "first.example", "{result}");
            let prev = &chain.stdin("first", "ADD")["prevResult"];
            assert_eq!(prev["ips"][0]["address"], "10.10.0.2/24", "{prev}");
            assert_eq!(chain.arp_filter(), "1");
        }
        sb.cmd("DEL", &conf).ok();
        if !load_only_inlined {
            assert_eq!(chain.calls(), ["ADD first eth0", "DEL first eth0"]);
        }
        sb.assert_clean("after DEL");
    }
}
