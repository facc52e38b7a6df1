//! `multus`: the node tools (`multus install`).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "multus",
    version,
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
    Install(multus::install::Options),
    /// Check NetworkAttachmentDefinition files before they are applied: exit 0 clean, 1
    /// warnings, 2 errors.
    Lint(multus::lint::Options),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Tool::Install(opts) => multus::install::run(opts),
        Tool::Lint(opts) => std::process::exit(multus::lint::run(opts)),
    };
    if let Err(e) = result {
        eprintln!("multus install: {e}");
        std::process::exit(1);
    }
}
