//! The plugin entry point, driven through `skel::dispatch` with a fake plugin.

use std::cell::RefCell;
use std::collections::HashMap;

use cni::skel::dispatch;
use cni::{CmdArgs, CniError, CniResult, Code, Command, IpConfig, Plugin, Route, Version};
use serde_json::{json, Value};

/// Records what it was called with and answers from `fail`.
#[derive(Default)]
struct Fake {
    calls: RefCell<Vec<Command>>,
    fail: Option<CniError>,
    /// ADD succeeds with a result that has no address (an L2-only attachment).
    l2_only: bool,
}

impl Fake {
    fn answer(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.calls.borrow_mut().push(args.command);
        self.fail.clone().map_or(Ok(()), Err)
    }
}

impl Plugin for Fake {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.answer(args)?;
        if self.l2_only {
            return Ok(CniResult::default());
        }
        Ok(CniResult {
            ips: vec![
                IpConfig {
                    address: "10.1.0.5/16".parse().expect("an address"),
                    gateway: "10.1.0.1".parse().ok(),
                    interface: None,
                },
                IpConfig {
                    address: "fd00::5/64".parse().expect("an address"),
                    gateway: None,
                    interface: None,
                },
            ],
            routes: vec![Route::new("0.0.0.0/0".parse().expect("a subnet"), None)],
            ..CniResult::default()
        })
    }
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn validate(&self, _config: &[u8]) -> Result<(), CniError> {
        self.fail.clone().map_or(Ok(()), Err)
    }
}

struct Outcome {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", self.stdout))
    }

    /// Asserts a printed error object with `code`, and returns it.
    fn error(&self, code: Code) -> Value {
        assert_eq!(self.status, 1, "stdout: {}", self.stdout);
        let v = self.json();
        assert_eq!(v["code"], code as u32, "{v}");
        v
    }
}

fn run_with(plugin: &Fake, vars: &[(&str, &str)], stdin: &str) -> Outcome {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let status = dispatch(
        plugin,
        "fake plugin v0",
        |k| env.get(k).cloned(),
        &mut stdin.as_bytes(),
        &mut stdout,
        &mut stderr,
    );
    Outcome {
        status,
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(stderr).expect("stderr is UTF-8"),
    }
}

/// `command` with a complete environment; the netns path does not exist, so it is not ours.
fn run(plugin: &Fake, command: &str, stdin: &str) -> Outcome {
    run_with(plugin, &env(command, "/run/netns/nonexistent"), stdin)
}

fn env<'a>(command: &'a str, netns: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
}

fn conf(version: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"net","type":"fake"}}"#)
}

#[test]
fn without_a_command_it_prints_about_and_exits_0() {
    let fake = Fake::default();
    let out = run_with(&fake, &[], "");
    assert_eq!((out.status, out.stdout.as_str()), (0, ""));
    assert_eq!(
        out.stderr,
        "fake plugin v0\nCNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n"
    );
}

#[test]
fn version_prints_the_supported_versions_without_reading_a_config() {
    let fake = Fake::default();
    let out = run_with(&fake, &[("CNI_COMMAND", "VERSION")], "not json");
    assert_eq!(out.status, 0);
    assert_eq!(
        out.json(),
        json!({
            "cniVersion": "1.1.0",
            "supportedVersions": ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
        })
    );
    assert!(fake.calls.borrow().is_empty());
}

