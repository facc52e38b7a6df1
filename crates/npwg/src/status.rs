//! The `k8s.v1.cni.cncf.io/network-status` annotation: what each network gave the pod.

use std::net::IpAddr;

use cni::{CniResult, Dns};
use serde::Serialize;
use serde_json::Value;

use crate::selection::Selection;

pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// One entry (the NPWG `NetworkStatus` shape).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkStatus {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interface: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    pub dns: Dns,
    #[serde(rename = "device-info", skip_serializing_if = "Option::is_none")]
    pub device_info: Option<Value>,
    /// The gateways of the network's default routes; absent when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
    /// The gateways the pod asked this network to carry (`default-route`).
    #[serde(rename = "default-route", skip_serializing_if = "Vec::is_empty")]
    pub default_route: Vec<String>,
}

/// The addresses the annotation shows on the pod's secondary networks (the entries not marked
/// `default`), as whereabouts' reconciler reads another writer's annotation: entries and
/// addresses it cannot read are skipped.
pub fn secondary_ips(annotation: &str) -> Vec<IpAddr> {
    let Ok(Value::Array(entries)) = serde_json::from_str::<Value>(annotation) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e.get("default").and_then(Value::as_bool) != Some(true))
        .filter_map(|e| e.get("ips").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|ip| ip.split('/').next()?.parse().ok())
        .collect()
}

/// The entries for one delegate's result. `ifname` is the interface multus asked for; it is
/// used when the result names no interface inside the pod. `is_default` marks the cluster
/// network: exactly one of its entries (the one with the gateway, else the first) is default.
pub fn entries(
    result: &CniResult,
    name: &str,
    ifname: &str,
    is_default: bool,
    default_route: &[IpAddr],
) -> Vec<NetworkStatus> {
    let gateway: Vec<String> = result
        .routes
        .iter()
        .filter(|r| r.dst.prefix_len() == 0)
        .filter_map(|r| r.gw)
        .map(|g| g.to_string())
        .collect();
    let base = NetworkStatus {
        name: name.to_owned(),
        interface: String::new(),
        ips: Vec::new(),
        mac: String::new(),
        mtu: None,
        default: false,
        dns: result.dns.clone(),
        device_info: None,
        gateway,
        default_route: default_route.iter().map(ToString::to_string).collect(),
    };
    // Interfaces inside the pod, with their index in the result.
    let sandboxed: Vec<(usize, &cni::Interface)> = result
        .interfaces
        .iter()
        .enumerate()
        .filter(|(_, i)| !i.sandbox.is_empty())
        .collect();
    if sandboxed.is_empty() {
        return vec![NetworkStatus {
            interface: ifname.to_owned(),
            ips: result
                .ips
                .iter()
                .map(|ip| ip.address.addr().to_string())
                .collect(),
            default: is_default,
            ..base
        }];
    }
    let mut out: Vec<NetworkStatus> = sandboxed
        .iter()
        .map(|(_, iface)| NetworkStatus {
            interface: iface.name.clone(),
            mac: iface.mac.clone(),
            mtu: iface.mtu,
            ..base.clone()
        })
        .collect();
    let last = out.len() - 1;
    for ip in &result.ips {
        let slot = ip
            .interface
            .and_then(|i| sandboxed.iter().position(|(index, _)| *index == i));
        match (ip.interface, slot) {
            (Some(_), Some(slot)) => out[slot].ips.push(ip.address.addr().to_string()),
            (Some(_), None) => {}
            (None, _) => out[last].ips.push(ip.address.addr().to_string()),
        }
    }
    if is_default {
        let with_gateway = result
            .ips
            .iter()
            .filter(|ip| ip.gateway.is_some())
            .filter_map(|ip| ip.interface)
            .find_map(|i| sandboxed.iter().position(|(index, _)| *index == i));
        out[with_gateway.unwrap_or(0)].default = true;
    }
    out
}

/// The annotation's text: a JSON list, each entry indented as upstream writes it.
pub fn annotation(statuses: &[NetworkStatus]) -> String {
    let entries: Vec<String> = statuses
        .iter()
        .map(|s| {
            let mut buf = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            match s.serialize(&mut ser) {
                Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
                Err(_) => String::new(),
            }
        })
        .collect();
    format!("[{}]", entries.join(","))
}

/// The selections a network-status annotation does not show: each selection is matched to an
/// entry of its `namespace/name` (and its interface, when it names one), each entry used once.
/// An annotation that is absent or does not read shows none.
pub fn missing<'a>(selections: &'a [Selection], annotation: Option<&str>) -> Vec<&'a Selection> {
    let entries: Vec<Value> = annotation
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or_default();
    let mut used = vec![false; entries.len()];
    let mut missing = Vec::new();
    for selection in selections {
        let name = format!("{}/{}", selection.namespace, selection.name);
        let found = entries.iter().enumerate().position(|(i, e)| {
            !used[i]
                && e.get("name").and_then(Value::as_str) == Some(name.as_str())
                && selection.interface.as_deref().is_none_or(|want| {
                    // An entry naming no interface (as other writers leave it) matches any.
                    match e.get("interface").and_then(Value::as_str) {
                        None | Some("") => true,
                        Some(have) => have == want,
                    }
                })
        });
        match found {
            Some(i) => used[i] = true,
            None => missing.push(selection),
        }
    }
    missing
}

