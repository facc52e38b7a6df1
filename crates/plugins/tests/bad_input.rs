//! A corpus of bad inputs. Each one gets a CNI error object on stdout, exit status 1, the right
//! well-known code, and leaves nothing behind: no link, no reservation, no rule. macvlan and
//! ipvlan run against the node's master `up0` (a veth whose peer is `up0p`), which stays.

use std::path::Path;

use testkit::{CniCall, Netns, PluginDir};

const DECODE: u64 = 6;
const CONFIG: u64 = 7;
const ENV: u64 = 4;
const VERSION: u64 = 1;

/// A valid bridge config with host-local; cases change one thing in it.
fn bridge(extra: &str, ipam: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"bridge","bridge":"bad0","isGateway":true,"ipMasq":true,"macspoofchk":true{extra},
            "ipam":{{"type":"host-local","dataDir":"DATADIR"{ipam}}}}}"#
    )
}

/// A valid macvlan config with host-local on the master `up0`; cases change one thing in it.
fn macvlan(extra: &str, ipam: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"macvlan","master":"up0"{extra},
            "ipam":{{"type":"host-local","dataDir":"DATADIR"{ipam}}}}}"#
    )
}

/// The same for ipvlan.
fn ipvlan(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"ipvlan","master":"up0"{extra},
            "ipam":{{"type":"host-local","dataDir":"DATADIR"{RANGES}}}}}"#
    )
}

/// The master macvlan and ipvlan attach to; not a leftover.
const MASTER: [&str; 2] = ["up0", "up0p"];

const RANGES: &str = r#","ranges":[[{"subnet":"10.66.0.0/24"}]]"#;

fn host_local(ipam: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"host-local","ipam":{{"type":"host-local","dataDir":"DATADIR"{ipam}}}}}"#
    )
}

fn static_ipam(ipam: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"static","ipam":{{"type":"static"{ipam}}}}}"#
    )
}

