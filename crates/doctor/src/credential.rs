//! multus's credential: which one the runtime-run multus (or the daemon) uses, what kind it
//! is, and when it expires. Also how the doctor itself reaches the API.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k8s::{ClientOptions, UserCredential};
use lint::{Place, Report, Severity};
use serde_json::Value;

use crate::configs::{Mode, Multus};
use crate::{Node, Options};

/// A pod's service-account token, where Kubernetes mounts it.
const POD_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// Less than this left on a credential is worth a warning: a token rotated as it should be
/// never gets this close.
const SOON: Duration = Duration::from_secs(5 * 60);

/// What the doctor learnt: how to reach the API, whether that is as multus, and the node
/// multus's bound token names.
#[derive(Default)]
pub struct Credential {
    pub client: Option<ClientOptions>,
    pub multus_own: bool,
    pub node_name: Option<String>,
}

pub fn check(
    node: &Node,
    opts: &Options,
    multus: Option<&Multus>,
    report: &mut Report,
) -> Credential {
    let mut found = Credential::default();
    let own = multus
        .filter(|m| m.mode == Mode::Thin)
        .and_then(|m| m.conf.kubeconfig.clone().map(|k| (m, k)));
    if let Some((multus, kubeconfig)) = own {
        let place = Place {
            file: Some(multus.file.clone()),
            path: "kubeconfig".into(),
            ..Place::default()
        };
        if !node.path(&kubeconfig).is_file() {
            report.add(
                Severity::Error,
                "credential",
                place,
                format!(
                    "multus's kubeconfig {} is not there: every ADD fails",
                    kubeconfig.display()
                ),
                "the multus DaemonSet's pod writes it: check that it runs on this node",
            );
        } else {
            inspect_kubeconfig(node, &kubeconfig, report, &mut found);
            if node.is_local() {
                found.client = Some(options(Some(kubeconfig)));
                found.multus_own = true;
            }
        }
    } else if !k8s::in_cluster_available() {
        report.add(
            Severity::Note,
            "credential",
            Place::default(),
            match multus.map(|m| m.mode) {
                Some(Mode::Thick) => "thick mode: the daemon uses its pod's service account, which only its pod sees",
                _ => "multus's config names no kubeconfig, and the doctor does not run in a pod",
            },
            "run the doctor in the multus DaemonSet's pod (kubectl exec ... -- multus doctor --host-root /host), or pass --kubeconfig",
        );
    }
    if found.client.is_none() && k8s::in_cluster_available() {
        // In the DaemonSet's pod: its account is the one multus acts as.
        inspect_token_file(
            &Node::new(Path::new("/")),
            Path::new(POD_TOKEN),
            report,
            &mut found,
        );
        found.client = Some(options(None));
        found.multus_own = true;
    }
    // The API reached with the kubeconfig given (an admin's, to list the node's pods); what is
    // said above is still of multus's own credential.
    if let Some(kubeconfig) = &opts.kubeconfig {
        found.client = Some(options(Some(kubeconfig.clone())));
        found.multus_own = false;
    }
    found
}

fn options(kubeconfig: Option<PathBuf>) -> ClientOptions {
    ClientOptions {
        kubeconfig,
        timeout: Duration::from_secs(5),
        retries: 1,
        ..ClientOptions::default()
    }
}

