//! `cni-plugins`: one binary for every plugin, chosen by the name it is run under
//! (a link named `bridge`, `host-local`, ...) or by its first argument. `cni-plugins --list`
//! prints the names, `cni-plugins --version` the version and commit; `cni-plugins validate
//! <name>` checks a config on stdin as that plugin's ADD would (see [`plugins::validate`]);
//! `dhcp daemon [flags]` runs the dhcp daemon instead of the plugin.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_default();
    let called_as = Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let name = if called_as == "cni-plugins" {
        argv.next().unwrap_or_default()
    } else {
        called_as
    };
    if name == "--version" {
        println!(
            "cni-plugins {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            env!("MULTUS_RS_COMMIT")
        );
        return ExitCode::SUCCESS;
    }
    // The names to install links under, for `multus install`.
    if name == "--list" {
        for entry in plugins::PLUGINS {
            println!("{}", entry.name);
        }
        return ExitCode::SUCCESS;
    }
    let validating = name == "validate";
    let name = if validating {
        argv.next().unwrap_or_default()
    } else {
        name
    };
    let Some(entry) = plugins::find(&name) else {
        let names: Vec<&str> = plugins::PLUGINS.iter().map(|e| e.name).collect();
        eprintln!(
            "cni-plugins {}: no plugin named {name:?}.\nInstall links to this binary named one of: {}\nor run it as `cni-plugins <name>`.",
            env!("CARGO_PKG_VERSION"),
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    if validating {
        let status = plugins::validate::main(
            entry,
            &mut std::io::stdin().lock(),
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        );
        return cni::skel::exit_code(status);
    }
    if entry.name == "dhcp" {
        let rest: Vec<String> = argv.collect();
        if rest.first().is_some_and(|a| a == "daemon") {
            return match ipam::dhcp::daemon::run(&rest[1..]) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("dhcp daemon: {e}");
                    e.exit_code()
                }
            };
        }
    }
    let about = format!("multus-rs {} v{}", entry.about, env!("CARGO_PKG_VERSION"));
    cni::plugin_main(entry.plugin, &about)
}