/// What a running pod lacks of the networks it asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Missing {
    /// `namespace/name[@interface]` of each network it lacks.
    pub networks: Vec<String>,
    /// Its network-status is from an earlier sandbox: the pod's addresses are not those its
    /// cluster network's entry shows, so its sandbox was made again (a node's reboot) without
    /// multus, which would have written the annotation anew. Every network is then lacking.
    pub stale: bool,
}

/// What a running pod lacks of the networks it asked for, `None` for a pod that asks for none,
/// is not running in a sandbox of its own, is going away, or is in one of
/// `system_namespaces` (whose network-status multus does not write).
pub fn pod_missing(pod: &Value, system_namespaces: &[String]) -> Option<Missing> {
    let running = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running");
    let host_network = pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true);
    let going = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let annotations = pod.pointer("/metadata/annotations")?;
    let asked = annotations
        .get(crate::selection::NETWORKS_ANNOTATION)
        .and_then(Value::as_str)
        .filter(|a| !a.trim().is_empty())?;
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    if !running || host_network || going || system_namespaces.iter().any(|s| s == namespace) {
        return None;
    }
    let status = annotations
        .get(NETWORK_STATUS_ANNOTATION)
        .and_then(Value::as_str);
    let stale = from_earlier_sandbox(pod, status);
    let selections =
        match crate::selection::parse(crate::selection::NETWORKS_ANNOTATION, asked, namespace) {
            Ok(selections) => selections,
            // multus refuses such a pod: running, it never met multus.
            Err(e) => {
                return Some(Missing {
                    networks: vec![format!("every network it asks for ({e})")],
                    stale,
                })
            }
        };
    let lacking = if stale {
        selections.iter().collect()
    } else {
        missing(&selections, status)
    };
    Some(Missing {
        networks: lacking
            .into_iter()
            .map(|s| match &s.interface {
                Some(ifname) => format!("{}/{}@{ifname}", s.namespace, s.name),
                None => format!("{}/{}", s.namespace, s.name),
            })
            .collect(),
        stale,
    })
}

