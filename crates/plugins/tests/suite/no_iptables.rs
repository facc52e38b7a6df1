//! bridge's and ptp's masquerade and bridge's spoof check on a node without iptables (PATH has
//! nft only): no backend named, they use nftables, the pod's traffic leaves masqueraded, and
//! DEL removes every rule. (portmap and firewall have theirs in their own files.)

use crate::common;

use common::{host_local, ping, NftOnly, Plugins, Sandbox, Side};
use testkit::CniOutput;

fn run(sb: &Sandbox, command: &str, conf: &str, path: &str) -> CniOutput {
    let mut call = sb.call(command, conf);
    call.env.push(("PATH".into(), Some(path.into())));
    sb.run(&call)
}

/// ADD and DEL of `conf` with nft only: the peer answers only while the masquerade is there,
/// the rules are nftables', and DEL leaves none; `own` names the rules the plugin adds besides.
fn masquerades_with_nftables(conf: &str, own: &[&str]) {
    let plugins = Plugins::new();
    let sb = Sandbox::new(&plugins, Side::Ours);
    // Without a route back: only a masqueraded ping gets its answer.
    let _peer = common::peer_on_up0(&sb, "nipeer", false);
    let bin = NftOnly::new();
    let out = run(&sb, "ADD", conf, &bin.path());
    assert_eq!(out.code, 0, "{out:?}");
    let rules = sb.node.firewall();
    assert!(
        !rules.contains("-A POSTROUTING"),
        "no iptables rule: {rules}"
    );
    assert!(
        rules.contains("table inet cni_plugins_masquerade") && rules.contains("masquerade"),
        "{rules}"
    );
    for rule in own {
        assert!(rules.contains(rule), "{rule}: {rules}");
    }
    ping(&sb.pod, "192.0.2.2").expect("the peer answers the masqueraded pod");

    assert_eq!(run(&sb, "DEL", conf, &bin.path()).code, 0);
    let rules = sb.node.firewall();
    assert!(!rules.contains("ip saddr 10.61."), "{rules}");
    for rule in own {
        assert!(!rules.contains(rule), "{rule} left: {rules}");
    }
}

#[test]
fn bridge_masquerades_and_checks_macs_with_nftables() {
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"ni","type":"bridge","bridge":"ni0","isGateway":true,"ipMasq":true,"macspoofchk":true,{}}}"#,
        host_local(
            r#"[[{"subnet":"10.61.0.0/24"}]]"#,
            r#","routes":[{"dst":"0.0.0.0/0"}]"#
        )
    );
    masquerades_with_nftables(&conf, &["macspoofchk-c0ffee-eth0"]);
}

#[test]
fn ptp_masquerades_with_nftables() {
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"ni","type":"ptp","ipMasq":true,{}}}"#,
        host_local(
            r#"[[{"subnet":"10.61.1.0/24"}]]"#,
            r#","routes":[{"dst":"0.0.0.0/0"}]"#
        )
    );
    masquerades_with_nftables(&conf, &[]);
}
