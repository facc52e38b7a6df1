//! Per-node client certificates (`perNodeCertificate`): a key made on the node, a
//! CertificateSigningRequest to the API server's client signer for `system:multus:<node>` in
//! group `system:multus`, and the signed certificate kept where and as client-go keeps it
//! (certificate and key in one PEM file, `multus-client-current.pem` linking to it), so that
//! upstream's daemon and ours take over each other's certificates.

use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::x509::{self, Validity};
use crate::{K8sError, KubeClient, Resource};

/// The signer of client certificates the API server trusts.
pub const SIGNER_NAME: &str = "kubernetes.io/kube-apiserver-client";
/// The group of every node's multus identity, and the prefix of its user name.
pub const GROUP: &str = "system:multus";
/// What a request asks the certificate to be used for, as the certificates API names it.
pub const USAGES: [&str; 2] = ["digital signature", "client auth"];
/// The file the current certificate and key are read from: a link to the latest.
pub const CURRENT_FILE: &str = "multus-client-current.pem";
const FILE_PREFIX: &str = "multus-client-";
/// The shortest lifetime the certificates API takes (`spec.expirationSeconds`), and
/// upstream's default `certDuration`.
pub const SHORTEST_LIFETIME: Duration = Duration::from_secs(600);

/// `certDuration` (a Go duration; upstream's default when absent), or why it cannot be one.
pub fn lifetime(text: Option<&str>) -> Result<Duration, String> {
    let Some(text) = text else {
        return Ok(SHORTEST_LIFETIME);
    };
    cni::go_duration::parse(text)
        .filter(|d| *d >= SHORTEST_LIFETIME)
        .ok_or_else(|| {
            format!(
                "{}: use a Go duration of 10m or more, such as \"10m\" or \"24h\"",
                cni::quote::quote(text)
            )
        })
}

pub const CSR_RESOURCE: Resource = Resource {
    group: "certificates.k8s.io",
    version: "v1",
    plural: "certificatesigningrequests",
};

