//! Fuzzing the IPAM plugins' parsers through their CNI entry points: host-local's config and
//! ranges, its store's files and resolv.conf, static's config, dhcp's config and the
//! plugin-daemon protocol. For the corpus in tests/corpus/, its fixed mutants, arbitrary bytes
//! and randomly broken corpus files, each returns a result or a CNI error of bounded size;
//! never a panic or a hang. The DHCP packets and the lease store are fuzzed inside the crate
//! (src/dhcp/fuzz.rs).

use std::path::{Path, PathBuf};

use cni::{CmdArgs, CniError, CniResult, Command, Dns, Plugin};
use ipam::dhcp::config::DhcpConf;
use ipam::dhcp::wire::{Request, Response};
use ipam::host_local::HostLocal;
use ipam::static_ipam::StaticIpam;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use testkit::fuzz::{self, check_corpus, json_mutated, junk, mutated, seeds};

fn corpus(target: &str) -> PathBuf {
    fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), target)
}

fn bounded(e: &CniError) -> Result<(), String> {
    fuzz::bounded_error(
        &e.msg,
        &e.details,
        &serde_json::to_value(e).expect("an error encodes"),
    )
}

fn args(command: Command, container_id: &str, stdin: &[u8], cni_args: &str) -> CmdArgs {
    CmdArgs {
        command,
        container_id: container_id.to_owned(),
        netns: "/nonexistent/netns".to_owned(),
        ifname: "eth0".to_owned(),
        args: cni_args.to_owned(),
        path: Vec::new(),
        stdin: stdin.to_vec(),
        path_roots_file: Some(testkit::test_path_roots()),
    }
}

/// `input` as JSON with its store and resolv.conf moved into `dir`, so that no input can make
/// a test write outside it; `None` when it is not a JSON object with an `ipam` object, which
/// no command gets past decoding.
fn confined(input: &[u8], dir: &Path, resolv: Option<&Path>) -> Option<Vec<u8>> {
    let mut conf: Map<String, Value> = serde_json::from_slice(input).ok()?;
    let ipam = conf.get_mut("ipam")?.as_object_mut()?;
    ipam.insert("dataDir".into(), json!(dir.join("store")));
    match resolv {
        Some(path) => ipam.insert("resolvConf".into(), json!(path)),
        None => ipam.remove("resolvConf"),
    };
    Some(serde_json::to_vec(&conf).expect("a config encodes"))
}

/// host-local's config through `validate`, then ADD, CHECK and DEL on a store of its own.
/// An ADD that succeeds leaves a reservation that CHECK finds, in every range set.
fn check_host_local_config(input: &[u8]) -> Result<(), String> {
    if let Err(e) = HostLocal.validate(input) {
        bounded(&e)?;
    }
    let dir = fuzz::scratch_dir();
    let Some(stdin) = confined(input, dir.path(), None) else {
        return Ok(());
    };
    let added = HostLocal.add(&args(Command::Add, "c0ffee", &stdin, ""));
    match added {
        Ok(result) => {
            if result.ips.is_empty() {
                return Err("ADD succeeded without an address".into());
            }
            HostLocal
                .check(&args(Command::Check, "c0ffee", &stdin, ""))
                .map_err(|e| format!("CHECK after ADD: {e}"))?;
        }
        Err(e) => bounded(&e)?,
    }
    if let Err(e) = HostLocal.del(&args(Command::Del, "c0ffee", &stdin, "")) {
        bounded(&e)?;
    }
    Ok(())
}

/// The store in `dir/store/net/` planted from a corpus file: a JSON object of file names to
/// contents, or (for bytes that are not one) the bytes as a reservation and as the last
/// reserved address. Names that are not plain file names are left out.
fn plant_store(input: &[u8], dir: &Path) {
    let net = dir.join("store/net");
    std::fs::create_dir_all(&net).expect("create the store dir");
    let files: Vec<(String, Vec<u8>)> = match serde_json::from_slice::<Map<String, Value>>(input) {
        Ok(map) => map
            .into_iter()
            .map(|(name, v)| {
                let content = match v {
                    Value::String(s) => s.into_bytes(),
                    other => other.to_string().into_bytes(),
                };
                (name, content)
            })
            .collect(),
        Err(_) => vec![
            ("10.1.2.2".to_owned(), input.to_vec()),
            ("last_reserved_ip.0".to_owned(), input.to_vec()),
        ],
    };
    for (name, content) in files {
        let plain = !name.is_empty() && name.len() < 200 && !name.contains(['/', '\0']);
        if plain && name != "." && name != ".." {
            let _ = std::fs::write(net.join(name), content);
        }
    }
}

