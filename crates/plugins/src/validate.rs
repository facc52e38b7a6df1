//! `cni-plugins validate <name>`: a config on stdin checked as the plugin's ADD checks it, and a
//! warning on stderr for each key of it that the plugin does not read (a misspelt option is
//! ignored, not refused, so the pod would come up without it). Warnings do not change the exit
//! status: 0 when ADD would take the config, 1 with the CNI error object on stdout when not.

use std::io::{Read, Write};

use cni::keys::{self, UnknownKey};
use serde_json::Value;

use crate::{Entry, Kind};

/// Runs the check on `stdin`; returns the exit status.
pub fn main(
    entry: &Entry,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let config = cni::input::read_capped(stdin, "stdin");
    if let Some(value) = config
        .as_ref()
        .ok()
        .and_then(|c| serde_json::from_slice::<Value>(c).ok())
    {
        for key in unknown_keys(entry, &value) {
            let _ = writeln!(stderr, "{}", key.warning(entry.name));
        }
    }
    cni::skel::validate_main(entry.plugin, config, stdout)
}

/// The keys of `config` that `entry` does not read, nor the IPAM plugin its `ipam` names when
/// that one is built in. An IPAM plugin's config belongs to the plugin that runs it, but for
/// its `ipam` object.
pub fn unknown_keys(entry: &Entry, config: &Value) -> Vec<UnknownKey> {
    match entry.kind {
        Kind::Ipam => keys::unknown_in_ipam(config, (entry.keys)()),
        Kind::Interface => {
            let ipam = config
                .get("ipam")
                .and_then(|i| i.get("type"))
                .and_then(Value::as_str)
                .and_then(crate::find)
                .filter(|e| e.kind == Kind::Ipam);
            let own = (entry.keys)();
            let keys = match ipam {
                Some(ipam) => own.with_ipam((ipam.keys)()),
                None => own,
            };
            keys::unknown(config, &keys)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn warnings(plugin: &str, config: Value) -> Vec<String> {
        let entry = crate::find(plugin).expect("a plugin");
        unknown_keys(entry, &config)
            .iter()
            .map(|k| k.warning(plugin))
            .collect()
    }

    /// A config with every key the plugin documents, plus the ones every config may carry,
    /// has nothing unknown.
    #[test]
    fn documented_keys_are_known() {
        let common = json!({"cniVersion": "1.0.0", "name": "n", "args": {"cni": {"x": 1}},
            "runtimeConfig": {"portMappings": []}, "capabilities": {"portMappings": true},
            "prevResult": {}, "dns": {}, "deviceID": "0000:01:00.1", "pciBusID": "0000:01:00.1",
            "cni.dev/valid-attachments": [], "cni.dev/attachments": []});
        let cases = [
            (
                "bridge",
                json!({"bridge": "b", "isGateway": true, "isDefaultGateway": true,
                "forceAddress": true, "ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1400,
                "hairpinMode": true, "promiscMode": true, "vlan": 0, "preserveDefaultVlan": true,
                "vlanTrunk": [{"minID": 1, "maxID": 2, "id": 3}], "macspoofchk": true,
                "enabledad": true, "disableContainerInterface": true, "portIsolation": true,
                "ipam": {"type": "host-local", "subnet": "10.0.0.0/24", "rangeStart": "10.0.0.2",
                    "rangeEnd": "10.0.0.9", "gateway": "10.0.0.1", "dataDir": "/x",
                    "resolvConf": "/r", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
                    "ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.2",
                        "rangeEnd": "10.1.0.9", "gateway": "10.1.0.1"}]]}}),
            ),
            (
                "macvlan",
                json!({"master": "eth0", "mode": "bridge", "mtu": 1400, "mac": "x",
                "bcqueuelen": 1, "linkInContainer": false, "enabledad": true,
                "ipam": {"type": "static", "addresses": [{"address": "10.0.0.2/24",
                    "gateway": "10.0.0.1"}], "routes": [], "dns": {"nameservers": []}}}),
            ),
            (
                "ipvlan",
                json!({"master": "eth0", "mode": "l2", "mtu": 1400,
                "linkInContainer": false, "enabledad": true,
                "ipam": {"type": "dhcp", "daemonSocketPath": "/s", "priority": 1,
                    "broadcast": true, "request": [{"skipDefault": true, "option": "3"}],
                    "provide": [{"option": "12", "value": "h", "fromArg": "K8S_POD_NAME"}]}}),
            ),
            (
                "vlan",
                json!({"master": "eth0", "vlanId": 5, "mtu": 1400,
                "linkInContainer": false}),
            ),
            (
                "portmap",
                json!({"snat": true, "masqAll": true, "markMasqBit": 13,
                "externalSetMarkChain": "X", "conditionsV4": [], "conditionsV6": [],
                "backend": "iptables"}),
            ),
            (
                "firewall",
                json!({"backend": "iptables", "iptablesAdminChainName": "A",
                "ingressPolicy": "open", "firewalldZone": "trusted"}),
            ),
            (
                "tuning",
                json!({"sysctl": {}, "mac": "x", "promisc": true, "mtu": 1,
                "txQLen": 1, "allmulti": true, "dataDir": "/d"}),
            ),
            (
                "bandwidth",
                json!({"ingressRate": 1, "ingressBurst": 1, "egressRate": 1,
                "egressBurst": 1}),
            ),
            (
                "host-device",
                json!({"device": "d", "hwaddr": "x", "kernelpath": "/k"}),
            ),
            (
                "ptp",
                json!({"ipMasq": true, "ipMasqBackend": "iptables", "mtu": 1400}),
            ),
            (
                "tap",
                json!({"multiQueue": true, "mtu": 1, "mac": "x", "owner": 0, "group": 0,
                "selinuxContext": "a:b:c", "bridge": "br"}),
            ),
            (
                "sbr",
                json!({"table": 100, "gateways": [], "addSourceHints": true}),
            ),
            ("vrf", json!({"vrfname": "v", "table": 100})),
            ("dummy", json!({"enabledad": true})),
            ("loopback", json!({})),
            ("passthru", json!({})),
        ];
        for (plugin, own) in cases {
            let mut config = common.clone();
            if let (Some(c), Some(own)) = (config.as_object_mut(), own.as_object()) {
                c.extend(own.clone());
                c.insert("type".into(), plugin.into());
            }
            assert_eq!(warnings(plugin, config), Vec::<String>::new(), "{plugin}");
        }
    }

    #[test]
    fn unknown_keys_are_named_with_a_suggestion() {
        assert_eq!(
            warnings("portmap", json!({"type": "portmap", "masqall": true})),
            [r#"portmap: unknown key "masqall" (did you mean "masqAll"?)"#]
        );
        // vlan has no modes.
        assert_eq!(
            warnings("vlan", json!({"type": "vlan", "mode": "x", "vlanID": 5})),
            [
                r#"vlan: unknown key "mode""#,
                r#"vlan: unknown key "vlanID" (did you mean "vlanId"?)"#
            ]
        );
        // A built-in IPAM's keys are checked inside the interface plugin's config; another's
        // are not.
        let ipam = |t: &str| json!({"type": "bridge", "ipam": {"type": t, "rangestart": "x"}});
        assert_eq!(
            warnings("bridge", ipam("host-local")),
            [r#"bridge: unknown key "ipam.rangestart" (did you mean "rangeStart"?)"#]
        );
        assert_eq!(
            warnings("bridge", ipam("whereabouts")),
            Vec::<String>::new()
        );
        // An IPAM plugin alone checks only its `ipam` object.
        assert_eq!(
            warnings(
                "static",
                json!({"type": "macvlan", "master": "eth0",
                "ipam": {"type": "static", "adresses": []}})
            ),
            [r#"static: unknown key "ipam.adresses" (did you mean "addresses"?)"#]
        );
    }
}
