//! The AdmissionReview object (`admission.k8s.io/v1`) as the API server sends it to a
//! validating webhook and reads the answer: only the fields this webhook uses.

use serde::Deserialize;
use serde_json::{json, Value};

/// What the API server asks about.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    pub kind: GroupVersionKind,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    /// The object as it would be stored; absent for DELETE.
    #[serde(default)]
    pub object: Value,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    pub kind: String,
}

/// Why a body is not an AdmissionReview this webhook answers.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not an AdmissionReview: {0}")]
    Json(serde_json::Error),
    #[error("AdmissionReview {0} is not served: this webhook speaks admission.k8s.io/v1")]
    Version(String),
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// The request in a review's body.
pub fn parse(body: &[u8]) -> Result<Request, ReviewError> {
    let mut review: Value = serde_json::from_slice(body).map_err(ReviewError::Json)?;
    let version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if version != "admission.k8s.io/v1" {
        return Err(ReviewError::Version(version.to_owned()));
    }
    match review.get_mut("request").map(Value::take) {
        Some(request) if !request.is_null() => {
            serde_json::from_value(request).map_err(ReviewError::Json)
        }
        _ => Err(ReviewError::NoRequest),
    }
}

/// The answer: admitted or denied with `message`, and `warnings` (which kubectl prints).
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    /// Why the object is denied; `None` admits it.
    pub denied: Option<String>,
    pub warnings: Vec<String>,
}

/// The API server passes on up to 4 KiB of warnings whole; past that it cuts every one to 256
/// characters. The warnings are kept within it here, each cut where the cut can be marked.
const MAX_WARNING: usize = 1024;
const MAX_WARNINGS_TOTAL: usize = 3800;

/// The review that carries `verdict` for the request `uid`.
pub fn answer(uid: &str, verdict: &Verdict) -> Value {
    let mut total = 0;
    let warnings: Vec<String> = verdict
        .warnings
        .iter()
        .map(|w| shorten(w, MAX_WARNING))
        .take_while(|w| {
            total += w.len();
            total <= MAX_WARNINGS_TOTAL
        })
        .collect();
    let mut response = json!({"uid": uid, "allowed": verdict.denied.is_none()});
    if let Some(message) = &verdict.denied {
        response["status"] = json!({
            "code": 403,
            "reason": "Forbidden",
            "message": message,
        });
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_is_read_and_answered_in_its_shape() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u-1","kind":{"group":"k8s.cni.cncf.io","version":"v1","kind":"NetworkAttachmentDefinition"},
            "operation":"CREATE","namespace":"ns","name":"n","object":{"kind":"x"}}}"#;
        let request = parse(body).unwrap();
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.kind.kind, "NetworkAttachmentDefinition");
        assert_eq!(request.operation, "CREATE");
        let denied = Verdict {
            denied: Some("no".into()),
            warnings: vec!["careful".into()],
        };
        assert_eq!(
            answer("u-1", &denied),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u-1", "allowed": false,
                                "status": {"code": 403, "reason": "Forbidden", "message": "no"},
                                "warnings": ["careful"]}})
        );
        assert_eq!(
            answer("u-2", &Verdict::default()),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u-2", "allowed": true}})
        );
    }

    #[test]
    fn other_versions_and_bodies_are_refused() {
        let v1beta1 = br#"{"apiVersion":"admission.k8s.io/v1beta1","request":{}}"#;
        assert!(matches!(parse(v1beta1), Err(ReviewError::Version(_))));
        assert!(matches!(parse(b"{"), Err(ReviewError::Json(_))));
        let empty = br#"{"apiVersion":"admission.k8s.io/v1"}"#;
        assert!(matches!(parse(empty), Err(ReviewError::NoRequest)));
    }

    #[test]
    fn long_warnings_are_cut_on_a_character() {
        let long = "é".repeat(600);
        let cut = shorten(&long, MAX_WARNING);
        assert!(cut.len() <= MAX_WARNING && cut.ends_with("..."));
    }
}
