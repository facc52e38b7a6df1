//! Running a network as libcni does, against small shell-script plugins that record what they
//! were given.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cni::network::{Attachment, Network};
use cni::{cache, GcAttachment};
use serde_json::{json, Map, Value};

/// A plugin that logs `<command> <own name> <ifname>` and its stdin to `calls`, and for ADD
/// prints a result with `addr`.
fn plugin(dir: &Path, name: &str, addr: &str) {
    let path = dir.join(name);
    let body = format!(
        r#"#!/bin/sh
d=$(dirname "$0")
echo "$CNI_COMMAND {name} $CNI_IFNAME" >> "$d/calls"
cat >> "$d/stdin.{name}.$CNI_COMMAND"
echo >> "$d/stdin.{name}.$CNI_COMMAND"
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{{"cniVersion":"1.1.0","ips":[{{"address":"{addr}"}}]}}'
fi
"#
    );
    fs::write(&path, body).expect("write the fake plugin");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
        .expect("make the fake plugin executable");
}

struct Setup {
    dir: tempfile::TempDir,
    path: Vec<PathBuf>,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        plugin(dir.path(), "first", "10.0.0.1/24");
        plugin(dir.path(), "second", "10.0.0.2/24");
        let path = vec![dir.path().to_owned()];
        Setup { dir, path }
    }

    fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn calls(&self) -> String {
        fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default()
    }

    fn stdin(&self, name: &str, command: &str) -> Vec<Value> {
        fs::read_to_string(self.dir.path().join(format!("stdin.{name}.{command}")))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("the fake plugin logs JSON lines"))
            .collect()
    }
}

const LIST: &str = r#"{"cniVersion":"1.1.0","name":"chain","plugins":[
    {"type":"first","capabilities":{"mac":true}},
    {"type":"second","capabilities":{"portMappings":true}}]}"#;

fn attachment<'a>(
    s: &'a Setup,
    cache_dir: &'a Path,
    args: &'a [(String, String)],
    caps: &'a Map<String, Value>,
) -> Attachment<'a> {
    Attachment {
        container_id: "ctr",
        netns: "/run/netns/x",
        ifname: "net1",
        args,
        capability_args: caps,
        path: &s.path,
        cache_dir,
    }
}

#[test]
fn a_list_chains_results_injects_declared_capabilities_and_caches_the_last_result() {
    let s = Setup::new();
    let net = Network::parse(LIST.as_bytes()).unwrap();
    let caps: Map<String, Value> = serde_json::from_value(
        json!({"mac": "02:00:00:00:00:01", "portMappings": [1], "ips": ["x"]}),
    )
    .unwrap();
    let args = vec![("K8S_POD_NAME".to_owned(), "web".to_owned())];
    let cache_dir = s.cache_dir();
    let result = net.add(&attachment(&s, &cache_dir, &args, &caps)).unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.0.0.2/24");
    assert_eq!(s.calls(), "ADD first net1\nADD second net1\n");

    let first = &s.stdin("first", "ADD")[0];
    assert_eq!(first["name"], "chain");
    assert_eq!(first["cniVersion"], "1.1.0");
    assert_eq!(first["runtimeConfig"], json!({"mac": "02:00:00:00:00:01"}));
    assert!(first.get("prevResult").is_none());
    let second = &s.stdin("second", "ADD")[0];
    assert_eq!(second["runtimeConfig"], json!({"portMappings": [1]}));
    assert_eq!(second["prevResult"]["ips"][0]["address"], "10.0.0.1/24");

    let cached = cache::read(&cache_dir, "chain", "ctr", "net1")
        .unwrap()
        .unwrap();
    assert_eq!(cached.config, LIST.as_bytes());
    assert_eq!(cached.cni_args, args);
    assert_eq!(cached.capability_args, caps);
    assert_eq!(cached.result.unwrap()["ips"][0]["address"], "10.0.0.2/24");

    // CHECK gives every plugin the cached result.
    net.check(&attachment(&s, &cache_dir, &args, &caps))
        .unwrap();
    assert_eq!(
        s.stdin("first", "CHECK")[0]["prevResult"]["ips"][0]["address"],
        "10.0.0.2/24"
    );

    // DEL runs in reverse with the cached result, then the cache entry goes.
    net.del(&attachment(&s, &cache_dir, &args, &caps)).unwrap();
    assert!(
        s.calls().ends_with("DEL second net1\nDEL first net1\n"),
        "{}",
        s.calls()
    );
    assert_eq!(
        s.stdin("second", "DEL")[0]["prevResult"]["ips"][0]["address"],
        "10.0.0.2/24"
    );
    assert!(cache::read(&cache_dir, "chain", "ctr", "net1")
        .unwrap()
        .is_none());
    // CHECK without a cached result is an error, not a silent pass.
    assert!(net
        .check(&attachment(&s, &cache_dir, &args, &caps))
        .is_err());
}

