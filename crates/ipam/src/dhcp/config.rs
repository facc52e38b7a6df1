//! The dhcp plugin's `ipam` settings, and the DHCP options they turn into.
//!
//! Keys and option names follow the reference: `daemonSocketPath`, `request` (with
//! `skipDefault`), `provide` (with `value` or `fromArg`), `priority`; plus `broadcast`, which
//! sets the BOOTP broadcast flag for this network (ipvlan needs it).

use std::path::PathBuf;

use cni::args::CniArgs;
use cni::keys::Keys;
use cni::quote::quote;
use serde::{Deserialize, Serialize};

use crate::common::require_ipam;
use crate::error::{Error, Result};
use crate::json::null_default;

/// Where the daemon listens unless the config says otherwise.
pub const DEFAULT_SOCKET_PATH: &str = "/run/cni/dhcp.sock";

/// Options asked for unless `skipDefault`: subnet mask, router, DNS servers, domain name,
/// interface MTU, static routes (33) and classless static routes (121).
pub const DEFAULT_REQUEST: [u8; 7] = [1, 3, 6, 15, 26, 33, 121];

/// Option names the reference accepts besides plain numbers.
const OPTION_NAMES: [(&str, u8); 6] = [
    ("dhcp-client-identifier", 61),
    ("subnet-mask", 1),
    ("routers", 3),
    ("host-name", 12),
    ("user-class", 77),
    ("vendor-class-identifier", 60),
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNet {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ipam: Option<RawIpam>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIpam {
    #[serde(default)]
    daemon_socket_path: String,
    #[serde(default, deserialize_with = "null_default")]
    provide: Vec<RawProvide>,
    #[serde(default, deserialize_with = "null_default")]
    request: Vec<RawRequest>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    broadcast: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProvide {
    #[serde(default)]
    option: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    from_arg: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRequest {
    #[serde(default)]
    skip_default: bool,
    #[serde(default)]
    option: String,
}

/// The keys dhcp reads in `ipam`.
pub fn keys() -> Keys {
    Keys::of::<RawIpam>()
        .with("provide", Keys::of::<RawProvide>())
        .with("request", Keys::of::<RawRequest>())
}

/// An option the client sends with its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provided {
    pub code: u8,
    pub value: String,
}

/// What one attachment asks of the DHCP server: everything the daemon needs besides the
/// interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseParams {
    /// Option 61, the reference's format: a 0 type byte, then `<containerID>/<network>/<ifname>`
    /// (cut to 255 bytes). A provided `dhcp-client-identifier` replaces it.
    pub client_id: Vec<u8>,
    /// Option 55, in order.
    pub request: Vec<u8>,
    pub provide: Vec<Provided>,
    /// Set the BOOTP broadcast flag, so replies reach an interface that shares its MAC.
    pub broadcast: bool,
    /// Metric for every route of the result.
    pub priority: Option<u32>,
}

/// The settings the plugin side reads.
#[derive(Debug)]
pub struct DhcpConf {
    pub network: String,
    pub socket_path: PathBuf,
    pub params: LeaseParams,
}

impl DhcpConf {
    /// Reads the network config; `CNI_ARGS` supplies `fromArg` values.
    pub fn parse(
        stdin: &[u8],
        cni_args: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<DhcpConf> {
        let net: RawNet = cni::decode::from_slice(stdin)?;
        let ipam = require_ipam(net.ipam)?;
        let args = CniArgs::parse(cni_args)?;
        let mut provide = Vec::new();
        for (i, p) in ipam.provide.iter().enumerate() {
            let key = format!("ipam.provide[{i}]");
            let code = option_code(&format!("{key}.option"), &p.option)?;
            let mut values = Vec::new();
            if !p.value.is_empty() {
                values.push((format!("{key}.value"), p.value.clone()));
            }
            if !p.from_arg.is_empty() {
                if let Some(v) = args.get(&p.from_arg) {
                    values.push((
                        format!("CNI_ARGS {} ({key}.fromArg)", quote(&p.from_arg)),
                        v.to_owned(),
                    ));
                }
            }
            for (source, value) in values {
                if value.len() > 255 {
                    return Err(Error::config(format!(
                        "{source}: {} is {} bytes long; an option holds at most 255",
                        quote(&value),
                        value.len()
                    )));
                }
                // A later value for the same option wins, as in the reference.
                provide.retain(|q: &Provided| q.code != code);
                provide.push(Provided { code, value });
            }
        }
        let mut request = Vec::new();
        let mut skip_default = false;
        for (i, r) in ipam.request.iter().enumerate() {
            skip_default |= r.skip_default;
            if !r.option.is_empty() {
                let key = format!("ipam.request[{i}].option");
                push_unique(&mut request, option_code(&key, &r.option)?);
            }
        }
        if !skip_default {
            for code in DEFAULT_REQUEST {
                push_unique(&mut request, code);
            }
        }
        let mut client_id = vec![0u8];
        client_id.extend_from_slice(format!("{container_id}/{}/{ifname}", net.name).as_bytes());
        client_id.truncate(255);
        let socket_path = if ipam.daemon_socket_path.is_empty() {
            PathBuf::from(DEFAULT_SOCKET_PATH)
        } else {
            PathBuf::from(ipam.daemon_socket_path)
        };
        Ok(DhcpConf {
            network: net.name,
            socket_path,
            params: LeaseParams {
                client_id,
                request,
                provide,
                broadcast: ipam.broadcast,
                priority: ipam.priority.filter(|p| *p != 0),
            },
        })
    }
}

fn push_unique(list: &mut Vec<u8>, code: u8) {
    if !list.contains(&code) {
        list.push(code);
    }
}

/// An option by reference name or number (1-254), written at `key`.
fn option_code(key: &str, name: &str) -> Result<u8> {
    if let Some((_, code)) = OPTION_NAMES.iter().find(|(n, _)| *n == name) {
        return Ok(*code);
    }
    match name.parse::<u8>() {
        Ok(code) if code != 0 && code != 255 => Ok(code),
        _ => {
            let names: Vec<&str> = OPTION_NAMES.iter().map(|(n, _)| *n).collect();
            Err(Error::config(format!(
                "{key}: unknown option {}: use a number from 1 to 254 or one of {}",
                quote(name),
                names.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ipam: &str, args: &str) -> Result<DhcpConf> {
        let conf =
            format!(r#"{{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{ipam}}}"#);
        DhcpConf::parse(conf.as_bytes(), args, "c0ffee", "eth1")
    }

    #[test]
    fn defaults() {
        let c = parse(r#"{"type":"dhcp"}"#, "").unwrap();
        assert_eq!(c.socket_path, PathBuf::from(DEFAULT_SOCKET_PATH));
        assert_eq!(c.params.request, DEFAULT_REQUEST);
        assert_eq!(c.params.client_id, b"\0c0ffee/net1/eth1");
        assert!(c.params.provide.is_empty());
        assert!(!c.params.broadcast);
    }

    #[test]
    fn request_and_provide() {
        let c = parse(
            r#"{"type":"dhcp","daemonSocketPath":"/tmp/d.sock","broadcast":true,"priority":7,
                "request":[{"skipDefault":true},{"option":"subnet-mask"},{"option":"42"}],
                "provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"},
                           {"option":"60","value":"edge"}]}"#,
            "K8S_POD_NAME=web-1;IgnoreUnknown=1",
        )
        .unwrap();
        assert_eq!(c.socket_path, PathBuf::from("/tmp/d.sock"));
        assert_eq!(c.params.request, [1, 42]);
        assert_eq!(
            c.params.provide,
            [
                Provided {
                    code: 12,
                    value: "web-1".into()
                },
                Provided {
                    code: 60,
                    value: "edge".into()
                }
            ]
        );
        assert!(c.params.broadcast);
        assert_eq!(c.params.priority, Some(7));
    }

    #[test]
    fn bad_options_are_code_7() {
        for ipam in [
            r#"{"type":"dhcp","request":[{"option":"no-such"}]}"#,
            r#"{"type":"dhcp","request":[{"option":"256"}]}"#,
            r#"{"type":"dhcp","provide":[{"option":"0","value":"x"}]}"#,
        ] {
            let e = parse(ipam, "").unwrap_err();
            assert!(e.to_string().contains("unknown option"), "{e}");
            assert_eq!(cni::CniError::from(e).code, 7);
        }
        let long = "x".repeat(256);
        let e = parse(
            &format!(r#"{{"type":"dhcp","provide":[{{"option":"12","value":"{long}"}}]}}"#),
            "",
        )
        .unwrap_err();
        assert!(e.to_string().contains("at most 255"), "{e}");
    }

    #[test]
    fn client_id_is_cut_to_an_option() {
        let conf = r#"{"name":"n","ipam":{"type":"dhcp"}}"#;
        let c = DhcpConf::parse(conf.as_bytes(), "", &"a".repeat(300), "eth0").unwrap();
        assert_eq!(c.params.client_id.len(), 255);
        assert_eq!(c.params.client_id[0], 0);
    }
}
