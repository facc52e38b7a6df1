//! Running an interface plugin's IPAM plugin.
//!
//! The IPAM binary is found in `CNI_PATH` as a runtime would find it. When that binary is this
//! very executable (the multi-call `cni-plugins` installed as `host-local`, `static`, ...), the
//! plugin runs in-process with the same arguments and config: same behaviour, one exec less.
//! Any other binary is executed like a runtime does.

use std::path::PathBuf;

use cni::in_use::InUse;
use cni::invoke::{self, DelegateEnv};
use cni::{CmdArgs, CniError, CniResult, Command, Dns, NetConf, Version};

use crate::Kind;

/// An IPAM plugin bound to one call's arguments.
pub struct Ipam<'a> {
    plugin_type: &'a str,
    args: &'a CmdArgs,
}

/// How the IPAM plugin runs.
enum Target {
    InProcess(&'static dyn cni::Plugin),
    Exec(PathBuf),
}

impl<'a> Ipam<'a> {
    pub fn new(plugin_type: &'a str, args: &'a CmdArgs) -> Ipam<'a> {
        Ipam { plugin_type, args }
    }

    /// ADD for an interface plugin: the result, in the 1.x model read as the config's version,
    /// must carry at least one address to configure. `reserved` is set once the IPAM plugin
    /// has succeeded: from then on a failure (an unusable result, a later step) must release.
    /// A failed IPAM ADD reserved nothing (it cleans up after itself), and releasing then would
    /// free what an earlier ADD of the same attachment holds.
    pub fn add_addresses(
        &self,
        version: Version,
        reserved: &mut bool,
    ) -> Result<CniResult, CniError> {
        let result = match self.target()? {
            Target::InProcess(plugin) => {
                let result = plugin.add(&self.call(Command::Add))?;
                *reserved = true;
                // A round trip through the config's version, so the answer is exactly what
                // the executed plugin would have printed.
                result.convert(version)?
            }
            Target::Exec(bin) => {
                let printed =
                    invoke::exec_output(&bin, Command::Add, &self.env(), &self.args.stdin)?;
                *reserved = true;
                invoke::add_result(&bin, &printed, &self.args.stdin)?
            }
        };
        if result.ips.is_empty() {
            return Err(CniError::internal(format!(
                "the IPAM plugin {:?} returned no IP address to configure",
                self.plugin_type
            )));
        }
        Ok(result)
    }

    /// DEL. An IPAM plugin that cannot be run (not installed, a path, an interface plugin)
    /// reserved nothing at ADD: DEL goes on without it, and says so on stderr.
    pub fn del(&self) -> Result<(), CniError> {
        self.release(&[])
    }

    /// DEL of what this ADD reserved, telling an executed IPAM plugin which addresses another
    /// host answered the conflict probe for ([`cni::in_use`]). The built-in ones keep no pool
    /// shared with other nodes, and free them all.
    pub fn release(&self, in_use: &[InUse]) -> Result<(), CniError> {
        match self.target() {
            Ok(Target::Exec(bin)) => {
                let encoded = cni::in_use::encode(in_use);
                let env = DelegateEnv {
                    addresses_in_use: &encoded,
                    ..self.env()
                };
                invoke::exec_plugin(&bin, Command::Del, &env, &self.args.stdin).map(drop)
            }
            Ok(target) => self.run_on(target, Command::Del),
            Err(e) => {
                eprintln!("DEL skips ipam {:?}: {}", self.plugin_type, e.msg);
                Ok(())
            }
        }
    }

    pub fn check(&self) -> Result<(), CniError> {
        self.run(Command::Check)
    }

    pub fn status(&self) -> Result<(), CniError> {
        self.run(Command::Status)
    }

    pub fn gc(&self) -> Result<(), CniError> {
        self.run(Command::Gc)
    }

    /// A command without a result.
    fn run(&self, command: Command) -> Result<(), CniError> {
        self.run_on(self.target()?, command)
    }

