//! Running an interface plugin's IPAM plugin.
//!
//! The IPAM binary is found in `CNI_PATH` as a runtime would find it. When that binary is this
//! very executable (the multi-call `cni-plugins` installed as `host-local`, `static`, ...), the
//! plugin runs in-process with the same arguments and config: same behaviour, one exec less.
//! Any other binary is executed like a runtime does.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cni::invoke::{self, DelegateEnv};
use cni::{CmdArgs, CniError, CniResult, Command, Version};

/// An IPAM plugin bound to one call's arguments.
pub struct Ipam<'a> {
    plugin_type: &'a str,
    args: &'a CmdArgs,
}

impl<'a> Ipam<'a> {
    pub fn new(plugin_type: &'a str, args: &'a CmdArgs) -> Ipam<'a> {
        Ipam { plugin_type, args }
    }

    /// ADD; the result comes back in the 1.x model, read as the config's version.
    pub fn add(&self, version: Version) -> Result<CniResult, CniError> {
        let result = match self.in_process()? {
            // A round trip through the config's version, so the answer is exactly what the
            // executed plugin would have printed.
            Some(plugin) => plugin.add(&self.call(Command::Add))?.convert(version)?,
            None => invoke::delegate_add(self.plugin_type, &self.env(), &self.args.stdin)?,
        };
        Ok(result)
    }

    pub fn del(&self) -> Result<(), CniError> {
        self.run(Command::Del)
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
        match self.in_process()? {
            Some(plugin) => {
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
            None => {
                let bin = invoke::find_in_path(self.plugin_type, &self.args.path)?;
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

    /// The plugin to run in-process, when the IPAM binary in `CNI_PATH` is this executable.
    fn in_process(&self) -> Result<Option<&'static dyn cni::Plugin>, CniError> {
        let bin = invoke::find_in_path(self.plugin_type, &self.args.path)?;
        if !is_this_executable(&bin) {
            return Ok(None);
        }
        Ok(crate::find(self.plugin_type).map(|entry| entry.plugin))
    }
}

/// Whether `bin` (symlinks followed) is the file this process runs.
fn is_this_executable(bin: &Path) -> bool {
    match (std::fs::metadata(bin), std::fs::metadata("/proc/self/exe")) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