#[test]
fn config_errors_have_their_codes_and_the_plugin_is_not_called() {
    let fake = Fake::default();
    let cases = [
        ("{not json", Code::Decoding, ""),
        (
            r#"{"cniVersion":"1.0.0","type":"fake"}"#,
            Code::InvalidConfig,
            "1.0.0",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"","type":"fake"}"#,
            Code::InvalidConfig,
            "1.0.0",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"my net","type":"fake"}"#,
            Code::InvalidConfig,
            "1.0.0",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"-net","type":"fake"}"#,
            Code::InvalidConfig,
            "1.0.0",
        ),
        (
            r#"{"cniVersion":"9.9.9","name":"net","type":"fake"}"#,
            Code::IncompatibleVersion,
            "9.9.9",
        ),
    ];
    for (stdin, code, version) in cases {
        for command in ["ADD", "DEL"] {
            let err = run(&fake, command, stdin).error(code);
            assert_eq!(
                err.get("cniVersion").and_then(Value::as_str).unwrap_or(""),
                version
            );
        }
    }
    let err =
        run(&fake, "ADD", r#"{"cniVersion":"1.0.0","type":"fake"}"#).error(Code::InvalidConfig);
    assert_eq!(
        err["msg"],
        "name: required, but missing (a network config needs a name)"
    );
    let err =
        run(&fake, "ADD", &conf("1.0.0").replace("\"net\"", "\"a b\"")).error(Code::InvalidConfig);
    let msg = err["msg"].as_str().unwrap();
    assert!(
        msg.starts_with(r#"name: "a b" has invalid characters"#),
        "{msg}"
    );
    assert!(fake.calls.borrow().is_empty());
}

#[test]
fn commands_the_config_version_does_not_have_are_code_1() {
    let fake = Fake::default();
    for (command, version) in [
        ("CHECK", "0.3.1"),
        ("CHECK", "0.1.0"),
        ("STATUS", "1.0.0"),
        ("GC", "1.0.0"),
        ("GC", "0.4.0"),
    ] {
        let err = run(&fake, command, &conf(version)).error(Code::IncompatibleVersion);
        assert_eq!(err["cniVersion"], version, "{command}");
    }
    assert!(fake.calls.borrow().is_empty());

    for (command, version) in [("CHECK", "0.4.0"), ("STATUS", "1.1.0"), ("GC", "1.1.0")] {
        let out = run(&fake, command, &conf(version));
        assert_eq!((out.status, out.stdout.as_str()), (0, ""), "{command}");
    }
    let status_only = [("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/opt/cni/bin")];
    assert_eq!(run_with(&fake, &status_only, &conf("1.1.0")).status, 0);
    assert_eq!(
        *fake.calls.borrow(),
        [
            Command::Check,
            Command::Status,
            Command::Gc,
            Command::Status
        ]
    );
}

#[test]
fn add_prints_the_result_in_the_config_version() {
    let fake = Fake::default();
    let out = run(&fake, "ADD", &conf("0.2.0"));
    assert_eq!(out.status, 0);
    assert_eq!(
        out.json(),
        json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
            "ip6": {"ip": "fd00::5/64"},
            "dns": {}
        })
    );
    let v = run(&fake, "ADD", &conf("0.4.0")).json();
    assert_eq!(v["cniVersion"], "0.4.0");
    assert_eq!(v["ips"][0]["version"], "4");
    assert_eq!(v["ips"][1]["version"], "6");
    let v = run(&fake, "ADD", &conf("1.0.0")).json();
    assert_eq!(v["cniVersion"], "1.0.0");
    assert!(v["ips"][0].get("version").is_none());
    // An empty cniVersion means 0.1.0.
    let v = run(&fake, "ADD", r#"{"name":"net","type":"fake"}"#).json();
    assert_eq!(v["cniVersion"], "0.1.0");
    assert!(v.get("ip4").is_some());
    // The result printed is the whole output: one JSON document.
    assert!(run(&fake, "DEL", &conf("1.0.0")).stdout.is_empty());
}

#[test]
fn a_plugin_error_is_printed_with_the_config_version_and_exit_1() {
    let fake = Fake {
        fail: Some(CniError::new(Code::TryAgainLater, "busy").with_details("lock held")),
        ..Fake::default()
    };
    for command in ["ADD", "DEL", "CHECK"] {
        let out = run(&fake, command, &conf("0.4.0"));
        assert_eq!(out.status, 1);
        assert_eq!(
            out.json(),
            json!({"cniVersion": "0.4.0", "code": 11, "msg": "busy", "details": "lock held"})
        );
    }
    // An error that names its own version keeps it.
    let mut own = CniError::new(Code::Io, "disk");
    own.cni_version = "1.0.0".into();
    let fake = Fake {
        fail: Some(own),
        ..Fake::default()
    };
    assert_eq!(
        run(&fake, "DEL", &conf("0.4.0")).json()["cniVersion"],
        "1.0.0"
    );
}