fn inspect_kubeconfig(node: &Node, kubeconfig: &Path, report: &mut Report, found: &mut Credential) {
    let place = Place {
        file: Some(kubeconfig.to_owned()),
        ..Place::default()
    };
    let user = match k8s::kubeconfig_user(&node.path(kubeconfig)) {
        Ok((_, user)) => user,
        Err(e) => {
            report.add(
                Severity::Error,
                "credential",
                place,
                e.to_string(),
                "write a valid kubeconfig",
            );
            return;
        }
    };
    match user {
        UserCredential::Token {
            inline: Some(token),
            ..
        } => {
            describe_token(&token, "an inline token", place, report, found);
        }
        UserCredential::Token {
            file: Some(file), ..
        } => {
            inspect_token_file(node, &file, report, found);
        }
        UserCredential::Certificate { inline, file } => {
            let pem = match (inline, &file) {
                (Some(pem), _) => Some(pem),
                (None, Some(file)) => cni::input::read_file_to_string(&node.path(file)).ok(),
                (None, None) => None,
            };
            let per_node = file.as_deref().is_some_and(|f| {
                f.file_name()
                    .is_some_and(|n| n == k8s::client_certificate::CURRENT_FILE)
            });
            describe_certificate(pem.as_deref(), per_node, place, report);
        }
        UserCredential::Exec { command } => report.add(
            Severity::Info,
            "credential",
            place,
            format!(
                "a credential printed by {}, each time it is needed",
                cni::quote::quote(&command)
            ),
            "",
        ),
        UserCredential::Token { .. } => {}
        UserCredential::Other(what) => report.add(
            Severity::Warning,
            "credential",
            place,
            format!("the kubeconfig's user has {what}"),
            "give multus a service-account token (what `multus install` writes)",
        ),
    }
}

