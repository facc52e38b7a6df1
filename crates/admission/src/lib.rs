//! `multus webhook`: a validating admission webhook that runs `multus lint`'s checks and the
//! admin's policy on NetworkAttachmentDefinitions (CREATE, UPDATE) and on pods' networks
//! annotations (CREATE), so a harmful NAD is refused at `kubectl apply` rather than found on a
//! node. It serves HTTPS with a certificate it makes and renews itself (shared by its
//! replicas through a Secret, and trusted through the webhook configuration's caBundle), or
//! with one that cert-manager keeps in files. docs/admission.md describes it.

mod certificate;
mod keeper;
mod review;
mod server;
mod verdict;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::Args;
use ipnet::IpNet;
use k8s::{ClientOptions, K8sError, KeepAlive, KubeClient, Resource};
use lint::{Linter, Policy, Setting, Uplink};
use serde_json::Value;

use certificate::{certified_key, CertError, Serving};
use keeper::Keeper;

#[derive(Args, Debug, Clone)]
pub struct Options {
    /// The address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// The admin's policy: a file with the policy, or its ConfigMap (as mounted from the
    /// ConfigMap). A file that was never there is the default policy. Read every round.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Serve the certificate in this directory (`tls.crt`, `tls.key`, as cert-manager
    /// writes them), read again when it changes, instead of making one. The caBundle is then
    /// someone else's to keep (cert-manager's cainjector).
    #[arg(long, value_name = "DIR")]
    pub certificate_dir: Option<PathBuf>,
    /// The namespace of the webhook's Service and Secret [default: the pod's own, from
    /// POD_NAMESPACE].
    #[arg(long)]
    pub namespace: Option<String>,
    /// The Service the API server calls: the certificate is made for its DNS names.
    #[arg(long, default_value = "multus-admission")]
    pub service: String,
    /// The Secret the replicas keep the self-made certificate in.
    #[arg(long, default_value = "multus-admission-tls")]
    pub secret: String,
    /// The ValidatingWebhookConfiguration whose caBundle is kept.
    #[arg(long, default_value = "multus-admission")]
    pub webhook_configuration: String,
    /// How long a self-made certificate lasts; it is renewed when a third of it is left.
    #[arg(long, value_name = "SECONDS", default_value_t = 365 * 24 * 3600)]
    pub certificate_lifetime: u64,
    /// How often the certificate, the policy and the cluster's networks are looked at.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub interval: u64,
    /// The cluster's networks when neither the policy nor the cluster (the nodes' podCIDRs,
    /// the ServiceCIDRs) says them.
    #[command(flatten)]
    pub networks: lint::ClusterNetworks,
    /// How many connections are served at once; more are closed as they come.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Where plugin binaries are, when cni-plugins is not beside this binary.
    #[arg(long, value_name = "DIR", default_value = "/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// A kubeconfig [default: the pod's service account].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("the server stopped: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Api(#[from] K8sError),
    #[error("{path}: {source}")]
    Certificate { path: PathBuf, source: CertError },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("stop signals: {0}")]
    Signals(std::io::Error),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("no namespace: give --namespace, or run in a pod with POD_NAMESPACE set")]
    NoNamespace,
    #[error("{0}")]
    Policy(#[from] lint::policy::PolicyError),
}

const NODES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "nodes",
};

const SERVICE_CIDRS: Resource = Resource {
    group: "networking.k8s.io",
    version: "v1",
    plural: "servicecidrs",
};