const STORE_CONF: &str = r#"{"cniVersion":"1.1.0","name":"net","type":"bridge",
    "ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/29"}],[{"subnet":"fd00::/125"}]]}}"#;

/// Every command over a planted store: none panics or fails with an unbounded error. An ADD
/// that succeeds is found by CHECK; GC with no valid attachment leaves no reservation.
fn check_store(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    plant_store(input, dir.path());
    let stdin =
        confined(STORE_CONF.as_bytes(), dir.path(), None).expect("the store config is confined");
    let call = |command, id| args(command, id, &stdin, "");
    match HostLocal.add(&call(Command::Add, "new")) {
        Ok(_) => HostLocal
            .check(&call(Command::Check, "new"))
            .map_err(|e| format!("CHECK after ADD: {e}"))?,
        Err(e) => bounded(&e)?,
    }
    for result in [
        HostLocal.check(&call(Command::Check, "c1")),
        HostLocal.status(&call(Command::Status, "")),
        HostLocal.del(&call(Command::Del, "c1")),
        HostLocal.del(&call(Command::Del, "c0ffee")),
    ] {
        if let Err(e) = result {
            bounded(&e)?;
        }
    }
    let mut gc: Value = serde_json::from_slice(&stdin).expect("the config is JSON");
    gc["cni.dev/valid-attachments"] = json!([]);
    let gc = serde_json::to_vec(&gc).expect("a config encodes");
    match HostLocal.gc(&args(Command::Gc, "", &gc, "")) {
        Ok(()) => {
            let left: Vec<String> = std::fs::read_dir(dir.path().join("store/net"))
                .expect("read the store")
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                .collect();
            if !left.is_empty() {
                return Err(format!("GC of everything left {left:?}"));
            }
        }
        Err(e) => bounded(&e)?,
    }
    Ok(())
}

/// resolv.conf as host-local reads it, then written back from the result and read again to
/// the same DNS settings.
fn check_resolv(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, input).expect("write resolv.conf");
    let conf =
        br#"{"cniVersion":"1.0.0","name":"net","ipam":{"ranges":[[{"subnet":"10.1.2.0/24"}]]}}"#;
    let stdin = confined(conf, dir.path(), Some(&resolv)).expect("the config is confined");
    let dns = match HostLocal.add(&args(Command::Add, "c1", &stdin, "")) {
        Ok(result) => result.dns,
        Err(e) => return bounded(&e),
    };
    std::fs::write(&resolv, render(&dns)).expect("write resolv.conf");
    let again = HostLocal
        .add(&args(Command::Add, "c2", &stdin, ""))
        .map_err(|e| format!("a written resolv.conf: {e}"))?
        .dns;
    if again != dns {
        return Err(format!("{dns:?} came back as {again:?}"));
    }
    Ok(())
}

fn render(dns: &Dns) -> String {
    let mut text = String::new();
    for ns in &dns.nameservers {
        text.push_str(&format!("nameserver {ns}\n"));
    }
    if !dns.domain.is_empty() {
        text.push_str(&format!("domain {}\n", dns.domain));
    }
    for (key, values) in [("search", &dns.search), ("options", &dns.options)] {
        if !values.is_empty() {
            text.push_str(&format!("{key} {}\n", values.join(" ")));
        }
    }
    text
}

