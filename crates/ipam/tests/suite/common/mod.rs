//! Test support: calling our plugins through the CNI entry point and the Go reference binaries
//! the way a runtime does, and reading a store directory.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

/// What a plugin call printed and returned.
#[derive(Debug)]
pub struct Outcome {
    pub status: i32,
    /// The printed JSON, or `Null` when nothing was printed.
    pub json: Value,
}

impl Outcome {
    pub fn ok(&self) -> &Value {
        assert_eq!(self.status, 0, "call failed: {}", self.json);
        &self.json
    }

    /// The error code; panics when the call succeeded.
    pub fn code(&self) -> u64 {
        assert_ne!(self.status, 0, "call succeeded: {}", self.json);
        self.json["code"].as_u64().unwrap()
    }

    pub fn msg(&self) -> &str {
        self.json["msg"].as_str().unwrap_or("")
    }

    /// The addresses of a successful ADD.
    pub fn addresses(&self) -> Vec<String> {
        self.ok()["ips"]
            .as_array()
            .map(|ips| {
                ips.iter()
                    .map(|ip| ip["address"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One call's environment.
pub struct Env {
    vars: HashMap<String, String>,
}

impl Env {
    pub fn new(command: &str, container_id: &str) -> Env {
        let mut vars = HashMap::new();
        vars.insert("CNI_COMMAND".into(), command.into());
        vars.insert("CNI_CONTAINERID".into(), container_id.into());
        vars.insert("CNI_NETNS".into(), "/nonexistent/netns".into());
        vars.insert("CNI_IFNAME".into(), "eth0".into());
        vars.insert(
            "CNI_PATH".into(),
            testkit::reference_dir().display().to_string(),
        );
        vars.insert(
            cni::path_roots::ROOTS_FILE_ENV.into(),
            testkit::test_path_roots().display().to_string(),
        );
        Env { vars }
    }

    pub fn ifname(mut self, ifname: &str) -> Env {
        self.vars.insert("CNI_IFNAME".into(), ifname.into());
        self
    }

    pub fn args(mut self, args: &str) -> Env {
        self.vars.insert("CNI_ARGS".into(), args.into());
        self
    }

    /// Our plugin, through the same entry point the binaries use.
    pub fn ours(&self, plugin: &dyn cni::Plugin, stdin: &str) -> Outcome {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let status = cni::skel::dispatch(
            plugin,
            "test",
            |k| self.vars.get(k).cloned(),
            &mut stdin.as_bytes(),
            &mut out,
            &mut err,
        );
        outcome(status, &out)
    }

    /// A Go reference plugin binary, e.g. `host-local`.
    pub fn reference(&self, plugin: &str, stdin: &str) -> Outcome {
        let binary = testkit::reference_dir().join(plugin);
        assert!(
            binary.exists(),
            "{} is missing: run `scripts/peers.sh build cni-plugins`",
            binary.display()
        );
        let var = |k: &str| self.vars.get(k).cloned().unwrap_or_default();
        let mut call = testkit::CniCall::new(&var("CNI_COMMAND"), stdin);
        call.container_id = var("CNI_CONTAINERID");
        call.netns = var("CNI_NETNS");
        call.ifname = var("CNI_IFNAME");
        call.args = var("CNI_ARGS");
        call.path = var("CNI_PATH");
        let done = call.run(&binary, None);
        outcome(done.code, done.stdout.as_bytes())
    }
}

fn outcome(status: i32, stdout: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(stdout);
    let json = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad output {text:?}: {e}"))
    };
    Outcome { status, json }
}

/// Every file in `dir` with its bytes.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// The reservation files only (named by address).
pub fn reservations(dir: &Path) -> BTreeMap<String, String> {
    tree(dir)
        .into_iter()
        .filter(|(name, _)| name.parse::<std::net::IpAddr>().is_ok())
        .map(|(name, bytes)| (name, String::from_utf8(bytes).unwrap()))
        .collect()
}
