//! The pod annotations that select networks (the NPWG de-facto standard):
//! `k8s.v1.cni.cncf.io/networks` and `v1.multus-cni.io/default-network`, in either form: a
//! comma list of `[namespace/]name[@ifname]`, or a JSON list of selection objects. Everything is
//! checked here, before anything runs.

use std::net::IpAddr;

use cni::quote::quote;
use serde::Deserialize;
use serde_json::{Map, Value};

/// An annotation that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("pod annotation {annotation}: {msg}")]
pub struct AnnotationError {
    pub annotation: String,
    pub msg: String,
}

pub type Result<T> = std::result::Result<T, AnnotationError>;

pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// The most networks one pod's annotation may select: each is a NAD read from the API, a
/// delegate run as root and an interface in the pod.
pub const MAX_NETWORKS: usize = 32;
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";

/// One network a pod asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    pub name: String,
    pub namespace: String,
    pub interface: Option<String>,
    pub ips: Vec<String>,
    pub mac: Option<String>,
    pub infiniband_guid: Option<String>,
    pub port_mappings: Option<Value>,
    pub bandwidth: Option<Value>,
    pub device_id: Option<String>,
    pub cni_args: Option<Map<String, Value>>,
    pub default_route: Vec<IpAddr>,
    /// `ipam-claim-reference` (spec v1.3): an IPAMClaim in the pod's namespace that owns this
    /// interface's addresses.
    pub ipam_claim_reference: Option<String>,
}

impl Selection {
    /// The host ports `portMappings` asks for, with each one's protocol (`tcp` when it names
    /// none, as portmap reads it).
    pub fn host_ports(port_mappings: &Value) -> Vec<(u16, String)> {
        let mappings: Vec<PortMapping> =
            serde_json::from_value(port_mappings.clone()).unwrap_or_default();
        mappings
            .into_iter()
            .map(|m| {
                let protocol = if m.protocol.is_empty() {
                    "tcp".to_owned()
                } else {
                    m.protocol.to_ascii_lowercase()
                };
                (m.host_port, protocol)
            })
            .collect()
    }
}

/// The JSON form of one element, as written by users.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Element {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    ips: Vec<String>,
    #[serde(default)]
    mac: String,
    #[serde(rename = "infiniband-guid", default)]
    infiniband_guid: String,
    #[serde(default)]
    interface: String,
    /// The old key for `interface`.
    #[serde(default)]
    interface_request: String,
    #[serde(default)]
    port_mappings: Option<Vec<PortMapping>>,
    #[serde(default)]
    bandwidth: Option<Bandwidth>,
    #[serde(rename = "deviceID", default)]
    device_id: String,
    #[serde(rename = "cni-args", default)]
    cni_args: Option<Map<String, Value>>,
    #[serde(rename = "default-route", default)]
    default_route: Vec<Gateway>,
    #[serde(rename = "ipam-claim-reference", default)]
    ipam_claim_reference: String,
}

/// A `default-route` entry: an address, whose error says what is wrong with it.
struct Gateway(IpAddr);

impl<'de> Deserialize<'de> for Gateway {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Gateway, D::Error> {
        let text = String::deserialize(d)?;
        cni::decode::parse_ip(&text, "a gateway")
            .map(Gateway)
            .map_err(|want| {
                serde::de::Error::invalid_value(serde::de::Unexpected::Str(&text), &want.as_str())
            })
    }
}

#[derive(Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct PortMapping {
    host_port: u16,
    container_port: u16,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    protocol: String,
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    host_ip: String,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Bandwidth {
    #[serde(default)]
    ingress_rate: u64,
    #[serde(default)]
    ingress_burst: u64,
    #[serde(default)]
    egress_rate: u64,
    #[serde(default)]
    egress_burst: u64,
}

