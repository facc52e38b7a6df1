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

    /// For each plugin, a config with every key containernetworking/plugins v1.9.1 reads (its
    /// config structs at the file:line given, under `plugins/`), as far as this plugin does
    /// too. The common keys are those of `types.NetConf` (containernetworking/cni v1.3.0,
    /// pkg/types/types.go:64-77), and the `runtimeConfig` and `args` the plugin reads.
    /// `runtimeConfig`, `args`, `prevResult`, `capabilities`, the top `dns` and `sysctl` hold
    /// keys no plugin's [`cni::keys::Keys`] describe; their keys are written for completeness
    /// and [`each_reference_key_is_checked`] leaves them alone.
    fn reference_configs() -> Vec<(&'static str, Value)> {
        let common = json!({"cniVersion": "1.0.0", "name": "n",
            "capabilities": {"portMappings": true}, "prevResult": {},
            "dns": {"nameservers": [], "domain": "d", "search": [], "options": []},
            "cni.dev/valid-attachments": [{"containerID": "c", "ifname": "eth0"}]});
        // ipam/host-local/backend/allocator/config.go:29-73: the legacy range in `ipam` itself
        // (the embedded *Range), `ranges`, and types.Route (cni pkg/types/types.go:277-285).
        let host_local = json!({"type": "host-local", "subnet": "10.0.0.0/24",
            "rangeStart": "10.0.0.2", "rangeEnd": "10.0.0.9", "gateway": "10.0.0.1",
            "dataDir": "/x", "resolvConf": "/r",
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "mtu": 1400, "advmss": 1360,
                "priority": 1, "table": 100, "scope": 0}],
            "ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.2",
                "rangeEnd": "10.1.0.9", "gateway": "10.1.0.1"}]]});
        let host_local_runtime = json!({"ipRanges": [[{"subnet": "10.2.0.0/24"}]],
            "ips": ["10.0.0.5"]});
        // ipam/static/main.go:32-66.
        let static_ipam = json!({"type": "static",
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "mtu": 1400, "advmss": 1360,
                "priority": 1, "table": 100, "scope": 0}],
            "addresses": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}],
            "dns": {"nameservers": ["10.0.0.1"], "domain": "d", "search": [], "options": []}});
        // ipam/dhcp/main.go:38-73 (`type` from the embedded types.IPAM).
        let dhcp = json!({"type": "dhcp", "daemonSocketPath": "/s", "priority": 1,
            "request": [{"skipDefault": true, "option": "3"}],
            "provide": [{"option": "12", "value": "h", "fromArg": "K8S_POD_NAME"}]});
        let own = [
            // main/bridge/bridge.go:48-86.
            (
                "bridge",
                json!({"bridge": "b", "isGateway": true, "isDefaultGateway": true,
                "forceAddress": true, "ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1400,
                "hairpinMode": false, "promiscMode": true, "vlan": 0,
                "vlanTrunk": [{"minID": 1, "maxID": 2, "id": 3}], "preserveDefaultVlan": true,
                "macspoofchk": true, "enabledad": true, "disableContainerInterface": false,
                "portIsolation": true, "args": {"cni": {"mac": "x"}},
                "runtimeConfig": {"mac": "x"}, "ipam": host_local.clone()}),
            ),
            // main/ptp/ptp.go:45-50.
            (
                "ptp",
                json!({"ipMasq": true, "ipMasqBackend": "iptables", "mtu": 1400,
                "ipam": host_local.clone()}),
            ),
            // main/macvlan/macvlan.go:38-50.
            (
                "macvlan",
                json!({"master": "eth0", "mode": "bridge", "mtu": 1400, "mac": "x",
                "linkInContainer": false, "bcqueuelen": 1, "runtimeConfig": {"mac": "x"},
                "ipam": static_ipam.clone()}),
            ),
            // main/ipvlan/ipvlan.go:37-43.
            (
                "ipvlan",
                json!({"master": "eth0", "mode": "l2", "mtu": 1400, "linkInContainer": false,
                "ipam": dhcp.clone()}),
            ),
            // main/vlan/vlan.go:36-42.
            (
                "vlan",
                json!({"master": "eth0", "vlanId": 5, "mtu": 1400, "linkInContainer": false}),
            ),
            // main/host-device/host-device.go:50-60, with the untagged `DPDKMode` (line 54)
            // as its field is named.
            (
                "host-device",
                json!({"device": "d", "hwaddr": "x", "kernelpath": "/k",
                "pciBusID": "0000:01:00.1", "DPDKMode": true,
                "runtimeConfig": {"deviceID": "0000:01:00.1"}}),
            ),
            // main/dummy/dummy.go:36-38: types.NetConf only.
            ("dummy", json!({"ipam": host_local.clone()})),
            // main/tap/tap.go:43-56.
            (
                "tap",
                json!({"multiQueue": true, "mtu": 1400, "mac": "x", "owner": 0, "group": 0,
                "selinuxContext": "a:b:c", "bridge": "br", "args": {},
                "runtimeConfig": {"mac": "x"}}),
            ),
            // main/loopback/loopback.go:35-37: types.NetConf only.
            ("loopback", json!({})),
            // meta/vrf/main.go:32-39.
            ("vrf", json!({"vrfname": "v", "table": 100})),
            // meta/portmap/main.go:57-83.
            (
                "portmap",
                json!({"backend": "iptables", "snat": true, "conditionsV4": [],
                "conditionsV6": [], "masqAll": true, "markMasqBit": 13,
                "externalSetMarkChain": "X",
                "runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 8080,
                    "protocol": "tcp", "hostIP": "0.0.0.0"}]}}),
            ),
            // meta/firewall/firewall.go:32-52.
            (
                "firewall",
                json!({"backend": "iptables", "iptablesAdminChainName": "A",
                "firewalldZone": "trusted", "ingressPolicy": "open"}),
            ),
            // meta/bandwidth/main.go:42-61: the embedded *BandwidthEntry, and the same in
            // runtimeConfig.bandwidth.
            (
                "bandwidth",
                json!({"ingressRate": 1, "ingressBurst": 1, "egressRate": 1, "egressBurst": 1,
                "runtimeConfig": {"bandwidth": {"ingressRate": 1, "ingressBurst": 1,
                    "egressRate": 1, "egressBurst": 1}}}),
            ),
            // meta/tuning/tuning.go:50-74.
            (
                "tuning",
                json!({"dataDir": "/d", "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"},
                "mac": "x", "promisc": true, "mtu": 1400, "txQLen": 1, "allmulti": true,
                "runtimeConfig": {"mac": "x"},
                "args": {"cni": {"sysctl": {}, "mac": "x", "promisc": true, "mtu": 1400,
                    "allmulti": true, "txQLen": 1}}}),
            ),
            // meta/sbr/main.go:38-52.
            ("sbr", json!({"table": 100})),
        ];
        let mut configs: Vec<(&'static str, Value)> = own
            .into_iter()
            .map(|(plugin, own)| {
                let mut config = common.clone();
                if let (Some(c), Some(own)) = (config.as_object_mut(), own.as_object()) {
                    c.extend(own.clone());
                    c.insert("type".into(), plugin.into());
                }
                (plugin, config)
            })
            .collect();
        // An IPAM plugin alone: its `ipam` object, and what it reads of the caller's config.
        configs.extend([
            (
                "host-local",
                json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge",
                "ipam": host_local, "runtimeConfig": host_local_runtime,
                "args": {"cni": {"ips": ["10.0.0.5"]}}}),
            ),
            (
                "static",
                json!({"cniVersion": "1.0.0", "name": "n", "type": "macvlan",
                "ipam": static_ipam, "runtimeConfig": {"ips": ["10.0.0.5/24"]},
                "args": {"cni": {"ips": ["10.0.0.5/24"]}}}),
            ),
            (
                "dhcp",
                json!({"cniVersion": "1.0.0", "name": "n", "type": "ipvlan", "ipam": dhcp}),
            ),
        ]);
        configs
    }

    /// Nothing v1.9.1 reads, and this plugin too, is unknown.
    #[test]
    fn reference_keys_are_known() {
        let configs = reference_configs();
        let plugins: Vec<&str> = configs.iter().map(|(p, _)| *p).collect();
        for plugin in [
            "bridge",
            "ptp",
            "macvlan",
            "ipvlan",
            "vlan",
            "host-device",
            "dummy",
            "tap",
            "loopback",
            "vrf",
            "portmap",
            "firewall",
            "bandwidth",
            "tuning",
            "sbr",
            "host-local",
            "static",
            "dhcp",
        ] {
            assert!(
                plugins.contains(&plugin),
                "{plugin} has no reference config"
            );
        }
        for (plugin, config) in configs {
            assert_eq!(warnings(plugin, config), Vec::<String>::new(), "{plugin}");
        }
    }

    /// The top keys whose values no plugin's keys describe.
    const OPAQUE: [&str; 7] = [
        "runtimeConfig",
        "args",
        "prevResult",
        "capabilities",
        "dns",
        "sysctl",
        "cni.dev/valid-attachments",
    ];

    #[derive(Clone, Debug)]
    enum Step {
        Key(String),
        Index(usize),
    }

    /// Every key of `value` below `at`, but not inside the values of [`OPAQUE`] top keys.
    fn key_paths(value: &Value, at: &[Step], out: &mut Vec<Vec<Step>>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let here = [at, &[Step::Key(key.clone())]].concat();
                    out.push(here.clone());
                    if !(at.is_empty() && OPAQUE.contains(&key.as_str())) {
                        key_paths(inner, &here, out);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    key_paths(item, &[at, &[Step::Index(i)]].concat(), out);
                }
            }
            _ => {}
        }
    }

    /// `config` with the key at `path` renamed to `<key>_`.
    fn renamed(config: &Value, path: &[Step]) -> Option<(Value, String)> {
        let mut config = config.clone();
        let (Step::Key(last), parents) = path.split_last()? else {
            return None;
        };
        let mut here = &mut config;
        for step in parents {
            here = match step {
                Step::Key(k) => here.get_mut(k.as_str())?,
                Step::Index(i) => here.get_mut(*i)?,
            };
        }
        let map = here.as_object_mut()?;
        let value = map.remove(last)?;
        let new = format!("{last}_");
        map.insert(new.clone(), value);
        Some((config, new))
    }

    /// The keys of [`reference_configs`] are known, not merely let through: each one, renamed,
    /// is the one warning. (`ipam.type` chooses the IPAM keys, so it is not renamed; for an
    /// IPAM plugin, only its `ipam` object is checked.)
    #[test]
    fn each_reference_key_is_checked() {
        for (plugin, config) in reference_configs() {
            let entry = crate::find(plugin).expect("a plugin");
            let mut paths = Vec::new();
            key_paths(&config, &[], &mut paths);
            let mut checked = 0;
            for path in paths {
                let in_ipam = matches!(path.first(), Some(Step::Key(k)) if k == "ipam");
                let ipam_type =
                    in_ipam && path.len() == 2 && matches!(&path[1], Step::Key(k) if k == "type");
                let ipam_alone = entry.kind == Kind::Ipam && (!in_ipam || path.len() == 1);
                if ipam_type || ipam_alone {
                    continue;
                }
                let (changed, new) = renamed(&config, &path).expect("a key at the path");
                let found = unknown_keys(entry, &changed);
                assert_eq!(found.len(), 1, "{plugin}: {path:?} renamed: {found:?}");
                assert!(
                    found[0].path.contains(&new),
                    "{plugin}: {path:?} renamed: {found:?}"
                );
                checked += 1;
            }
            assert!(checked > 0, "{plugin}: no key checked");
        }
    }

    /// The reference's untagged fields that ours does not take (docs/compatibility.md, "host-local
    /// and static") are named, not silently dropped.
    #[test]
    fn the_references_untagged_fields_we_do_not_take_are_named() {
        let config = json!({"type": "static", "ipam": {"type": "static", "Name": "n",
            "addresses": [{"Address": {"IP": "10.0.0.2", "Mask": "////AA=="}, "Version": "4",
                "address": "10.0.0.2/24"}]}});
        let got = warnings("static", config);
        for key in [
            "ipam.Name",
            "ipam.addresses[0].Address",
            "ipam.addresses[0].Version",
        ] {
            assert!(
                got.iter().any(|w| w.contains(&format!("\"{key}\""))),
                "{key}: {got:?}"
            );
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