/// Serves until SIGTERM or SIGINT.
pub fn run(opts: &Options) -> Result<ExitCode, WebhookError> {
    let stop = nodekit::signals::Stop::block().map_err(WebhookError::Signals)?;
    let namespace = opts
        .namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .filter(|n| !n.is_empty())
        .ok_or(WebhookError::NoNamespace)?;
    // One client for the certificate's rounds, one for the checks' lists. A round that
    // fails is tried again at the next one, so a call is not retried within it.
    let client = || {
        KubeClient::new(&ClientOptions {
            kubeconfig: opts.kubeconfig.clone(),
            keep_alive: KeepAlive::Process,
            retries: 0,
            ..ClientOptions::default()
        })
    };
    let interval = Duration::from_secs(opts.interval.max(1));
    let mut certificate = match &opts.certificate_dir {
        Some(dir) => Certificate::Files {
            dir: dir.clone(),
            seen: None,
        },
        None => Certificate::Made {
            keeper: Box::new(Keeper {
                client: client()?,
                dns_names: service_names(&opts.service, &namespace),
                namespace: namespace.clone(),
                secret: opts.secret.clone(),
                configuration: opts.webhook_configuration.clone(),
                lifetime: Duration::from_secs(opts.certificate_lifetime.max(60)),
                interval,
            }),
            serving: None,
        },
    };
    // Nothing is served before there is a certificate to serve.
    let first = loop {
        match certificate.refresh() {
            Ok(Some(key)) => break key,
            Ok(None) => {}
            Err(e) => eprintln!("multus webhook: no certificate yet: {e}"),
        }
        if stop.wait(Duration::from_secs(2)) {
            return Ok(ExitCode::SUCCESS);
        }
    };
    let serving = Arc::new(Serving::new(first));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&serving) as Arc<dyn rustls::server::ResolvesServerCert>);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut checks = Checks::new(opts, client()?);
    let shared = Arc::new(server::Shared::new(
        Arc::new(tls),
        checks.linter(),
        opts.max_connections.max(1),
    ));
    let listener =
        TcpListener::bind(opts.listen).map_err(|e| WebhookError::Listen(opts.listen, e))?;
    eprintln!(
        "multus webhook: serving https://{} (POST /validate), {}",
        opts.listen,
        certificate.describe()
    );
    let serving_shared = Arc::clone(&shared);
    let server = std::thread::Builder::new()
        .name("accept".into())
        .spawn(move || server::serve(&listener, &serving_shared))
        .map_err(WebhookError::Serve)?;
    while !stop.wait(interval) {
        if server.is_finished() {
            break;
        }
        match certificate.refresh() {
            Ok(Some(key)) => {
                eprintln!("multus webhook: serving a new certificate");
                serving.replace(key);
            }
            Ok(None) => {}
            Err(e) => eprintln!("multus webhook: the certificate was not kept this round: {e}"),
        }
        if checks.changed() {
            if let Ok(mut linter) = shared.linter.write() {
                *linter = Arc::new(checks.linter());
            }
        }
    }
    if server.is_finished() {
        return match server.join() {
            Ok(Err(e)) => Err(WebhookError::Serve(e)),
            _ => Ok(ExitCode::FAILURE),
        };
    }
    eprintln!("multus webhook: stopped by a signal");
    Ok(ExitCode::SUCCESS)
}

/// The DNS names the API server may call the Service by.
fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Where the serving certificate comes from.
enum Certificate {
    /// Made here and kept in the Secret; `serving` is the pair last handed over.
    Made {
        keeper: Box<Keeper>,
        serving: Option<certificate::Pair>,
    },
    /// Files someone else renews; `seen` is their last modification times.
    Files {
        dir: PathBuf,
        seen: Option<(SystemTime, SystemTime)>,
    },
}

impl Certificate {
    fn describe(&self) -> String {
        match self {
            Certificate::Made { keeper, .. } => format!(
                "with a certificate of its own kept in Secret {}/{} and trusted through \
                 ValidatingWebhookConfiguration {}",
                keeper.namespace, keeper.secret, keeper.configuration
            ),
            Certificate::Files { dir, .. } => {
                format!("with the certificate in {}", dir.display())
            }
        }
    }

    /// The certificate to serve when it changed since the last call.
    fn refresh(&mut self) -> Result<Option<rustls::sign::CertifiedKey>, WebhookError> {
        match self {
            Certificate::Made { keeper, serving } => {
                let pair = match keeper.round() {
                    Ok(pair) => pair,
                    Err(e) => {
                        return match serving {
                            // Serving goes on with the certificate it has.
                            Some(_) => {
                                eprintln!("multus webhook: certificate round: {e}");
                                Ok(None)
                            }
                            None => Err(WebhookError::Certificate {
                                path: PathBuf::from(&keeper.secret),
                                source: CertError::Load(e.to_string()),
                            }),
                        };
                    }
                };
                if serving.as_ref() == Some(&pair) {
                    return Ok(None);
                }
                let key =
                    certified_key(pair.cert.as_bytes(), pair.key.as_bytes()).map_err(|source| {
                        WebhookError::Certificate {
                            path: PathBuf::from(&keeper.secret),
                            source,
                        }
                    })?;
                *serving = Some(pair);
                Ok(Some(key))
            }
            Certificate::Files { dir, seen } => {
                let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
                let times = (modified(&cert)?, modified(&key)?);
                if *seen == Some(times) {
                    return Ok(None);
                }
                let read = |p: &Path| {
                    std::fs::read(p).map_err(|source| WebhookError::Read {
                        path: p.to_owned(),
                        source,
                    })
                };
                let loaded = certified_key(&read(&cert)?, &read(&key)?)
                    .map_err(|source| WebhookError::Certificate { path: cert, source })?;
                *seen = Some(times);
                Ok(Some(loaded))
            }
        }
    }
}