/// Environment overrides; `None` removes the variable.
type EnvOverrides = Vec<(&'static str, Option<String>)>;

struct Case {
    what: String,
    plugin: &'static str,
    command: &'static str,
    stdin: String,
    /// Environment overrides; `None` removes the variable.
    env: Vec<(&'static str, Option<String>)>,
    code: u64,
}

fn case(what: impl Into<String>, plugin: &'static str, stdin: String, code: u64) -> Case {
    Case {
        what: what.into(),
        plugin,
        command: "ADD",
        stdin,
        env: Vec::new(),
        code,
    }
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let good_bridge = bridge("", RANGES);
    let good_macvlan = macvlan("", RANGES);
    let plugins: [(&'static str, String); 5] = [
        ("bridge", good_bridge.clone()),
        ("macvlan", good_macvlan.clone()),
        ("ipvlan", ipvlan("")),
        ("host-local", host_local(RANGES)),
        (
            "static",
            static_ipam(r#","addresses":[{"address":"10.66.0.5/24"}]"#),
        ),
    ];

    // The environment, for every plugin.
    for (plugin, good) in &plugins {
        let env_cases: Vec<(&str, EnvOverrides)> = vec![
            (
                "unknown command",
                vec![("CNI_COMMAND", Some("FROB".into()))],
            ),
            ("no container id", vec![("CNI_CONTAINERID", None)]),
            (
                "container id with a slash",
                vec![("CNI_CONTAINERID", Some("a/b".into()))],
            ),
            (
                "container id starting with a dash",
                vec![("CNI_CONTAINERID", Some("-abc".into()))],
            ),
            ("no netns", vec![("CNI_NETNS", None)]),
            ("no ifname", vec![("CNI_IFNAME", None)]),
            (
                "ifname of 16 bytes",
                vec![("CNI_IFNAME", Some("abcdefghijklmnop".into()))],
            ),
            ("ifname .", vec![("CNI_IFNAME", Some(".".into()))]),
            ("ifname ..", vec![("CNI_IFNAME", Some("..".into()))]),
            ("ifname with /", vec![("CNI_IFNAME", Some("et/h0".into()))]),
            ("ifname with :", vec![("CNI_IFNAME", Some("eth0:1".into()))]),
            (
                "ifname with a space",
                vec![("CNI_IFNAME", Some("eth 0".into()))],
            ),
            (
                "ifname with a tab",
                vec![("CNI_IFNAME", Some("eth\t0".into()))],
            ),
            ("no CNI_PATH", vec![("CNI_PATH", None)]),
        ];
        for (what, env) in env_cases {
            let mut c = case(format!("{plugin}: {what}"), plugin, good.clone(), ENV);
            c.env = env;
            cases.push(c);
        }
        // Decoding and the common config keys.
        for (what, stdin, code) in [
            ("empty stdin", String::new(), DECODE),
            ("truncated JSON", good[..good.len() / 2].to_owned(), DECODE),
            ("a JSON array", "[]".to_owned(), DECODE),
            ("a JSON number", "42".to_owned(), DECODE),
            (
                "name is a number",
                good.replace(r#""name":"badnet""#, r#""name":5"#),
                DECODE,
            ),
            ("no name", good.replace(r#""name":"badnet","#, ""), CONFIG),
            (
                "name with a slash",
                good.replace("badnet", "bad/net"),
                CONFIG,
            ),
            ("name ..", good.replace("badnet", ".."), CONFIG),
            (
                "unknown cniVersion",
                good.replace("1.0.0", "9.9.9"),
                VERSION,
            ),
            (
                "cniVersion not a version",
                good.replace("1.0.0", "one"),
                VERSION,
            ),
        ] {
            cases.push(case(format!("{plugin}: {what}"), plugin, stdin, code));
        }
        for (command, version) in [("CHECK", "0.3.1"), ("STATUS", "1.0.0"), ("GC", "0.4.0")] {
            let mut c = case(
                format!("{plugin}: {command} with cniVersion {version}"),
                plugin,
                good.replace("1.0.0", version),
                VERSION,
            );
            c.command = command;
            cases.push(c);
        }
    }

    // bridge options.
    for (what, extra, code) in [
        ("vlan -1", r#","vlan":-1"#, CONFIG),
        ("vlan 4095", r#","vlan":4095"#, CONFIG),
        ("vlan is a string", r#","vlan":"10""#, DECODE),
        (
            "trunk minID 0",
            r#","vlanTrunk":[{"minID":0,"maxID":10}]"#,
            CONFIG,
        ),
        (
            "trunk maxID 4095",
            r#","vlanTrunk":[{"minID":1,"maxID":4095}]"#,
            CONFIG,
        ),
        (
            "trunk minID above maxID",
            r#","vlanTrunk":[{"minID":20,"maxID":10}]"#,
            CONFIG,
        ),
        (
            "trunk minID alone",
            r#","vlanTrunk":[{"minID":20}]"#,
            CONFIG,
        ),
        (
            "trunk maxID alone",
            r#","vlanTrunk":[{"maxID":20}]"#,
            CONFIG,
        ),
        ("trunk id 0", r#","vlanTrunk":[{"id":0}]"#, CONFIG),
        ("trunk id 4095", r#","vlanTrunk":[{"id":4095}]"#, CONFIG),
        (
            "hairpin and promiscuous together",
            r#","hairpinMode":true,"promiscMode":true"#,
            CONFIG,
        ),
        (
            "disableContainerInterface with ipam",
            r#","disableContainerInterface":true"#,
            CONFIG,
        ),
        ("isGateway is a string", r#","isGateway":"yes""#, DECODE),
        ("mtu is negative", r#","mtu":-5"#, DECODE),
        ("unknown ipMasq backend", r#","ipMasqBackend":"pf""#, CONFIG),
        (
            "bad runtimeConfig mac",
            r#","runtimeConfig":{"mac":"zz:zz:zz:zz:zz:zz"}"#,
            CONFIG,
        ),
        ("bad args mac", r#","args":{"cni":{"mac":"01:02"}}"#, CONFIG),
    ] {
        cases.push(case(
            format!("bridge: {what}"),
            "bridge",
            bridge(extra, RANGES),
            code,
        ));
    }
    for (what, name) in [
        ("bridge name too long", "abcdefghijklmnopq"),
        ("bridge name with a slash", "br/0"),
    ] {
        let stdin = good_bridge.replace(r#""bridge":"bad0""#, &format!(r#""bridge":"{name}""#));
        cases.push(case(format!("bridge: {what}"), "bridge", stdin, CONFIG));
    }
    // The ipam block and CNI_ARGS of the interface plugins that read them. (DEL of such a
    // config succeeds: the ADD that failed reserved nothing; see the DEL after every ADD below.)
    for (plugin, good) in [("bridge", &good_bridge), ("macvlan", &good_macvlan)] {
        for command in ["ADD", "CHECK"] {
            let mut c = case(
                format!("{plugin}: {command} with an interface plugin as ipam"),
                plugin,
                good.replace(r#""type":"host-local""#, &format!(r#""type":"{plugin}""#)),
                CONFIG,
            );
            c.command = command;
            cases.push(c);
        }
        for (what, ipam_type) in [
            ("ipam type with a path", "../host-local"),
            ("ipam type absolute", "/usr/lib/cni/host-local"),
            ("ipam type not installed", "no-such-ipam"),
        ] {
            let stdin = good.replace(
                r#""type":"host-local""#,
                &format!(r#""type":"{ipam_type}""#),
            );
            cases.push(case(format!("{plugin}: {what}"), plugin, stdin, CONFIG));
        }
        let mut c = case(
            format!("{plugin}: bad MAC in CNI_ARGS"),
            plugin,
            good.clone(),
            CONFIG,
        );
        c.env = vec![("CNI_ARGS", Some("MAC=nope".into()))];
        cases.push(c);
    }

    // macvlan and ipvlan options.
    for (what, extra, code) in [
        ("unknown mode", r#","mode":"l2""#, CONFIG),
        ("mode is a number", r#","mode":4"#, DECODE),
        ("mtu is negative", r#","mtu":-5"#, CONFIG),
        ("mtu is a string", r#","mtu":"1400""#, DECODE),
        ("mtu above the master's", r#","mtu":1501"#, CONFIG),
        ("mac garbage", r#","mac":"02:00:00""#, CONFIG),
        ("mac is a number", r#","mac":2"#, DECODE),
        (
            "runtimeConfig mac garbage",
            r#","runtimeConfig":{"mac":"zz"}"#,
            CONFIG,
        ),
        ("bcqueuelen negative", r#","bcqueuelen":-1"#, DECODE),
        (
            "linkInContainer is a string",
            r#","linkInContainer":"yes""#,
            DECODE,
        ),
        (
            "master not in the pod with linkInContainer",
            r#","linkInContainer":true"#,
            CONFIG,
        ),
        ("multicast mac", r#","mac":"01:00:5e:00:00:01""#, 999),
    ] {
        cases.push(case(
            format!("macvlan: {what}"),
            "macvlan",
            macvlan(extra, RANGES),
            code,
        ));
    }
    for (what, extra, code) in [
        ("unknown mode", r#","mode":"bridge""#, CONFIG),
        ("mtu is negative", r#","mtu":-5"#, CONFIG),
        ("mtu above the master's", r#","mtu":9000"#, CONFIG),
        ("prevResult garbage", r#","prevResult":{"ips":"x"}"#, DECODE),
        (
            "master not in the pod with linkInContainer",
            r#","linkInContainer":true"#,
            CONFIG,
        ),
    ] {
        cases.push(case(
            format!("ipvlan: {what}"),
            "ipvlan",
            ipvlan(extra),
            code,
        ));
    }
    for (plugin, good) in [("macvlan", good_macvlan.clone()), ("ipvlan", ipvlan(""))] {
        for (what, from, to) in [
            (
                "master missing",
                r#""master":"up0""#,
                r#""master":"nosuch0""#,
            ),
            (
                "master name with a slash",
                r#""master":"up0""#,
                r#""master":"a/b""#,
            ),
            (
                "master name too long",
                r#""master":"up0""#,
                r#""master":"abcdefghijklmnopq""#,
            ),
        ] {
            cases.push(case(
                format!("{plugin}: {what}"),
                plugin,
                good.replace(from, to),
                CONFIG,
            ));
        }
    }
    cases.push(case(
        "ipvlan: no ipam and no prevResult",
        "ipvlan",
        r#"{"cniVersion":"1.0.0","name":"badnet","type":"ipvlan","master":"up0"}"#.into(),
        CONFIG,
    ));
    cases.push(case(
        "ipvlan: chained, prevResult with two interfaces and no master",
        "ipvlan",
        r#"{"cniVersion":"1.0.0","name":"badnet","type":"ipvlan","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}],"ips":[{"address":"10.66.0.9/24"}]}}"#.into(),
        CONFIG,
    ));
    // host-local, alone and under bridge (both must fail the same way, leaving nothing).
    let ipam_cases: Vec<(&str, String, u64)> = vec![
        ("no ranges", String::new(), CONFIG),
        ("empty ranges", r#","ranges":[]"#.into(), CONFIG),
        ("empty range set", r#","ranges":[[]]"#.into(), CONFIG),
        ("subnet without prefix", r#","ranges":[[{"subnet":"10.66.0.0"}]]"#.into(), DECODE),
        ("subnet garbage", r#","ranges":[[{"subnet":"ten.sixty-six"}]]"#.into(), DECODE),
        ("subnet /31", r#","ranges":[[{"subnet":"10.66.0.0/31"}]]"#.into(), CONFIG),
        ("subnet /32", r#","ranges":[[{"subnet":"10.66.0.0/32"}]]"#.into(), CONFIG),
        ("IPv6 subnet /127", r#","ranges":[[{"subnet":"fd00::/127"}]]"#.into(), CONFIG),
        ("overlapping ranges in a set", r#","ranges":[[{"subnet":"10.66.0.0/24"},{"subnet":"10.66.0.0/25"}]]"#.into(), CONFIG),
        ("overlapping range sets", r#","ranges":[[{"subnet":"10.66.0.0/24"}],[{"subnet":"10.66.0.128/25"}]]"#.into(), CONFIG),
        ("mixed families in a set", r#","ranges":[[{"subnet":"10.66.0.0/24"},{"subnet":"fd00::/64"}]]"#.into(), CONFIG),
        ("rangeStart outside the subnet", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeStart":"10.67.0.10"}]]"#.into(), CONFIG),
        ("rangeEnd outside the subnet", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeEnd":"10.67.0.10"}]]"#.into(), CONFIG),
        ("rangeStart after rangeEnd", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeStart":"10.66.0.50","rangeEnd":"10.66.0.10"}]]"#.into(), CONFIG),
        ("rangeStart garbage", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeStart":"x"}]]"#.into(), DECODE),
        ("gateway garbage", r#","ranges":[[{"subnet":"10.66.0.0/24","gateway":"x"}]]"#.into(), DECODE),
        ("route dst garbage", format!(r#"{RANGES},"routes":[{{"dst":"x"}}]"#), DECODE),
        ("route gw garbage", format!(r#"{RANGES},"routes":[{{"dst":"0.0.0.0/0","gw":"x"}}]"#), DECODE),
        ("legacy subnet garbage", r#","subnet":"10.66.0.0/99""#.into(), DECODE),
        ("ranges is an object", r#","ranges":{"subnet":"10.66.0.0/24"}"#.into(), DECODE),
        ("requested IP outside every range", format!(r#"{RANGES},"ips":["10.9.9.9"]"#), CONFIG),
        ("runtimeConfig IP garbage", RANGES.to_owned(), DECODE),
        ("resolvConf missing", format!(r#"{RANGES},"resolvConf":"/nonexistent/resolv.conf""#), 5),
    ];
    for (what, ipam, code) in &ipam_cases {
        cases.push(case(
            format!("host-local: {what}"),
            "host-local",
            host_local(ipam),
            *code,
        ));
        cases.push(case(
            format!("bridge+host-local: {what}"),
            "bridge",
            bridge("", ipam),
            *code,
        ));
        cases.push(case(
            format!("macvlan+host-local: {what}"),
            "macvlan",
            macvlan("", ipam),
            *code,
        ));
    }
    // Fix up the two cases whose bad part is outside the ipam block.
    for c in cases
        .iter_mut()
        .filter(|c| c.what.ends_with("requested IP outside every range"))
    {
        c.stdin = c.stdin.replace(r#","ips":["10.9.9.9"]"#, "");
        c.env = vec![("CNI_ARGS", Some("IP=10.9.9.9".into()))];
    }
    for c in cases
        .iter_mut()
        .filter(|c| c.what.ends_with("runtimeConfig IP garbage"))
    {
        c.stdin = c.stdin.replacen(
            r#""name":"badnet","#,
            r#""name":"badnet","capabilities":{"ips":true},"runtimeConfig":{"ips":["not-an-ip"]},"#,
            1,
        );
    }
    for (what, env) in [
        ("CNI_ARGS not KEY=VALUE", "garbage"),
        ("CNI_ARGS unknown key", "FOO=bar"),
        ("CNI_ARGS IP garbage", "IP=10.66.0.x"),
        (
            "CNI_ARGS IgnoreUnknown garbage",
            "IgnoreUnknown=maybe;FOO=bar",
        ),
    ] {
        for (plugin, stdin) in [
            ("host-local", host_local(RANGES)),
            ("bridge", good_bridge.clone()),
            ("macvlan", good_macvlan.clone()),
        ] {
            let mut c = case(format!("{plugin}: {what}"), plugin, stdin, CONFIG);
            c.env = vec![("CNI_ARGS", Some(env.into()))];
            cases.push(c);
        }
    }

    // static.
    for (what, ipam, code) in [
        (
            "address garbage",
            r#","addresses":[{"address":"x"}]"#,
            CONFIG,
        ),
        (
            "address without prefix",
            r#","addresses":[{"address":"10.66.0.5"}]"#,
            CONFIG,
        ),
        (
            "gateway garbage",
            r#","addresses":[{"address":"10.66.0.5/24","gateway":"x"}]"#,
            DECODE,
        ),
        (
            "route garbage",
            r#","addresses":[{"address":"10.66.0.5/24"}],"routes":[{"dst":"x"}]"#,
            DECODE,
        ),
        (
            "addresses is a string",
            r#","addresses":"10.66.0.5/24""#,
            DECODE,
        ),
        (
            "dns is a list",
            r#","addresses":[{"address":"10.66.0.5/24"}],"dns":["1.1.1.1"]"#,
            DECODE,
        ),
    ] {
        cases.push(case(
            format!("static: {what}"),
            "static",
            static_ipam(ipam),
            code,
        ));
    }
    for (what, env) in [
        ("CNI_ARGS IP garbage", "IP=nope"),
        ("CNI_ARGS GATEWAY garbage", "IP=10.66.0.5/24;GATEWAY=nope"),
    ] {
        let mut c = case(format!("static: {what}"), "static", static_ipam(""), CONFIG);
        c.env = vec![("CNI_ARGS", Some(env.into()))];
        cases.push(c);
    }
    cases
}

/// A JSON object naming a network and a version every command accepts: then DEL has what it
/// needs. (Without them every command is refused, DEL too.)
fn is_network_config(stdin: &str) -> bool {
    let Ok(serde_json::Value::Object(o)) = serde_json::from_str(stdin) else {
        return false;
    };
    let text = |k: &str| o.get(k).and_then(serde_json::Value::as_str);
    let named = text("name").is_some_and(|n| !matches!(n, "" | "." | "..") && !n.contains('/'));
    let versioned = text("cniVersion").is_some_and(|v| v.parse::<cni::Version>().is_ok());
    named && versioned && serde_json::from_str::<cni::NetConf>(stdin).is_ok()
}

#[test]
fn every_bad_input_gets_a_cni_error_and_leaves_nothing_behind() {
    let bin = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    let plugins = PluginDir::new(
        bin,
        &["bridge", "macvlan", "ipvlan", "host-local", "static"],
    );
    let node = Netns::new("badnode");
    node.ip(&["link", "add", "up0", "type", "veth", "peer", "name", "up0p"]);
    node.ip(&["link", "set", "up0p", "up"]);
    node.ip(&["link", "set", "up0", "up"]);
    let pod = Netns::new("badpod");
    let data = tempfile::tempdir().expect("tempdir");
    let cases = corpus();
    assert!(cases.len() >= 100, "the corpus has {} cases", cases.len());

    let mut failures = Vec::new();
    for c in &cases {
        let mut call = CniCall::new(
            c.command,
            &c.stdin
                .replace("DATADIR", &data.path().display().to_string()),
        );
        call.netns = pod.path().display().to_string();
        call.path = plugins.path().display().to_string();
        for (k, v) in &c.env {
            call.env.push((k.to_string(), v.clone()));
        }
        let out = call.run(&plugins.path().join(c.plugin), Some(&node));
        let got = serde_json::from_str::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| Some((v["code"].as_u64()?, v["msg"].as_str()?.to_owned())));
        match got {
            Some((code, msg)) if out.code == 1 && code == c.code && !msg.is_empty() => {}
            _ => failures.push(format!(
                "{}: want code {}, got exit {} stdout {}",
                c.what,
                c.code,
                out.code,
                out.stdout.trim()
            )),
        }
        // The runtime DELs what failed to ADD: with nothing made, DEL succeeds, unless the
        // config cannot even be read as a network config.
        if c.command == "ADD" && c.env.is_empty() && is_network_config(&call.stdin) {
            call.command = "DEL".into();
            let del = call.run(&plugins.path().join(c.plugin), Some(&node));
            if del.code != 0 {
                failures.push(format!(
                    "{}: DEL after the failed ADD: {}",
                    c.what,
                    del.stdout.trim()
                ));
            }
        }
        let left_node: Vec<String> = node
            .links()
            .into_iter()
            .filter(|l| l != "lo" && !MASTER.contains(&l.as_str()))
            .collect();
        let left_pod: Vec<String> = pod.links().into_iter().filter(|l| l != "lo").collect();
        if !left_node.is_empty() || !left_pod.is_empty() {
            failures.push(format!(
                "{}: left links node {left_node:?} pod {left_pod:?}",
                c.what
            ));
            for l in left_node {
                node.try_ip(&["link", "del", &l]);
            }
        }
        let reservations = testkit::reservation_files(data.path());
        if !reservations.is_empty() {
            failures.push(format!("{}: left reservations {reservations:?}", c.what));
            let _ = std::fs::remove_dir_all(data.path().join("badnet"));
        }
        let rules: Vec<String> = node
            .firewall()
            .lines()
            .filter(|l| l.contains("badnet") || l.contains("c0ffee"))
            .map(str::to_owned)
            .collect();
        if !rules.is_empty() {
            failures.push(format!("{}: left rules {rules:?}", c.what));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// A config past the 2 MiB cap (a 50 MB one took bridge to 813 MB) is refused before it is
/// parsed, by every plugin, for every command.
#[test]
fn stdin_past_the_cap_is_refused_before_it_is_parsed() {
    let bin = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    let plugins = [
        "bridge",
        "macvlan",
        "ipvlan",
        "host-local",
        "static",
        "dhcp",
        "passthru",
    ];
    let dir = PluginDir::new(bin, &plugins);
    let huge = format!(
        r#"{{"cniVersion":"1.0.0","name":"big","type":"bridge","junk":[{}0]}}"#,
        "0,".repeat(3 << 20)
    );
    for plugin in plugins {
        for command in ["ADD", "DEL", "CHECK"] {
            let mut call = CniCall::new(command, &huge);
            call.netns = "/nonexistent".into();
            call.path = dir.path().display().to_string();
            let out = call.run(&dir.path().join(plugin), None);
            assert_eq!(out.code, 1, "{plugin} {command}: {out:?}");
            let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
            assert_eq!(out.json()["code"], 6, "{plugin} {command}: {msg}");
            assert!(
                msg.contains("larger than 2 MiB"),
                "{plugin} {command}: {msg}"
            );
        }
    }
}
