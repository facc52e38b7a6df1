//! passthru: a plugin that does nothing and returns an empty result. multus puts it first in
//! an auxiliary CNI chain (`auxiliaryCNIChainName`), so the chain's other plugins run with an
//! empty `prevResult` in the pod's namespace.

use cni::{CmdArgs, CniError, CniResult, NetConf, Plugin};

pub struct Passthru;

impl Plugin for Passthru {
    /// An empty result; the entry point prints it in the config's version.
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.validate(&args.stdin)?;
        Ok(CniResult::default())
    }

    fn del(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }

    fn check(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }

    /// Any valid network config will do: passthru has no options of its own.
    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        cni::config::parse_plugin_config::<NetConf>(config).map(drop)
    }
}
