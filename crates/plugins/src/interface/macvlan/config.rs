//! The macvlan plugin's configuration: parsed, checked and resolved once (mode, MTU, MAC
//! precedence), so the rest of the plugin reads plain values.

use cni::keys::Keys;
use cni::CniError;
use netkit::netlink::MacvlanMode;
use serde::Deserialize;

use crate::support::sublink::SubConf;

/// Modes by name, the default first.
pub const MODES: [(&str, MacvlanMode); 4] = [
    ("bridge", MacvlanMode::Bridge),
    ("private", MacvlanMode::Private),
    ("vepa", MacvlanMode::Vepa),
    ("passthru", MacvlanMode::Passthru),
];

/// macvlan's own keys, as written.
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    mac: String,
    #[serde(default, rename = "bcqueuelen")]
    bc_queue_len: u32,
}

/// The keys macvlan reads.
pub fn keys() -> Keys {
    crate::support::sublink::keys().and::<Raw>()
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct MacvlanConf {
    pub common: SubConf,
    pub mode: MacvlanMode,
    /// From `mac`, `CNI_ARGS` `MAC=` or `runtimeConfig.mac` (later wins).
    pub mac: Option<[u8; 6]>,
    /// `None`: the kernel's default.
    pub bc_queue_len: Option<u32>,
}

impl MacvlanConf {
    /// Parses stdin and the raw `CNI_ARGS`; every problem is a code-7 error saying what to fix
    /// (code 6 for a value of the wrong JSON type).
    pub fn parse(stdin: &[u8], cni_args: &str) -> Result<MacvlanConf, CniError> {
        let (common, mode, raw): (_, _, Raw) = SubConf::parse(stdin, "macvlan", &MODES)?;
        let mac = crate::support::mac::resolve(Some(&raw.mac), &common.net, cni_args, false)?;
        Ok(MacvlanConf {
            mode,
            mac,
            bc_queue_len: (raw.bc_queue_len != 0).then_some(raw.bc_queue_len),
            common,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<MacvlanConf, CniError> {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"macvlan"{extra}}}"#);
        MacvlanConf::parse(json.as_bytes(), "")
    }

    #[test]
    fn defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.mode, MacvlanMode::Bridge);
        assert!(c.common.master.is_none() && c.common.mtu.is_none() && c.mac.is_none());
        assert!(c.bc_queue_len.is_none() && !c.common.link_in_container);
        let c = parse(r#","master":"","mtu":0,"mode":"""#).unwrap();
        assert!(c.common.master.is_none() && c.common.mtu.is_none());
    }

    #[test]
    fn every_mode() {
        for (name, mode) in MODES {
            let c = parse(&format!(r#","mode":"{name}""#)).unwrap();
            assert_eq!(c.mode, mode);
        }
        let e = parse(r#","mode":"l2""#).unwrap_err();
        assert_eq!(e.code, 7);
        assert_eq!(
            e.msg,
            r#"mode: "l2" is not a mode of macvlan: use one of bridge (the default), private, vepa, passthru"#
        );
    }

    #[test]
    fn options() {
        let c = parse(
            r#","master":"eth1","mtu":1400,"mac":"02:00:00:00:00:09","bcqueuelen":100,"linkInContainer":true"#,
        )
        .unwrap();
        assert_eq!(c.common.master.as_deref(), Some("eth1"));
        assert_eq!(c.common.mtu, Some(1400));
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(c.bc_queue_len, Some(100));
        assert!(c.common.link_in_container);
    }

    #[test]
    fn bad_values() {
        assert_eq!(parse(r#","mtu":-1"#).unwrap_err().code, 7);
        assert_eq!(parse(r#","mtu":"1400""#).unwrap_err().code, 6);
        assert_eq!(parse(r#","mac":"nope""#).unwrap_err().code, 7);
        assert_eq!(parse(r#","bcqueuelen":-1"#).unwrap_err().code, 6);
        assert_eq!(parse(r#","master":5"#).unwrap_err().code, 6);
    }
}