fn modified(path: &Path) -> Result<SystemTime, WebhookError> {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|source| WebhookError::Read {
            path: path.to_owned(),
            source,
        })
}

/// What the checks are built from: the policy file and the cluster's networks, looked at
/// again every round.
struct Checks {
    policy_file: Option<PathBuf>,
    client: KubeClient,
    flags: (Vec<IpNet>, Vec<IpNet>),
    cni_bin_dir: PathBuf,
    /// The policy and networks the current linter was built from.
    built: Option<(Policy, Vec<IpNet>, Vec<IpNet>)>,
    /// The last failed list, said once until it changes.
    list_failed: std::cell::RefCell<Option<String>>,
}

impl Checks {
    fn new(opts: &Options, client: KubeClient) -> Checks {
        Checks {
            policy_file: opts.policy.clone(),
            client,
            flags: (
                opts.networks.pod_cidrs.clone(),
                opts.networks.service_cidrs.clone(),
            ),
            cni_bin_dir: opts.cni_bin_dir.clone(),
            built: None,
            list_failed: std::cell::RefCell::new(None),
        }
    }

    /// The policy in the file, the default one when there never was a file, or the last one
    /// read when the file is gone or wrong (said in the log).
    fn policy(&self) -> Policy {
        let Some(path) = &self.policy_file else {
            return Policy::default();
        };
        // A file that goes away (its ConfigMap key removed) keeps the policy in force, as
        // the nodes keep their copy; only a webhook that never had one uses the default.
        if !path.exists() {
            return self
                .built
                .as_ref()
                .map_or_else(Policy::default, |(p, _, _)| p.clone());
        }
        match Policy::read(path) {
            Ok(policy) => policy,
            Err(e) => {
                eprintln!("multus webhook: {e}: the policy in force stays");
                self.built
                    .as_ref()
                    .map_or_else(Policy::default, |(p, _, _)| p.clone())
            }
        }
    }

    /// The pod networks the nodes were given and the cluster's service networks; a list the
    /// webhook may not read or the cluster does not have leaves the flags' in force.
    fn cluster_networks(&self) -> (Vec<IpNet>, Vec<IpNet>) {
        let cidrs = |resource, pointer: &str| -> Vec<IpNet> {
            match self.client.list_objects_everywhere(resource) {
                Ok(items) => {
                    let mut nets: Vec<IpNet> = items
                        .iter()
                        .filter_map(|o| o.pointer(pointer).and_then(Value::as_array))
                        .flatten()
                        .filter_map(|c| c.as_str()?.parse().ok())
                        .collect();
                    nets.sort();
                    nets.dedup();
                    nets
                }
                Err(e) => {
                    let said = e.to_string();
                    let mut last = self.list_failed.borrow_mut();
                    if last.as_ref() != Some(&said) {
                        eprintln!("multus webhook: {said}: the flags' networks stand in");
                        *last = Some(said);
                    }
                    Vec::new()
                }
            }
        };
        let pods = cidrs(NODES, "/spec/podCIDRs");
        let services = cidrs(SERVICE_CIDRS, "/spec/cidrs");
        let or = |found: Vec<IpNet>, flag: &Vec<IpNet>| {
            if found.is_empty() {
                flag.clone()
            } else {
                found
            }
        };
        (or(pods, &self.flags.0), or(services, &self.flags.1))
    }

    /// Whether the policy or the networks differ from the current linter's.
    fn changed(&mut self) -> bool {
        let policy = self.policy();
        let (pods, services) = self.cluster_networks();
        let now = Some((policy, pods, services));
        if now == self.built {
            return false;
        }
        eprintln!("multus webhook: the policy or the cluster's networks changed: checks rebuilt");
        self.built = now;
        true
    }

    /// A linter for the policy and networks last read (read now, the first time).
    fn linter(&mut self) -> Linter {
        if self.built.is_none() {
            self.changed();
        }
        let (policy, pods, services) = self.built.clone().unwrap_or_else(|| {
            (
                Policy::default(),
                self.flags.0.clone(),
                self.flags.1.clone(),
            )
        });
        let shown = |nets: &[IpNet]| {
            nets.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        eprintln!(
            "multus webhook: checking against pod networks {}, service networks {} and the policy {}",
            shown(&pods),
            shown(&services),
            serde_json::to_string(&policy).unwrap_or_default()
        );
        Linter::new(Setting {
            pod_cidrs: pods,
            service_cidrs: services,
            uplink: Uplink::Unknown,
            dhcp_broadcast: false,
            cni_bin_dir: self.cni_bin_dir.clone(),
            namespace: "default".into(),
            policy,
        })
    }
}
