//! `cni-plugins validate <type>`: every plugin's config checks, run as a tool would run them
//! (config on stdin, nothing or a CNI error object on stdout, a warning on stderr per key the
//! plugin does not read), with nothing on the node read.

use std::path::Path;

use serde_json::Value;

fn validate(plugin: &str, config: &str) -> (i32, Option<Value>, Vec<String>) {
    testkit::validate_config(Path::new(env!("CARGO_BIN_EXE_cni-plugins")), plugin, config)
}

fn conf(plugin: &str, extra: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"net","type":"{plugin}"{extra}}}"#)
}

/// The config passes: exit 0 and nothing printed.
fn passes(plugin: &str, extra: &str) {
    let config = conf(plugin, extra);
    assert_eq!(validate(plugin, &config), (0, None, Vec::new()), "{config}");
}

/// The config fails with `code` and a message containing `msg`.
fn fails(plugin: &str, extra: &str, code: u64, msg: &str) {
    let config = conf(plugin, extra);
    let (status, err, _) = validate(plugin, &config);
    assert_eq!(status, 1, "{config}");
    let err = err.expect("an error object on stdout");
    assert_eq!(err["code"], code, "{config}: {err}");
    assert_eq!(err["cniVersion"], "1.0.0", "{err}");
    let text = err["msg"].as_str().expect("the error has a msg");
    assert!(text.contains(msg), "{config}: {text:?} lacks {msg:?}");
}

const HOST_LOCAL: &str = r#","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24"}]]}"#;