/// The user name a node's certificate carries: `system:multus:<node>`.
pub fn user_name(node: &str) -> String {
    format!("{GROUP}:{node}")
}

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("cannot make a key and a certificate signing request: {0}")]
    Key(String),
    #[error(transparent)]
    Api(#[from] K8sError),
    #[error("bootstrap kubeconfig {}: {source}", path.display())]
    Bootstrap { path: PathBuf, source: K8sError },
    #[error("certificate signing request {name} was denied: {message}")]
    Denied { name: String, message: String },
    #[error("certificate signing request {name} failed: {message}")]
    Failed { name: String, message: String },
    #[error(
        "certificate signing request {name} was not approved and signed within {}s: is the \
         approver of multus's requests running (deploy/per-node-certificate), and does the \
         controller manager sign kubernetes.io/kube-apiserver-client?",
        waited.as_secs()
    )]
    NotSigned { name: String, waited: Duration },
    #[error("certificate signing request {name}: its certificate is not a PEM certificate")]
    NotACertificate { name: String },
    #[error(
        "{} was held by another process for {}s: it is asking for a certificate; try again",
        path.display(),
        waited.as_secs()
    )]
    Busy { path: PathBuf, waited: Duration },
    #[error("cannot {what} {}: {source}", path.display())]
    Store {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl CertificateError {
    /// As the setup error of a client that reads the certificate in `dir`: one to try again
    /// while the certificate is being made, one to fix otherwise.
    pub fn into_setup(self, dir: &Path) -> K8sError {
        let from = format!("the per-node certificate in {}", dir.display());
        match self {
            CertificateError::Api(e) => e,
            e @ (CertificateError::NotSigned { .. } | CertificateError::Busy { .. }) => {
                K8sError::not_yet(from, &e)
            }
            other => K8sError::setup(from, &other),
        }
    }
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub certificate: String,
    pub key: String,
    pub validity: Validity,
}

impl KubeClient {
    /// Asks for a client certificate for `node` that lasts `lifetime`, and waits up to `wait`
    /// for it to be approved and signed.
    pub fn request_client_certificate(
        &self,
        node: &str,
        lifetime: Duration,
        wait: Duration,
    ) -> Result<Issued, CertificateError> {
        let key = rcgen::KeyPair::generate().map_err(|e| CertificateError::Key(e.to_string()))?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
            .map_err(|e| CertificateError::Key(e.to_string()))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, user_name(node));
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, GROUP);
        let request = params
            .serialize_request(&key)
            .and_then(|r| r.pem())
            .map_err(|e| CertificateError::Key(e.to_string()))?;
        let object = json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"generateName": format!("multus-{node}-")},
            "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(request),
                "signerName": SIGNER_NAME,
                "usages": USAGES,
                "expirationSeconds": lifetime.max(SHORTEST_LIFETIME).as_secs(),
            },
        });
        let created = self.create_cluster_object(CSR_RESOURCE, &object)?;
        let name = created
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let began = Instant::now();
        loop {
            if let Some(csr) = self.get_cluster_object(CSR_RESOURCE, &name)? {
                if let Some(certificate) = signed(&name, &csr)? {
                    let validity = x509::validity(&certificate)
                        .ok_or_else(|| CertificateError::NotACertificate { name: name.clone() })?;
                    return Ok(Issued {
                        certificate,
                        key: key.serialize_pem(),
                        validity,
                    });
                }
            }
            if began.elapsed() >= wait {
                return Err(CertificateError::NotSigned { name, waited: wait });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The certificate of a signed request; `None` while it waits; an error once it was denied
/// or failed.
fn signed(name: &str, csr: &Value) -> Result<Option<String>, CertificateError> {
    let conditions = csr
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for condition in conditions {
        let field = |f: &str| condition.get(f).and_then(Value::as_str).unwrap_or_default();
        if field("status") != "True" {
            continue;
        }
        let message = format!("{}: {}", field("reason"), field("message"));
        match field("type") {
            "Denied" => {
                return Err(CertificateError::Denied {
                    name: name.to_owned(),
                    message,
                })
            }
            "Failed" => {
                return Err(CertificateError::Failed {
                    name: name.to_owned(),
                    message,
                })
            }
            _ => {}
        }
    }
    let Some(encoded) = csr
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    else {
        return Ok(None);
    };
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|pem| String::from_utf8(pem).ok())
        .map(Some)
        .ok_or_else(|| CertificateError::NotACertificate {
            name: name.to_owned(),
        })
}

/// The longest lifetime the approver lets a request ask for.
pub const LONGEST_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// What the approver does with a certificate signing request.
#[derive(Debug, PartialEq, Eq)]
pub enum Review {
    /// Not multus's (another signer, another subject), or decided already: left alone.
    NotOurs,
    Approve {
        node: String,
    },
    Deny {
        reason: &'static str,
        message: String,
    },
}

/// Reviews a request for multus's signer and subjects: approved only when a node asks for
/// `system:multus:<that node>` in group `system:multus` alone, for a client certificate and
/// nothing more, for at most a year.
pub fn review(csr: &Value) -> Review {
    let text = |p: &str| csr.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let decided = csr
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("Approved" | "Denied" | "Failed")
                )
            })
        });
    if text("/spec/signerName") != SIGNER_NAME || decided || !text("/status/certificate").is_empty()
    {
        return Review::NotOurs;
    }
    let subject = base64::engine::general_purpose::STANDARD
        .decode(text("/spec/request"))
        .ok()
        .and_then(|pem| String::from_utf8(pem).ok())
        .and_then(|pem| x509::request_subject(&pem));
    let prefix = format!("{GROUP}:");
    let Some(subject) = subject.filter(|s| {
        s.common_name
            .as_deref()
            .is_some_and(|cn| cn.starts_with(&prefix))
    }) else {
        return Review::NotOurs;
    };
    let common_name = subject.common_name.unwrap_or_default();
    let deny = |reason, message: String| Review::Deny { reason, message };
    let requester = text("/spec/username");
    let groups: Vec<&str> = csr
        .pointer("/spec/groups")
        .and_then(Value::as_array)
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The requester is the node itself (its kubelet's credential). A node's multus
    // certificate never asks for its successor: one taken from a node ends with its lifetime.
    let node = requester
        .strip_prefix("system:node:")
        .filter(|n| groups.contains(&"system:nodes") && crate::objects::is_object_name(n));
    let Some(node) = node else {
        return deny(
            "NotANode",
            format!("requested by {requester:?} in groups {groups:?}: only the node may ask"),
        );
    };
    if common_name != user_name(node) {
        return deny(
            "OtherNode",
            format!(
                "node {node} asked for {common_name:?}: a node may ask only for {:?}",
                user_name(node)
            ),
        );
    }
    if subject.organizations != [GROUP] {
        return deny(
            "Groups",
            format!(
                "organizations {:?}: only [\"{GROUP}\"] is approved",
                subject.organizations
            ),
        );
    }
    let mut usages: Vec<&str> = csr
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    usages.sort_unstable();
    usages.dedup();
    let mut wanted = USAGES.to_vec();
    wanted.sort_unstable();
    if usages != wanted {
        return deny(
            "Usages",
            format!("usages {usages:?}: only {USAGES:?} are approved"),
        );
    }
    match csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_u64)
    {
        Some(s) if s <= LONGEST_LIFETIME.as_secs() => Review::Approve {
            node: node.to_owned(),
        },
        other => deny(
            "Lifetime",
            format!(
                "expirationSeconds {other:?}: a lifetime of at most {} s must be asked for",
                LONGEST_LIFETIME.as_secs()
            ),
        ),
    }
}

