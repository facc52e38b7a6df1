//! `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`.

use crate::quote::quote;
use crate::CniError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Splits the pairs; a pair without exactly one `=` is an error, as in the reference.
    pub fn parse(raw: &str) -> Result<CniArgs, CniError> {
        let mut pairs = Vec::new();
        if raw.is_empty() {
            return Ok(CniArgs { pairs });
        }
        for pair in raw.split(';') {
            let mut kv = pair.split('=');
            match (kv.next(), kv.next(), kv.next()) {
                (Some(k), Some(v), None) => pairs.push((k.to_owned(), v.to_owned())),
                _ => {
                    return Err(CniError::invalid_config(format!(
                        "CNI_ARGS: invalid pair {}: want KEY=VALUE",
                        quote(pair)
                    )))
                }
            }
        }
        Ok(CniArgs { pairs })
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The value for `key`; a repeated key's last value wins, as in the reference.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rfind(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `IgnoreUnknown` as the reference reads it: 1/true/0/false, any case.
    pub fn ignore_unknown(&self) -> Result<bool, CniError> {
        match self
            .get("IgnoreUnknown")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("0") | Some("false") => Ok(false),
            Some("1") | Some("true") => Ok(true),
            Some(other) => Err(CniError::invalid_config(format!(
                "CNI_ARGS: IgnoreUnknown must be 1, true, 0 or false, not {}",
                quote(other)
            ))),
        }
    }

    /// Fails on keys outside `known` unless `IgnoreUnknown` is set.
    pub fn check_known(&self, known: &[&str]) -> Result<(), CniError> {
        if self.ignore_unknown()? {
            return Ok(());
        }
        let unknown: Vec<&str> = self
            .pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| *k != "IgnoreUnknown" && !known.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        // A few names are enough to see the mistake; the list itself is input.
        const SHOWN: usize = 5;
        let mut names: Vec<String> = unknown.iter().take(SHOWN).map(|k| quote(k)).collect();
        if unknown.len() > SHOWN {
            names.push(format!("and {} more", unknown.len() - SHOWN));
        }
        Err(CniError::invalid_config(format!(
            "CNI_ARGS: unknown args [{}]; set IgnoreUnknown=1 to allow them",
            names.join(", ")
        )))
    }

    /// The IPAMClaim the pod's network selection names ([`IPAM_CLAIM_REFERENCE`]), checked.
    pub fn ipam_claim(&self) -> Result<Option<&str>, CniError> {
        let Some(name) = self.get(IPAM_CLAIM_REFERENCE).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        check_ipam_claim_name(name).map_err(|why| {
            CniError::invalid_config(format!("CNI_ARGS {IPAM_CLAIM_REFERENCE}: {why}"))
        })?;
        Ok(Some(name))
    }

    /// Refuses an IPAMClaim for `plugin`, which keeps its addresses on one node: a claim's
    /// address must come back to its pod on any node.
    pub fn refuse_ipam_claim(&self, plugin: &str) -> Result<(), CniError> {
        match self.ipam_claim()? {
            None => Ok(()),
            Some(claim) => Err(CniError::invalid_config(format!(
                "CNI_ARGS {IPAM_CLAIM_REFERENCE}: {plugin} cannot keep IPAMClaim {}'s address: \
                 it keeps addresses on one node, and a claimed address must follow its pod to \
                 any node; use whereabouts",
                quote(claim)
            ))),
        }
    }
}

/// The `CNI_ARGS` key by which multus hands a delegate the `ipam-claim-reference` of the pod's
/// network selection element: the name of an IPAMClaim in the pod's namespace
/// (`k8s.cni.cncf.io/v1alpha1`) that owns the interface's addresses. Only the runtime and
/// multus set `CNI_ARGS`, never a network's own config.
pub const IPAM_CLAIM_REFERENCE: &str = "IPAM_CLAIM_REFERENCE";

/// An IPAMClaim's name as a reference gives it: an object name (a DNS-1123 subdomain) in the
/// pod's namespace, so never `namespace/name`.
pub fn check_ipam_claim_name(name: &str) -> Result<(), String> {
    if name.contains('/') {
        return Err(format!(
            "{} is not a name: a claim is named in the pod's own namespace, without one",
            quote(name)
        ));
    }
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !b.is_empty()
        && b.len() <= 253
        && b.iter().all(|c| alnum(c) || *c == b'-' || *c == b'.')
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not an object name (lower case letters, digits, '-' and '.', starting and \
             ending with a letter or digit, at most 253)",
            quote(name)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipam_claim_names_are_checked() {
        let args = |raw: &str| CniArgs::parse(raw).unwrap();
        assert_eq!(args("K8S_POD_NAME=a").ipam_claim().unwrap(), None);
        assert_eq!(args("IPAM_CLAIM_REFERENCE=").ipam_claim().unwrap(), None);
        assert_eq!(
            args("IPAM_CLAIM_REFERENCE=vm-1.net1").ipam_claim().unwrap(),
            Some("vm-1.net1")
        );
        for bad in ["other/vm1", "VM1", "-vm", "vm.", "vm_1"] {
            let e = args(&format!("IPAM_CLAIM_REFERENCE={bad}"))
                .ipam_claim()
                .unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.starts_with("CNI_ARGS IPAM_CLAIM_REFERENCE: "), "{e}");
        }
        assert!(check_ipam_claim_name(&"a".repeat(253)).is_ok());
        assert!(check_ipam_claim_name(&"a".repeat(254)).is_err());
        let e = args("IPAM_CLAIM_REFERENCE=vm1")
            .refuse_ipam_claim("host-local")
            .unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg
                .contains("host-local cannot keep IPAMClaim \"vm1\"'s address"),
            "{e}"
        );
        assert!(args("IP=10.0.0.1").refuse_ipam_claim("static").is_ok());
    }
}