/// Parses annotation `annotation` whose text is `text`; names without a namespace get
/// `default_namespace`.
pub fn parse(annotation: &str, text: &str, default_namespace: &str) -> Result<Vec<Selection>> {
    let bad = |msg: String| AnnotationError {
        annotation: annotation.to_owned(),
        msg,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(bad("is empty".to_owned()));
    }
    let mut selections = if trimmed.contains(['[', '{', '"']) {
        parse_json(trimmed).map_err(bad)?
    } else {
        trimmed
            .split(',')
            .enumerate()
            .map(|(i, item)| parse_text_item(item.trim()).map_err(|m| format!("element {i}: {m}")))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(bad)?
    };
    if selections.len() > MAX_NETWORKS {
        return Err(bad(format!(
            "selects {} networks: a pod may have at most {MAX_NETWORKS}",
            selections.len()
        )));
    }
    for (i, s) in selections.iter_mut().enumerate() {
        if s.namespace.is_empty() {
            s.namespace = default_namespace.to_owned();
        }
        // Each message quotes the one value that is wrong, once; the name, once valid, is short.
        if !is_dns1123_label(&s.name) {
            return Err(bad(format!(
                "element {i}: network name {} is not a DNS-1123 label (lower case letters, \
                 digits and '-', starting and ending with a letter or digit, at most 63)",
                quote(&s.name)
            )));
        }
        validate(s).map_err(|m| bad(format!("element {i} ({}): {m}", s.name)))?;
    }
    let mut seen: Vec<&str> = Vec::new();
    for s in &selections {
        if let Some(ifname) = s.interface.as_deref() {
            if seen.contains(&ifname) {
                return Err(bad(format!(
                    "interface {} is requested more than once",
                    quote(ifname)
                )));
            }
            seen.push(ifname);
        }
    }
    Ok(selections)
}

fn parse_json(text: &str) -> std::result::Result<Vec<Selection>, String> {
    let items: Vec<Value> = match cni::decode::read_any(text.as_bytes()) {
        Ok(Value::Array(items)) => items,
        Ok(_) => return Err("the JSON form must be a list of selection objects".to_owned()),
        Err(e) => return Err(format!("invalid JSON: {e}")),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if !item.is_object() {
                return Err(format!(
                    "element {i}: {} is not a selection object",
                    cni::quote::quote_value(item)
                ));
            }
            let e: Element =
                cni::decode::from_value(item).map_err(|e| format!("element {i}: {e}"))?;
            Ok(Selection {
                name: e.name,
                namespace: e.namespace,
                interface: Some(e.interface)
                    .filter(|s| !s.is_empty())
                    .or(Some(e.interface_request).filter(|s| !s.is_empty())),
                ips: e.ips,
                mac: Some(e.mac).filter(|s| !s.is_empty()),
                infiniband_guid: Some(e.infiniband_guid).filter(|s| !s.is_empty()),
                port_mappings: e.port_mappings.as_ref().map(to_json),
                bandwidth: e.bandwidth.as_ref().map(to_json),
                device_id: Some(e.device_id).filter(|s| !s.is_empty()),
                cni_args: e.cni_args,
                default_route: e.default_route.into_iter().map(|g| g.0).collect(),
                ipam_claim_reference: Some(e.ipam_claim_reference).filter(|s| !s.is_empty()),
            })
        })
        .collect()
}

/// The typed port mappings and bandwidth, back in JSON for the delegate.
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// `[namespace/]name[@ifname]`.
fn parse_text_item(item: &str) -> std::result::Result<Selection, String> {
    if item.is_empty() {
        return Err("empty network name (a stray comma?)".to_owned());
    }
    let (namespace, rest) = match item.split_once('/') {
        Some((ns, rest)) => (ns.trim(), rest),
        None => ("", item),
    };
    if rest.contains('/') {
        return Err(format!("{} has more than one '/'", quote(item)));
    }
    let (name, ifname) = match rest.split_once('@') {
        Some((name, ifname)) => (name.trim(), Some(ifname.trim())),
        None => (rest.trim(), None),
    };
    if ifname.is_some_and(|i| i.contains('@')) {
        return Err(format!("{} has more than one '@'", quote(item)));
    }
    if item.contains('/') && namespace.is_empty() {
        return Err(format!("{} has an empty namespace before '/'", quote(item)));
    }
    if ifname == Some("") {
        return Err(format!(
            "{} has an empty interface name after '@'",
            quote(item)
        ));
    }
    Ok(Selection {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        interface: ifname.map(str::to_owned),
        ..Selection::default()
    })
}

/// The rest of a selection whose name is valid.
fn validate(s: &Selection) -> std::result::Result<(), String> {
    if !is_dns1123_label(&s.namespace) {
        return Err(format!(
            "namespace {} is not a DNS-1123 label",
            quote(&s.namespace)
        ));
    }
    if let Some(ifname) = &s.interface {
        cni::env::validate_ifname(ifname).map_err(|e| e.to_string())?;
    }
    if let Some(mac) = &s.mac {
        if !is_hex_address(mac, &[6]) {
            return Err(format!("mac {} is not a MAC address", quote(mac)));
        }
    }
    if let Some(guid) = &s.infiniband_guid {
        if !is_hex_address(guid, &[8, 20]) {
            return Err(format!(
                "infiniband-guid {} is not 8 or 20 colon-separated hex bytes",
                quote(guid)
            ));
        }
    }
    for (i, ip) in s.ips.iter().enumerate() {
        let ok = if ip.contains('/') {
            ip.parse::<ipnet::IpNet>().is_ok()
        } else {
            ip.parse::<IpAddr>().is_ok()
        };
        if !ok {
            return Err(format!(
                "ips[{i}]: {} is not an IP address or CIDR",
                quote(ip)
            ));
        }
    }
    if let Some(claim) = &s.ipam_claim_reference {
        cni::args::check_ipam_claim_name(claim)
            .map_err(|why| format!("ipam-claim-reference: {why}"))?;
    }
    let v4 = s.default_route.iter().filter(|g| g.is_ipv4()).count();
    if v4 > 1 || s.default_route.len() - v4 > 1 {
        return Err("default-route has two gateways of one family".to_owned());
    }
    Ok(())
}