impl KubeClient {
    /// Writes the review's decision on the request (its `approval` subresource), unless it
    /// changed since it was read.
    pub fn decide_certificate_request(
        &self,
        csr: &Value,
        approve: bool,
        reason: &str,
        message: &str,
    ) -> Result<crate::Written, K8sError> {
        let name = csr
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let approval = Resource {
            plural: "certificatesigningrequests/approval",
            ..CSR_RESOURCE
        };
        let call = crate::objects::cluster_call("update", approval, name)?;
        let mut decided = csr.clone();
        let condition = json!({
            "type": if approve { "Approved" } else { "Denied" },
            "status": "True",
            "reason": reason,
            "message": message,
        });
        match decided
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            Some(conditions) => conditions.push(condition),
            None => decided["status"] = json!({"conditions": [condition]}),
        }
        let path =
            format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval");
        match self.send_json(
            call,
            http::Method::PUT,
            path,
            "application/json",
            Some(&decided),
        ) {
            Ok(v) => Ok(crate::Written::Done(v)),
            Err(e) if matches!(e.cause(), Some(crate::Cause::Conflict(_))) => {
                Ok(crate::Written::Stale)
            }
            Err(e) => Err(e),
        }
    }
}

/// The validity of the current certificate in `dir`, if there is one that can be read.
pub fn current(dir: &Path) -> Option<Validity> {
    let text = cni::input::read_file_to_string(&dir.join(CURRENT_FILE)).ok()?;
    x509::validity(&text)
}

/// When a certificate is renewed: at a point between 70% and 90% of its lifetime, as
/// client-go's manager does, so that the nodes of a cluster do not all ask at once. `jitter`
/// (0 to 1) picks the point.
pub fn renewal_due(validity: Validity, jitter: f64) -> SystemTime {
    let lifetime = (validity.not_after - validity.not_before).max(0) as f64;
    let at = validity.not_before as f64 + lifetime * (0.7 + 0.2 * jitter.clamp(0.0, 1.0));
    UNIX_EPOCH + Duration::try_from_secs_f64(at).unwrap_or_default()
}

/// A validity whose lifetime counts from `issued`, when that is later than its `notBefore`:
/// kube's signer backdates `notBefore` by 5 minutes, which a short certificate would spend
/// most of its lifetime on, and be due for renewal as soon as it is issued.
pub fn issued_at(validity: Validity, issued: SystemTime) -> Validity {
    let issued = issued
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    Validity {
        not_before: validity.not_before.max(issued.min(validity.not_after)),
        ..validity
    }
}

