//! `multus`: the CNI plugin when the runtime runs it (`CNI_COMMAND` set), and the node tools
//! (`multus install`) otherwise. Run through a link named `whereabouts`, it is the whereabouts
//! IPAM plugin; named `multus-shim` and `multus-daemon`, the two halves of thick mode.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "multus",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MULTUS_RS_COMMIT"), ")"),
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
    Install(multus_node::install::Options),
    /// Try NADs and a pod on a throwaway node in namespaces of their own, with no cluster:
    /// ADD, what the pod got, a connectivity check per network, DEL, and what is left.
    Try(multus_node::tryout::Options),
    /// Check NetworkAttachmentDefinition files before they are applied: exit 0 clean, 1
    /// warnings, 2 errors.
    Lint(multus_node::lint::Options),
    /// The whereabouts IPAM plugin's tools (also reached through the `whereabouts` link).
    #[command(subcommand)]
    Whereabouts(WhereaboutsTool),
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
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MULTUS_RS_COMMIT"), ")"),
    about = "whereabouts: cluster-wide IPAM (a CNI plugin when the runtime runs it)"
)]
struct WhereaboutsCli {
    #[command(subcommand)]
    command: WhereaboutsTool,
}

#[derive(Subcommand)]
enum WhereaboutsTool {
    /// One reconciler pass: free the addresses whose pod is gone or does not show them in its
    /// network-status, delete their reservations, and exit.
    Reconcile {
        /// The kubeconfig; without one, the pod's service account.
        #[arg(long)]
        kubeconfig: Option<std::path::PathBuf>,
    },
    /// Keep freeing: watch the cluster's pods and free a pod's addresses as soon as it is
    /// deleted, with a whole pass at the start and whenever the watch lists again. Runs until
    /// killed.
    Control {
        /// The kubeconfig; without one, the pod's service account.
        #[arg(long)]
        kubeconfig: Option<std::path::PathBuf>,
    },
}

fn run_whereabouts(tool: &WhereaboutsTool) -> ! {
    let (WhereaboutsTool::Reconcile { kubeconfig } | WhereaboutsTool::Control { kubeconfig }) =
        tool;
    let opts = k8s::ClientOptions {
        kubeconfig: kubeconfig.clone(),
        // Listing every pod of a cluster takes longer than a plugin's call.
        timeout: std::time::Duration::from_secs(30),
        keep_alive: k8s::KeepAlive::Process,
        ..k8s::ClientOptions::default()
    };
    let client = || k8s::KubeClient::new(&opts).map_err(whereabouts::Error::from);
    if let WhereaboutsTool::Control { .. } = tool {
        let started = client().and_then(|watcher| Ok((watcher, client()?)));
        match started {
            Ok((watcher, client)) => {
                // The watch's troubles (a failed list, a broken connection) go to stderr.
                multus::log::init_with(
                    multus::config::LogLevel::Error,
                    None,
                    &multus::config::LogOptions::default(),
                    true,
                );
                let stop = std::sync::atomic::AtomicBool::new(false);
                whereabouts::control(&watcher, &client, &stop, &mut std::io::stdout());
                std::process::exit(0)
            }
            Err(e) => {
                eprintln!("whereabouts control: {e}");
                std::process::exit(1)
            }
        }
    }
    let done = client().and_then(|client| whereabouts::reconcile(&client, &mut std::io::stdout()));
    match done {
        Ok(s) => {
            println!(
                "reconciled: freed {} addresses, deleted {} reservations, freed {} node slices",
                s.freed, s.reservations_deleted, s.slices_freed
            );
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("whereabouts reconcile: {e}");
            std::process::exit(1)
        }
    }
}

fn main() {
    let cni_call = std::env::var_os("CNI_COMMAND").is_some_and(|c| !c.is_empty());
    // Run through the `whereabouts` link: the IPAM plugin.
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // Thick mode's two halves, under upstream's names.
    if invoked_as == "multus-shim" {
        std::process::exit(multus_node::thick::shim::main());
    }
    if invoked_as == "multus-daemon" {
        if cni_call {
            // A network naming it as a plugin would start a daemon as root.
            std::process::exit(cni::skel::refuse_main(cni::CniError::invalid_config(
                "multus-daemon is thick mode's daemon, not a CNI plugin: a network cannot run it",
            )));
        }
        let args: Vec<String> = std::env::args().skip(1).collect();
        std::process::exit(multus_node::thick::daemon::main(&args));
    }
    if invoked_as == "whereabouts" {
        if cni_call {
            let about = format!("multus-rs whereabouts v{}", env!("CARGO_PKG_VERSION"));
            std::process::exit(cni::plugin_main(&whereabouts::Whereabouts::node(), &about));
        }
        run_whereabouts(&WhereaboutsCli::parse().command);
    }
    if cni_call {
        let about = format!("multus-rs meta-plugin v{}", env!("CARGO_PKG_VERSION"));
        let plugin = multus::command::Multus {
            called_as: invoked_as,
            connect: Box::new(multus::api::kube::connect),
            log_per_call: true,
            node_root: None,
        };
        std::process::exit(cni::plugin_main(&plugin, &about));
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Tool::Install(opts) => multus_node::install::run(opts),
        Tool::Try(opts) => match multus_node::tryout::run(opts) {
            Ok(true) => std::process::exit(0),
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("multus try: {e}");
                std::process::exit(2);
            }
        },
        Tool::Lint(opts) => std::process::exit(multus_node::lint::run(opts)),
        Tool::Whereabouts(tool) => run_whereabouts(tool),
        Tool::Daemon { args } => std::process::exit(multus_node::thick::daemon::main(args)),
    };
    if let Err(e) = result {
        eprintln!("multus install: {e}");
        std::process::exit(1);
    }
}