/// A DNS-1123 label: what Kubernetes allows for namespace names.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_hex_address(text: &str, lengths: &[usize]) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    lengths.contains(&parts.len())
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The default-network annotation: exactly one network, namespace defaulting to
/// `multusNamespace`.
pub fn parse_default_network(text: &str, multus_namespace: &str) -> Result<Selection> {
    let mut selections = parse(DEFAULT_NETWORK_ANNOTATION, text, multus_namespace)?;
    if selections.len() != 1 {
        return Err(AnnotationError {
            annotation: DEFAULT_NETWORK_ANNOTATION.to_owned(),
            msg: format!("names {} networks; it takes exactly one", selections.len()),
        });
    }
    Ok(selections.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form() {
        let s = parse(NETWORKS_ANNOTATION, " a , other/b@eth5 ,c@x", "pods").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].namespace.as_str(), s[0].name.as_str()), ("pods", "a"));
        assert_eq!(s[1].namespace, "other");
        assert_eq!(s[1].interface.as_deref(), Some("eth5"));
        assert_eq!(s[2].interface.as_deref(), Some("x"));
    }

    #[test]
    fn json_form() {
        let s = parse(
            NETWORKS_ANNOTATION,
            r#"[{"name":"a","ips":["10.1.1.1/24"],"mac":"02:00:00:00:00:01","interface":"n1",
                "default-route":["10.1.1.254"],"cni-args":{"k":1},
                "portMappings":[{"hostPort":80,"containerPort":8080}],"bandwidth":{"ingressRate":5}}]"#,
            "pods",
        )
        .unwrap();
        assert_eq!(s[0].namespace, "pods");
        assert_eq!(s[0].default_route.len(), 1);
        assert_eq!(
            s[0].port_mappings,
            Some(serde_json::json!([{"hostPort":80,"containerPort":8080}]))
        );
        assert_eq!(s[0].bandwidth.as_ref().unwrap()["ingressRate"], 5);
    }

    #[test]
    fn bad_elements_name_the_element() {
        for bad in [
            "",
            "a,,b",
            "A",
            "a/b/c",
            "a@b@c",
            "a@",
            "/a",
            "-a",
            "a@this-name-is-too-long",
            r#"[{"name":"a","mac":"nope"}]"#,
            r#"[{"name":"a","ips":["10.0.0.300"]}]"#,
            r#"[{"name":"a","default-route":["1.1.1.1","2.2.2.2"]}]"#,
            r#"[{"name":"a","interface":"x"},{"name":"b","interface":"x"}]"#,
            r#"{"name":"a"}"#,
            r#"[{"nam":"a"}]"#,
            r#"[{"name":"a","ipam-claim-reference":"other/vm1"}]"#,
            r#"[{"name":"a","ipam-claim-reference":"VM1"}]"#,
        ] {
            let e = parse(NETWORKS_ANNOTATION, bad, "pods").unwrap_err();
            assert!(e.to_string().contains(NETWORKS_ANNOTATION), "{bad}: {e}");
        }
    }

    #[test]
    fn an_ipam_claim_reference_is_a_name_in_the_pods_namespace() {
        let s = parse(
            NETWORKS_ANNOTATION,
            r#"[{"name":"a","ipam-claim-reference":"vm1.net1"},{"name":"b"}]"#,
            "vms",
        )
        .unwrap();
        assert_eq!(s[0].ipam_claim_reference.as_deref(), Some("vm1.net1"));
        assert_eq!(s[1].ipam_claim_reference, None);
        let e = parse(
            NETWORKS_ANNOTATION,
            r#"[{"name":"a","ipam-claim-reference":"other/vm1"}]"#,
            "vms",
        )
        .unwrap_err();
        assert!(
            e.msg
                .contains("element 0 (a): ipam-claim-reference: \"other/vm1\" is not a name"),
            "{e}"
        );
    }
}
