//! A corpus of bad inputs. Each one gets a CNI error object on stdout, exit status 1, the right
//! well-known code, and leaves nothing behind: no link, no reservation, no rule. macvlan and
//! ipvlan run against the node's master `up0` (a veth whose peer is `up0p`), which stays.

use std::path::Path;

use testkit::{CniCall, Netns, PluginDir};

const DECODE: u64 = 6;
const CONFIG: u64 = 7;
const ENV: u64 = 4;
const VERSION: u64 = 1;
const INTERNAL: u64 = 999;

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

/// The same for vlan, with id 10.
fn vlan(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"vlan","master":"up0","vlanId":10{extra},
            "ipam":{{"type":"host-local","dataDir":"DATADIR"{RANGES}}}}}"#
    )
}

/// ptp with host-local.
fn ptp(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"ptp"{extra},
            "ipam":{{"type":"host-local","dataDir":"DATADIR"{RANGES}}}}}"#
    )
}

/// tap at layer 2.
const TAP: &str = r#"{"cniVersion":"1.0.0","name":"badnet","type":"tap"}"#;

/// sbr chained after an interface the pod has not got: every case fails before anything is
/// added. (The prevResult's version differs from the config's, which cases replace.)
fn sbr(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"sbr","prevResult":{{"cniVersion":"1.1.0","interfaces":[{{"name":"eth0"}}],"ips":[{{"address":"10.66.0.5/24","interface":0}}]}}{extra}}}"#
    )
}

/// vrf chained after an interface the pod has not got.
fn vrf(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"vrf","vrfname":"blue","prevResult":{{"cniVersion":"1.1.0","interfaces":[{{"name":"eth0"}}]}}{extra}}}"#
    )
}

/// bandwidth chained after a pair the pod has not got.
fn bandwidth(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"bandwidth","ingressRate":1000000,"ingressBurst":100000,"prevResult":{{"cniVersion":"1.1.0","interfaces":[{{"name":"vethbad0"}},{{"name":"eth0","sandbox":"/x"}}]}}{extra}}}"#
    )
}

/// portmap chained after an interface, with one mapping; cases change one thing.
fn portmap(extra: &str, mapping: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"portmap"{extra},"runtimeConfig":{{"portMappings":[{mapping}]}},"prevResult":{{"cniVersion":"1.1.0","ips":[{{"address":"10.66.0.5/24"}}]}}}}"#
    )
}

const MAPPING: &str = r#"{"hostPort":8080,"containerPort":80,"protocol":"tcp"}"#;

/// firewall after a bridge, for one address.
fn firewall(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"firewall"{extra},"prevResult":{{"cniVersion":"1.1.0","interfaces":[{{"name":"bad0"}}],"ips":[{{"address":"10.66.0.5/24"}}]}}}}"#
    )
}

/// dummy with static IPAM.
fn dummy(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"dummy"{extra},"ipam":{{"type":"static","addresses":[{{"address":"10.66.0.5/24"}}]}}}}"#
    )
}

/// The master macvlan, ipvlan and vlan attach to; not a leftover.
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

/// dhcp with a daemon that is not there: every case fails before the plugin would call it.
fn dhcp(ipam: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"dhcp","ipam":{{"type":"dhcp","daemonSocketPath":"/nonexistent/dhcp.sock"{ipam}}}}}"#
    )
}

const PASSTHRU: &str = r#"{"cniVersion":"1.0.0","name":"badnet","type":"passthru"}"#;
const LOOPBACK: &str = r#"{"cniVersion":"1.0.0","name":"badnet","type":"loopback"}"#;

/// tuning chained after an interface the pod has not got: every case fails before anything
/// is written.
fn tuning(extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"badnet","type":"tuning","dataDir":"DATADIR/tuning","prevResult":{{}}{extra}}}"#
    )
}

/// host-device: every case fails before anything moves.
fn host_device(extra: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"badnet","type":"host-device"{extra}}}"#)
}

/// A bad value of a megabyte: its error must quote it short.
fn huge() -> String {
    "x".repeat(1 << 20)
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
    /// What the message must contain: for a config error, the key path and the value.
    says: Vec<String>,
}

fn case(what: impl Into<String>, plugin: &'static str, stdin: String, code: u64) -> Case {
    Case {
        what: what.into(),
        plugin,
        command: "ADD",
        stdin,
        env: Vec::new(),
        code,
        says: Vec::new(),
    }
}