/// Whether the annotation's cluster network entry (`default`) shows addresses and the pod's
/// own (`status.podIPs`, the runtime's answer for its current sandbox) are not among them.
fn from_earlier_sandbox(pod: &Value, annotation: Option<&str>) -> bool {
    let address = |text: &str| text.split('/').next()?.parse::<IpAddr>().ok();
    let Some(Value::Array(entries)) = annotation.and_then(|a| serde_json::from_str(a).ok()) else {
        return false;
    };
    let shown: Vec<IpAddr> = entries
        .iter()
        .filter(|e| e.get("default").and_then(Value::as_bool) == Some(true))
        .filter_map(|e| e.get("ips").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(address)
        .collect();
    let own: Vec<IpAddr> = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("ip").and_then(Value::as_str))
        .filter_map(address)
        .collect();
    !shown.is_empty() && !own.is_empty() && own.iter().any(|ip| !shown.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(json: &str) -> CniResult {
        CniResult::from_slice(json.as_bytes()).unwrap()
    }

    #[test]
    fn bridge_result_maps_to_one_entry_with_ip_mac_and_gateway() {
        let r = result(
            r#"{"cniVersion":"1.0.0","interfaces":[{"name":"cni0","mac":"aa:aa:aa:aa:aa:aa"},
            {"name":"veth1","mac":"bb:bb:bb:bb:bb:bb"},
            {"name":"net1","mac":"22:c4:f3:e9:a8:8f","sandbox":"/run/netns/p"}],
            "ips":[{"address":"10.10.0.1/24","gateway":"10.10.0.254","interface":2}],
            "routes":[{"dst":"0.0.0.0/0","gw":"10.10.0.254"}]}"#,
        );
        let e = entries(&r, "default/bridge-conf", "net1", false, &[]);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].interface, "net1");
        assert_eq!(e[0].ips, ["10.10.0.1"]);
        assert_eq!(e[0].gateway, ["10.10.0.254"]);
        assert!(!e[0].default);
        let text = annotation(&e);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[0]["mac"], "22:c4:f3:e9:a8:8f");
        assert_eq!(v[0]["dns"], serde_json::json!({}));
        assert!(v[0].get("default").is_none());
    }

    #[test]
    fn no_gateway_key_without_a_real_gateway() {
        let r = result(
            r#"{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.2/24"}],
            "routes":[{"dst":"0.0.0.0/0"}]}"#,
        );
        let e = entries(&r, "net", "eth0", true, &[]);
        assert!(e[0].gateway.is_empty());
        assert!(e[0].default);
        assert!(!annotation(&e).contains("gateway"));
    }

    #[test]
    fn secondary_ips_skip_the_default_network_and_what_cannot_be_read() {
        let text = r#"[{"name":"cbr0","ips":["10.42.0.7"],"default":true},
                      {"name":"default/blue","interface":"net1","ips":["10.77.0.5","fd77::5","nope"]},
                      "junk", {"name":"x","ips":"10.1.1.1"}]"#;
        let want: Vec<IpAddr> = vec!["10.77.0.5".parse().unwrap(), "fd77::5".parse().unwrap()];
        assert_eq!(secondary_ips(text), want);
        assert!(secondary_ips("not json").is_empty());
    }

    #[test]
    fn missing_networks_are_those_no_entry_shows() {
        let asked = crate::selection::parse(
            crate::selection::NETWORKS_ANNOTATION,
            "a, a, b@data, other/c",
            "default",
        )
        .unwrap();
        let status = r#"[{"name": "cluster", "interface": "eth0", "default": true},
            {"name": "default/a", "interface": "net1"},
            {"name": "default/b", "interface": "net3"},
            {"name": "other/c", "interface": "net4"}]"#;
        let names = |m: Vec<&Selection>| {
            m.iter()
                .map(|s| format!("{}/{}", s.namespace, s.name))
                .collect::<Vec<_>>()
        };
        // `a` twice with one entry; `b` on another interface than it asked for.
        assert_eq!(
            names(missing(&asked, Some(status))),
            ["default/a", "default/b"]
        );
        assert_eq!(missing(&asked, None).len(), 4);
        assert_eq!(missing(&asked, Some("not json")).len(), 4);
        assert!(missing(&asked[3..], Some(status)).is_empty());
    }

    #[test]
    fn a_running_pod_misses_what_its_status_does_not_show() {
        let pod = |phase: &str, host_network: bool, status: Option<&str>| {
            let mut annotations = serde_json::json!({"k8s.v1.cni.cncf.io/networks": "a"});
            if let Some(status) = status {
                annotations[NETWORK_STATUS_ANNOTATION] = status.into();
            }
            serde_json::json!({
                "metadata": {"namespace": "ns", "name": "p", "annotations": annotations},
                "spec": {"hostNetwork": host_network},
                "status": {"phase": phase},
            })
        };
        let lacking = |networks: &[&str], stale: bool| {
            Some(Missing {
                networks: networks.iter().map(|n| n.to_string()).collect(),
                stale,
            })
        };
        assert_eq!(
            pod_missing_here(&pod("Running", false, None)),
            lacking(&["ns/a"], false)
        );
        let shown = r#"[{"name": "cluster", "ips": ["10.42.0.7"], "default": true},
                        {"name": "ns/a", "interface": "net1"}]"#;
        assert_eq!(
            pod_missing_here(&pod("Running", false, Some(shown))),
            lacking(&[], false)
        );
        // The same annotation, and the pod at another address: a sandbox made again without
        // multus, the annotation left from the one before.
        let mut again = pod("Running", false, Some(shown));
        again["status"]["podIPs"] = serde_json::json!([{"ip": "10.42.0.9"}]);
        assert_eq!(pod_missing_here(&again), lacking(&["ns/a"], true));
        again["status"]["podIPs"] = serde_json::json!([{"ip": "10.42.0.7"}]);
        assert_eq!(pod_missing_here(&again), lacking(&[], false));
        // Not in a sandbox of its own yet, or never: nothing to say.
        assert_eq!(pod_missing_here(&pod("Pending", false, None)), None);
        assert_eq!(pod_missing_here(&pod("Running", true, None)), None);
        assert_eq!(
            pod_missing_here(&serde_json::json!({"status": {"phase": "Running"}})),
            None
        );
        let mut broken = pod("Running", false, None);
        broken["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = "[not json".into();
        let said = pod_missing_here(&broken).unwrap();
        assert!(
            said.networks[0].starts_with("every network it asks for"),
            "{said:?}"
        );
    }

    fn pod_missing_here(pod: &Value) -> Option<Missing> {
        pod_missing(pod, &["kube-system".to_owned()])
    }

    #[test]
    fn pods_multus_writes_no_status_for_or_that_are_going_are_not_missing_anything() {
        let mut pod = serde_json::json!({
            "metadata": {"namespace": "kube-system", "name": "p",
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "a"}},
            "status": {"phase": "Running"},
        });
        assert_eq!(pod_missing_here(&pod), None);
        pod["metadata"]["namespace"] = "ns".into();
        assert!(pod_missing_here(&pod).is_some());
        pod["metadata"]["deletionTimestamp"] = "2026-12-04T08:00:00Z".into();
        assert_eq!(pod_missing_here(&pod), None);
    }

    #[test]
    fn an_entry_naming_no_interface_shows_the_selection_whatever_it_asked_for() {
        let asked =
            crate::selection::parse(crate::selection::NETWORKS_ANNOTATION, "a@data", "ns").unwrap();
        for status in [
            r#"[{"name": "ns/a"}]"#,
            r#"[{"name": "ns/a", "interface": ""}]"#,
        ] {
            assert!(missing(&asked, Some(status)).is_empty(), "{status}");
        }
        assert_eq!(
            missing(&asked, Some(r#"[{"name": "ns/a", "interface": "net1"}]"#)).len(),
            1
        );
    }
}
