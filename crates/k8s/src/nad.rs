//! NetworkAttachmentDefinitions (`k8s.cni.cncf.io/v1`): the object and its API resource.

use kube::core::{ApiResource, GroupVersionKind, NotUsed, Object};
use serde::{Deserialize, Deserializer, Serialize};

/// The `spec` of a NetworkAttachmentDefinition. `config` is empty when the NAD has no
/// `spec.config` (or no spec at all): the standard then says to look in the CNI conf dir.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NadSpec {
    pub config: String,
}

impl<'de> Deserialize<'de> for NadSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NadSpec, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            config: Option<String>,
        }
        // Through `Option`, a missing or null spec reads as an empty one.
        let raw = Option::<Raw>::deserialize(d)?;
        Ok(NadSpec {
            config: raw.and_then(|r| r.config).unwrap_or_default(),
        })
    }
}

/// A `k8s.cni.cncf.io/v1` NetworkAttachmentDefinition.
pub type NetworkAttachmentDefinition = Object<NadSpec, NotUsed>;

/// The API resource of NetworkAttachmentDefinitions.
pub fn nad_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition"),
        "network-attachment-definitions",
    )
}

pub(crate) const NAD_RESOURCE_NAME: &str = "network-attachment-definitions.k8s.cni.cncf.io";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nad_spec_may_be_missing_null_or_without_config() {
        for doc in [
            r#"{"metadata":{"name":"a"}}"#,
            r#"{"metadata":{"name":"a"},"spec":null}"#,
            r#"{"metadata":{"name":"a"},"spec":{}}"#,
        ] {
            let nad: NetworkAttachmentDefinition = serde_json::from_str(doc).unwrap();
            assert_eq!(nad.spec.config, "", "{doc}");
        }
        let nad: NetworkAttachmentDefinition =
            serde_json::from_str(r#"{"metadata":{"name":"a"},"spec":{"config":"{}"}}"#).unwrap();
        assert_eq!(nad.spec.config, "{}");
    }
}