impl Case {
    fn says(mut self, parts: &[&str]) -> Case {
        self.says = parts.iter().map(|p| p.to_string()).collect();
        self
    }
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let good_bridge = bridge("", RANGES);
    let good_macvlan = macvlan("", RANGES);
    let plugins: [(&'static str, String); 19] = [
        ("bridge", good_bridge.clone()),
        ("macvlan", good_macvlan.clone()),
        ("ipvlan", ipvlan("")),
        ("host-local", host_local(RANGES)),
        (
            "static",
            static_ipam(r#","addresses":[{"address":"10.66.0.5/24"}]"#),
        ),
        ("dhcp", dhcp("")),
        ("passthru", PASSTHRU.to_owned()),
        ("loopback", LOOPBACK.to_owned()),
        ("host-device", host_device(r#","device":"nope0""#)),
        ("tuning", tuning(r#","mtu":1400"#)),
        ("vlan", vlan("")),
        ("dummy", dummy("")),
        ("ptp", ptp("")),
        ("tap", TAP.to_owned()),
        ("sbr", sbr("")),
        ("vrf", vrf("")),
        ("bandwidth", bandwidth("")),
        ("portmap", portmap("", MAPPING)),
        ("firewall", firewall("")),
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
        let huge_name = format!("{} y", huge());
        for (what, stdin, code, says) in [
            (
                "empty stdin",
                String::new(),
                DECODE,
                &["not valid JSON"][..],
            ),
            (
                "truncated JSON",
                good[..good.len() / 2].to_owned(),
                DECODE,
                &["not valid JSON", "after"],
            ),
            (
                "a JSON array",
                "[]".to_owned(),
                DECODE,
                &["[] is not an object"],
            ),
            (
                "a JSON number",
                "42".to_owned(),
                DECODE,
                &["42 is not an object"],
            ),
            (
                "name is a number",
                good.replace(r#""name":"badnet""#, r#""name":5"#),
                DECODE,
                &["name: 5 is not a string"],
            ),
            (
                "no name",
                good.replace(r#""name":"badnet","#, ""),
                CONFIG,
                &["name: required"],
            ),
            (
                "name with a slash",
                good.replace("badnet", "bad/net"),
                CONFIG,
                &[r#"name: "bad/net" has invalid characters"#],
            ),
            (
                "name ..",
                good.replace("badnet", ".."),
                CONFIG,
                &[r#"name: "..""#],
            ),
            (
                "a megabyte name",
                good.replace("badnet", &huge_name),
                CONFIG,
                &["name: \"xxx", "(1048578 bytes)"],
            ),
            (
                "capabilities of the wrong type",
                good.replacen(
                    r#""name":"badnet","#,
                    r#""name":"badnet","capabilities":{"ips":"yes"},"#,
                    1,
                ),
                DECODE,
                &[r#"capabilities.ips: "yes" is not true or false"#],
            ),
            (
                "unknown cniVersion",
                good.replace("1.0.0", "9.9.9"),
                VERSION,
                &["\"9.9.9\""],
            ),
            (
                "cniVersion not a version",
                good.replace("1.0.0", "one"),
                VERSION,
                &[],
            ),
            (
                "a megabyte cniVersion",
                good.replace("1.0.0", &huge()),
                VERSION,
                &[],
            ),
        ] {
            cases.push(case(format!("{plugin}: {what}"), plugin, stdin, code).says(says));
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
    let huge_mtu = format!(r#","mtu":"{}""#, huge());
    for (what, extra, code, says) in [
        (
            "vlan -1",
            r#","vlan":-1"#,
            CONFIG,
            &["vlan: -1 is out of range"][..],
        ),
        ("vlan 4095", r#","vlan":4095"#, CONFIG, &["vlan: 4095"]),
        (
            "vlan is a string",
            r#","vlan":"10""#,
            DECODE,
            &[r#"vlan: "10" is not a whole number"#],
        ),
        (
            "trunk minID 0",
            r#","vlanTrunk":[{"minID":0,"maxID":10}]"#,
            CONFIG,
            &["vlanTrunk[0].minID: 0 is out of range"],
        ),
        (
            "trunk maxID 4095",
            r#","vlanTrunk":[{"minID":1,"maxID":4095}]"#,
            CONFIG,
            &["vlanTrunk[0].maxID: 4095"],
        ),
        (
            "trunk minID above maxID",
            r#","vlanTrunk":[{"minID":20,"maxID":10}]"#,
            CONFIG,
            &["vlanTrunk[0].minID: 20"],
        ),
        (
            "trunk minID alone",
            r#","vlanTrunk":[{"minID":20}]"#,
            CONFIG,
            &["vlanTrunk[0].maxID"],
        ),
        (
            "trunk maxID alone",
            r#","vlanTrunk":[{"maxID":20}]"#,
            CONFIG,
            &["vlanTrunk[0].minID"],
        ),
        (
            "trunk id 0",
            r#","vlanTrunk":[{"id":0}]"#,
            CONFIG,
            &["vlanTrunk[0].id: 0"],
        ),
        (
            "trunk id 4095",
            r#","vlanTrunk":[{"id":1},{"id":4095}]"#,
            CONFIG,
            &["vlanTrunk[1].id: 4095"],
        ),
        (
            "trunk id a string",
            r#","vlanTrunk":[{"id":"1"}]"#,
            DECODE,
            &[r#"vlanTrunk[0].id: "1" is not a whole number"#],
        ),
        (
            "hairpin and promiscuous together",
            r#","hairpinMode":true,"promiscMode":true"#,
            CONFIG,
            &["hairpinMode and promiscMode"],
        ),
        (
            "disableContainerInterface with ipam",
            r#","disableContainerInterface":true"#,
            CONFIG,
            &["disableContainerInterface"],
        ),
        (
            "isGateway is a string",
            r#","isGateway":"yes""#,
            DECODE,
            &[r#"isGateway: "yes" is not true or false"#],
        ),
        (
            "mtu is negative",
            r#","mtu":-5"#,
            DECODE,
            &["mtu: -5 is not a whole number from 0 to 4294967295"],
        ),
        (
            "mtu is a megabyte string",
            &huge_mtu,
            DECODE,
            &["mtu: \"xxx", "(1048576 bytes) is not a whole number"],
        ),
        (
            "unknown ipMasq backend",
            r#","ipMasqBackend":"pf""#,
            CONFIG,
            &[r#"ipMasqBackend: "pf" is not"#],
        ),
        (
            "bad runtimeConfig mac",
            r#","runtimeConfig":{"mac":"zz:zz:zz:zz:zz:zz"}"#,
            CONFIG,
            &[r#"runtimeConfig.mac: "zz:zz:zz:zz:zz:zz" is not a MAC address"#],
        ),
        (
            "bad args mac",
            r#","args":{"cni":{"mac":"01:02"}}"#,
            CONFIG,
            &[r#"args.cni.mac: "01:02""#],
        ),
    ] {
        cases.push(
            case(
                format!("bridge: {what}"),
                "bridge",
                bridge(extra, RANGES),
                code,
            )
            .says(says),
        );
    }
    for (what, name) in [
        ("bridge name too long", "abcdefghijklmnopq".to_owned()),
        ("bridge name with a slash", "br/0".to_owned()),
        ("bridge name of a megabyte", huge()),
    ] {
        let stdin = good_bridge.replace(r#""bridge":"bad0""#, &format!(r#""bridge":"{name}""#));
        let quoted = format!("{:?}", &name[..name.len().min(10)]);
        let says = ["bridge: ", quoted.trim_end_matches('"')];
        cases.push(case(format!("bridge: {what}"), "bridge", stdin, CONFIG).says(&says));
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
            let quoted = format!("{ipam_type:?}");
            cases.push(case(format!("{plugin}: {what}"), plugin, stdin, CONFIG).says(&[&quoted]));
        }
        let mut c = case(
            format!("{plugin}: bad MAC in CNI_ARGS"),
            plugin,
            good.clone(),
            CONFIG,
        );
        c.env = vec![("CNI_ARGS", Some("MAC=nope".into()))];
        cases.push(c.says(&[r#"CNI_ARGS MAC: "nope""#]));
    }

    // macvlan and ipvlan options.
    for (what, extra, code, says) in [
        (
            "unknown mode",
            r#","mode":"l2""#,
            CONFIG,
            &[r#"mode: "l2" is not a mode of macvlan"#][..],
        ),
        (
            "mode is a number",
            r#","mode":4"#,
            DECODE,
            &["mode: 4 is not a string"],
        ),
        (
            "mtu is negative",
            r#","mtu":-5"#,
            CONFIG,
            &["mtu: -5 is out of range"],
        ),
        (
            "mtu is a string",
            r#","mtu":"1400""#,
            DECODE,
            &[r#"mtu: "1400" is not a whole number"#],
        ),
        (
            "mtu above the master's",
            r#","mtu":1501"#,
            CONFIG,
            &["mtu: 1501 is larger than the MTU 1500"],
        ),
        (
            "mac garbage",
            r#","mac":"02:00:00""#,
            CONFIG,
            &[r#"mac: "02:00:00" is not a MAC"#],
        ),
        (
            "mac is a number",
            r#","mac":2"#,
            DECODE,
            &["mac: 2 is not a string"],
        ),
        (
            "runtimeConfig mac garbage",
            r#","runtimeConfig":{"mac":"zz"}"#,
            CONFIG,
            &[r#"runtimeConfig.mac: "zz""#],
        ),
        (
            "bcqueuelen negative",
            r#","bcqueuelen":-1"#,
            DECODE,
            &["bcqueuelen: -1 is not a whole number"],
        ),
        (
            "linkInContainer is a string",
            r#","linkInContainer":"yes""#,
            DECODE,
            &[r#"linkInContainer: "yes" is not true or false"#],
        ),
        (
            "master not in the pod with linkInContainer",
            r#","linkInContainer":true"#,
            CONFIG,
            &[r#"master: "up0" is not found in the pod's netns"#],
        ),
        ("multicast mac", r#","mac":"01:00:5e:00:00:01""#, 999, &[]),
    ] {
        cases.push(
            case(
                format!("macvlan: {what}"),
                "macvlan",
                macvlan(extra, RANGES),
                code,
            )
            .says(says),
        );
    }
    let huge_mode = format!(r#","mode":"{}""#, huge());
    for (what, extra, code, says) in [
        (
            "unknown mode",
            r#","mode":"bridge""#,
            CONFIG,
            &[r#"mode: "bridge" is not a mode of ipvlan"#][..],
        ),
        (
            "a megabyte mode",
            &huge_mode,
            CONFIG,
            &["mode: \"xxx", "(1048576 bytes)"],
        ),
        ("mtu is negative", r#","mtu":-5"#, CONFIG, &["mtu: -5"]),
        (
            "mtu above the master's",
            r#","mtu":9000"#,
            CONFIG,
            &["mtu: 9000"],
        ),
        (
            "prevResult garbage",
            r#","prevResult":{"ips":"x"}"#,
            DECODE,
            &[r#"prevResult.ips: "x" is not a list"#],
        ),
        (
            "prevResult address without a prefix",
            r#","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.66.0.9"}]}"#,
            DECODE,
            &[r#"prevResult.ips[0].address: "10.66.0.9""#],
        ),
        (
            "master not in the pod with linkInContainer",
            r#","linkInContainer":true"#,
            CONFIG,
            &["master: \"up0\""],
        ),
    ] {
        cases.push(case(format!("ipvlan: {what}"), "ipvlan", ipvlan(extra), code).says(says));
    }
    for (plugin, good) in [("macvlan", good_macvlan.clone()), ("ipvlan", ipvlan(""))] {
        for (what, to, says) in [
            (
                "master missing",
                "nosuch0",
                r#"master: "nosuch0" is not found"#,
            ),
            (
                "master name with a slash",
                "a/b",
                r#"master: "a/b" is not an interface name"#,
            ),
            (
                "master name too long",
                "abcdefghijklmnopq",
                r#"master: "abcdefghijklmnopq""#,
            ),
        ] {
            let stdin = good.replace(r#""master":"up0""#, &format!(r#""master":"{to}""#));
            cases.push(case(format!("{plugin}: {what}"), plugin, stdin, CONFIG).says(&[says]));
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
    let huge_gw = format!(
        r#"{RANGES},"routes":[{{"dst":"0.0.0.0/0","gw":"{}"}}]"#,
        huge()
    );
    #[rustfmt::skip]
    let ipam_cases: Vec<(&str, String, u64, &[&str])> = vec![
        ("no ranges", String::new(), CONFIG, &["ipam.ranges: no IP ranges specified"]),
        ("empty ranges", r#","ranges":[]"#.into(), CONFIG, &["ipam.ranges: no IP ranges"]),
        ("empty range set", r#","ranges":[[]]"#.into(), CONFIG, &["ipam.ranges[0]: empty range set"]),
        ("subnet without prefix", r#","ranges":[[{"subnet":"10.66.0.0"}]]"#.into(), DECODE,
            &["ipam.ranges[0][0].subnet", r#""10.66.0.0""#, "a subnet needs a prefix length"]),
        ("subnet garbage", r#","ranges":[[{"subnet":"ten.sixty-six"}]]"#.into(), DECODE,
            &[r#"ipam.ranges[0][0].subnet: "ten.sixty-six" is not a CIDR"#]),
        ("subnet /31", r#","ranges":[[{"subnet":"10.66.0.0/31"}]]"#.into(), CONFIG,
            &["ipam.ranges[0][0].subnet: 10.66.0.0/31 is too small"]),
        ("subnet /32", r#","ranges":[[{"subnet":"10.66.0.0/32"}]]"#.into(), CONFIG, &["ipam.ranges[0][0].subnet"]),
        ("IPv6 subnet /127", r#","ranges":[[{"subnet":"fd00::/127"}]]"#.into(), CONFIG, &["ipam.ranges[0][0].subnet"]),
        ("overlapping ranges in a set", r#","ranges":[[{"subnet":"10.66.0.0/24"},{"subnet":"10.66.0.0/25"}]]"#.into(), CONFIG,
            &["ipam.ranges[0]: ranges"]),
        ("overlapping range sets", r#","ranges":[[{"subnet":"10.66.0.0/24"}],[{"subnet":"10.66.0.128/25"}]]"#.into(), CONFIG,
            &["ipam.ranges[1]: overlaps ipam.ranges[0]"]),
        ("mixed families in a set", r#","ranges":[[{"subnet":"10.66.0.0/24"},{"subnet":"fd00::/64"}]]"#.into(), CONFIG,
            &["ipam.ranges[0]: mixed address families"]),
        ("rangeStart outside the subnet", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeStart":"10.67.0.10"}]]"#.into(), CONFIG,
            &["ipam.ranges[0][0].rangeStart: 10.67.0.10 is not in the subnet 10.66.0.0/24"]),
        ("rangeEnd outside the subnet", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeEnd":"10.67.0.10"}]]"#.into(), CONFIG,
            &["ipam.ranges[0][0].rangeEnd: 10.67.0.10"]),
        ("rangeStart after rangeEnd", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeStart":"10.66.0.50","rangeEnd":"10.66.0.10"}]]"#.into(), CONFIG,
            &["ipam.ranges[0][0].rangeStart: 10.66.0.50 is after rangeEnd 10.66.0.10"]),
        ("rangeStart garbage", r#","ranges":[[{"subnet":"10.66.0.0/24","rangeStart":"x"}]]"#.into(), DECODE,
            &[r#"ipam.ranges[0][0].rangeStart: "x" is not an IP address"#]),
        ("gateway garbage", r#","ranges":[[{"subnet":"10.66.0.0/24","gateway":"x"}]]"#.into(), DECODE,
            &[r#"ipam.ranges[0][0].gateway: "x" is not an IP address"#]),
        ("gateway with a prefix length", r#","ranges":[[{"subnet":"10.66.0.0/24","gateway":"10.66.0.1/24"}]]"#.into(), DECODE,
            &["ipam.ranges[0][0].gateway", r#""10.66.0.1/24""#, "no prefix length"]),
        ("gateway of the other family", r#","ranges":[[{"subnet":"10.66.0.0/24","gateway":"fd00::1"}]]"#.into(), CONFIG,
            &["ipam.ranges[0][0].gateway: fd00::1 and 10.66.0.0/24 are of different address families"]),
        ("route dst garbage", format!(r#"{RANGES},"routes":[{{"dst":"x"}}]"#), DECODE,
            &[r#"ipam.routes[0].dst: "x" is not a CIDR"#]),
        ("route dst without a prefix", format!(r#"{RANGES},"routes":[{{"dst":"0.0.0.0"}}]"#), DECODE,
            &["ipam.routes[0].dst", "a destination needs a prefix length"]),
        ("route without dst", format!(r#"{RANGES},"routes":[{{"gw":"10.66.0.1"}}]"#), DECODE,
            &["ipam.routes[0].dst: required, but missing"]),
        ("route gw garbage", format!(r#"{RANGES},"routes":[{{"dst":"0.0.0.0/0","gw":"x"}}]"#), DECODE,
            &[r#"ipam.routes[0].gw: "x" is not an IP address"#]),
        // The troublemaker NAD of the field report: a gateway written with its prefix length.
        ("route gw with a prefix length", format!(r#"{RANGES},"routes":[{{"dst":"0.0.0.0/0","gw":"10.42.0.100/24"}}]"#), DECODE,
            &["ipam.routes[0].gw", r#""10.42.0.100/24""#, "no prefix length"]),
        ("route gw of a megabyte", huge_gw, DECODE, &["ipam.routes[0].gw: \"xxx", "(1048576 bytes)"]),
        ("legacy subnet garbage", r#","subnet":"10.66.0.0/99""#.into(), DECODE,
            &[r#"ipam.subnet: "10.66.0.0/99""#, "a prefix length is at most 32"]),
        ("ranges is an object", r#","ranges":{"subnet":"10.66.0.0/24"}"#.into(), DECODE,
            &[r#"ipam.ranges: {"subnet":"10.66.0.0/24"} is not a list"#]),
        ("dataDir is a number", format!(r#"{RANGES},"dataDir":5"#), DECODE, &["ipam.dataDir: 5 is not a string"]),
        ("requested IP outside every range", format!(r#"{RANGES},"ips":["10.9.9.9"]"#), CONFIG, &["10.9.9.9"]),
        ("runtimeConfig IP garbage", RANGES.to_owned(), DECODE, &[r#"runtimeConfig.ips[0]: "not-an-ip" is not an IP address"#]),
        ("resolvConf missing", format!(r#"{RANGES},"resolvConf":"/nonexistent/resolv.conf""#), 5, &[]),
    ];
    for (what, ipam, code, says) in &ipam_cases {
        for (plugin, stdin) in [
            ("host-local", host_local(ipam)),
            ("bridge", bridge("", ipam)),
            ("macvlan", macvlan("", ipam)),
        ] {
            let what = match plugin {
                "host-local" => format!("host-local: {what}"),
                _ => format!("{plugin}+host-local: {what}"),
            };
            cases.push(case(what, plugin, stdin, *code).says(says));
        }
    }
    // Fix up the two cases whose bad part is outside the ipam block.
    for c in cases
        .iter_mut()
        .filter(|c| c.what.ends_with("requested IP outside every range"))
    {
        c.stdin = c.stdin.replace(r#","ips":["10.9.9.9"]"#, "");
        c.env = vec![("CNI_ARGS", Some("IP=10.9.9.9".into()))];
        if c.plugin != "host-local" {
            c.says = vec![r#"CNI_ARGS: unknown args ["IP"]"#.to_owned()];
        }
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
    for (what, env, says) in [
        (
            "CNI_ARGS not KEY=VALUE",
            "garbage",
            r#"CNI_ARGS: invalid pair "garbage""#,
        ),
        (
            "CNI_ARGS unknown key",
            "FOO=bar",
            r#"CNI_ARGS: unknown args ["FOO"]"#,
        ),
        (
            "CNI_ARGS IP garbage",
            "IP=10.66.0.x",
            r#"CNI_ARGS IP: "10.66.0.x""#,
        ),
        (
            "CNI_ARGS IgnoreUnknown garbage",
            "IgnoreUnknown=maybe;FOO=bar",
            r#"not "maybe""#,
        ),
    ] {
        for (plugin, stdin) in [
            ("host-local", host_local(RANGES)),
            ("bridge", good_bridge.clone()),
            ("macvlan", good_macvlan.clone()),
        ] {
            let mut c = case(format!("{plugin}: {what}"), plugin, stdin, CONFIG);
            c.env = vec![("CNI_ARGS", Some(env.into()))];
            // The interface plugins read only MAC from CNI_ARGS, so IP is unknown to them.
            let says = match (plugin, env.starts_with("IP=")) {
                ("host-local", _) | (_, false) => says,
                _ => r#"CNI_ARGS: unknown args ["IP"]"#,
            };
            cases.push(c.says(&[says]));
        }
    }

    // static.
    let huge_address = format!(r#","addresses":[{{"address":"{}"}}]"#, huge());
    #[rustfmt::skip]
    let static_cases: [(&str, &str, u64, &[&str]); 10] = [
        ("address garbage", r#","addresses":[{"address":"x"}]"#, CONFIG,
            &[r#"ipam.addresses[0].address: "x" is not a CIDR"#]),
        ("address without prefix", r#","addresses":[{"address":"10.66.0.5/24"},{"address":"10.66.1.5"}]"#, CONFIG,
            &[r#"ipam.addresses[1].address: "10.66.1.5""#, "an address needs a prefix length"]),
        ("address of a megabyte", &huge_address, CONFIG, &["ipam.addresses[0].address: \"xxx", "(1048576 bytes)"]),
        ("gateway garbage", r#","addresses":[{"address":"10.66.0.5/24","gateway":"x"}]"#, DECODE,
            &[r#"ipam.addresses[0].gateway: "x" is not an IP address"#]),
        ("gateway with a prefix length", r#","addresses":[{"address":"10.66.0.5/24","gateway":"10.66.0.1/24"}]"#, DECODE,
            &["ipam.addresses[0].gateway", r#""10.66.0.1/24""#, "no prefix length"]),
        ("route garbage", r#","addresses":[{"address":"10.66.0.5/24"}],"routes":[{"dst":"x"}]"#, DECODE,
            &[r#"ipam.routes[0].dst: "x""#]),
        ("route gw with a prefix length", r#","addresses":[{"address":"10.66.0.5/24"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.42.0.100/24"}]"#, DECODE,
            &["ipam.routes[0].gw", r#""10.42.0.100/24""#, "no prefix length"]),
        ("addresses is a string", r#","addresses":"10.66.0.5/24""#, DECODE,
            &[r#"ipam.addresses: "10.66.0.5/24" is not a list"#]),
        ("dns is a list", r#","addresses":[{"address":"10.66.0.5/24"}],"dns":["1.1.1.1"]"#, DECODE,
            &[r#"ipam.dns: ["1.1.1.1"] is not an object"#]),
        ("dns nameservers of the wrong type", r#","addresses":[{"address":"10.66.0.5/24"}],"dns":{"nameservers":[1]}"#, DECODE,
            &["ipam.dns.nameservers[0]: 1 is not a string"]),
    ];
    for (what, ipam, code, says) in static_cases {
        cases.push(case(format!("static: {what}"), "static", static_ipam(ipam), code).says(says));
    }
    for (what, env, says) in [
        (
            "CNI_ARGS IP garbage",
            "IP=nope",
            r#"CNI_ARGS IP: "nope" is not a CIDR"#,
        ),
        (
            "CNI_ARGS GATEWAY garbage",
            "IP=10.66.0.5/24;GATEWAY=nope",
            r#"CNI_ARGS GATEWAY: "nope" is not an IP address"#,
        ),
    ] {
        let mut c = case(format!("static: {what}"), "static", static_ipam(""), CONFIG);
        c.env = vec![("CNI_ARGS", Some(env.into()))];
        cases.push(c.says(&[says]));
    }

    // dhcp: its own keys, checked before the daemon is asked.
    let huge_option = format!(r#","request":[{{"option":"{}"}}]"#, huge());
    #[rustfmt::skip]
    let dhcp_cases: [(&str, &str, u64, &[&str]); 5] = [
        ("unknown option", r#","request":[{"option":"routers"},{"option":"no-such"}]"#, CONFIG,
            &[r#"ipam.request[1].option: unknown option "no-such""#]),
        ("option of a megabyte", &huge_option, CONFIG, &["ipam.request[0].option: unknown option \"xxx", "(1048576 bytes)"]),
        ("provide value too long", &r#","provide":[{"option":"host-name","value":"LONG"}]"#.replace("LONG", &"v".repeat(256)), CONFIG,
            &["ipam.provide[0].value: \"vvv", "256 bytes long"]),
        ("priority is a string", r#","priority":"high""#, DECODE, &[r#"ipam.priority: "high" is not a whole number"#]),
        ("broadcast is a string", r#","broadcast":"yes""#, DECODE, &[r#"ipam.broadcast: "yes" is not true or false"#]),
    ];
    for (what, ipam, code, says) in dhcp_cases {
        cases.push(case(format!("dhcp: {what}"), "dhcp", dhcp(ipam), code).says(says));
    }

    // passthru reads nothing but the common keys.
    cases.push(
        case(
            "passthru: dns of the wrong type",
            "passthru",
            PASSTHRU.replace("}", r#","dns":{"search":"example.org"}}"#),
            DECODE,
        )
        .says(&[r#"dns.search: "example.org" is not a list"#]),
    );

    // loopback reads the common keys and, chained, a prevResult.
    let loopback_cases: [(&str, &str, u64, &[&str]); 3] = [
        (
            "a prevResult that is not an object",
            r#","prevResult":5"#,
            DECODE,
            &["prevResult"],
        ),
        (
            "a prevResult address without a prefix",
            r#","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1"}]}"#,
            DECODE,
            &["10.0.0.1"],
        ),
        (
            "dns of the wrong type",
            r#","dns":{"nameservers":"10.0.0.53"}"#,
            DECODE,
            &["dns.nameservers"],
        ),
    ];
    let host_device_cases: [(&str, &str, u64, &[&str]); 12] = [
        (
            "no selection",
            "",
            CONFIG,
            &[r#""device", "hwaddr", "kernelpath" or "pciBusID""#],
        ),
        (
            "a device that is not there",
            r#","device":"nope0""#,
            CONFIG,
            &["nope0"],
        ),
        (
            "a device name with a slash",
            r#","device":"a/b""#,
            CONFIG,
            &["device: "],
        ),
        (
            "a device of the wrong type",
            r#","device":5"#,
            DECODE,
            &["device"],
        ),
        (
            "a malformed hwaddr",
            r#","hwaddr":"02:00""#,
            CONFIG,
            &["hwaddr: ", "02:00"],
        ),
        (
            "a hwaddr no link has",
            r#","hwaddr":"02:de:ad:be:ef:00""#,
            CONFIG,
            &["02:de:ad:be:ef:00"],
        ),
        (
            "kernelpath outside /sys/devices",
            r#","kernelpath":"/etc""#,
            CONFIG,
            &["kernelpath: ", "/etc"],
        ),
        (
            "kernelpath climbing out",
            r#","kernelpath":"/sys/devices/../../etc""#,
            CONFIG,
            &["kernelpath: "],
        ),
        (
            "a pciBusID that is a path",
            r#","pciBusID":"../../../etc""#,
            CONFIG,
            &["pciBusID: "],
        ),
        (
            "a pciBusID that is not there",
            r#","pciBusID":"0000:99:1f.7""#,
            CONFIG,
            &["0000:99:1f.7"],
        ),
        (
            "a deviceID that is a path",
            r#","runtimeConfig":{"deviceID":"../../etc"}"#,
            CONFIG,
            &["runtimeConfig.deviceID: "],
        ),
        (
            "the node's loopback",
            r#","device":"lo""#,
            CONFIG,
            &["loopback"],
        ),
    ];
    let tuning_cases: [(&str, &str, u64, &[&str]); 11] = [
        (
            "a dataDir in the runtime's config directory",
            r#","dataDir":"/etc/cni/net.d""#,
            CONFIG,
            &["dataDir: ", "/etc/cni/net.d"],
        ),
        (
            "a sysctl outside net",
            r#","sysctl":{"kernel.shmmax":"1"}"#,
            CONFIG,
            &["kernel.shmmax"],
        ),
        (
            "a sysctl climbing out",
            r#","sysctl":{"net/../kernel/shmmax":"1"}"#,
            CONFIG,
            &["net/../kernel/shmmax"],
        ),
        (
            "a sysctl key given twice",
            r#","sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}"#,
            DECODE,
            &["given twice"],
        ),
        (
            "a sysctl value that is a number",
            r#","sysctl":{"net.core.somaxconn":1}"#,
            DECODE,
            &["sysctl"],
        ),
        (
            "a malformed mac",
            r#","mac":"02:00""#,
            CONFIG,
            &["mac: ", "02:00"],
        ),
        (
            "a runtimeConfig mac that is a number",
            r#","runtimeConfig":{"mac":5}"#,
            CONFIG,
            &["runtimeConfig.mac"],
        ),
        ("an mtu that is negative", r#","mtu":-1"#, DECODE, &["mtu"]),
        (
            "args.cni of the wrong shape",
            r#","args":{"cni":{"mtu":"big"}}"#,
            DECODE,
            &["args.cni.mtu"],
        ),
        (
            "an interface the pod does not have",
            r#","mtu":1400"#,
            999,
            &["eth0"],
        ),
        (
            "a sysctl on an interface the pod does not have",
            r#","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}"#,
            999,
            &["arp_filter"],
        ),
    ];
    for (what, extra, code, says) in tuning_cases {
        cases.push(case(format!("tuning: {what}"), "tuning", tuning(extra), code).says(says));
    }
    cases.push(
        case(
            "tuning: no prevResult",
            "tuning",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"tuning","mtu":1400}"#.into(),
            CONFIG,
        )
        .says(&["prevResult"]),
    );
    for (what, extra, code, says) in host_device_cases {
        cases.push(
            case(
                format!("host-device: {what}"),
                "host-device",
                host_device(extra),
                code,
            )
            .says(says),
        );
    }
    let vlan_cases: [(&str, String, u64, &[&str]); 8] = [
        (
            "vlanId 4095",
            vlan("").replace(r#""vlanId":10"#, r#""vlanId":4095"#),
            CONFIG,
            &["vlanId: 4095 is not a VLAN id"],
        ),
        (
            "negative vlanId",
            vlan("").replace(r#""vlanId":10"#, r#""vlanId":-1"#),
            CONFIG,
            &["vlanId: -1"],
        ),
        (
            "vlanId a string",
            vlan("").replace(r#""vlanId":10"#, r#""vlanId":"10""#),
            DECODE,
            &["vlanId"],
        ),
        (
            "no master",
            vlan("").replace(r#""master":"up0","#, ""),
            CONFIG,
            &["master: required"],
        ),
        (
            "master missing",
            vlan("").replace("up0", "nope0"),
            CONFIG,
            &[r#"master: "nope0" is not found"#],
        ),
        (
            "mtu above the master's",
            vlan(r#","mtu":9000"#),
            CONFIG,
            &["mtu: 9000 is larger than the MTU 1500"],
        ),
        (
            "no ipam",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"vlan","master":"up0","vlanId":10}"#
                .into(),
            CONFIG,
            &["vlan needs addresses"],
        ),
        (
            "a master name of 16 bytes",
            vlan("").replace("up0", "abcdefghijklmnop"),
            CONFIG,
            &["master: \"abcdefghijklmnop\" is not an interface name"],
        ),
    ];
    for (what, stdin, code, says) in vlan_cases {
        cases.push(case(format!("vlan: {what}"), "vlan", stdin, code).says(says));
    }
    let dummy_cases: [(&str, String, u64, &[&str]); 4] = [
        (
            "an ipam that is a string",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"dummy","ipam":"static"}"#.into(),
            DECODE,
            &[r#"ipam: "static" is not an object"#],
        ),
        (
            "no ipam",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"dummy"}"#.into(),
            CONFIG,
            &["dummy needs addresses"],
        ),
        (
            "enabledad a string",
            dummy(r#","enabledad":"yes""#),
            DECODE,
            &["enabledad"],
        ),
        (
            "an ipam without a type",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"dummy","ipam":{}}"#.into(),
            CONFIG,
            &["dummy needs addresses"],
        ),
    ];
    let ptp_cases: [(&str, String, u64, &[&str]); 6] = [
        (
            "no ipam",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"ptp"}"#.into(),
            CONFIG,
            &["ptp needs addresses"],
        ),
        (
            "an unknown ipMasqBackend",
            ptp(r#","ipMasq":true,"ipMasqBackend":"pf""#),
            CONFIG,
            &[r#"ipMasqBackend: "pf" is not"#],
        ),
        ("a negative mtu", ptp(r#","mtu":-1"#), DECODE, &["mtu"]),
        ("ipMasq a string", ptp(r#","ipMasq":"yes""#), DECODE, &["ipMasq"]),
        (
            "a static address without a gateway",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"ptp","ipMasq":true,"ipam":{"type":"static","addresses":[{"address":"10.66.0.5/24"}]}}"#.into(),
            CONFIG,
            &["ptp needs a gateway for address 10.66.0.5/24"],
        ),
        (
            "a gateway of the other family",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"ptp","ipam":{"type":"static","addresses":[{"address":"10.66.0.5/24","gateway":"fd66::1"}]}}"#.into(),
            CONFIG,
            &["fd66::1 and 10.66.0.5/24 are of different address families"],
        ),
    ];
    let tap_cases: [(&str, &str, u64, &[&str]); 7] = [
        (
            "a MAC of five bytes",
            r#","mac":"02:00:00:00:00""#,
            CONFIG,
            &[r#"mac: "02:00:00:00:00" is not a MAC address"#],
        ),
        ("a negative owner", r#","owner":-1"#, DECODE, &["owner"]),
        ("a group name", r#","group":"kvm""#, DECODE, &["group"]),
        (
            "a bridge name with a slash",
            r#","bridge":"a/b""#,
            CONFIG,
            &[r#"bridge: "a/b" is not an interface name"#],
        ),
        (
            "a bridge the pod has not got",
            r#","bridge":"br9""#,
            CONFIG,
            &[r#"bridge: "br9" is not a bridge"#],
        ),
        (
            "an selinuxContext of one field",
            r#","selinuxContext":"unconfined_t""#,
            CONFIG,
            &["selinuxContext: \"unconfined_t\" is not an SELinux context"],
        ),
        (
            "an selinuxContext with a newline",
            r#","selinuxContext":"u:r:t:s0\nx""#,
            CONFIG,
            &["selinuxContext: "],
        ),
    ];
    let sbr_cases: [(&str, String, u64, &[&str]); 6] = [
        (
            "no prevResult",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"sbr"}"#.into(),
            CONFIG,
            &["sbr needs prevResult"],
        ),
        (
            "a prevResult without addresses on the interface",
            sbr("").replace(r#""name":"eth0""#, r#""name":"net7""#),
            CONFIG,
            &["prevResult has no IP address on \"eth0\""],
        ),
        (
            "a negative table",
            sbr(r#","table":-4"#),
            DECODE,
            &["table"],
        ),
        (
            "a gateway with a prefix",
            sbr(r#","gateways":["10.66.0.1/24"]"#),
            CONFIG,
            &[r#"gateways[0]: "10.66.0.1/24" is not an IP address"#],
        ),
        (
            "two IPv4 gateways",
            sbr(r#","gateways":["10.66.0.1","10.66.0.2"]"#),
            CONFIG,
            &["gateways[1]: 10.66.0.2 is a second gateway"],
        ),
        (
            "a prevResult address without a prefix",
            sbr("").replace("10.66.0.5/24", "10.66.0.5"),
            DECODE,
            &["prevResult.ips[0].address"],
        ),
    ];
    let vrf_cases: [(&str, String, u64, &[&str]); 5] = [
        (
            "no vrfname",
            vrf("").replace(r#""vrfname":"blue","#, ""),
            CONFIG,
            &["vrfname: required"],
        ),
        (
            "a vrfname with a slash",
            vrf("").replace("blue", "bl/ue"),
            CONFIG,
            &[r#"vrfname: "bl/ue" is not an interface name"#],
        ),
        (
            "a negative table",
            vrf(r#","table":-1"#),
            DECODE,
            &["table"],
        ),
        (
            "no prevResult",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"vrf","vrfname":"blue"}"#.into(),
            CONFIG,
            &["vrf needs prevResult"],
        ),
        (
            "an interface the pod has not got",
            vrf(""),
            INTERNAL,
            &[r#"link "eth0" in netns"#, "not found"],
        ),
    ];
    let bandwidth_cases: [(&str, String, u64, &[&str]); 6] = [
        (
            "a rate without a burst",
            bandwidth("").replace(r#","ingressBurst":100000"#, ""),
            CONFIG,
            &["ingressBurst: set it too"],
        ),
        (
            "a burst without a rate",
            bandwidth(r#","egressBurst":5000"#),
            CONFIG,
            &["egressRate: set it too"],
        ),
        (
            "a negative rate",
            bandwidth("").replace("1000000", "-1000000"),
            DECODE,
            &["ingressRate"],
        ),
        (
            "a burst of more than 4 GB",
            bandwidth("").replace("100000,", "40000000000,"),
            CONFIG,
            &["ingressBurst: 40000000000 bits is more than 4 GB"],
        ),
        (
            "a runtimeConfig rate of 1 bit per second",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"bandwidth","runtimeConfig":{"bandwidth":{"egressRate":1,"egressBurst":8}},"prevResult":{"cniVersion":"1.1.0"}}"#.into(),
            CONFIG,
            &["runtimeConfig.bandwidth.egressRate: 1 is below 8 bits per second"],
        ),
        (
            "an interface that is not a veth",
            bandwidth(""),
            CONFIG,
            &["interface \"eth0\" in netns", "is not a veth"],
        ),
    ];
    let portmap_cases: [(&str, String, u64, &[&str]); 12] = [
        (
            "host port 0",
            portmap("", r#"{"hostPort":0,"containerPort":80,"protocol":"tcp"}"#),
            CONFIG,
            &["runtimeConfig.portMappings[0].hostPort: 0 is not a port"],
        ),
        (
            "container port 65536",
            portmap(
                "",
                r#"{"hostPort":80,"containerPort":65536,"protocol":"tcp"}"#,
            ),
            CONFIG,
            &["containerPort: 65536 is not a port"],
        ),
        (
            "protocol icmp",
            portmap(
                "",
                r#"{"hostPort":80,"containerPort":80,"protocol":"icmp"}"#,
            ),
            CONFIG,
            &[r#"protocol: "icmp" is not tcp, udp or sctp"#],
        ),
        (
            "a host IP that is not one",
            portmap(
                "",
                r#"{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"localhost"}"#,
            ),
            CONFIG,
            &[r#"hostIP: "localhost" is not an IP address"#],
        ),
        (
            "a condition that is a new rule",
            portmap(
                r#","conditionsV4":["-s\n-A PREROUTING -j ACCEPT"]"#,
                MAPPING,
            ),
            CONFIG,
            &["conditionsV4[0]: ", "is not a match argument"],
        ),
        (
            "a condition that jumps",
            portmap(r#","conditionsV4":["-j","ACCEPT"]"#, MAPPING),
            CONFIG,
            &["conditionsV4[0]: \"-j\" is not a match argument"],
        ),
        (
            "a mark bit of 32",
            portmap(r#","markMasqBit":32"#, MAPPING),
            CONFIG,
            &["markMasqBit: 32 is not a bit"],
        ),
        (
            "both mark settings",
            portmap(
                r#","markMasqBit":3,"externalSetMarkChain":"KUBE-MARK-MASQ""#,
                MAPPING,
            ),
            CONFIG,
            &["cannot both be set"],
        ),
        (
            "an unknown backend",
            portmap(r#","backend":"pf""#, MAPPING),
            CONFIG,
            &[r#"backend: "pf" is not a backend"#],
        ),
        (
            "an nftables condition that is a statement",
            portmap(
                r#","backend":"nftables","conditionsV4":["ip saddr 10.0.0.0/8 accept"]"#,
                MAPPING,
            ),
            CONFIG,
            &["conditionsV4[0]", "is not an nftables match"],
        ),
        (
            "an nftables condition that is a second command",
            portmap(
                r#","backend":"nftables","conditionsV4":["iifname eth0 ; flush ruleset"]"#,
                MAPPING,
            ),
            CONFIG,
            &["conditionsV4[0]", "is not an nftables match"],
        ),
        (
            "an iptables option with the nftables backend",
            portmap(
                r#","backend":"nftables","externalSetMarkChain":"KUBE-MARK-MASQ""#,
                MAPPING,
            ),
            CONFIG,
            &["externalSetMarkChain is for the iptables backend"],
        ),
    ];
    let firewall_cases: [(&str, String, u64, &[&str]); 6] = [
        (
            "an unknown backend",
            firewall(r#","backend":"pf""#),
            CONFIG,
            &[r#"backend: "pf" is not a backend"#],
        ),
        (
            "the firewalld backend on a node without firewalld",
            firewall(r#","backend":"firewalld""#),
            11,
            &[
                r#"backend "firewalld""#,
                "is firewalld running on this node?",
            ],
        ),
        (
            "a firewalld zone name with a space",
            firewall(r#","backend":"firewalld","firewalldZone":"my zone""#),
            CONFIG,
            &[r#"firewalldZone: "my zone" is not a firewalld zone name"#],
        ),
        (
            "an admin chain name with a space",
            firewall(r#","iptablesAdminChainName":"MY ADMIN""#),
            CONFIG,
            &[r#"iptablesAdminChainName: "MY ADMIN" is not an iptables chain name"#],
        ),
        (
            "an unknown ingress policy",
            firewall(r#","ingressPolicy":"closed""#),
            CONFIG,
            &[r#"ingressPolicy: "closed" is not a policy"#],
        ),
        (
            "no prevResult",
            r#"{"cniVersion":"1.0.0","name":"badnet","type":"firewall"}"#.into(),
            CONFIG,
            &["firewall needs prevResult"],
        ),
    ];
    for (what, stdin, code, says) in firewall_cases {
        cases.push(case(format!("firewall: {what}"), "firewall", stdin, code).says(says));
    }
    for (what, stdin, code, says) in portmap_cases {
        cases.push(case(format!("portmap: {what}"), "portmap", stdin, code).says(says));
    }
    for (what, stdin, code, says) in bandwidth_cases {
        cases.push(case(format!("bandwidth: {what}"), "bandwidth", stdin, code).says(says));
    }
    for (what, stdin, code, says) in vrf_cases {
        cases.push(case(format!("vrf: {what}"), "vrf", stdin, code).says(says));
    }
    for (what, stdin, code, says) in sbr_cases {
        cases.push(case(format!("sbr: {what}"), "sbr", stdin, code).says(says));
    }
    for (what, extra, code, says) in tap_cases {
        let stdin = TAP.replace('}', &format!("{extra}}}"));
        cases.push(case(format!("tap: {what}"), "tap", stdin, code).says(says));
    }
    for (what, stdin, code, says) in ptp_cases {
        cases.push(case(format!("ptp: {what}"), "ptp", stdin, code).says(says));
    }
    for (what, stdin, code, says) in dummy_cases {
        cases.push(case(format!("dummy: {what}"), "dummy", stdin, code).says(says));
    }
    for (what, extra, code, says) in loopback_cases {
        let stdin = LOOPBACK.replace('}', &format!("{extra}}}"));
        cases.push(case(format!("loopback: {what}"), "loopback", stdin, code).says(says));
    }
    cases
}

/// Every plugin the `cni-plugins` binary answers to.
fn every_plugin() -> Vec<&'static str> {
    plugins::PLUGINS.iter().map(|e| e.name).collect()
}

/// A JSON object naming a network and a version every command accepts: then DEL has what it
/// needs. (Without them every command is refused, DEL too.)
fn is_network_config(stdin: &str) -> bool {
    let Ok(serde_json::Value::Object(o)) = serde_json::from_str(stdin) else {
        return false;
    };
    let text = |k: &str| o.get(k).and_then(serde_json::Value::as_str);
    let named = text("name").is_some_and(cni::env::is_valid_name);
    let versioned = text("cniVersion").is_some_and(|v| v.parse::<cni::Version>().is_ok());
    named && versioned && serde_json::from_str::<cni::NetConf>(stdin).is_ok()
}

#[test]
fn every_bad_input_gets_a_cni_error_and_leaves_nothing_behind() {
    let bin = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    let plugins = PluginDir::new(bin, &every_plugin());
    let node = Netns::new("badnode");
    node.veth_pair("up0", "up0p");
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
            .and_then(|v| {
                let text = format!(
                    "{}; {}",
                    v["msg"].as_str()?,
                    v["details"].as_str().unwrap_or("")
                );
                Some((v["code"].as_u64()?, v["msg"].as_str()?.to_owned(), text))
            });
        // Whatever the input, the error object stays small, names no column, and says what
        // the case expects.
        let fits = out.stdout.len() < 4096;
        match got {
            Some((code, msg, text))
                if out.code == 1
                    && code == c.code
                    && !msg.is_empty()
                    && fits
                    && !text.contains("column")
                    && c.says.iter().all(|part| text.contains(part.as_str())) => {}
            _ => failures.push(format!(
                "{}: want code {} saying {:?}, got exit {} stdout ({} bytes) {}",
                c.what,
                c.code,
                c.says,
                out.code,
                out.stdout.len(),
                out.stdout.chars().take(2000).collect::<String>().trim()
            )),
        }
        // The runtime DELs what failed to ADD: with nothing made, DEL succeeds, unless the
        // config cannot even be read as a network config. sbr's DEL lists routing rules, which
        // qemu-user cannot do for the aarch64 build (`cargo xtask aarch64-test`).
        let emulator_cannot = c.plugin == "sbr" && std::env::var_os(testkit::EMULATED).is_some();
        if c.command == "ADD"
            && c.env.is_empty()
            && is_network_config(&call.stdin)
            && !emulator_cannot
        {
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
    let plugins = every_plugin();
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

/// Under the size cap, a config of a million tiny values (2 MB of `0,`) would cost each
/// plugin 40-80 MB to read: it is refused by its count of values first.
#[test]
fn a_config_of_too_many_values_is_refused_before_it_is_read() {
    let bin = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
    let dir = PluginDir::new(bin, &["bridge", "host-local"]);
    let many = format!(
        r#"{{"cniVersion":"1.0.0","name":"big","type":"bridge","junk":[{}0]}}"#,
        "0,".repeat(1_000_000)
    );
    assert!(many.len() < 2 << 20);
    for plugin in ["bridge", "host-local"] {
        let mut call = CniCall::new("ADD", &many);
        call.netns = "/nonexistent".into();
        call.path = dir.path().display().to_string();
        let out = call.run(&dir.path().join(plugin), None);
        assert_eq!(out.json()["code"], 6, "{plugin}: {out:?}");
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_owned();
        assert!(
            msg.contains("more than 100000 JSON values"),
            "{plugin}: {msg}"
        );
    }
}