/// Keeps `issued` in `dir`: a new file (mode 0600) of certificate and key, then the current
/// link moved to it in one rename, then the older files removed (client-go keeps them all;
/// a node renewing every few minutes would fill the directory).
pub fn store(dir: &Path, issued: &Issued) -> Result<PathBuf, CertificateError> {
    std::fs::create_dir_all(dir).map_err(fail("make", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(fail("restrict", dir))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let name = format!(
        "{FILE_PREFIX}{}-{:09}.pem",
        now.as_secs(),
        now.subsec_nanos()
    );
    let file = dir.join(&name);
    let pem = format!("{}\n{}", issued.certificate, issued.key);
    cni::atomic_file::write(&file, pem.as_bytes(), 0o600).map_err(fail("write", &file))?;
    let current = dir.join(CURRENT_FILE);
    cni::atomic_file::symlink(Path::new(&name), &current).map_err(fail("link", &current))?;
    for entry in std::fs::read_dir(dir).map_err(fail("read", dir))?.flatten() {
        let old = entry.file_name();
        let old = old.to_string_lossy();
        if old.starts_with(FILE_PREFIX)
            && old.ends_with(".pem")
            && old != name
            && old != CURRENT_FILE
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(file)
}

/// A kubeconfig that reaches the bootstrap kubeconfig's server as the node's certificate in
/// `dir`: the current context's cluster kept as it is, the user replaced.
pub fn kubeconfig(bootstrap: &Path, dir: &Path) -> Result<String, K8sError> {
    let from = format!("bootstrap kubeconfig {}", bootstrap.display());
    let config =
        crate::credentials::read_kubeconfig(bootstrap).map_err(|e| K8sError::setup(&from, &*e))?;
    let current = config.current_context.as_deref().unwrap_or_default();
    let cluster = config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| config.clusters.iter().find(|n| n.name == c.cluster))
        .ok_or_else(|| {
            let e: Box<dyn std::error::Error + Send + Sync> =
                "its current context names no cluster".into();
            K8sError::setup(&from, &*e)
        })?;
    let cluster = serde_json::to_value(cluster).map_err(|e| K8sError::setup(&from, &e))?;
    let certificate = dir.join(CURRENT_FILE).display().to_string();
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster["cluster"]}],
        "users": [{"name": "multus", "user": {
            "client-certificate": certificate,
            "client-key": certificate,
        }}],
        "contexts": [{"name": "multus", "context": {"cluster": "cluster", "user": "multus"}}],
        "current-context": "multus",
    });
    // JSON is YAML: the file is read by every kubeconfig reader.
    serde_json::to_string_pretty(&kubeconfig).map_err(|e| K8sError::setup(&from, &e))
}

/// A node's certificate kept current: where it lives, whom it is for, and the credential that
/// asks for the first one (upstream's `perNodeCertificate` keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerNode {
    pub node: String,
    /// `bootstrapKubeconfig`: a credential that may ask for certificates, such as the
    /// kubelet's; used when there is no valid certificate of the node's own.
    pub bootstrap: PathBuf,
    /// `certDir`.
    pub dir: PathBuf,
    /// `certDuration`.
    pub lifetime: Duration,
}

/// What [`PerNode::keep`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// When the next renewal is due.
    pub due: SystemTime,
    /// Whether a certificate was asked for and kept.
    pub renewed: bool,
}

/// How long a request may wait for its approval and signature (client-go's manager waits as
/// long for its first certificate).
pub const SIGNING_WAIT: Duration = Duration::from_secs(120);

/// The kubeconfig, in `certDir`, through which the node's certificate is used.
pub const KUBECONFIG_FILE: &str = "multus.kubeconfig";

