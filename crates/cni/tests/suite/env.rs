//! `CNI_*` environment checks and `CNI_ARGS`, against the reference skel and pkg/types/args.go.

use std::collections::HashMap;
use std::path::PathBuf;

use cni::args::CniArgs;
use cni::env::{validate_container_id, validate_ifname};
use cni::{CmdArgs, CniError, Code, Command};

fn from_env(vars: &[(&str, &str)]) -> Result<CmdArgs, CniError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    CmdArgs::from_env(|k| map.get(k).cloned())
}

const FULL: [(&str, &str); 5] = [
    ("CNI_CONTAINERID", "c1"),
    ("CNI_NETNS", "/var/run/netns/p"),
    ("CNI_IFNAME", "eth0"),
    ("CNI_ARGS", "K=V"),
    ("CNI_PATH", "/opt/cni/bin"),
];

/// The full environment for `command`, less the variables in `drop`.
fn env_without(command: &str, drop: &[&str]) -> Vec<(&'static str, String)> {
    std::iter::once(("CNI_COMMAND", command.to_owned()))
        .chain(FULL.iter().map(|(k, v)| (*k, v.to_string())))
        .filter(|(k, _)| !drop.contains(k))
        .collect()
}

fn check(vars: &[(&'static str, String)]) -> Result<CmdArgs, CniError> {
    let borrowed: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    from_env(&borrowed)
}

#[test]
fn missing_variables_are_listed_together_in_the_reference_order() {
    let all = ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"];
    let cases: &[(&str, &[&str], &str)] = &[
        ("ADD", &all, "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"),
        (
            "CHECK",
            &all,
            "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH",
        ),
        ("DEL", &all, "CNI_CONTAINERID,CNI_IFNAME,CNI_PATH"),
        ("ADD", &["CNI_NETNS", "CNI_IFNAME"], "CNI_NETNS,CNI_IFNAME"),
        (
            "ADD",
            &["CNI_PATH", "CNI_CONTAINERID"],
            "CNI_CONTAINERID,CNI_PATH",
        ),
        ("DEL", &["CNI_IFNAME"], "CNI_IFNAME"),
        ("CHECK", &["CNI_NETNS"], "CNI_NETNS"),
        ("STATUS", &all, "CNI_PATH"),
        ("GC", &all, "CNI_PATH"),
        ("", &[], "CNI_COMMAND"),
        ("", &all, "CNI_COMMAND"),
    ];
    for (command, drop, missing) in cases {
        let err = check(&env_without(command, drop)).unwrap_err();
        assert_eq!(
            err.code,
            Code::InvalidEnvironment as u32,
            "{command} {drop:?}"
        );
        assert_eq!(
            err.msg,
            format!("required env variables [{missing}] missing"),
            "{command} {drop:?}"
        );
    }
}

#[test]
fn what_each_command_needs_and_no_more() {
    // DEL of a namespace that is gone: no CNI_NETNS.
    let del = check(&env_without("DEL", &["CNI_NETNS"])).unwrap();
    assert_eq!((del.command, del.netns.as_str()), (Command::Del, ""));
    // STATUS and GC: only CNI_PATH; an ifname they do not use is not checked.
    for command in ["STATUS", "GC"] {
        let mut vars = env_without(command, &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"]);
        vars.push(("CNI_IFNAME", "not/valid".into()));
        assert!(check(&vars).is_ok(), "{command}");
    }
    // VERSION: nothing else at all.
    let version = from_env(&[("CNI_COMMAND", "VERSION")]).unwrap();
    assert_eq!(version.command, Command::Version);
    // Everything set is read back.
    let add = check(&env_without("ADD", &[])).unwrap();
    assert_eq!(add.command, Command::Add);
    assert_eq!(add.container_id, "c1");
    assert_eq!(add.netns, "/var/run/netns/p");
    assert_eq!(add.ifname, "eth0");
    assert_eq!(add.args, "K=V");
    assert_eq!(add.path, [PathBuf::from("/opt/cni/bin")]);
}

#[test]
fn cni_path_is_split_on_colons_skipping_empty_entries() {
    let mut vars = env_without("ADD", &["CNI_PATH"]);
    vars.push(("CNI_PATH", "/a::/b:".into()));
    let args = check(&vars).unwrap();
    assert_eq!(args.path, [PathBuf::from("/a"), PathBuf::from("/b")]);
}

#[test]
fn an_unknown_command_is_code_4() {
    let err = check(&env_without("FROB", &[])).unwrap_err();
    assert_eq!(err.code, Code::InvalidEnvironment as u32);
    assert_eq!(err.msg, r#"unknown CNI_COMMAND: "FROB""#);
    // Commands are case-sensitive, as in the reference.
    assert!(check(&env_without("add", &[])).is_err());
}

#[test]
fn container_id_rules() {
    for bad in ["-lead", "_lead", ".lead", "a/b", "a b", "a:b", "ü"] {
        let mut vars = env_without("ADD", &["CNI_CONTAINERID"]);
        vars.push(("CNI_CONTAINERID", bad.into()));
        let err = check(&vars).unwrap_err();
        assert_eq!(err.code, Code::InvalidEnvironment as u32, "{bad:?}");
        assert_eq!(err.msg, "invalid characters in containerID", "{bad:?}");
        assert_eq!(err.details, cni::quote::quote(bad));
    }
    for good in ["a", "0", "abc-DEF_1.2", "f00d"] {
        assert!(validate_container_id(good).is_ok(), "{good:?}");
    }
    let err = validate_container_id("").unwrap_err();
    assert_eq!(
        (err.code, err.msg.as_str()),
        (Code::UnknownContainer as u32, "missing containerID")
    );
}

#[test]
fn an_invalid_value_is_reported_before_later_missing_ones() {
    // The reference checks in variable order and stops at the first invalid value.
    let mut vars = env_without("ADD", &["CNI_CONTAINERID", "CNI_NETNS", "CNI_PATH"]);
    vars.push(("CNI_CONTAINERID", "bad id".into()));
    let err = check(&vars).unwrap_err();
    assert_eq!(err.msg, "invalid characters in containerID");
    let mut vars = env_without("ADD", &["CNI_IFNAME", "CNI_PATH"]);
    vars.push(("CNI_IFNAME", "a:b".into()));
    let err = check(&vars).unwrap_err();
    assert!(err.msg.starts_with("interface name contains"), "{err}");
}

#[test]
fn ifname_rules() {
    let bad = [
        "",
        "sixteen-bytes-xx",
        ".",
        "..",
        "a/b",
        "a:b",
        "a b",
        "a\tb",
        "a\nb",
        "a\u{a0}b",
    ];
    for name in bad {
        let err = validate_ifname(name).unwrap_err();
        assert_eq!(err.code, Code::InvalidEnvironment as u32, "{name:?}");
        if !name.is_empty() {
            let mut vars = env_without("CHECK", &["CNI_IFNAME"]);
            vars.push(("CNI_IFNAME", name.into()));
            assert_eq!(check(&vars).unwrap_err().code, 4, "{name:?}");
        }
    }
    for name in ["eth0", "net1", "fifteen-bytes-x", "a.b", "...", "a-b_c@d"] {
        assert!(validate_ifname(name).is_ok(), "{name:?}");
    }
}

#[test]
fn cni_args_pairs() {
    let args = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web;K8S_POD_NAME=api;EMPTY=").unwrap();
    assert_eq!(args.get("K8S_POD_NAME"), Some("api"), "the last value wins");
    assert_eq!(args.get("EMPTY"), Some(""));
    assert_eq!(args.get("k8s_pod_name"), None, "keys are case-sensitive");
    assert_eq!(CniArgs::parse("").unwrap(), CniArgs::default());

    for bad in ["A", "A=B=C", "A=B;", ";A=B", "A=B;;C=D", "=;"] {
        let err = CniArgs::parse(bad).unwrap_err();
        assert_eq!(err.code, Code::InvalidConfig as u32, "{bad:?}");
        assert!(err.msg.contains("invalid pair"), "{bad:?}: {err}");
    }
}

#[test]
fn cni_args_ignore_unknown() {
    let cases = [
        ("", Some(false)),
        ("A=1", Some(false)),
        ("IgnoreUnknown=1", Some(true)),
        ("IgnoreUnknown=true", Some(true)),
        ("IgnoreUnknown=TRUE", Some(true)),
        ("IgnoreUnknown=True", Some(true)),
        ("IgnoreUnknown=0", Some(false)),
        ("IgnoreUnknown=false", Some(false)),
        ("IgnoreUnknown=FaLsE", Some(false)),
        ("IgnoreUnknown=yes", None),
        ("IgnoreUnknown=", None),
        ("IgnoreUnknown=2", None),
        // Only the exact key counts, as Go's field lookup is case-sensitive.
        ("ignoreunknown=1", Some(false)),
    ];
    for (raw, want) in cases {
        let got = CniArgs::parse(raw).unwrap().ignore_unknown();
        match want {
            Some(b) => assert_eq!(got.unwrap(), b, "{raw:?}"),
            None => assert_eq!(got.unwrap_err().code, Code::InvalidConfig as u32, "{raw:?}"),
        }
    }
}

#[test]
fn cni_args_unknown_keys() {
    let known = ["IP", "MAC"];
    assert!(CniArgs::parse("IP=10.0.0.2;MAC=aa:bb:cc:dd:ee:ff")
        .unwrap()
        .check_known(&known)
        .is_ok());
    let err = CniArgs::parse("IP=10.0.0.2;K8S_POD_NAME=web;X=1")
        .unwrap()
        .check_known(&known)
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidConfig as u32);
    assert!(
        err.msg.contains("K8S_POD_NAME") && err.msg.contains("\"X\""),
        "{err}"
    );
    assert!(!err.msg.contains("\"IP\""), "{err}");
    for ignore in ["IgnoreUnknown=1", "IgnoreUnknown=true"] {
        let raw = format!("{ignore};K8S_POD_NAME=web");
        assert!(CniArgs::parse(&raw).unwrap().check_known(&known).is_ok());
    }
    assert!(CniArgs::parse("IgnoreUnknown=0")
        .unwrap()
        .check_known(&known)
        .is_ok());
    let err = CniArgs::parse("IgnoreUnknown=maybe;X=1")
        .unwrap()
        .check_known(&known)
        .unwrap_err();
    assert!(err.msg.contains("IgnoreUnknown"), "{err}");
}