/// static's config through `validate` and ADD (with `cni_args`); a result it returns reads
/// back in the config's version.
fn check_static(input: &[u8], cni_args: &str) -> Result<(), String> {
    if let Err(e) = StaticIpam.validate(input) {
        bounded(&e)?;
    }
    match StaticIpam.add(&args(Command::Add, "c1", input, cni_args)) {
        Ok(result) => round_trip(&result)?,
        Err(e) => bounded(&e)?,
    }
    if let Err(e) = StaticIpam.check(&args(Command::Check, "c1", input, cni_args)) {
        bounded(&e)?;
    }
    Ok(())
}

fn round_trip(result: &CniResult) -> Result<(), String> {
    let json = result
        .to_value(cni::Version::LATEST)
        .map_err(|e| e.to_string())?;
    let back = CniResult::from_value(&json).map_err(|e| e.to_string())?;
    if back.ips != result.ips || back.routes != result.routes || back.dns != result.dns {
        return Err(format!("{result:?} came back as {back:?}"));
    }
    Ok(())
}

/// dhcp's config as the plugin reads it; the lease parameters it gives cross the daemon
/// socket and come back the same.
fn check_dhcp_config(input: &[u8], cni_args: &str) -> Result<(), String> {
    match DhcpConf::parse(input, cni_args, "c0ffee", "eth0") {
        Ok(conf) => {
            if conf.params.client_id.len() > 255 {
                return Err(format!("a client id of {}", conf.params.client_id.len()));
            }
            let json = serde_json::to_vec(&conf.params).expect("lease parameters encode");
            let back: ipam::dhcp::config::LeaseParams =
                serde_json::from_slice(&json).expect("encoded lease parameters decode");
            if back != conf.params {
                return Err(format!("{:?} came back as {back:?}", conf.params));
            }
        }
        Err(e) => bounded(&CniError::from(e))?,
    }
    Ok(())
}

/// A line of the plugin-daemon protocol, either way: what decodes encodes and decodes to the
/// same value.
fn check_wire(input: &[u8]) -> Result<(), String> {
    if let Ok(request) = serde_json::from_slice::<Request>(input) {
        let back: Request =
            serde_json::from_slice(&serde_json::to_vec(&request).expect("a request encodes"))
                .map_err(|e| format!("a written request does not read: {e}"))?;
        if back != request {
            return Err(format!("{request:?} came back as {back:?}"));
        }
    }
    if let Ok(response) = serde_json::from_slice::<Response>(input) {
        let back: Response =
            serde_json::from_slice(&serde_json::to_vec(&response).expect("a response encodes"))
                .map_err(|e| format!("a written response does not read: {e}"))?;
        if back != response {
            return Err(format!("{response:?} came back as {back:?}"));
        }
    }
    Ok(())
}

#[test]
fn host_local_config_corpus() {
    check_corpus(&corpus("host_local_config"), check_host_local_config);
}

#[test]
fn host_local_store_corpus() {
    check_corpus(&corpus("host_local_store"), check_store);
}

#[test]
fn resolv_conf_corpus() {
    check_corpus(&corpus("resolv_conf"), check_resolv);
}

#[test]
fn static_config_corpus() {
    check_corpus(&corpus("static_config"), |input| check_static(input, ""));
}

#[test]
fn dhcp_config_corpus() {
    check_corpus(&corpus("dhcp_config"), |input| {
        check_dhcp_config(input, "K8S_POD_NAME=web-1")
    });
}

#[test]
fn dhcp_wire_corpus() {
    check_corpus(&corpus("dhcp_wire"), check_wire);
}

/// An address or CIDR that is often just valid, or just not.
fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<[u8; 4]>(), 0..=33u8)
            .prop_map(|(a, p)| format!("{}.{}.{}.{}/{p}", a[0], a[1], a[2], a[3])),
        (any::<u128>(), 0..=129u8)
            .prop_map(|(a, p)| format!("{}/{p}", std::net::Ipv6Addr::from(a))),
        any::<[u8; 4]>().prop_map(|a| std::net::Ipv4Addr::from(a).to_string()),
        any::<u128>().prop_map(|a| std::net::Ipv6Addr::from(a).to_string()),
        any::<u32>().prop_map(|a| format!("::ffff:{}", std::net::Ipv4Addr::from(a))),
        Just(String::new()),
    ]
}

