//! `multus install`: the node entrypoint the multus DaemonSet runs. It puts `multus` and
//! `cni-plugins` (with a link per plugin) into the CNI bin directory, writes the kubeconfig
//! multus uses and `00-multus.conf` around the node's primary network, and keeps them current
//! until it is told to stop.

mod admission;
mod binaries;
mod conf;
mod kubeconfig;
mod missing;
mod relay;
mod whereabouts;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::{ArgAction, Args};

/// Every flag keeps the name the Multus entrypoint gives it, so existing DaemonSets and
/// MicroShift's manifests keep working.
#[derive(Args, Debug, Clone)]
pub struct Options {
    /// CNI binary directory on the host, as mounted in this container.
    #[arg(long, default_value = "/host/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// CNI config directory on the host, as mounted; 00-multus.conf and multus.d/ go here.
    #[arg(long, default_value = "/host/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// cniVersion for the multus config; must equal the primary network's unless forced.
    #[arg(long)]
    pub cni_version: Option<String>,
    /// Use --cni-version even when the primary network declares another one.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", hide = true)]
    pub force_cni_version: bool,
    /// "auto" generates the multus config from the primary network; a path copies that file.
    #[arg(long, default_value = "auto")]
    pub multus_conf_file: String,
    /// The multus binary to install [default: this binary].
    #[arg(long)]
    pub multus_bin_file: Option<PathBuf>,
    /// The cni-plugins binary to install [default: cni-plugins beside this binary].
    #[arg(long)]
    pub cni_plugins_bin_file: Option<PathBuf>,
    /// Do not install the multus binary (the node has its own).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub skip_multus_binary_copy: bool,
    /// Written into the config as multus's `confDir` (where NADs with an empty spec are read).
    #[arg(long)]
    pub multus_cni_conf_dir: Option<String>,
    /// Path of the kubeconfig as the host sees it; multus, run by the runtime, reads it there.
    #[arg(long, default_value = "/etc/cni/net.d/multus.d/multus.kubeconfig")]
    pub multus_kubeconfig_file_host: PathBuf,
    /// The primary network's file in --multus-autoconfig-dir [default: the first config there].
    #[arg(long)]
    pub multus_master_cni_file_name: Option<String>,
    /// Pods may use only NADs from their own namespace and the global ones.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub namespace_isolation: bool,
    /// Comma-separated namespaces whose NADs every pod may use (with --namespace-isolation).
    #[arg(long)]
    pub global_namespaces: Option<String>,
    /// Where to look for the primary network's config.
    #[arg(long, default_value = "/host/etc/cni/net.d")]
    pub multus_autoconfig_dir: PathBuf,
    /// multus logs to stderr (the runtime's log).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub multus_log_to_stderr: bool,
    /// multus's log level: panic, error, verbose or debug.
    #[arg(long)]
    pub multus_log_level: Option<String>,
    /// multus's log file on the host.
    #[arg(long)]
    pub multus_log_file: Option<String>,
    /// Rotate the log file once past this many MB (`logOptions.maxSize`).
    #[arg(long)]
    pub multus_log_max_size: Option<u64>,
    /// Keep this many rotated log files (`logOptions.maxBackups`).
    #[arg(long)]
    pub multus_log_max_backups: Option<u64>,
    /// Compress rotated log files (`logOptions.compress`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub multus_log_compress: Option<bool>,
    /// Copy the lines multus appends to this file (the log file, as this container sees it)
    /// to stdout, so the DaemonSet's log shows every CNI call on the node.
    #[arg(long)]
    pub relay_log: Option<PathBuf>,
    /// Name the multus network after the primary network instead of multus-cni-network.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub override_network_name: bool,
    /// Remove the multus config when stopped, so the node falls back to the primary network.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub cleanup_config_on_exit: bool,
    /// Write once and wait; do not follow changes of the primary config, token or CA.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub skip_config_watch: bool,
    /// Rename the primary network's file to <name>.old so the runtime only sees multus.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub rename_conf_file: bool,
    /// The cluster's pod and service networks, comma-separated (`clusterCIDRs`): a secondary
    /// network's routes into them are removed, and its addresses may not be in them.
    #[arg(long, value_delimiter = ',', value_parser = parse_cidr)]
    pub cluster_cidrs: Vec<ipnet::IpNet>,
    /// The host ports a pod's networks annotation may map, comma-separated ports and ranges
    /// (`hostPortRanges`; default 1024-65535).
    #[arg(long, value_delimiter = ',', value_parser = check_port_range)]
    pub host_port_ranges: Vec<String>,
    /// A file (path on the host) that exists once the primary network is ready; waited for
    /// under --host-prefix, and passed to multus.
    #[arg(long)]
    pub readiness_indicator_file: Option<PathBuf>,
    /// Where the host's root is mounted in this container, to find host paths.
    #[arg(long, default_value = "/host")]
    pub host_prefix: PathBuf,
    /// An extra plugin directory for multus's delegates (`binDir` in the config).
    #[arg(long)]
    pub additional_bin_dir: Option<String>,
    /// Do not verify the API server's certificate (test clusters only).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true", hide = true)]
    pub skip_tls_verify: bool,
    /// The pod's service account (token and CA) that multus will act as.
    #[arg(long, default_value = "/var/run/secrets/kubernetes.io/serviceaccount")]
    pub service_account_dir: PathBuf,
    /// Write whereabouts' flat file (whereabouts.d/whereabouts.conf in --cni-conf-dir) naming
    /// multus's kubeconfig, unless the node has one.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub whereabouts_flat_file: bool,
    /// With --whereabouts-flat-file: this node's name, written to whereabouts.d/nodename, where
    /// whereabouts' node-slice mode reads it (the DaemonSet passes spec.nodeName).
    #[arg(long, value_name = "NAME")]
    pub whereabouts_node_name: Option<String>,
    /// Install the binaries and exit: thick mode's init container (its daemon writes the
    /// multus config).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub binaries_only: bool,
    /// The admission webhook's policy (its ConfigMap, as mounted): copied to multus.d and
    /// applied by multus at every ADD (`admissionPolicy`), followed as it changes.
    #[arg(long, value_name = "FILE")]
    pub admission_policy: Option<PathBuf>,
    /// This node's name (the DaemonSet passes spec.nodeName): with it, the node's running pods
    /// whose network-status lacks networks they ask for are reported, as pods that started
    /// without multus (a MissingNetworks event and a log line).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// With --node-name: how often the node's pods are looked at, in seconds (1 to 3600).
    #[arg(long, default_value_t = 30)]
    pub missing_networks_check_seconds: u64,
    /// With --node-name: delete such a pod when a workload controller owns it, so that the
    /// controller makes it again with its networks (the account needs `delete` on pods).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub delete_pods_missing_networks: bool,
    /// Per-node certificates: multus talks to the API server as `system:multus:<node>` with a
    /// client certificate kept in this directory of the host, instead of the service account's
    /// token. The installer asks for it with the kubelet's credential and renews it; multus
    /// asks for one itself when none is valid, so pods keep starting while this pod is down.
    /// Needs --node-name, and multus-rs's approver (deploy/per-node-certificate).
    #[arg(long, value_name = "DIR")]
    pub per_node_certificate_dir: Option<PathBuf>,
    /// With --per-node-certificate-dir: the kubeconfig on the host whose credential asks for
    /// the certificates (the kubelet's, which the kubelet keeps current).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/kubernetes/kubelet.conf"
    )]
    pub per_node_certificate_bootstrap_kubeconfig: PathBuf,
    /// With --per-node-certificate-dir: how long a certificate lasts, as a Go duration (10m or
    /// more). Renewed at 70% to 90% of it.
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    pub per_node_certificate_duration: String,
    /// How long to wait for the primary network's config and the readiness file, in seconds.
    #[arg(long, default_value_t = 300)]
    pub wait_timeout: u64,
}

