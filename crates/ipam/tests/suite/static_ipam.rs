//! static through the CNI entry point.

use crate::common;

use common::Env;
use ipam::static_ipam::StaticIpam;
use serde_json::{json, Value};

fn conf(version: &str) -> Value {
    json!({
        "cniVersion": version, "name": "net1", "type": "macvlan",
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}, {"address": "fd00::5/64"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.10.0.53"]},
        },
    })
}

#[test]
fn add_returns_the_configured_addresses() {
    let out = Env::new("ADD", "c").ours(&StaticIpam, &conf("1.1.0").to_string());
    assert_eq!(
        out.ok(),
        &json!({
            "cniVersion": "1.1.0",
            "ips": [
                {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
                {"address": "fd00::5/64"},
            ],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.10.0.53"]},
        })
    );
}

#[test]
fn check_compares_with_prev_result() {
    let mut c = conf("1.1.0");
    let added = Env::new("ADD", "c").ours(&StaticIpam, &c.to_string());
    c["prevResult"] = added.ok().clone();
    assert_eq!(
        Env::new("CHECK", "c")
            .ours(&StaticIpam, &c.to_string())
            .status,
        0
    );

    // An address missing from the previous result is an error (the reference lets it pass).
    c["prevResult"]["ips"].as_array_mut().unwrap().pop();
    let out = Env::new("CHECK", "c").ours(&StaticIpam, &c.to_string());
    assert_eq!(out.code(), 999);
    assert!(
        out.msg().contains("fd00::5 is not in the previous result"),
        "{}",
        out.msg()
    );

    c["prevResult"]["ips"][0]["gateway"] = json!("10.10.0.254");
    let out = Env::new("CHECK", "c").ours(&StaticIpam, &c.to_string());
    assert!(out.msg().contains("gateway 10.10.0.254"), "{}", out.msg());

    let no_prev = Env::new("CHECK", "c").ours(&StaticIpam, &conf("1.1.0").to_string());
    assert_eq!(no_prev.code(), 7);
}

#[test]
fn del_status_gc_succeed() {
    let c = conf("1.1.0").to_string();
    for cmd in ["DEL", "STATUS", "GC"] {
        let out = Env::new(cmd, "c").ours(&StaticIpam, &c);
        assert_eq!(out.status, 0, "{cmd}: {}", out.json);
    }
}

#[test]
fn errors_have_codes() {
    let c = conf("1.0.0").to_string();
    assert_eq!(
        Env::new("ADD", "c")
            .args("IP=10.1.1.1")
            .ours(&StaticIpam, &c)
            .code(),
        7
    );
    assert_eq!(
        Env::new("ADD", "c")
            .args("X=1")
            .ours(&StaticIpam, &c)
            .code(),
        7
    );
    let mut bad = conf("1.0.0");
    bad["ipam"]["addresses"][0]["gateway"] = json!("nope");
    assert_eq!(
        Env::new("ADD", "c")
            .ours(&StaticIpam, &bad.to_string())
            .code(),
        6
    );
}