/// Ranges of every size and edge (a /0, a /32, start after end, a gateway of the other family).
fn ranges_config() -> impl Strategy<Value = Vec<u8>> {
    let range = (
        prop_oneof![
            (any::<[u8; 4]>(), 0..=32u8).prop_map(|(a, p)| {
                let net = ipnet::Ipv4Net::new(a.into(), p)
                    .expect("the prefix length is in range")
                    .trunc();
                net.to_string()
            }),
            (any::<u128>(), 0..=128u8).prop_map(|(a, p)| {
                let net = ipnet::Ipv6Net::new(a.into(), p)
                    .expect("the prefix length is in range")
                    .trunc();
                net.to_string()
            }),
            address(),
        ],
        proptest::option::of(address()),
        proptest::option::of(address()),
        proptest::option::of(address()),
    )
        .prop_map(|(subnet, start, end, gateway)| {
            let mut r = json!({ "subnet": subnet });
            for (key, value) in [
                ("rangeStart", start),
                ("rangeEnd", end),
                ("gateway", gateway),
            ] {
                if let Some(v) = value {
                    r[key] = json!(v.split('/').next().unwrap_or_default());
                }
            }
            r
        });
    (
        proptest::collection::vec(proptest::collection::vec(range, 1..3), 1..3),
        prop_oneof![Just("0.2.0"), Just("0.4.0"), Just("1.1.0")],
    )
        .prop_map(|(ranges, version)| {
            serde_json::to_vec(&json!({
                "cniVersion": version, "name": "net",
                "ipam": {"type": "host-local", "ranges": ranges}
            }))
            .expect("a config encodes")
        })
}

proptest! {
    #![proptest_config(fuzz::config(128))]

    #[test]
    fn host_local_config_arbitrary(input in junk(256)) {
        check_host_local_config(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn host_local_config_mutated(input in json_mutated(seeds(&corpus("host_local_config")))) {
        check_host_local_config(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn host_local_ranges(input in ranges_config()) {
        check_host_local_config(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn host_local_cni_args(raw in ".{0,64}", ip in address()) {
        let stdin = br#"{"cniVersion":"1.0.0","name":"net","ipam":{"subnet":"10.1.2.0/24"}}"#;
        let dir = fuzz::scratch_dir();
        let stdin = confined(stdin, dir.path(), None).unwrap();
        for cni_args in [raw.clone(), format!("IP={ip}"), format!("IgnoreUnknown=1;{raw}")] {
            if let Err(e) = HostLocal.add(&args(Command::Add, "c1", &stdin, &cni_args)) {
                bounded(&e).map_err(TestCaseError::fail)?;
            }
            let _ = HostLocal.del(&args(Command::Del, "c1", &stdin, ""));
        }
    }

    #[test]
    fn host_local_store_mutated(input in json_mutated(seeds(&corpus("host_local_store")))) {
        check_store(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn host_local_store_arbitrary(input in junk(64)) {
        check_store(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn resolv_conf_arbitrary(input in junk(512)) {
        check_resolv(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn resolv_conf_mutated(input in mutated(seeds(&corpus("resolv_conf")))) {
        check_resolv(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn static_config_mutated(
        input in json_mutated(seeds(&corpus("static_config"))),
        ip in address(),
    ) {
        check_static(&input, "").map_err(TestCaseError::fail)?;
        check_static(&input, &format!("IP={ip};GATEWAY={ip}")).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn static_config_arbitrary(input in junk(256), raw in ".{0,32}") {
        check_static(&input, &raw).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn dhcp_config_mutated(input in json_mutated(seeds(&corpus("dhcp_config"))), raw in ".{0,300}") {
        check_dhcp_config(&input, &format!("K8S_POD_NAME={raw}")).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn dhcp_config_arbitrary(input in junk(256)) {
        check_dhcp_config(&input, "").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn dhcp_wire_mutated(input in json_mutated(seeds(&corpus("dhcp_wire")))) {
        check_wire(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn dhcp_wire_arbitrary(input in junk(256)) {
        check_wire(&input).map_err(TestCaseError::fail)?;
    }
}