#[test]
fn bridge() {
    passes("bridge", "");
    passes("bridge", HOST_LOCAL);
    // The bridge need not exist: nothing on the node is looked at.
    passes("bridge", r#","bridge":"nosuchbr0","vlan":4094"#);
    fails("bridge", r#","vlan":5000"#, 7, "vlan: 5000 is out of range");
    fails(
        "bridge",
        r#","vlan":"10""#,
        6,
        r#"vlan: "10" is not a whole number"#,
    );
    fails(
        "bridge",
        r#","hairpinMode":true,"promiscMode":true"#,
        7,
        "choose one",
    );
    fails(
        "bridge",
        r#","vlanTrunk":[{"minID":9,"maxID":5}]"#,
        7,
        "swap them",
    );
    fails(
        "bridge",
        r#","ipMasqBackend":"pf""#,
        7,
        r#"ipMasqBackend: "pf" is not"#,
    );
    fails(
        "bridge",
        r#","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24","rangeStart":"10.8.0.1"}]]}"#,
        7,
        "ipam.ranges[0][0].rangeStart: 10.8.0.1 is not in the subnet 10.9.0.0/24",
    );
    fails(
        "bridge",
        r#","ipam":{"type":"macvlan"}"#,
        7,
        "is not an IPAM plugin",
    );
}

#[test]
fn macvlan() {
    passes("macvlan", "");
    // A master that does not exist here is the node's business.
    passes("macvlan", r#","master":"nosuch0","mode":"vepa""#);
    passes("macvlan", HOST_LOCAL);
    fails(
        "macvlan",
        r#","mode":"l2""#,
        7,
        r#"mode: "l2" is not a mode of macvlan"#,
    );
    fails("macvlan", r#","mtu":-1"#, 7, "mtu: -1 is out of range");
    fails(
        "macvlan",
        r#","mac":"nope""#,
        7,
        r#"mac: "nope" is not a MAC"#,
    );
    fails("macvlan", r#","master":5"#, 6, "master: 5 is not a string");
    fails(
        "macvlan",
        r#","ipam":{"type":"static","addresses":[{"address":"10.1.0.5"}]}"#,
        7,
        r#"ipam.addresses[0].address: "10.1.0.5" is not a CIDR"#,
    );
}

#[test]
fn ipvlan() {
    passes("ipvlan", HOST_LOCAL);
    passes(
        "ipvlan",
        r#","master":"eth9","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"up0"}],"ips":[{"address":"10.1.0.5/24"}]}"#,
    );
    fails(
        "ipvlan",
        r#","mode":"bridge""#,
        7,
        r#"mode: "bridge" is not a mode of ipvlan"#,
    );
    // Without ipam and without a previous result there is nothing to address it with.
    fails("ipvlan", r#","master":"eth9""#, 7, "ipvlan needs addresses");
    fails(
        "ipvlan",
        r#","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}],"ips":[{"address":"10.1.0.5/24"}]}"#,
        7,
        "exactly one interface",
    );
    fails(
        "ipvlan",
        r#","prevResult":{"ips":5}"#,
        6,
        "prevResult.ips: 5 is not a list",
    );
}

#[test]
fn host_local() {
    passes("host-local", HOST_LOCAL);
    // The data directory is not opened.
    passes(
        "host-local",
        r#","ipam":{"type":"host-local","subnet":"10.9.0.0/24","dataDir":"/nonexistent/x"}"#,
    );
    fails("host-local", "", 7, "IPAM config missing 'ipam' key");
    fails(
        "host-local",
        r#","ipam":{"type":"host-local"}"#,
        7,
        "no IP ranges specified",
    );
    fails(
        "host-local",
        r#","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24"}],[{"subnet":"10.9.0.0/25"}]]}"#,
        7,
        "ipam.ranges[1]: overlaps ipam.ranges[0]",
    );
    fails(
        "host-local",
        r#","ipam":{"type":"host-local","ranges":[[{"subnet":"nope"}]]}"#,
        6,
        r#"ipam.ranges[0][0].subnet: "nope" is not a CIDR"#,
    );
}

#[test]
fn static_ipam() {
    passes(
        "static",
        r#","ipam":{"type":"static","addresses":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}]}"#,
    );
    // No addresses is valid for static itself; the runtime may give `ips`.
    passes("static", r#","ipam":{"type":"static"}"#);
    fails("static", "", 7, "IPAM config missing 'ipam' key");
    fails(
        "static",
        r#","ipam":{"type":"static","addresses":[{"address":"10.1.0.5/24","gateway":"fd00::1"}]}"#,
        7,
        "ipam.addresses[0].gateway: fd00::1 and 10.1.0.5/24 are of different address families",
    );
}

#[test]
fn shared_checks_and_unknown_types() {
    let (status, err, _) = validate(
        "bridge",
        r#"{"cniVersion":"9.0.0","name":"net","type":"bridge"}"#,
    );
    assert_eq!(status, 1);
    assert_eq!(err.unwrap()["code"], 1);
    let (status, err, _) = validate("bridge", r#"{"cniVersion":"1.0.0","name":"a b"}"#);
    assert_eq!(status, 1);
    assert_eq!(err.unwrap()["code"], 7);
    let (status, err, _) = validate("bridge", "not json");
    assert_eq!(status, 1);
    assert_eq!(err.unwrap()["code"], 6);
    // A type that is not built in is not ours to answer for.
    let (status, err, _) = validate("whereabouts", "{}");
    assert_eq!((status, err), (2, None));
}

#[test]
fn dhcp() {
    passes("dhcp", r#","ipam":{"type":"dhcp"}"#);
    passes(
        "macvlan",
        r#","master":"eth1","ipam":{"type":"dhcp","request":[{"option":"121"}],"provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"}]}"#,
    );
    // The daemon's socket is not opened.
    passes(
        "dhcp",
        r#","ipam":{"type":"dhcp","daemonSocketPath":"/nonexistent.sock"}"#,
    );
    fails(
        "dhcp",
        r#","ipam":{"type":"dhcp","request":[{"option":"no-such-option"}]}"#,
        7,
        r#"ipam.request[0].option: unknown option "no-such-option""#,
    );
}

#[test]
fn passthru() {
    passes("passthru", "");
    // passthru has no options: it refuses none, and says it reads none.
    let config = conf("passthru", r#","anything":{"at":"all"}"#);
    assert_eq!(
        validate("passthru", &config),
        (
            0,
            None,
            vec![r#"passthru: unknown key "anything""#.to_owned()]
        )
    );
}

#[test]
fn loopback() {
    passes("loopback", "");
    passes(
        "loopback",
        r#","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}"#,
    );
    fails(
        "loopback",
        r#","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5"}]}"#,
        6,
        "prevResult.ips[0].address",
    );
}

#[test]
fn host_device() {
    // The selection's form is checked, not whether the node has the device.
    passes("host-device", r#","device":"eth9""#);
    passes("host-device", r#","hwaddr":"02:00:00:00:00:09""#);
    passes(
        "host-device",
        r#","device":"eth9","ipam":{"type":"static","addresses":[{"address":"10.1.0.5/24"}]}"#,
    );
    fails(
        "host-device",
        "",
        7,
        r#""device", "hwaddr", "kernelpath" or "pciBusID""#,
    );
    fails(
        "host-device",
        r#","kernelpath":"/proc/1""#,
        7,
        "kernelpath: ",
    );
    fails("host-device", r#","pciBusID":"03:00.1""#, 7, "pciBusID: ");
    fails(
        "host-device",
        r#","device":"eth9","ipam":{"type":"static","addresses":[{"address":"10.1.0.5"}]}"#,
        7,
        "10.1.0.5",
    );
}

#[test]
fn tuning() {
    let prev = r#","prevResult":{"cniVersion":"1.0.0"}"#;
    passes(
        "tuning",
        &format!(r#"{prev},"mtu":1400,"sysctl":{{"net.core.somaxconn":"512"}}"#),
    );
    passes(
        "tuning",
        &format!(r#"{prev},"args":{{"cni":{{"mac":"02:00:00:00:00:01"}}}}"#),
    );
    fails(
        "tuning",
        &format!(r#"{prev},"sysctl":{{"kernel.shmmax":"1"}}"#),
        7,
        "kernel.shmmax",
    );
    fails("tuning", &format!(r#"{prev},"mac":"zz""#), 7, "mac: ");
    fails("tuning", &format!(r#"{prev},"txQLen":"long""#), 6, "txQLen");
}

/// What only the node can answer is left to ADD: a PCI device or a deviceID this machine does
/// not have still validates, in the right form.
#[test]
fn host_device_validates_without_the_node() {
    passes("host-device", r#","pciBusID":"0000:99:1f.7""#);
    passes(
        "host-device",
        r#","runtimeConfig":{"deviceID":"0000:99:1f.7"}"#,
    );
    passes(
        "host-device",
        r#","runtimeConfig":{"deviceID":"mlx5_core.sf.4"}"#,
    );
    fails(
        "host-device",
        r#","runtimeConfig":{"deviceID":"../x"}"#,
        7,
        "runtimeConfig.deviceID: ",
    );
}

#[test]
fn vlan() {
    // The master need not exist: nothing on the node is looked at.
    passes(
        "vlan",
        &format!(r#","master":"nosuch9","vlanId":4094{HOST_LOCAL}"#),
    );
    passes(
        "vlan",
        &format!(r#","master":"eth1","mtu":1400{HOST_LOCAL}"#),
    );
    fails(
        "vlan",
        &format!(r#","master":"eth1","vlanId":4095{HOST_LOCAL}"#),
        7,
        "vlanId: 4095 is not a VLAN id: use 0 to 4094",
    );
    fails(
        "vlan",
        &format!(r#","master":"eth1","vlanId":"7"{HOST_LOCAL}"#),
        6,
        "vlanId",
    );
    fails("vlan", HOST_LOCAL, 7, "master: required");
    fails("vlan", r#","master":"eth1""#, 7, "vlan needs addresses");
    fails(
        "vlan",
        &format!(r#","master":"eth1","mtu":-1{HOST_LOCAL}"#),
        7,
        "mtu: -1 is out of range",
    );
}

#[test]
fn dummy() {
    passes("dummy", HOST_LOCAL);
    fails("dummy", "", 7, "dummy needs addresses");
    fails(
        "dummy",
        r#","ipam":{"type":"static","addresses":[{"address":"10.1.0.5"}]}"#,
        7,
        "10.1.0.5",
    );
}

#[test]
fn ptp() {
    passes("ptp", HOST_LOCAL);
    passes(
        "ptp",
        &format!(r#","ipMasq":true,"ipMasqBackend":"nftables","mtu":1400{HOST_LOCAL}"#),
    );
    fails("ptp", "", 7, "ptp needs addresses");
    fails(
        "ptp",
        &format!(r#","ipMasqBackend":"pf"{HOST_LOCAL}"#),
        7,
        "ipMasqBackend",
    );
    fails("ptp", &format!(r#","mtu":"9000"{HOST_LOCAL}"#), 6, "mtu");
}

#[test]
fn tap() {
    // The bridge need not exist: nothing in any namespace is looked at.
    passes(
        "tap",
        r#","multiQueue":true,"mtu":9000,"owner":107,"group":107,"bridge":"br9","mac":"02:00:00:00:00:09""#,
    );
    passes("tap", HOST_LOCAL);
    fails("tap", r#","mac":"zz""#, 7, "mac: ");
    fails("tap", r#","owner":"qemu""#, 6, "owner");
    fails(
        "tap",
        r#","selinuxContext":"x""#,
        7,
        "selinuxContext: \"x\" is not an SELinux context",
    );
}

#[test]
fn sbr() {
    // In a NAD's chain sbr has no prevResult yet: its keys are checked alone.
    passes("sbr", "");
    passes(
        "sbr",
        r#","table":500,"gateways":["10.1.0.1","fd01::1"],"addSourceHints":true"#,
    );
    fails("sbr", r#","gateways":["x"]"#, 7, "gateways[0]: \"x\"");
    fails("sbr", r#","table":"main""#, 6, "table");
}

#[test]
fn vrf() {
    passes("vrf", r#","vrfname":"blue""#);
    passes("vrf", r#","vrfname":"blue","table":1001"#);
    fails("vrf", "", 7, "vrfname: required");
    fails("vrf", r#","vrfname":"blue","table":"x""#, 6, "table");
}

#[test]
fn bandwidth() {
    passes(
        "bandwidth",
        r#","ingressRate":1000000,"ingressBurst":100000"#,
    );
    passes(
        "bandwidth",
        r#","runtimeConfig":{"bandwidth":{"egressRate":8000,"egressBurst":800}}"#,
    );
    fails(
        "bandwidth",
        r#","egressRate":8000"#,
        7,
        "egressBurst: set it too",
    );
    fails("bandwidth", r#","ingressRate":"fast""#, 6, "ingressRate");
}

#[test]
fn portmap() {
    passes(
        "portmap",
        r#","snat":false,"conditionsV4":["-s","10.0.0.0/8"],"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#,
    );
    passes("portmap", r#","capabilities":{"portMappings":true}"#);
    fails(
        "portmap",
        r#","runtimeConfig":{"portMappings":[{"hostPort":"80","containerPort":80,"protocol":"tcp"}]}"#,
        6,
        "hostPort",
    );
    fails(
        "portmap",
        r#","conditionsV6":["-s 10.0.0.0/8"]"#,
        7,
        "conditionsV6[0]: ",
    );
    fails(
        "portmap",
        r#","backend":"iptables","conditionsV6":["ip6 saddr fd00::/8"]"#,
        7,
        "conditionsV6 is for the nftables backend, and this config uses the iptables backend",
    );
    passes(
        "portmap",
        r#","backend":"nftables","conditionsV6":["ip6 saddr fd00::/8"]"#,
    );
}

#[test]
fn firewall() {
    passes("firewall", "");
    passes(
        "firewall",
        r#","backend":"iptables","iptablesAdminChainName":"MY-ADMIN","ingressPolicy":"same-bridge""#,
    );
    passes(
        "firewall",
        r#","backend":"firewalld","firewalldZone":"pods""#,
    );
    passes(
        "firewall",
        r#","backend":"nftables","ingressPolicy":"isolated""#,
    );
    fails("firewall", r#","backend":"nft""#, 7, "backend: ");
    fails(
        "firewall",
        r#","firewalldZone":"a/b/c""#,
        7,
        "firewalldZone: ",
    );
    fails("firewall", r#","ingressPolicy":7"#, 6, "ingressPolicy");
}

/// A key no plugin reads is a warning on stderr, naming the plugin, the key and the key it
/// most resembles; the exit status is the config's own.
#[test]
fn unknown_keys_are_warnings() {
    let (status, err, warnings) = validate("portmap", &conf("portmap", r#","masqall":true"#));
    assert_eq!((status, err), (0, None));
    assert_eq!(
        warnings,
        [r#"portmap: unknown key "masqall" (did you mean "masqAll"?)"#]
    );
    // Inside a built-in IPAM, and beside an error.
    let (status, _, warnings) = validate(
        "bridge",
        &conf(
            "bridge",
            r#","vlan":5000,"hairpin":true,"ipam":{"type":"host-local","subnet":"10.9.0.0/24","rangestart":"10.9.0.9"}"#,
        ),
    );
    assert_eq!(status, 1);
    assert_eq!(
        warnings,
        [
            r#"bridge: unknown key "hairpin""#,
            r#"bridge: unknown key "ipam.rangestart" (did you mean "rangeStart"?)"#,
        ]
    );
    // The keys runtimes and multus add are every plugin's.
    passes(
        "tuning",
        r#","mtu":1400,"deviceID":"0000:01:00.1","pciBusID":"0000:01:00.1","args":{"cni":{"mac":"02:00:00:00:00:01"}},"runtimeConfig":{"mac":"02:00:00:00:00:02"},"capabilities":{"mac":true}"#,
    );
}