#[test]
fn environment_errors_are_printed_as_error_objects() {
    let fake = Fake::default();
    let out = run_with(&fake, &[("CNI_COMMAND", "ADD")], &conf("1.0.0"));
    let err = out.error(Code::InvalidEnvironment);
    assert_eq!(
        err["msg"],
        "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
    let err = run(&fake, "FROB", &conf("1.0.0")).error(Code::InvalidEnvironment);
    assert_eq!(err["msg"], r#"unknown CNI_COMMAND: "FROB""#);
}

#[test]
fn add_in_the_plugins_own_netns_is_code_8_unless_overridden() {
    let fake = Fake::default();
    let own = env("ADD", "/proc/self/ns/net");
    let err = run_with(&fake, &own, &conf("1.0.0")).error(Code::InvalidNetns);
    assert!(
        err["msg"].as_str().unwrap().contains("/proc/self/ns/net"),
        "{err}"
    );
    assert!(fake.calls.borrow().is_empty());
    // DEL is not refused: tearing down is always allowed.
    assert_eq!(
        run_with(&fake, &env("DEL", "/proc/self/ns/net"), &conf("1.0.0")).status,
        0
    );

    for value in ["1", "true", "TRUE"] {
        let mut vars = own.clone();
        vars.push(("CNI_NETNS_OVERRIDE", value));
        assert_eq!(run_with(&fake, &vars, &conf("1.0.0")).status, 0, "{value}");
    }
    let mut vars = own.clone();
    vars.push(("CNI_NETNS_OVERRIDE", "0"));
    run_with(&fake, &vars, &conf("1.0.0")).error(Code::InvalidNetns);
    assert_eq!(fake.calls.borrow().len(), 4);
}

#[test]
fn every_version_is_accepted_for_add() {
    let fake = Fake::default();
    for v in Version::ALL {
        let out = run(&fake, "ADD", &conf(v.as_str()));
        assert_eq!(out.status, 0, "{v}");
        assert_eq!(out.json()["cniVersion"], v.as_str());
    }
}

#[test]
fn an_add_whose_result_cannot_be_expressed_is_undone() {
    let fake = Fake {
        l2_only: true,
        ..Fake::default()
    };
    let out = run(&fake, "ADD", &conf("0.2.0"));
    let err = out.error(Code::IncompatibleVersion);
    assert!(
        err["msg"].as_str().unwrap().contains("no IP address"),
        "{err}"
    );
    assert_eq!(*fake.calls.borrow(), [Command::Add, Command::Del]);
}

/// `validate_main` with `config` read from stdin: exit status and stdout.
fn validate(plugin: &Fake, config: &str) -> (i32, String) {
    let mut out = Vec::new();
    let code = cni::skel::validate_main(plugin, Ok(config.as_bytes().to_vec()), &mut out);
    (code, String::from_utf8(out).expect("stdout is UTF-8"))
}

#[test]
fn validate_runs_the_shared_checks_then_the_plugin() {
    // A good config: nothing printed.
    assert_eq!(
        validate(&Fake::default(), &conf("1.0.0")),
        (0, String::new())
    );

    // The shared checks come first, with their codes and the config's version.
    let cases = [
        ("[1]".to_owned(), 6),
        (
            r#"{"cniVersion":"1.0.0","name":"","type":"fake"}"#.to_owned(),
            7,
        ),
        (conf("9.9.9"), 1),
    ];
    for (config, code) in cases {
        let (status, out) = validate(&Fake::default(), &config);
        assert_eq!(status, 1, "{config}");
        let err: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(err["code"], code, "{config}: {out}");
    }

    // Then the plugin's own answer, carrying the config's version.
    let fake = Fake {
        fail: Some(CniError::invalid_config("vlan 5000 is out of range")),
        ..Fake::default()
    };
    let (status, out) = validate(&fake, &conf("0.4.0"));
    assert_eq!(status, 1);
    let err: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        err,
        json!({"cniVersion": "0.4.0", "code": 7, "msg": "vlan 5000 is out of range"})
    );
    // validate never runs a command.
    assert!(fake.calls.borrow().is_empty());
}

#[test]
fn an_error_object_stays_under_4_kb_whatever_the_input() {
    let big = "x".repeat(1 << 20);
    // A plugin's own message that quotes its input whole, and a huge cniVersion and name.
    let fake = Fake {
        fail: Some(CniError::invalid_config(format!("bad: {big}")).with_details(big.clone())),
        ..Fake::default()
    };
    let out = run(&fake, "ADD", &conf("1.0.0"));
    assert!(out.stdout.len() < 4096, "{} bytes", out.stdout.len());
    assert!(out.error(Code::InvalidConfig)["msg"]
        .as_str()
        .unwrap()
        .ends_with("bytes cut)"));
    let bad_name = format!("\"{big} \"");
    for stdin in [conf(&big), conf("1.0.0").replace("\"net\"", &bad_name)] {
        let out = run(&Fake::default(), "ADD", &stdin);
        assert_eq!(out.status, 1);
        assert!(out.stdout.len() < 4096, "{} bytes", out.stdout.len());
    }
}
