//! `multus`: the CNI plugin when the runtime runs it (`CNI_COMMAND` set), and the node tools
//! (`multus install`) otherwise. Run through a link named `whereabouts`, it is the whereabouts
//! IPAM plugin; named `multus-shim` and `multus-daemon`, the two halves of thick mode.
//!
//! Every tool returns its exit status or its error; this is the one place the process exits.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use multus_node::{approver, install, tryout, whereabouts_tools};

const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MULTUS_RS_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "multus",
    version = VERSION,
    about = "multus-rs: pods on more than one network"
)]
struct Cli {
    #[command(subcommand)]
    command: Tool,
}

#[derive(Subcommand)]
// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Tool {
    /// Install multus and the plugins on this node and keep its multus config current (the
    /// multus DaemonSet's entrypoint).
    Install(install::Options),
    /// Try NADs and a pod on a throwaway node in namespaces of their own, with no cluster:
    /// ADD, what the pod got, a connectivity check per network, DEL, and what is left.
    Try(tryout::Options),
    /// Check NetworkAttachmentDefinition files before they are applied: exit 0 clean, 1
    /// warnings, 2 errors.
    Lint(lint::Options),
    /// The admission webhook: multus lint's checks and the admin's policy applied to
    /// NetworkAttachmentDefinitions and pods at the API server (docs/admission.md).
    Webhook(admission::Options),
    /// Check this node's multus where it runs: the config the runtime picks, the cluster
    /// network, the plugins, readiness, the credential, the API and its RBAC, the caches, and
    /// the node's pods missing networks: exit 0 clean, 1 warnings, 2 errors.
    Doctor(doctor::Options),
    /// The whereabouts IPAM plugin's tools (also reached through the `whereabouts` link).
    #[command(subcommand)]
    Whereabouts(whereabouts_tools::Tool),
    /// Approve the certificate signing requests of multus's per-node certificates: a node
    /// asking for its own `system:multus:<node>` client certificate (deploy/per-node-certificate).
    ApproveCertificates(approver::Options),
    /// Thick mode's node daemon (also run as `multus-daemon`): serves the `multus-shim` CNI
    /// plugin's calls on a unix socket. Takes upstream's flags: `-config PATH`.
    Daemon {
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
}

/// `whereabouts <tool>`, through the link.
#[derive(Parser)]
#[command(
    name = "whereabouts",
    version = VERSION,
    about = "whereabouts: cluster-wide IPAM (a CNI plugin when the runtime runs it)"
)]
struct WhereaboutsCli {
    #[command(subcommand)]
    command: whereabouts_tools::Tool,
}

/// A tool that could not do its job: it says which, and exits with its own status.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error("multus install: {0}")]
    Install(#[from] install::InstallError),
    #[error("multus try: {0}")]
    Try(#[from] tryout::Error),
    #[error(transparent)]
    Whereabouts(#[from] whereabouts_tools::ToolError),
    #[error("multus-daemon: {0}")]
    Daemon(#[from] thick::daemon::StartError),
    #[error("multus webhook: {0}")]
    Webhook(#[from] admission::WebhookError),
    #[error("multus approve-certificates: {0}")]
    Approver(#[from] approver::ApproverError),
}

impl ToolError {
    fn exit_code(&self) -> ExitCode {
        match self {
            // 1 is a failed trial.
            ToolError::Try(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(status) => status,
        Err(e) => {
            eprintln!("{e}");
            e.exit_code()
        }
    }
}

fn run() -> Result<ExitCode, ToolError> {
    let cni_call = std::env::var_os("CNI_COMMAND").is_some_and(|c| !c.is_empty());
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let about = |what: &str| format!("multus-rs {what} v{}", env!("CARGO_PKG_VERSION"));
    match (invoked_as.as_str(), cni_call) {
        // Thick mode's two halves, under upstream's names.
        ("multus-shim", _) => Ok(thick::shim::main()),
        // A network naming it as a plugin would start a daemon as root.
        ("multus-daemon", true) => Ok(cni::skel::refuse_main(cni::CniError::invalid_config(
            "multus-daemon is thick mode's daemon, not a CNI plugin: a network cannot run it",
        ))),
        ("multus-daemon", false) => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            Ok(thick::daemon::run(&args, VERSION)?)
        }
        ("whereabouts", true) => Ok(cni::plugin_main(
            &whereabouts::Whereabouts::node(),
            &about("whereabouts"),
        )),
        ("whereabouts", false) => Ok(whereabouts_tools::run(&WhereaboutsCli::parse().command)?),
        (_, true) => {
            let plugin = multus::command::Multus {
                called_as: invoked_as,
                connect: Box::new(multus::api::kube::connect),
                log_per_call: true,
                node_root: None,
            };
            Ok(cni::plugin_main(&plugin, &about("meta-plugin")))
        }
        (_, false) => match &Cli::parse().command {
            Tool::Install(opts) => Ok(install::run(opts)?),
            Tool::Try(opts) => Ok(tryout::run(opts)?),
            Tool::Lint(opts) => Ok(lint::run(opts)),
            Tool::Webhook(opts) => Ok(admission::run(opts)?),
            Tool::Doctor(opts) => Ok(doctor::run(opts)),
            Tool::ApproveCertificates(opts) => Ok(approver::run(opts)?),
            Tool::Whereabouts(tool) => Ok(whereabouts_tools::run(tool)?),
            Tool::Daemon { args } => Ok(thick::daemon::run(args, VERSION)?),
        },
    }
}