#[test]
fn a_single_config_is_passed_as_written() {
    let s = Setup::new();
    let conf = r#"{"cniVersion":"0.3.1","name":"one","type":"first","extra":{"k":1}}"#;
    let net = Network::parse(conf.as_bytes()).unwrap();
    let cache_dir = s.cache_dir();
    let caps = Map::new();
    let result = net.add(&attachment(&s, &cache_dir, &[], &caps)).unwrap();
    assert_eq!(result.ips.len(), 1);
    let seen = &s.stdin("first", "ADD")[0];
    assert_eq!(seen["extra"], json!({"k": 1}));
    assert!(seen.get("runtimeConfig").is_none());
    // 0.3.1 has no CHECK, and DEL gets no prevResult.
    assert!(net.check(&attachment(&s, &cache_dir, &[], &caps)).is_err());
    net.del(&attachment(&s, &cache_dir, &[], &caps)).unwrap();
    assert!(s.stdin("first", "DEL")[0].get("prevResult").is_none());
}

#[test]
fn del_calls_every_plugin_even_when_one_fails_and_keeps_the_cache() {
    let s = Setup::new();
    let net = Network::parse(LIST.as_bytes()).unwrap();
    let cache_dir = s.cache_dir();
    let caps = Map::new();
    net.add(&attachment(&s, &cache_dir, &[], &caps)).unwrap();
    let bad = s.dir.path().join("second");
    fs::write(
        &bad,
        "#!/bin/sh\necho '{\"code\":11,\"msg\":\"second is busy\"}'; exit 1\n",
    )
    .unwrap();
    let e = net
        .del(&attachment(&s, &cache_dir, &[], &caps))
        .unwrap_err();
    assert_eq!(e.code, 11);
    assert!(e.msg.contains("second is busy"));
    assert!(s.calls().ends_with("DEL first net1\n"), "{}", s.calls());
    assert!(cache::read(&cache_dir, "chain", "ctr", "net1")
        .unwrap()
        .is_some());
}

#[test]
fn gc_deletes_cached_attachments_not_in_use_and_passes_the_valid_ones() {
    let s = Setup::new();
    let net = Network::parse(LIST.as_bytes()).unwrap();
    let cache_dir = s.cache_dir();
    let caps = Map::new();
    for id in ["keep", "drop"] {
        let mut att = attachment(&s, &cache_dir, &[], &caps);
        att.container_id = id;
        net.add(&att).unwrap();
    }
    let valid = vec![GcAttachment {
        container_id: "keep".into(),
        ifname: "net1".into(),
    }];
    net.gc(&s.path, &cache_dir, &valid).unwrap();
    assert!(cache::read(&cache_dir, "chain", "keep", "net1")
        .unwrap()
        .is_some());
    assert!(cache::read(&cache_dir, "chain", "drop", "net1")
        .unwrap()
        .is_none());
    let gc = &s.stdin("first", "GC")[0];
    assert_eq!(
        gc["cni.dev/valid-attachments"],
        json!([{"containerID": "keep", "ifname": "net1"}])
    );
    // STATUS reaches every plugin of a 1.1.0 list, and none of an older one.
    net.status(&s.path).unwrap();
    assert_eq!(s.stdin("second", "STATUS").len(), 1);
    let old = Network::parse(br#"{"cniVersion":"1.0.0","name":"old","type":"first"}"#).unwrap();
    old.status(&s.path).unwrap();
    old.gc(&s.path, &cache_dir, &[]).unwrap();
    assert_eq!(s.stdin("first", "STATUS").len(), 1);
}

#[test]
fn bad_networks_are_refused_with_their_reason() {
    for (conf, expected) in [
        (
            "[]",
            "error parsing network config: the config: [] is not an object",
        ),
        (
            "{",
            "error parsing network config: not valid JSON: EOF while parsing an object",
        ),
        (r#"{"cniVersion":"1.0.0","name":"n"}"#, "no plugin type"),
        (
            r#"{"cniVersion":"1.0.0","name":"bad name","type":"x"}"#,
            "invalid characters",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"l","plugins":[]}"#,
            "has no plugins",
        ),
        (
            r#"{"cniVersion":"5.0.0","name":"n","type":"x"}"#,
            "incompatible CNI versions",
        ),
    ] {
        let e = Network::parse(conf.as_bytes()).unwrap_err();
        assert!(e.to_string().contains(expected), "{conf}: {e}");
    }
}

#[test]
fn del_skips_plugins_that_cannot_be_run_and_says_why() {
    let s = Setup::new();
    let conf = r#"{"cniVersion":"1.1.0","name":"gone","plugins":[
        {"type":"first"},{"type":"removed-since"},{"type":"../first"}]}"#;
    let net = Network::parse(conf.as_bytes()).unwrap();
    let cache_dir = s.cache_dir();
    let caps = Map::new();
    let skipped = net.del(&attachment(&s, &cache_dir, &[], &caps)).unwrap();
    assert_eq!(s.calls(), "DEL first net1\n");
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].contains("\"../first\""), "{skipped:?}");
    assert!(
        skipped[1].contains("failed to find plugin \"removed-since\""),
        "{skipped:?}"
    );
}
