//! `CNI_ARGS`: the pod as the runtime names it, and the `CNI_ARGS` each delegate gets.

use crate::delegate::Delegate;
use crate::error::Result;

/// The pod, as the runtime names it in `CNI_ARGS`.
#[derive(Clone, Debug, Default)]
pub struct K8sArgs {
    pub namespace: String,
    pub name: String,
    pub infra_container_id: String,
    pub uid: String,
    /// Every `CNI_ARGS` pair, passed on to delegates.
    pub pairs: Vec<(String, String)>,
}

impl K8sArgs {
    pub fn parse(raw: &str) -> Result<K8sArgs> {
        let args = cni::args::CniArgs::parse(raw)?;
        let get = |k: &str| args.get(k).unwrap_or_default().to_owned();
        Ok(K8sArgs {
            namespace: get("K8S_POD_NAMESPACE"),
            name: get("K8S_POD_NAME"),
            infra_container_id: get("K8S_POD_INFRA_CONTAINER_ID"),
            uid: get("K8S_POD_UID"),
            pairs: args.pairs().to_vec(),
        })
    }

    /// `CNI_ARGS` for a delegate: the pod's identity first (as upstream orders it), then the
    /// runtime's other pairs, then the MAC, IPs and IPAMClaim the selection asked for.
    pub fn for_delegate(&self, d: &Delegate) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            ("IgnoreUnknown", "true"),
            ("K8S_POD_NAMESPACE", self.namespace.as_str()),
            ("K8S_POD_NAME", self.name.as_str()),
            (
                "K8S_POD_INFRA_CONTAINER_ID",
                self.infra_container_id.as_str(),
            ),
            ("K8S_POD_UID", self.uid.as_str()),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (k, v) in &self.pairs {
            match out.iter_mut().find(|(key, _)| key == k) {
                Some(slot) if slot.1.is_empty() => slot.1.clone_from(v),
                Some(_) => {}
                None => out.push((k.clone(), v.clone())),
            }
        }
        if let Some(mac) = &d.mac {
            out.push(("MAC".into(), mac.clone()));
        }
        if !d.ips.is_empty() {
            out.push(("IP".into(), d.ips.join(",")));
        }
        if let Some(claim) = &d.ipam_claim {
            out.push((cni::args::IPAM_CLAIM_REFERENCE.into(), claim.clone()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delegate_gets_the_pod_then_the_selections_requests() {
        let pod = K8sArgs::parse("K8S_POD_NAMESPACE=vms;K8S_POD_NAME=virt-launcher-a;X=1").unwrap();
        let mut d = Delegate::from_config(
            br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#,
            "vms/n",
        )
        .unwrap();
        d.mac = Some("02:00:00:00:00:01".into());
        d.ipam_claim = Some("vm1.net1".into());
        let args = pod.for_delegate(&d);
        let keys: Vec<&str> = args.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "IgnoreUnknown",
                "K8S_POD_NAMESPACE",
                "K8S_POD_NAME",
                "K8S_POD_INFRA_CONTAINER_ID",
                "K8S_POD_UID",
                "X",
                "MAC",
                "IPAM_CLAIM_REFERENCE"
            ]
        );
        assert_eq!(args[7].1, "vm1.net1");
    }
}
