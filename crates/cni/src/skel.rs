//! The plugin entry point: reads the environment and stdin, checks them as the reference does,
//! calls the plugin, and prints the result or the error object.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;

use crate::{CmdArgs, CniError, CniResult, Code, Command, NetConf, Version};

/// What a plugin implements. The config is in `args.stdin`, already checked to be JSON with a
/// valid name and a supported `cniVersion` that allows the command.
pub trait Plugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError>;
    fn del(&self, args: &CmdArgs) -> Result<(), CniError>;
    fn check(&self, args: &CmdArgs) -> Result<(), CniError>;
    /// STATUS; a plugin that keeps no state of its own is always ready.
    fn status(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
    /// GC; a plugin that keeps no state of its own has nothing to collect.
    fn gc(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
    /// Checks a network config (as ADD would receive it on stdin, without `CNI_ARGS`) the way
    /// ADD checks it before touching the system: the plugin's own options and, for an interface
    /// plugin, an `ipam` section whose plugin is built in. Nothing on the node is read or
    /// changed, so `Ok` means ADD will not refuse the config's content; what only the node can
    /// answer (a missing master, a full range) is not part of it. Called through [`validate`],
    /// which has already run the checks every command shares.
    fn validate(&self, config: &[u8]) -> Result<(), CniError>;
}

/// The config checks every command runs before the plugin sees it: a JSON object, a valid
/// network name, a supported `cniVersion`. `config_version` gets the config's version as
/// written, for the error object.
fn common_checks(config: &[u8], config_version: &mut String) -> Result<Version, CniError> {
    let conf: NetConf = crate::config::parse_plugin_config(config)?;
    config_version.clone_from(&conf.cni_version);
    crate::config::validate_network_name(&conf.name)?;
    conf.version()
}

/// Checks `config` as `plugin`'s ADD would before touching the system: the shared checks, then
/// [`Plugin::validate`]. The error carries the config's `cniVersion`, as ADD's would.
pub fn validate(plugin: &dyn Plugin, config: &[u8]) -> Result<(), CniError> {
    let mut config_version = String::new();
    common_checks(config, &mut config_version)
        .and_then(|_| plugin.validate(config))
        .map_err(|mut e| {
            if e.cni_version.is_empty() {
                e.cni_version = config_version;
            }
            e
        })
}

/// Runs `plugin` against this process's environment and stdio; returns the exit status.
pub fn plugin_main(plugin: &dyn Plugin, about: &str) -> std::process::ExitCode {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let status = dispatch(
        plugin,
        about,
        |k| std::env::var(k).ok(),
        &mut std::io::stdin().lock(),
        &mut stdout.lock(),
        &mut stderr.lock(),
    );
    exit_code(status)
}

/// An exit status as the process returns it; one out of range is a failure.
pub fn exit_code(status: i32) -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(status).unwrap_or(1))
}

/// [`plugin_main`] with its inputs and outputs passed in.
pub fn dispatch(
    plugin: &dyn Plugin,
    about: &str,
    env: impl Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    if env("CNI_COMMAND").unwrap_or_default().is_empty() {
        let versions = Version::ALL.map(Version::as_str).join(", ");
        let _ = writeln!(
            stderr,
            "{about}\nCNI protocol versions supported: {versions}"
        );
        return 0;
    }
    let override_netns_check =
        env("CNI_NETNS_OVERRIDE").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let mut config_version = String::new();
    let outcome = run(
        plugin,
        env,
        stdin,
        &mut config_version,
        override_netns_check,
    );
    match outcome {
        Ok(None) => 0,
        Ok(Some(value)) => {
            if print_json(stdout, &value) {
                0
            } else {
                1
            }
        }
        Err(mut e) => {
            if e.cni_version.is_empty() {
                e.cni_version = config_version;
            }
            print_error(stdout, e);
            1
        }
    }
}