impl Options {
    /// Flag values that are wrong whatever the node holds: refused before anything is written.
    fn validate(&self) -> Result<(), InstallError> {
        if let Some(level) = &self.multus_log_level {
            if !LOG_LEVELS.contains(&level.to_lowercase().as_str()) {
                return Err(InstallError::Invalid(format!(
                    "--multus-log-level={level}: use one of {}",
                    LOG_LEVELS.join(", ")
                )));
            }
        }
        if let Some(node) = &self.whereabouts_node_name {
            whereabouts::check_node_name(node)?;
        }
        // The pods are found by the node's name: without it nothing would be deleted, and
        // the admin who asked for it would never know.
        if self.per_node_certificate_dir.is_some() {
            if self.node_name.is_none() {
                return Err(InstallError::Invalid(
                    "--per-node-certificate-dir needs --node-name: the certificate is the node's"
                        .into(),
                ));
            }
            self.certificate_lifetime()?;
        }
        if !(1..=3600).contains(&self.missing_networks_check_seconds) {
            return Err(InstallError::Invalid(format!(
                "--missing-networks-check-seconds={}: use 1 to 3600",
                self.missing_networks_check_seconds
            )));
        }
        if self.delete_pods_missing_networks && self.node_name.is_none() {
            return Err(InstallError::Invalid(
                "--delete-pods-missing-networks needs --node-name: the node's pods are found by it"
                    .into(),
            ));
        }
        Ok(())
    }

