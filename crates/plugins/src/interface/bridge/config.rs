//! The bridge plugin's configuration: parsed, checked and resolved once (MAC precedence, VLAN
//! trunk ranges, implied options), so the rest of the plugin reads plain values.

use cni::keys::Keys;
use cni::quote::quote;
use cni::{CniError, NetConf};
use serde::Deserialize;

/// The bridge used when the config names none.
pub const DEFAULT_BRIDGE: &str = "cni0";
/// Highest usable 802.1Q VLAN ID (4095 is reserved).
const MAX_VLAN: u16 = 4094;

pub use crate::support::ip_masq::Backend as MasqBackend;

/// The bridge's own keys as written, before checks (the common ones are a [`NetConf`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    bridge: Option<String>,
    #[serde(default)]
    is_gateway: bool,
    #[serde(default)]
    is_default_gateway: bool,
    #[serde(default)]
    force_address: bool,
    #[serde(default)]
    ip_masq: bool,
    #[serde(default)]
    ip_masq_backend: Option<String>,
    /// 0 leaves the kernel's default.
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    hairpin_mode: bool,
    #[serde(default)]
    promisc_mode: bool,
    #[serde(default)]
    vlan: i64,
    #[serde(default)]
    vlan_trunk: Option<Vec<TrunkEntry>>,
    #[serde(default)]
    preserve_default_vlan: bool,
    #[serde(default, rename = "macspoofchk")]
    mac_spoof_check: bool,
    #[serde(default, rename = "enabledad")]
    enable_dad: bool,
    #[serde(default)]
    disable_container_interface: bool,
    #[serde(default)]
    port_isolation: bool,
    #[serde(default)]
    conflict_probe: Option<serde_json::Value>,
}

/// One `vlanTrunk` item: either `{"id": n}` or `{"minID": a, "maxID": b}` (or both).
#[derive(Deserialize)]
struct TrunkEntry {
    #[serde(default, rename = "minID")]
    min_id: Option<i64>,
    #[serde(default, rename = "maxID")]
    max_id: Option<i64>,
    #[serde(default)]
    id: Option<i64>,
}