/// `<plugin> validate`: checks the config read from stdin ([`crate::input::read_capped`]'s
/// answer) with [`validate`]. Prints nothing and returns 0 when it passes; prints the CNI error
/// object and returns 1 when it does not.
pub fn validate_main(
    plugin: &dyn Plugin,
    stdin: Result<Vec<u8>, CniError>,
    stdout: &mut dyn Write,
) -> i32 {
    match stdin.and_then(|config| validate(plugin, &config)) {
        Ok(()) => 0,
        Err(e) => {
            print_error(stdout, e);
            1
        }
    }
}

/// A binary that is not a plugin under the name it was run by: prints `e` as a plugin prints
/// its error object, and returns the exit status.
pub fn refuse_main(e: CniError) -> std::process::ExitCode {
    print_error(&mut std::io::stdout().lock(), e);
    std::process::ExitCode::FAILURE
}

/// The error object, bounded: it goes into the runtime's log and, through multus, into events.
fn print_error(out: &mut dyn Write, e: CniError) {
    let value = serde_json::to_value(e.bounded()).unwrap_or_default();
    print_json(out, &value);
}

/// One write of the whole document: stdout is line-buffered, and a reader gets it at once.
fn print_json(out: &mut dyn Write, value: &serde_json::Value) -> bool {
    let Ok(mut text) = serde_json::to_vec_pretty(value) else {
        return false;
    };
    text.push(b'\n');
    out.write_all(&text).and_then(|()| out.flush()).is_ok()
}

fn run(
    plugin: &dyn Plugin,
    env: impl Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
    config_version: &mut String,
    override_netns_check: bool,
) -> Result<Option<serde_json::Value>, CniError> {
    let mut args = CmdArgs::from_env(env)?;
    if args.command == Command::Version {
        return Ok(Some(Version::plugin_info()));
    }
    args.stdin = crate::input::read_capped(stdin, "stdin")?;
    call(plugin, args, None, config_version, override_netns_check)
}

/// One call of `plugin` with its inputs read: the checks every plugin makes (the config's
/// version and name, the version the command needs, a netns that is not the plugin's own),
/// then the command. ADD's result is in `result_version`, or the config's version when that is
/// `None`. `config_version` gets the config's `cniVersion`, for the error object. (A server that
/// takes calls over a socket runs them through here too.)
pub fn call(
    plugin: &dyn Plugin,
    mut args: CmdArgs,
    result_version: Option<Version>,
    config_version: &mut String,
    override_netns_check: bool,
) -> Result<Option<serde_json::Value>, CniError> {
    let version = common_checks(&args.stdin, config_version)?;
    let needed = match args.command {
        Command::Check => Some(Version::V0_4_0),
        Command::Status | Command::Gc => Some(Version::V1_1_0),
        _ => None,
    };
    if let Some(needed) = needed {
        crate::config::require_version(version, needed, args.command.as_str())?;
    }
    match args.command {
        Command::Add => {
            if !override_netns_check {
                refuse_own_netns(&args.netns)?;
            }
            let result = plugin.add(&args)?;
            match result.to_value(result_version.unwrap_or(version)) {
                Ok(value) => Ok(Some(value)),
                Err(e) => {
                    // The runtime sees a failed ADD, so nothing it set up may stay behind.
                    args.command = Command::Del;
                    let _ = plugin.del(&args);
                    Err(e)
                }
            }
        }
        Command::Del => plugin.del(&args).map(|()| None),
        Command::Check => plugin.check(&args).map(|()| None),
        Command::Status => plugin.status(&args).map(|()| None),
        Command::Gc => plugin.gc(&args).map(|()| None),
        Command::Version => Ok(Some(Version::plugin_info())),
    }
}

/// A plugin must not configure its own namespace as the container's (code 8).
fn refuse_own_netns(netns: &str) -> Result<(), CniError> {
    let Ok(target) = std::fs::metadata(netns) else {
        // The plugin reports an unusable path itself, naming what it tried to do.
        return Ok(());
    };
    let own = std::fs::metadata("/proc/self/ns/net")
        .map_err(|e| CniError::io(format!("cannot read this process's netns: {e}")))?;
    if own.dev() == target.dev() && own.ino() == target.ino() {
        return Err(CniError::new(
            Code::InvalidNetns,
            format!("CNI_NETNS {netns} is the plugin's own network namespace, not a container's"),
        ));
    }
    Ok(())
}