    /// --per-node-certificate-duration, read.
    fn certificate_lifetime(&self) -> Result<Duration, InstallError> {
        k8s::client_certificate::lifetime(Some(&self.per_node_certificate_duration))
            .map_err(|e| InstallError::Invalid(format!("--per-node-certificate-duration={e}")))
    }

    /// The node's certificate as this container sees it, when one is asked for.
    fn per_node_certificate(
        &self,
    ) -> Result<Option<k8s::client_certificate::PerNode>, InstallError> {
        let (Some(dir), Some(node)) = (&self.per_node_certificate_dir, &self.node_name) else {
            return Ok(None);
        };
        Ok(Some(k8s::client_certificate::PerNode {
            node: node.clone(),
            bootstrap: self.on_host(&self.per_node_certificate_bootstrap_kubeconfig),
            dir: self.on_host(dir),
            lifetime: self.certificate_lifetime()?,
        }))
    }

    /// Where a path on the host is seen from this container.
    fn on_host(&self, path: &Path) -> PathBuf {
        self.host_prefix
            .join(path.strip_prefix("/").unwrap_or(path))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {msg}", path.display())]
    Config { path: PathBuf, msg: String },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot block SIGTERM and SIGINT: {0}")]
    Signals(#[source] std::io::Error),
    #[error("gave up after {seconds} s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
    #[error("per-node certificate: {0}")]
    Certificate(#[source] k8s::client_certificate::CertificateError),
}

impl InstallError {
    fn io<'p>(
        what: &'static str,
        path: &'p Path,
    ) -> impl FnOnce(std::io::Error) -> InstallError + 'p {
        move |source| InstallError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// multus's log levels, as Multus names them.
const LOG_LEVELS: [&str; 4] = ["debug", "verbose", "error", "panic"];

/// How often the watch loop looks at the files it follows.
const POLL: Duration = Duration::from_secs(1);

/// Installs, then follows changes until SIGTERM or SIGINT (or returns after one pass with
/// --skip-config-watch and no cleanup to do).
pub fn run(opts: &Options) -> Result<ExitCode, InstallError> {
    // Blocked before anything else, so a signal that arrives during the first pass waits for
    // the loop instead of killing the process halfway through a write.
    let stop = nodekit::signals::Stop::block().map_err(InstallError::Signals)?;
    opts.validate()?;
    for dir in [&opts.cni_bin_dir, &opts.cni_conf_dir] {
        if !dir.is_dir() {
            return Err(InstallError::Invalid(format!(
                "{} is not a directory: mount the host's CNI directory there",
                dir.display()
            )));
        }
    }
    binaries::install(opts)?;
    if opts.binaries_only {
        log("installed the binaries (--binaries-only)");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(path) = &opts.relay_log {
        relay::spawn(path.clone());
    }
    // The certificate before the kubeconfig that names it.
    let certificate = opts.per_node_certificate()?;
    let jitter = k8s::client_certificate::jitter();
    let mut renewal = match &certificate {
        Some(per_node) => {
            let due = per_node
                .keep(jitter)
                .map_err(InstallError::Certificate)?
                .due;
            log(&format!(
                "per-node certificate for {} in {}",
                k8s::client_certificate::user_name(&per_node.node),
                per_node.dir.display()
            ));
            Some(due)
        }
        None => None,
    };
    let mut kube = kubeconfig::Kubeconfig::new(opts);
    kube.refresh()?;
    if opts.whereabouts_flat_file {
        whereabouts::write_flat_file(opts)?;
    }
    let mut admission = opts
        .admission_policy
        .as_deref()
        .map(admission::AdmissionPolicy::new);
    if let Some(policy) = admission.as_mut() {
        policy.install(opts)?;
    }

    let mut multus_conf = if opts.multus_conf_file == "auto" {
        let deadline = Instant::now() + Duration::from_secs(opts.wait_timeout);
        let mut generator = conf::Generator::new(opts);
        generator.wait_and_write(deadline, &stop)?;
        Some(generator)
    } else {
        conf::copy_given(opts)?;
        None
    };

    let watch = !opts.skip_config_watch;
    let stop_looking = Arc::new(AtomicBool::new(false));
    if watch {
        missing::spawn(opts, Arc::clone(&stop_looking));
    }
    if !watch && !opts.cleanup_config_on_exit {
        log("installed; not watching (--skip-config-watch)");
        return Ok(ExitCode::SUCCESS);
    }
    log(if watch {
        "watching the primary config, the token and the CA"
    } else {
        "waiting for a signal to remove the config"
    });
    while !stop.wait(POLL) {
        if !watch {
            continue;
        }
        // A failed pass is logged and retried: the DaemonSet must keep the node configured.
        if let Err(e) = kube.refresh() {
            nodelog::error!("multus install: kubeconfig: {e}");
        }
        if let (Some(per_node), Some(due)) = (&certificate, renewal.as_mut()) {
            if SystemTime::now() >= *due {
                *due = match per_node.keep(jitter) {
                    Ok(kept) => {
                        if kept.renewed {
                            log("per-node certificate renewed");
                        }
                        kept.due
                    }
                    Err(e) => {
                        nodelog::error!(
                            "multus install: per-node certificate: {e}; trying again in 10 s"
                        );
                        SystemTime::now() + Duration::from_secs(10)
                    }
                };
            }
        }
        if let Some(policy) = admission.as_mut() {
            policy.refresh(opts);
        }
        if let Some(generator) = multus_conf.as_mut() {
            if let Err(e) = generator.refresh() {
                nodelog::error!("multus install: multus config: {e}");
            }
        }
    }
    stop_looking.store(true, Ordering::SeqCst);
    if opts.cleanup_config_on_exit {
        conf::remove(opts);
    }
    log("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Whether `name` in `dir` is a file holding what `new` reads. A symlink never is (it is not
/// followed), so the caller replaces it with the file itself. Compared a block at a time: a
/// binary is never held in memory.
fn holds(dir: &cni::dir::Dir, name: &str, mut new: impl std::io::Read) -> bool {
    let Ok(mut old) = dir.open_read(name) else {
        return false;
    };
    let (mut a, mut b) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        match (read_block(&mut old, &mut a), read_block(&mut new, &mut b)) {
            (Ok(0), Ok(0)) => return true,
            (Ok(n), Ok(m)) if n == m && a[..n] == b[..m] => {}
            _ => return false,
        }
    }
}

/// Reads until `buf` is full or the end: how many bytes it holds.
fn read_block(from: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match from.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// One line to the DaemonSet's log.
fn log(msg: &str) {
    nodelog::info!("multus install: {msg}");
}

fn parse_cidr(text: &str) -> Result<ipnet::IpNet, String> {
    cni::decode::parse_cidr(text, "a CIDR").map_err(|want| format!("{text:?} is not {want}"))
}

fn check_port_range(text: &str) -> Result<String, String> {
    multus::config::parse_port_range(text).map(|_| text.to_owned())
}
