//! `conflictProbe`: on a shared layer-2 network (macvlan, ipvlan L2, vlan, bridge), an opt-in
//! check that no other host already holds the addresses IPAM chose, made after they are chosen
//! and before ADD returns them ([`netkit::probe`]). An address in use fails the ADD with code
//! 11 (try again later); the failure path releases it, telling IPAM which addresses are in
//! use ([`cni::in_use`]).

use std::net::IpAddr;
use std::time::Duration;

use cni::in_use::InUse;
use cni::{CniError, CniResult, Code};
use netkit::{NetNs, Netlink};
use serde_json::Value;

use crate::support::sys::{sys, sys_ctx};

/// The wait for answers when `conflictProbe` is `true`.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(100);
/// Waits for the probing link's carrier: the kernel raises it within microseconds; past
/// these, the probe goes out anyway.
const CARRIER_WAITS_MS: [u64; 6] = [0, 1, 5, 20, 100, 300];
/// The longest wait a config may ask for: ADD waits for all of it when nobody answers.
const MAX_WAIT_MS: u64 = 2000;

/// `conflictProbe`: absent or `false` is off; `true` waits [`DEFAULT_WAIT`];
/// `{"timeoutMs": N}` waits N ms (1 to 2000).
pub fn parse(value: Option<&Value>) -> Result<Option<Duration>, CniError> {
    let ms = match value {
        None | Some(Value::Null | Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => return Ok(Some(DEFAULT_WAIT)),
        Some(Value::Object(o)) => match (o.get("timeoutMs"), o.len()) {
            (None, 0) => return Ok(Some(DEFAULT_WAIT)),
            (Some(ms), 1) => ms.as_u64(),
            _ => None,
        },
        Some(_) => None,
    };
    match ms {
        Some(ms @ 1..=MAX_WAIT_MS) => Ok(Some(Duration::from_millis(ms))),
        _ => Err(CniError::invalid_config(format!(
            "conflictProbe: {} is not a probe setting: use true, or {{\"timeoutMs\": N}} with N \
             from 1 to {MAX_WAIT_MS}",
            value.map(Value::to_string).unwrap_or_default()
        ))),
    }
}

/// Where the probe goes out: a link, by index, in a namespace.
pub struct Probe<'a> {
    pub ns: &'a NetNs,
    pub nl: &'a Netlink,
    pub index: u32,
    pub wait: Duration,
}

impl Probe<'_> {
    /// Probes `result`'s addresses; an address another host answers for is an error naming
    /// it, the MAC that answered, and `ifname`'s network, and is put in `in_use` for the DEL
    /// that releases it. The link is brought up to send.
    pub fn check(
        &self,
        result: &CniResult,
        ifname: &str,
        in_use: &mut Vec<InUse>,
    ) -> Result<(), CniError> {
        let addresses: Vec<IpAddr> = result.ips.iter().map(|ip| ip.address.addr()).collect();
        if addresses.is_empty() {
            return Ok(());
        }
        let ctx = || format!("probing for address conflicts on the network of {ifname:?}");
        self.nl.set_up(self.index).map_err(sys_ctx(ctx()))?;
        // A probe sent before the link has carrier (a veth whose node end is not up yet) is
        // lost, and silence would pass for a free address.
        let mut link;
        let mut waits = CARRIER_WAITS_MS.iter();
        loop {
            link = self
                .nl
                .link_by_index(self.index)
                .map_err(sys_ctx(ctx()))?
                .ok_or_else(|| CniError::internal(format!("{}: the link is gone", ctx())))?;
            match waits.next() {
                Some(ms) if !link.running => std::thread::sleep(Duration::from_millis(*ms)),
                _ => break,
            }
        }
        let mac = link.mac.unwrap_or_default();
        let (index, wait) = (self.index, self.wait);
        let found = self
            .ns
            .run(|| netkit::probe::conflicts(index, mac, &addresses, wait))
            .map_err(sys)?
            .map_err(|e| CniError::io(format!("{}: {e}", ctx())))?;
        let Some(first) = found.first() else {
            return Ok(());
        };
        in_use.extend(found.iter().map(|c| InUse {
            address: c.address,
            mac: netkit::format_mac(&c.mac),
        }));
        let others: Vec<String> = found[1..]
            .iter()
            .map(|c| format!("{} (from {})", c.address, netkit::format_mac(&c.mac)))
            .collect();
        let and = if others.is_empty() {
            String::new()
        } else {
            format!("; so are {}", others.join(", "))
        };
        Err(CniError::new(
            Code::TryAgainLater,
            format!(
                "address {} is already in use on the network of {ifname:?}: {} answered the \
                 conflict probe{and}. The address was released; another ADD asks IPAM again",
                first.address,
                netkit::format_mac(&first.mac)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn settings() {
        assert_eq!(parse(None).unwrap(), None);
        assert_eq!(parse(Some(&json!(false))).unwrap(), None);
        assert_eq!(parse(Some(&json!(true))).unwrap(), Some(DEFAULT_WAIT));
        assert_eq!(
            parse(Some(&json!({"timeoutMs": 250}))).unwrap(),
            Some(Duration::from_millis(250))
        );
        for bad in [
            json!({"timeoutMs": 0}),
            json!({"timeoutMs": 2001}),
            json!({"timeoutMs": "100"}),
            json!({"timeout": 100}),
            json!("yes"),
            json!(1),
        ] {
            let e = parse(Some(&bad)).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.starts_with("conflictProbe: "), "{e}");
        }
    }
}