impl PerNode {
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join(KUBECONFIG_FILE)
    }

    /// Writes `certDir/multus.kubeconfig` (the bootstrap kubeconfig's cluster, with the
    /// certificate as its user), for a process that reads the certificate through it.
    pub fn write_kubeconfig(&self) -> Result<PathBuf, CertificateError> {
        let text = kubeconfig(&self.bootstrap, &self.dir)?;
        let path = self.kubeconfig();
        if cni::input::read_file_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::create_dir_all(&self.dir).map_err(fail("make", &self.dir))?;
            cni::atomic_file::write(&path, text.as_bytes(), 0o600).map_err(fail("write", &path))?;
        }
        Ok(path)
    }

    /// The current certificate, if one is valid now, with its lifetime counted from when it
    /// was kept here when that is later than its notBefore (see [`issued_at`]).
    fn valid(&self, now: SystemTime) -> Option<Validity> {
        let validity = current(&self.dir).filter(|v| now < UNIX_EPOCH + secs(v.not_after))?;
        let kept = std::fs::metadata(self.dir.join(CURRENT_FILE))
            .and_then(|m| m.modified())
            .unwrap_or(UNIX_EPOCH);
        Some(issued_at(validity, kept))
    }

    /// Makes sure a certificate is current: asks for one when there is none still valid, or
    /// when its renewal is due (`jitter` as in [`renewal_due`]). Says when the next renewal is
    /// due, and whether a certificate was asked for.
    pub fn keep(&self, jitter: f64) -> Result<Kept, CertificateError> {
        let _lock = self.lock(SIGNING_WAIT)?;
        let now = SystemTime::now();
        if let Some(validity) = self.valid(now) {
            let due = renewal_due(validity, jitter);
            if now < due {
                return Ok(Kept {
                    due,
                    renewed: false,
                });
            }
        }
        let issued = self.request(SIGNING_WAIT)?;
        store(&self.dir, &issued)?;
        // Due as the next look will count it: from the file just kept.
        let validity = self
            .valid(SystemTime::now())
            .unwrap_or_else(|| issued_at(issued.validity, now));
        Ok(Kept {
            due: renewal_due(validity, jitter),
            renewed: true,
        })
    }

    /// For a process that cannot wait for another's renewals (thin multus, while the
    /// DaemonSet's pod is down): asks for a certificate now when there is none valid, or when
    /// less than a tenth of its lifetime is left. One process at a time asks, holding
    /// `certDir/.lock`; the others then find its certificate. True when one was asked for.
    pub fn renew_if_ending(&self, wait: Duration) -> Result<bool, CertificateError> {
        let ending = |now: SystemTime| {
            self.valid(now).is_none_or(|v| {
                let tenth = (v.not_after - v.not_before) / 10;
                now >= UNIX_EPOCH + secs(v.not_after - tenth)
            })
        };
        if !ending(SystemTime::now()) {
            return Ok(false);
        }
        let _lock = self.lock(wait)?;
        // Another process may have renewed it while this one waited for the lock.
        if !ending(SystemTime::now()) {
            return Ok(false);
        }
        let issued = self.request(wait)?;
        store(&self.dir, &issued)?;
        Ok(true)
    }

    /// `certDir/.lock`, held while a certificate is asked for and kept: two processes
    /// storing at once could each remove the other's new file. Waited for `wait` at most.
    fn lock(&self, wait: Duration) -> Result<std::fs::File, CertificateError> {
        std::fs::create_dir_all(&self.dir).map_err(fail("make", &self.dir))?;
        let path = self.dir.join(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(fail("open", &path))?;
        let deadline = Instant::now() + wait;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(lock),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(CertificateError::Busy { path, waited: wait })
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(fail("lock", &path)(e)),
            }
        }
    }

    /// Always with the bootstrap credential, which its owner (the kubelet) keeps valid: the
    /// node's certificate never asks for its successor, so one taken from a node lasts no
    /// longer than `certDuration`.
    fn request(&self, wait: Duration) -> Result<Issued, CertificateError> {
        let client = KubeClient::new(&crate::ClientOptions {
            kubeconfig: Some(self.bootstrap.clone()),
            ..crate::ClientOptions::default()
        })
        .map_err(|source| CertificateError::Bootstrap {
            path: self.bootstrap.clone(),
            source,
        })?;
        client.request_client_certificate(&self.node, self.lifetime, wait)
    }
}