fn inspect_token_file(node: &Node, file: &Path, report: &mut Report, found: &mut Credential) {
    let place = Place {
        file: Some(file.to_owned()),
        ..Place::default()
    };
    match cni::input::read_file_to_string(&node.path(file)) {
        Ok(token) => describe_token(token.trim(), "a token", place, report, found),
        Err(e) => report.add(
            Severity::Error,
            "credential",
            place,
            format!("the token cannot be read: {e}; every call to the API fails"),
            "the multus DaemonSet's pod writes it: check that it runs on this node",
        ),
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
        .unwrap_or_default()
}

/// A span of seconds, in words.
fn span(seconds: i64) -> String {
    let s = seconds.unsigned_abs();
    match s {
        0..120 => format!("{s} s"),
        120..7_200 => format!("{} min", s / 60),
        7_200..172_800 => format!("{} h", s / 3_600),
        _ => format!("{} days", s / 86_400),
    }
}

/// The claims of a JWT (a service-account token), unverified: only what it says of itself.
fn claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn describe_token(
    token: &str,
    what: &str,
    place: Place,
    report: &mut Report,
    found: &mut Credential,
) {
    let Some(claims) = claims(token) else {
        report.add(
            Severity::Info,
            "credential",
            place,
            format!(
                "{what} that is not a JWT: whether and when it expires is the API server's to say"
            ),
            "",
        );
        return;
    };
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .unwrap_or("(no subject)");
    found.node_name = claims
        .pointer("/kubernetes.io/node/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let bound = found
        .node_name
        .as_deref()
        .map(|n| format!(", bound to node {n}"))
        .unwrap_or_default();
    let Some(exp) = claims.get("exp").and_then(Value::as_i64) else {
        report.add(
            Severity::Info,
            "credential",
            place,
            format!("{what} of {subject}{bound}, with no expiry"),
            "",
        );
        return;
    };
    let left = exp - now();
    let (severity, problem, fix) = if left <= 0 {
        (
            Severity::Error,
            format!("{what} of {subject}{bound}, expired {} ago: every pod start fails with Unauthorized", span(left)),
            "the multus DaemonSet's pod writes a fresh token while it runs: check that it is running on this node",
        )
    } else if left < SOON.as_secs().try_into().unwrap_or(i64::MAX) {
        (
            Severity::Warning,
            format!("{what} of {subject}{bound}, expires in {}", span(left)),
            "the multus DaemonSet's pod writes a fresh token while it runs: check that it is running on this node",
        )
    } else {
        (
            Severity::Info,
            format!("{what} of {subject}{bound}, expires in {}", span(left)),
            "",
        )
    };
    report.add(severity, "credential", place, problem, fix);
}

/// A client certificate's expiry. A per-node certificate (`multus-client-current.pem`) is
/// renewed by the DaemonSet's pod, and in thin mode by multus itself at its next call: one
/// that expired says the approver or the signer is not answering.
fn describe_certificate(pem: Option<&str>, per_node: bool, place: Place, report: &mut Report) {
    let Some(expires) = pem.and_then(|pem| k8s::x509::validity(pem).map(|v| v.not_after)) else {
        report.add(
            Severity::Warning,
            "credential",
            place,
            "a client certificate that cannot be read",
            "check the kubeconfig's client-certificate",
        );
        return;
    };
    let what = if per_node {
        "a per-node client certificate"
    } else {
        "a client certificate"
    };
    let left = expires - now();
    if left <= 0 {
        let fix = if per_node {
            "per-node certificates are renewed by the multus DaemonSet's pod and asked for by \
             multus when it finds none valid: check that `multus approve-certificates` runs \
             (kubectl -n multus get deploy multus-certificate-approver), that the node's \
             requests are approved (kubectl get csr), and that the controller manager signs \
             kubernetes.io/kube-apiserver-client"
        } else {
            "renew the certificate"
        };
        report.add(
            Severity::Error,
            "credential",
            place,
            format!(
                "{what} that expired {} ago: every call to the API fails until it is renewed",
                span(left)
            ),
            fix,
        );
    } else {
        report.add(
            Severity::Info,
            "credential",
            place,
            format!("{what}, expires in {}", span(left)),
            "",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &Value) -> String {
        let part =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.signature",
            part(&serde_json::json!({"alg": "RS256"})),
            part(claims)
        )
    }

    #[test]
    fn a_token_says_whose_it_is_its_node_and_when_it_expires() {
        let mut report = Report::default();
        let mut found = Credential::default();
        let token = jwt(&serde_json::json!({
            "sub": "system:serviceaccount:kube-system:multus",
            "exp": now() + 3_030,
            "kubernetes.io": {"node": {"name": "edge-1"}},
        }));
        describe_token(&token, "a token", Place::default(), &mut report, &mut found);
        assert_eq!(found.node_name.as_deref(), Some("edge-1"));
        let f = &report.findings[0];
        assert_eq!(f.severity, Severity::Info);
        assert!(
            f.problem.contains(
                "system:serviceaccount:kube-system:multus, bound to node edge-1, expires in 50 min"
            ),
            "{}",
            f.problem
        );
    }

    #[test]
    fn an_expired_per_node_certificate_points_to_its_approver() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 2);
        let expired = params.self_signed(&key).unwrap().pem();
        for (per_node, what, fix) in [
            (
                true,
                "a per-node client certificate that expired",
                "multus approve-certificates",
            ),
            (
                false,
                "a client certificate that expired",
                "renew the certificate",
            ),
        ] {
            let mut report = Report::default();
            describe_certificate(Some(&expired), per_node, Place::default(), &mut report);
            let f = &report.findings[0];
            assert_eq!(f.severity, Severity::Error);
            assert!(f.problem.starts_with(what), "{}", f.problem);
            assert!(f.fix.contains(fix), "{}", f.fix);
        }
    }

    #[test]
    fn an_expired_token_is_an_error_and_one_about_to_expire_a_warning() {
        for (exp, severity, words) in [
            (-600, Severity::Error, "expired 10 min ago"),
            (120, Severity::Warning, "expires in 2 min"),
        ] {
            let mut report = Report::default();
            let token = jwt(&serde_json::json!({"sub": "s", "exp": now() + exp}));
            describe_token(
                &token,
                "a token",
                Place::default(),
                &mut report,
                &mut Credential::default(),
            );
            let f = &report.findings[0];
            assert_eq!(f.severity, severity);
            assert!(f.problem.contains(words), "{}", f.problem);
            assert!(f.fix.contains("DaemonSet"), "{}", f.fix);
        }
    }

    #[test]
    fn a_token_that_is_no_jwt_is_described_without_an_expiry() {
        let mut report = Report::default();
        describe_token(
            "opaque",
            "a token",
            Place::default(),
            &mut report,
            &mut Credential::default(),
        );
        assert_eq!(report.findings[0].severity, Severity::Info);
        assert!(report.findings[0].problem.contains("not a JWT"));
    }
}
