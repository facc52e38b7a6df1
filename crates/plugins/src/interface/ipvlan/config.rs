//! The ipvlan plugin's configuration: parsed and checked once, so the rest of the plugin reads
//! plain values.

use cni::{CniError, CniResult};
use netkit::netlink::IpvlanMode;
use serde::de::IgnoredAny;

use crate::support::sublink::SubConf;

/// Modes by name, the default first.
pub const MODES: [(&str, IpvlanMode); 3] = [
    ("l2", IpvlanMode::L2),
    ("l3", IpvlanMode::L3),
    ("l3s", IpvlanMode::L3S),
];

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct IpvlanConf {
    pub common: SubConf,
    pub mode: IpvlanMode,
    /// The previous plugin's result, when chained.
    pub prev: Option<CniResult>,
}

impl IpvlanConf {
    /// Parses stdin; every problem is a code-7 error saying what to fix (code 6 for a value of
    /// the wrong JSON type or an undecodable `prevResult`).
    pub fn parse(stdin: &[u8]) -> Result<IpvlanConf, CniError> {
        // ipvlan has no keys of its own.
        let (common, mode, IgnoredAny) = SubConf::parse(stdin, "ipvlan", &MODES)?;
        if common.conflict_probe.is_some() && mode != IpvlanMode::L2 {
            return Err(CniError::invalid_config(
                "conflictProbe needs mode l2: in l3 and l3s the pod's link answers no ARP or \
                 neighbour discovery, so there is no layer 2 to probe",
            ));
        }
        let prev = common
            .net
            .prev_result
            .as_ref()
            .map(|v| CniResult::from_value_at(v, Some("prevResult")))
            .transpose()?;
        Ok(IpvlanConf { common, mode, prev })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::sublink::Flavor;

    fn parse(extra: &str) -> Result<IpvlanConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"ipvlan"{extra}}}"#);
        IpvlanConf::parse(json.as_bytes())
    }

    #[test]
    fn modes() {
        assert_eq!(parse("").unwrap().mode, IpvlanMode::L2);
        for (name, mode) in MODES {
            assert_eq!(parse(&format!(r#","mode":"{name}""#)).unwrap().mode, mode);
        }
        let e = parse(r#","mode":"bridge""#).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg
                .starts_with(r#"mode: "bridge" is not a mode of ipvlan"#),
            "{e}"
        );
    }

    #[test]
    fn the_conflict_probe_is_for_mode_l2_only() {
        let c = parse(r#","conflictProbe":true"#).unwrap();
        assert_eq!(
            c.common.conflict_probe,
            Some(crate::support::conflict::DEFAULT_WAIT)
        );
        for mode in ["l3", "l3s"] {
            let e = parse(&format!(r#","mode":"{mode}","conflictProbe":true"#)).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains("conflictProbe needs mode l2"), "{e}");
        }
    }

    #[test]
    fn chained_master_and_addresses_come_from_prev_result() {
        let prev = r#","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"up0"}],"ips":[{"address":"10.1.0.5/24"}]}"#;
        let c = parse(prev).unwrap();
        assert_eq!(c.implied_master().unwrap().as_deref(), Some("up0"));
        assert_eq!(c.without_ipam().unwrap().ips.len(), 1);

        let two =
            r#","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}]}"#;
        let c = parse(two).unwrap();
        let e = c.implied_master().unwrap_err();
        assert!(e.msg.contains("exactly one interface"), "{e}");
        let e = c.without_ipam().unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("needs addresses"), "{e}");

        let alone = parse("").unwrap();
        assert_eq!(alone.implied_master().unwrap(), None);
        assert!(alone.without_ipam().is_err());
    }

    #[test]
    fn bad_values() {
        assert_eq!(parse(r#","mtu":-1"#).unwrap_err().code, 7);
        assert_eq!(parse(r#","mtu":99999999999"#).unwrap_err().code, 7);
        assert_eq!(parse(r#","linkInContainer":"yes""#).unwrap_err().code, 6);
        assert_eq!(parse(r#","prevResult":{"ips":5}"#).unwrap_err().code, 6);
    }
}
