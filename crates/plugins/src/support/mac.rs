//! The container interface's MAC address from its sources, in the reference's order of
//! precedence.

use cni::args::CniArgs;
use cni::{CniError, NetConf};
use serde_json::Value;

/// The MAC to give the container interface. Later sources win: the plugin's own `mac` key
/// (`config_mac`), `CNI_ARGS` `MAC=`, `args.cni.mac` (only where the plugin reads it:
/// `with_args_cni`), and `runtimeConfig.mac`. Empty values count as absent.
pub fn resolve(
    config_mac: Option<&str>,
    net: &NetConf,
    cni_args: &str,
    with_args_cni: bool,
) -> Result<Option<[u8; 6]>, CniError> {
    let mut chosen: Option<(String, &str)> = config_mac
        .filter(|m| !m.is_empty())
        .map(|m| (m.to_owned(), "mac"));
    if !cni_args.is_empty() {
        let args = CniArgs::parse(cni_args)?;
        args.check_known(&["MAC"])?;
        if let Some(mac) = args.get("MAC").filter(|m| !m.is_empty()) {
            chosen = Some((mac.to_owned(), "CNI_ARGS MAC"));
        }
    }
    let args_cni = if with_args_cni {
        net.args_cni("mac")
    } else {
        None
    };
    let sources = [
        (args_cni, "args.cni.mac"),
        (net.runtime_config("mac"), "runtimeConfig.mac"),
    ];
    for (value, source) in sources {
        match value {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::String(s)) => chosen = Some((s.clone(), source)),
            Some(other) => {
                return Err(CniError::invalid_config(format!(
                    "{source}: {} is not a string like \"0a:58:0a:f4:00:01\"",
                    cni::quote::quote_value(other)
                )))
            }
        }
    }
    chosen
        .map(|(text, source)| {
            netkit::parse_mac(&text.replace('-', ":")).map_err(|_| {
                CniError::invalid_config(format!(
                    "{source}: {} is not a MAC address: write six hex bytes like \
                     0a:58:0a:f4:00:01",
                    cni::quote::quote(&text)
                ))
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(extra: &str) -> NetConf {
        serde_json::from_str(&format!(
            r#"{{"cniVersion":"1.0.0","name":"n","type":"x"{extra}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn later_sources_win() {
        let all = net(
            r#","args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}"#,
        );
        let env = "IgnoreUnknown=1;MAC=02:00:00:00:00:01;K8S_POD_NAME=x";
        let cfg = Some("02:00:00:00:00:09");
        assert_eq!(
            resolve(cfg, &all, env, true).unwrap(),
            Some([2, 0, 0, 0, 0, 3])
        );
        let no_rc = net(r#","args":{"cni":{"mac":"02:00:00:00:00:02"}}"#);
        assert_eq!(
            resolve(cfg, &no_rc, env, true).unwrap(),
            Some([2, 0, 0, 0, 0, 2])
        );
        // A plugin that does not read args.cni (macvlan): CNI_ARGS beats the config.
        assert_eq!(
            resolve(cfg, &no_rc, env, false).unwrap(),
            Some([2, 0, 0, 0, 0, 1])
        );
        assert_eq!(
            resolve(cfg, &net(""), "", false).unwrap(),
            Some([2, 0, 0, 0, 0, 9])
        );
        assert_eq!(
            resolve(None, &net(""), "MAC=02-00-00-00-00-04", false).unwrap(),
            Some([2, 0, 0, 0, 0, 4])
        );
        assert_eq!(resolve(Some(""), &net(""), "", false).unwrap(), None);
    }

    #[test]
    fn errors_name_the_source() {
        let e = resolve(None, &net(""), "MAC=zz", true).unwrap_err();
        assert!(e.msg.contains("CNI_ARGS MAC"), "{e}");
        let e = resolve(None, &net(""), "FOO=1", true).unwrap_err();
        assert_eq!(e.code, 7);
        let e = resolve(None, &net(r#","runtimeConfig":{"mac":5}"#), "", true).unwrap_err();
        assert!(e.msg.contains("runtimeConfig.mac"), "{e}");
        let e = resolve(Some("01:02"), &net(""), "", false).unwrap_err();
        assert!(
            e.msg.starts_with("mac: \"01:02\" is not a MAC address"),
            "{e}"
        );
    }
}