/// The keys of its own bridge reads.
pub fn keys() -> Keys {
    Keys::of::<Raw>().with("vlanTrunk", Keys::of::<TrunkEntry>())
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct BridgeConf {
    pub net: NetConf,
    pub bridge: String,
    /// Set by `isGateway`, and implied by `isDefaultGateway`.
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    pub ip_masq: bool,
    /// `ipMasqBackend`; `None` leaves the choice to [`netkit::firewall::masq::setup`].
    pub ip_masq_backend: Option<MasqBackend>,
    pub mtu: Option<u32>,
    pub hairpin: bool,
    pub promisc: bool,
    /// Access VLAN of the port (0: none).
    pub vlan: u16,
    /// Trunk VLANs of the port, sorted and without duplicates.
    pub trunk: Vec<u16>,
    /// `vlanTrunk` was present, even if empty: the bridge then filters VLANs.
    pub trunk_configured: bool,
    pub preserve_default_vlan: bool,
    pub mac_spoof_check: bool,
    pub enable_dad: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    /// `conflictProbe`'s wait for answers; `None` when off.
    pub conflict_probe: Option<std::time::Duration>,
    /// The container interface's MAC, from CNI_ARGS, `args.cni.mac` or `runtimeConfig.mac`.
    pub mac: Option<[u8; 6]>,
}

impl BridgeConf {
    /// Parses stdin and the raw `CNI_ARGS`; every problem is a code-7 error saying what to fix.
    pub fn parse(stdin: &[u8], cni_args: &str) -> Result<BridgeConf, CniError> {
        // A value of the wrong type is a decoding error (6); a value out of range is code 7.
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        let bridge = raw.bridge.unwrap_or_else(|| DEFAULT_BRIDGE.to_owned());
        if bridge.is_empty() {
            return Err(CniError::invalid_config(
                "bridge: \"\" is empty: name the bridge, or leave the key out to use cni0",
            ));
        }
        cni::env::validate_ifname(&bridge).map_err(|e| {
            CniError::invalid_config(format!(
                "bridge: {} is not an interface name: {}",
                quote(&bridge),
                e.msg
            ))
        })?;
        let vlan = u16::try_from(raw.vlan)
            .ok()
            .filter(|&v| v <= MAX_VLAN)
            .ok_or_else(|| {
                CniError::invalid_config(format!(
                    "vlan: {} is out of range: use 0 (no VLAN) to {MAX_VLAN}",
                    raw.vlan
                ))
            })?;
        let mtu = (raw.mtu != 0).then_some(raw.mtu);
        let ip_masq_backend =
            crate::support::ip_masq::parse_backend(raw.ip_masq_backend.as_deref())?;
        if raw.hairpin_mode && raw.promisc_mode {
            return Err(CniError::invalid_config(
                "hairpinMode and promiscMode cannot both be set: choose one",
            ));
        }
        if raw.disable_container_interface && net.ipam_type().is_some() {
            return Err(CniError::invalid_config(
                "disableContainerInterface cannot be used with ipam: an interface that stays \
                 down cannot carry addresses; remove one of them",
            ));
        }
        let trunk = match &raw.vlan_trunk {
            Some(entries) => collect_trunk(entries)?,
            None => Vec::new(),
        };
        let mac = crate::support::mac::resolve(None, &net, cni_args, true)?;
        let conflict_probe = crate::support::conflict::parse(raw.conflict_probe.as_ref())?;
        if conflict_probe.is_some() && raw.disable_container_interface {
            return Err(CniError::invalid_config(
                "conflictProbe sends from the pod's interface, which disableContainerInterface \
                 keeps down: drop one of the two",
            ));
        }
        Ok(BridgeConf {
            bridge,
            is_gateway: raw.is_gateway || raw.is_default_gateway,
            is_default_gateway: raw.is_default_gateway,
            force_address: raw.force_address,
            ip_masq: raw.ip_masq,
            ip_masq_backend,
            mtu,
            hairpin: raw.hairpin_mode,
            promisc: raw.promisc_mode,
            vlan,
            trunk,
            trunk_configured: raw.vlan_trunk.is_some(),
            preserve_default_vlan: raw.preserve_default_vlan,
            mac_spoof_check: raw.mac_spoof_check,
            enable_dad: raw.enable_dad,
            disable_container_interface: raw.disable_container_interface,
            port_isolation: raw.port_isolation,
            conflict_probe,
            mac,
            net,
        })
    }

    /// The IPAM plugin type, when the network assigns addresses (layer 3).
    pub fn ipam_type(&self) -> Option<&str> {
        self.net.ipam_type()
    }

    /// The bridge must filter VLANs when the port has an access VLAN or a trunk.
    pub fn vlan_filtering(&self) -> bool {
        self.vlan != 0 || self.trunk_configured
    }
}

/// Expands `vlanTrunk` into a sorted list of VLAN IDs.
fn collect_trunk(entries: &[TrunkEntry]) -> Result<Vec<u16>, CniError> {
    let mut vids = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let check = |key: &str, id: i64| -> Result<u16, CniError> {
            u16::try_from(id)
                .ok()
                .filter(|v| (1..=MAX_VLAN).contains(v))
                .ok_or_else(|| {
                    CniError::invalid_config(format!(
                        "vlanTrunk[{i}].{key}: {id} is out of range: trunk VLAN IDs are 1 to \
                         {MAX_VLAN}"
                    ))
                })
        };
        let range_needs_both = |given: &str, missing: &str| {
            CniError::invalid_config(format!(
                "vlanTrunk[{i}].{missing}: required with {given}: a range needs both"
            ))
        };
        match (entry.min_id, entry.max_id) {
            (Some(min), Some(max)) => {
                let min = check("minID", min)?;
                let max = check("maxID", max)?;
                if max < min {
                    return Err(CniError::invalid_config(format!(
                        "vlanTrunk[{i}].minID: {min} is greater than maxID {max}: swap them"
                    )));
                }
                vids.extend(min..=max);
            }
            (None, Some(_)) => return Err(range_needs_both("maxID", "minID")),
            (Some(_), None) => return Err(range_needs_both("minID", "maxID")),
            (None, None) => {}
        }
        if let Some(id) = entry.id {
            vids.push(check("id", id)?);
        }
    }
    vids.sort_unstable();
    vids.dedup();
    Ok(vids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<BridgeConf, CniError> {
        BridgeConf::parse(json.as_bytes(), "")
    }

    fn base(extra: &str) -> String {
        format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"bridge"{extra}}}"#)
    }

    #[test]
    fn defaults() {
        let c = parse(&base("")).unwrap();
        assert_eq!(c.bridge, "cni0");
        assert!(!c.is_gateway && !c.vlan_filtering() && c.mtu.is_none() && c.mac.is_none());
        assert!(c.ipam_type().is_none());
    }

    #[test]
    fn default_gateway_implies_gateway() {
        let c = parse(&base(r#","isDefaultGateway":true"#)).unwrap();
        assert!(c.is_gateway && c.is_default_gateway);
    }

    #[test]
    fn vlan_range() {
        assert_eq!(parse(&base(r#","vlan":4094"#)).unwrap().vlan, 4094);
        for bad in ["5000", "-1", "4095"] {
            let e = parse(&base(&format!(r#","vlan":{bad}"#))).unwrap_err();
            assert_eq!(e.code, 7, "{bad}: {e}");
            assert!(e.msg.contains("0 (no VLAN) to 4094"), "{e}");
        }
    }

    #[test]
    fn trunk_expands_sorts_and_dedups() {
        let c = parse(&base(
            r#","vlanTrunk":[{"id":42},{"minID":10,"maxID":12},{"id":11}]"#,
        ))
        .unwrap();
        assert_eq!(c.trunk, vec![10, 11, 12, 42]);
        assert!(c.vlan_filtering());
        let empty = parse(&base(r#","vlanTrunk":[]"#)).unwrap();
        assert!(empty.trunk.is_empty() && empty.vlan_filtering());
    }

    #[test]
    fn trunk_errors() {
        let cases = [
            (
                r#"[{"minID":0,"maxID":5}]"#,
                "vlanTrunk[0].minID: 0 is out of range",
            ),
            (
                r#"[{"id":7},{"minID":1,"maxID":5000}]"#,
                "vlanTrunk[1].maxID: 5000 is out of range",
            ),
            (r#"[{"minID":9,"maxID":5}]"#, "greater than maxID"),
            (
                r#"[{"maxID":5}]"#,
                "vlanTrunk[0].minID: required with maxID",
            ),
            (
                r#"[{"minID":5}]"#,
                "vlanTrunk[0].maxID: required with minID",
            ),
            (r#"[{"id":0}]"#, "vlanTrunk[0].id: 0 is out of range"),
            (r#"[{"id":4095}]"#, "vlanTrunk[0].id: 4095 is out of range"),
        ];
        for (trunk, want) in cases {
            let e = parse(&base(&format!(r#","vlanTrunk":{trunk}"#))).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(want), "{trunk}: {e}");
        }
    }

    #[test]
    fn exclusive_options() {
        let e = parse(&base(r#","hairpinMode":true,"promiscMode":true"#)).unwrap_err();
        assert!(e.msg.contains("hairpinMode and promiscMode"), "{e}");
        let e = parse(&base(
            r#","disableContainerInterface":true,"ipam":{"type":"host-local"}"#,
        ))
        .unwrap_err();
        assert!(e.msg.contains("disableContainerInterface"), "{e}");
        // An ipam object without a type is layer 2.
        assert!(parse(&base(r#","disableContainerInterface":true,"ipam":{}"#)).is_ok());
    }

    #[test]
    fn mac_precedence() {
        let all = base(
            r#","args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}"#,
        );
        let env = "IgnoreUnknown=1;MAC=02:00:00:00:00:01;K8S_POD_NAME=x";
        let mac = |json: &str, env: &str| BridgeConf::parse(json.as_bytes(), env).unwrap().mac;
        assert_eq!(mac(&all, env), Some([2, 0, 0, 0, 0, 3]));
        let no_rc = base(r#","args":{"cni":{"mac":"02:00:00:00:00:02"}}"#);
        assert_eq!(mac(&no_rc, env), Some([2, 0, 0, 0, 0, 2]));
        assert_eq!(mac(&base(""), env), Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(
            mac(&base(""), "MAC=02-00-00-00-00-04"),
            Some([2, 0, 0, 0, 0, 4])
        );
    }

    #[test]
    fn mac_errors() {
        let e = BridgeConf::parse(base("").as_bytes(), "MAC=zz").unwrap_err();
        assert!(e.msg.contains("CNI_ARGS MAC"), "{e}");
        let e = BridgeConf::parse(base("").as_bytes(), "FOO=1").unwrap_err();
        assert_eq!(e.code, 7);
        let e = parse(&base(r#","runtimeConfig":{"mac":5}"#)).unwrap_err();
        assert!(e.msg.contains("runtimeConfig.mac"), "{e}");
    }

    #[test]
    fn other_errors() {
        assert_eq!(parse(&base(r#","bridge":"""#)).unwrap_err().code, 7);
        assert_eq!(
            parse(&base(r#","bridge":"much-too-long-name0""#))
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(parse(&base(r#","mtu":-5"#)).unwrap_err().code, 6);
        assert_eq!(parse(&base(r#","vlan":"10""#)).unwrap_err().code, 6);
        let e = parse(&base(r#","ipMasqBackend":"pf""#)).unwrap_err();
        assert!(e.msg.contains("nftables"), "{e}");
    }
}
