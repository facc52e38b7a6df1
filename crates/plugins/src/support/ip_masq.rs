//! `ipMasq` and `ipMasqBackend`, which bridge and ptp share: the key, and setting up the
//! attachment's masquerade so that a failed ADD can undo it.

use cni::quote::quote;
use cni::{CmdArgs, CniError, CniResult};
use ipnet::IpNet;

use crate::support::sys::sys;

/// Which firewall tool programs `ipMasq` rules: netkit's own choice, so the config's value
/// goes through unchanged.
pub use netkit::firewall::masq::Backend;

/// `ipMasqBackend`: `None` leaves the choice to [`netkit::firewall::masq::setup`].
pub fn parse_backend(raw: Option<&str>) -> Result<Option<Backend>, CniError> {
    match raw {
        None => Ok(None),
        Some("nftables") => Ok(Some(Backend::Nftables)),
        Some("iptables") => Ok(Some(Backend::Iptables)),
        Some(other) => Err(CniError::invalid_config(format!(
            "ipMasqBackend: {} is not \"nftables\" or \"iptables\"",
            quote(other)
        ))),
    }
}

/// Masquerades the result's addresses for network `name`. `done` is set first, so a setup
/// that fails halfway is undone too (the teardown is idempotent).
pub fn setup(
    backend: Option<Backend>,
    name: &str,
    args: &CmdArgs,
    result: &CniResult,
    done: &mut Option<Vec<IpNet>>,
) -> Result<(), CniError> {
    let addrs: Vec<IpNet> = result.ips.iter().map(|ip| ip.address).collect();
    *done = Some(addrs.clone());
    netkit::firewall::masq::setup(backend, name, &args.container_id, &args.ifname, &addrs)
        .map_err(sys)
}

/// Removes what [`setup`] made for `addrs`, for a failed ADD; the failure, if any, as text for
/// the error's details.
pub fn undo(name: &str, args: &CmdArgs, addrs: &[IpNet]) -> Option<String> {
    netkit::firewall::masq::teardown(name, &args.container_id, &args.ifname, addrs)
        .err()
        .map(|e| e.to_string())
}
