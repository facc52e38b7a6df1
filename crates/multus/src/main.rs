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
enum Tool {
    /// Install multus and the plugins on this node and keep its multus config current (the
    /// multus DaemonSet's entrypoint).
    Install(multus::install::Options),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Tool::Install(opts) => multus::install::run(opts),
    };
    if let Err(e) = result {
        eprintln!("multus install: {e}");
        std::process::exit(1);
    }
}