/// The error of a file operation on the certificates' directory.
fn fail(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CertificateError {
    let path = path.to_owned();
    move |source| CertificateError::Store { what, path, source }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

/// A number from 0 to 1, different in every process: where between 70% and 90% of the
/// lifetime this node renews.
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(days: u32) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 12, 1);
        params.not_after = rcgen::date_time_ymd(2026, 12, 1 + u8::try_from(days).unwrap());
        let certificate = params.self_signed(&key).unwrap().pem();
        let validity = x509::validity(&certificate).unwrap();
        Issued {
            certificate,
            key: key.serialize_pem(),
            validity,
        }
    }

    /// A thin ADD that finds the certificate still being made is retried by the runtime
    /// (11); one refused for good names a config to fix (7).
    #[test]
    fn a_certificate_being_made_is_worth_another_try_and_a_denied_one_is_not() {
        let dir = Path::new("/var/lib/multus/certs");
        let code = |e: CertificateError| e.into_setup(dir).cni_code();
        let name = "multus-node-a".to_owned();
        assert_eq!(
            code(CertificateError::NotSigned {
                name: name.clone(),
                waited: Duration::from_secs(20)
            }),
            cni::Code::TryAgainLater
        );
        assert_eq!(
            code(CertificateError::Busy {
                path: dir.join(".lock"),
                waited: Duration::from_secs(20)
            }),
            cni::Code::TryAgainLater
        );
        assert_eq!(
            code(CertificateError::Denied {
                name,
                message: "OtherNode".into()
            }),
            cni::Code::InvalidConfig
        );
    }

    #[test]
    fn jitter_is_a_fraction() {
        assert!((0.0..1.0).contains(&jitter()));
    }

    #[test]
    fn renewal_is_due_between_70_and_90_percent_of_the_lifetime() {
        let validity = Validity {
            not_before: 1_000,
            not_after: 2_000,
        };
        let at = |jitter| {
            renewal_due(validity, jitter)
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        assert_eq!(at(0.0), 1_700);
        assert_eq!(at(0.5), 1_800);
        assert_eq!(at(1.0), 1_900);
        assert_eq!(at(7.0), 1_900);
    }

    #[test]
    fn a_backdated_certificate_counts_its_lifetime_from_its_issue() {
        // kube's signer: notBefore 5 minutes before the issue, notAfter 1 minute after.
        let validity = Validity {
            not_before: 1_000,
            not_after: 1_360,
        };
        let issued = UNIX_EPOCH + Duration::from_secs(1_300);
        let due = renewal_due(issued_at(validity, issued), 0.0);
        assert_eq!(due, UNIX_EPOCH + Duration::from_secs(1_342));
        // Issued before its notBefore (a clock behind), or after its end: its own bounds.
        assert_eq!(issued_at(validity, UNIX_EPOCH), validity);
        let late = issued_at(validity, UNIX_EPOCH + Duration::from_secs(9_999));
        assert_eq!(late.not_before, 1_360);
    }

    #[test]
    fn the_current_link_moves_to_each_new_certificate_and_old_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        assert_eq!(current(&certs), None);
        let first = store(&certs, &issued(2)).unwrap();
        assert_eq!(current(&certs).unwrap(), issued(2).validity);
        let second = store(&certs, &issued(3)).unwrap();
        assert_eq!(current(&certs).unwrap(), issued(3).validity);
        assert!(!first.exists(), "the older certificate is removed");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&second), 0o600);
        assert_eq!(mode(&certs), 0o700);
        let text = std::fs::read_to_string(certs.join(CURRENT_FILE)).unwrap();
        assert!(text.contains("BEGIN CERTIFICATE") && text.contains("BEGIN PRIVATE KEY"));
        let names: Vec<_> = std::fs::read_dir(&certs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    /// A request as the API server keeps it: `requester` in `groups` asks for `cn` in `orgs`.
    fn csr(requester: &str, groups: &[&str], cn: &str, orgs: &[&str]) -> Value {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *org);
        }
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        json!({
            "metadata": {"name": "multus-node-1-x7"},
            "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(pem),
                "signerName": SIGNER_NAME,
                "usages": ["client auth", "digital signature"],
                "expirationSeconds": 600,
                "username": requester,
                "groups": groups,
            },
        })
    }

    #[test]
    fn only_a_node_asking_for_its_own_multus_identity_is_approved() {
        let node = ["system:nodes", "system:authenticated"];
        let multus = ["system:multus", "system:authenticated"];
        let approved = Review::Approve {
            node: "node-1".into(),
        };
        let own = csr(
            "system:node:node-1",
            &node,
            "system:multus:node-1",
            &[GROUP],
        );
        assert_eq!(review(&own), approved);
        let renewing = csr(
            "system:multus:node-1",
            &multus,
            "system:multus:node-1",
            &[GROUP],
        );
        // The certificate itself may not ask for its successor.
        assert!(matches!(
            review(&renewing),
            Review::Deny {
                reason: "NotANode",
                ..
            }
        ));
        let reason = |csr: &Value| match review(csr) {
            Review::Deny { reason, .. } => reason,
            other => panic!("{other:?}"),
        };
        let other_node = csr(
            "system:node:node-2",
            &node,
            "system:multus:node-1",
            &[GROUP],
        );
        assert_eq!(reason(&other_node), "OtherNode");
        let masters = csr(
            "system:node:node-1",
            &node,
            "system:multus:node-1",
            &[GROUP, "system:masters"],
        );
        assert_eq!(reason(&masters), "Groups");
        let tenant = csr(
            "system:serviceaccount:t:default",
            &["system:serviceaccounts"],
            "system:multus:node-1",
            &[GROUP],
        );
        assert_eq!(reason(&tenant), "NotANode");
        // A node's name without the node's group is not a node.
        let pretender = csr("system:node:node-1", &[], "system:multus:node-1", &[GROUP]);
        assert_eq!(reason(&pretender), "NotANode");
        let mut serving = own.clone();
        serving["spec"]["usages"] = json!(["digital signature", "server auth"]);
        assert_eq!(reason(&serving), "Usages");
        let mut forever = own.clone();
        forever["spec"]
            .as_object_mut()
            .unwrap()
            .remove("expirationSeconds");
        assert_eq!(reason(&forever), "Lifetime");
        // Other subjects, other signers, and what is decided already are not the approver's.
        let kubelet = csr(
            "system:node:node-1",
            &node,
            "system:node:node-1",
            &["system:nodes"],
        );
        assert_eq!(review(&kubelet), Review::NotOurs);
        let mut other_signer = own.clone();
        other_signer["spec"]["signerName"] = json!("kubernetes.io/kubelet-serving");
        assert_eq!(review(&other_signer), Review::NotOurs);
        let mut approved_already = own.clone();
        approved_already["status"] =
            json!({"conditions": [{"type": "Approved", "status": "True"}]});
        assert_eq!(review(&approved_already), Review::NotOurs);
    }

    #[test]
    fn a_call_waits_for_anothers_request_no_longer_than_its_own_wait() {
        let dir = tempfile::tempdir().unwrap();
        let per_node = PerNode {
            node: "n".into(),
            bootstrap: dir.path().join("kubelet.conf"),
            dir: dir.path().join("certs"),
            lifetime: SHORTEST_LIFETIME,
        };
        let held = per_node.lock(Duration::ZERO).unwrap();
        let began = Instant::now();
        let e = per_node
            .renew_if_ending(Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(e, CertificateError::Busy { .. }), "{e}");
        assert!(began.elapsed() < Duration::from_secs(2));
        drop(held);
        // Free again, it goes on to ask, and says which kubeconfig it could not use.
        let e = per_node.renew_if_ending(Duration::ZERO).unwrap_err();
        assert!(e.to_string().starts_with("bootstrap kubeconfig"), "{e}");
        assert_eq!(current(&per_node.dir), None);
    }

    #[test]
    fn a_denied_or_failed_request_says_why_and_a_waiting_one_waits() {
        let waiting = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "AutoApproved", "message": ""}]}});
        assert!(signed("r", &waiting).unwrap().is_none());
        let denied = json!({"status": {"conditions": [
            {"type": "Denied", "status": "True", "reason": "NotMultus",
             "message": "the common name is not system:multus:n"}]}});
        let e = signed("r", &denied).unwrap_err().to_string();
        assert_eq!(
            e,
            "certificate signing request r was denied: NotMultus: the common name is not \
             system:multus:n"
        );
        let failed = json!({"status": {"conditions": [
            {"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
             "message": "x"}]}});
        assert!(matches!(
            signed("r", &failed),
            Err(CertificateError::Failed { .. })
        ));
        let garbage = json!({"status": {"certificate": "not base64!"}});
        assert!(matches!(
            signed("r", &garbage),
            Err(CertificateError::NotACertificate { .. })
        ));
    }
}