    fn run_on(&self, target: Target, command: Command) -> Result<(), CniError> {
        match target {
            Target::InProcess(plugin) => {
                let args = self.call(command);
                match command {
                    Command::Del => plugin.del(&args),
                    Command::Check => plugin.check(&args),
                    Command::Status => plugin.status(&args),
                    Command::Gc => plugin.gc(&args),
                    Command::Add | Command::Version => Err(CniError::internal(format!(
                        "IPAM {} cannot be run without a result",
                        command.as_str()
                    ))),
                }
            }
            Target::Exec(bin) => {
                invoke::exec_plugin(&bin, command, &self.env(), &self.args.stdin).map(drop)
            }
        }
    }

    /// The same arguments as ours, for another command.
    fn call(&self, command: Command) -> CmdArgs {
        CmdArgs {
            command,
            ..self.args.clone()
        }
    }

    fn env(&self) -> DelegateEnv<'_> {
        DelegateEnv::from(self.args)
    }

    /// Finds the IPAM binary in `CNI_PATH`; when it is this executable, the plugin runs
    /// in-process. Only an IPAM plugin may: an interface plugin as `ipam` would call itself.
    fn target(&self) -> Result<Target, CniError> {
        let bin = invoke::find_in_path(self.plugin_type, &self.args.path)?;
        if !invoke::is_this_executable(&bin) {
            return Ok(Target::Exec(bin));
        }
        match crate::find(self.plugin_type) {
            Some(entry) if entry.kind == Kind::Ipam => Ok(Target::InProcess(entry.plugin)),
            _ => Err(not_ipam(self.plugin_type)),
        }
    }
}

/// Checks the `ipam` section of `config` (the whole network config, as the IPAM plugin reads
/// it) when its plugin is built in, as that plugin's ADD would. A type that is not built in is
/// another binary's business; a built-in interface plugin is refused as at ADD.
pub fn validate(net: &NetConf, config: &[u8]) -> Result<(), CniError> {
    let Some(plugin_type) = net.ipam_type() else {
        return Ok(());
    };
    match crate::find(plugin_type) {
        Some(entry) if entry.kind == Kind::Ipam => entry.plugin.validate(config),
        Some(_) => Err(not_ipam(plugin_type)),
        None => Ok(()),
    }
}

fn not_ipam(plugin_type: &str) -> CniError {
    let ipam: Vec<&str> = crate::PLUGINS
        .iter()
        .filter(|e| e.kind == Kind::Ipam)
        .map(|e| e.name)
        .collect();
    CniError::invalid_config(format!(
        "ipam.type: {} is not an IPAM plugin: use one of {}",
        cni::quote::quote(plugin_type),
        ipam.join(", ")
    ))
}

/// The DNS settings of a result: the config's `dns`, completed with what the IPAM plugin
/// returned (servers, search domains and options it adds; its domain when the config has none).
pub fn result_dns(config: Option<&Dns>, from_ipam: &Dns) -> Dns {
    let mut dns = config.cloned().unwrap_or_default();
    dns.merge(from_ipam);
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_dns_comes_first_and_ipam_dns_is_kept() {
        let config = Dns {
            nameservers: vec!["10.0.0.53".into()],
            search: vec!["cluster.local".into()],
            ..Dns::default()
        };
        let ipam = Dns {
            nameservers: vec!["10.0.0.53".into(), "10.0.0.54".into()],
            domain: "example.org".into(),
            ..Dns::default()
        };
        let dns = result_dns(Some(&config), &ipam);
        assert_eq!(dns.nameservers, ["10.0.0.53", "10.0.0.54"]);
        assert_eq!(dns.search, ["cluster.local"]);
        assert_eq!(dns.domain, "example.org");
        assert_eq!(result_dns(None, &ipam), ipam);
        assert!(result_dns(None, &Dns::default()).is_empty());
    }
}
