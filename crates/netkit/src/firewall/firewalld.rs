//! firewalld's zones over the system bus, for the firewall plugin's firewalld backend: each pod
//! address (`<ip>/32` or `<ip>/128`) is bound to a zone as a runtime source, as the reference
//! binds it, so the zone's rules apply to the pod's traffic. Runtime sources end with firewalld:
//! after a restart there is nothing left to remove.

use std::net::IpAddr;

use crate::dbus::{Bus, Call, Value};
use crate::error::{Error, Result};

/// The zone when the config names none, as the reference has it.
pub const DEFAULT_ZONE: &str = "trusted";

const NAME: &str = "org.fedoraproject.FirewallD1";
const PATH: &str = "/org/fedoraproject/FirewallD1";
const ZONE_INTERFACE: &str = "org.fedoraproject.FirewallD1.zone";

/// The bus's errors when no process holds firewalld's name.
const NOT_RUNNING: [&str; 2] = [
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
];

/// A connection to the system bus, for firewalld's calls.
pub struct Firewalld {
    bus: Bus,
}

/// The source firewalld binds for `ip`.
pub fn source(ip: IpAddr) -> String {
    ipnet::IpNet::from(ip).to_string()
}

/// firewalld's error code: the start of its exception's message (`ZONE_CONFLICT: ...`).
pub fn code(e: &Error) -> Option<&str> {
    match e {
        Error::Dbus { name, msg, .. } if name.starts_with(NAME) => msg.split(':').next(),
        _ => None,
    }
}

/// Whether the bus said no process holds firewalld's name.
pub fn not_running(e: &Error) -> bool {
    matches!(e, Error::Dbus { name, .. } if NOT_RUNNING.contains(&name.as_str()))
}

impl Firewalld {
    /// Connects to the system bus.
    pub fn connect() -> Result<Firewalld> {
        Ok(Firewalld {
            bus: Bus::system()?,
        })
    }

    /// Connects to the bus at `address`, a D-Bus address as `DBUS_SYSTEM_BUS_ADDRESS` has it.
    pub fn connect_to(address: &str) -> Result<Firewalld> {
        Ok(Firewalld {
            bus: Bus::connect(address)?,
        })
    }

    /// A connection when firewalld holds its name on the system bus, `None` when there is no
    /// bus or no firewalld: how the reference picks a backend when the config names none.
    pub fn if_running() -> Option<Firewalld> {
        let mut fw = Firewalld::connect().ok()?;
        fw.bus
            .call(&Call {
                destination: "org.freedesktop.DBus",
                path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus",
                member: "GetNameOwner",
                args: &[NAME],
            })
            .ok()?;
        Some(fw)
    }

    fn zone_call(&mut self, member: &str, zone: &str, source: &str) -> Result<Value> {
        self.bus
            .call(&Call {
                destination: NAME,
                path: PATH,
                interface: ZONE_INTERFACE,
                member,
                args: &[zone, source],
            })
            .map_err(|e| match e {
                Error::Dbus { name, msg, .. } => Error::Dbus {
                    op: format!("{member} {source} in firewalld zone {zone:?}"),
                    msg: if NOT_RUNNING.contains(&name.as_str()) {
                        format!("firewalld is not running on the system bus ({msg})")
                    } else {
                        msg
                    },
                    name,
                },
                other => other,
            })
    }

    /// Binds `ip` to `zone`; already bound to it is success. Bound to another zone is
    /// firewalld's `ZONE_CONFLICT`.
    pub fn add_source(&mut self, zone: &str, ip: IpAddr) -> Result<()> {
        match self.zone_call("addSource", zone, &source(ip)) {
            Err(e) if code(&e) == Some("ZONE_ALREADY_SET") => Ok(()),
            other => other.map(drop),
        }
    }

    /// Unbinds `ip` from `zone`. Nothing to unbind (not bound, bound elsewhere, no such zone,
    /// firewalld gone) is success: DEL must be repeatable.
    pub fn remove_source(&mut self, zone: &str, ip: IpAddr) -> Result<()> {
        match self.zone_call("removeSource", zone, &source(ip)) {
            Err(e)
                if not_running(&e)
                    || matches!(
                        code(&e),
                        Some("UNKNOWN_SOURCE" | "INVALID_ZONE" | "ZONE_CONFLICT" | "NOT_ENABLED")
                    ) =>
            {
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// Whether `ip` is bound to `zone`.
    pub fn has_source(&mut self, zone: &str, ip: IpAddr) -> Result<bool> {
        match self.zone_call("querySource", zone, &source(ip))? {
            Value::Bool(bound) => Ok(bound),
            other => Err(Error::Decode {
                op: format!("querySource {} in firewalld zone {zone:?}", source(ip)),
                msg: format!("expected a boolean, got {other:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_host_prefixes() {
        assert_eq!(source("10.1.0.5".parse().expect("ip")), "10.1.0.5/32");
        assert_eq!(source("fd00::5".parse().expect("ip")), "fd00::5/128");
    }

    #[test]
    fn codes_are_read_from_firewalld_exceptions_only() {
        let fw = |name: &str, msg: &str| Error::Dbus {
            op: "x".into(),
            name: name.into(),
            msg: msg.into(),
        };
        let e = fw(
            "org.fedoraproject.FirewallD1.Exception",
            "ZONE_ALREADY_SET: '10.9.0.5/32' already bound to 'trusted'",
        );
        assert_eq!(code(&e), Some("ZONE_ALREADY_SET"));
        assert_eq!(code(&fw("org.example.Other", "ZONE_ALREADY_SET: x")), None);
        assert!(not_running(&fw(
            "org.freedesktop.DBus.Error.ServiceUnknown",
            ""
        )));
    }
}
