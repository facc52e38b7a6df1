//! The ports this network namespace listens on, from `/proc/thread-self/net/{tcp,tcp6,udp,udp6}`
//! (the calling thread's namespace: `/proc/net` is the process's first thread's, which a thread
//! that entered a node's namespace would not see): a tenant's port mapping must not take one of
//! them.

use std::collections::BTreeSet;
use std::io::BufRead;

use crate::{Error, Result};

/// A transport protocol of a listening socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// `st` of a listening TCP socket and of a bound, unconnected UDP socket.
const TCP_LISTEN: &str = "0A";
const UDP_UNCONNECTED: &str = "07";

/// Every `(protocol, port)` a socket of this namespace listens on, on any address.
pub fn listening() -> Result<BTreeSet<(Protocol, u16)>> {
    let mut ports = BTreeSet::new();
    for (file, protocol, state) in [
        ("/proc/thread-self/net/tcp", Protocol::Tcp, TCP_LISTEN),
        ("/proc/thread-self/net/tcp6", Protocol::Tcp, TCP_LISTEN),
        ("/proc/thread-self/net/udp", Protocol::Udp, UDP_UNCONNECTED),
        ("/proc/thread-self/net/udp6", Protocol::Udp, UDP_UNCONNECTED),
    ] {
        // The kernel's own table, read a line at a time: a busy node has many sockets.
        let table = match std::fs::File::open(file) {
            Ok(f) => std::io::BufReader::new(f),
            // A kernel without IPv6 has no tcp6.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::Invalid(format!("reading {file}: {e}"))),
        };
        for line in table.lines().skip(1) {
            let line = line.map_err(|e| Error::Invalid(format!("reading {file}: {e}")))?;
            if let Some(port) = listening_port(&line, state) {
                ports.insert((protocol, port));
            }
        }
    }
    Ok(ports)
}

/// The local port of a line of a `/proc/net` socket table, when its state is `state`.
fn listening_port(line: &str, state: &str) -> Option<u16> {
    let mut fields = line.split_whitespace();
    let local = fields.nth(1)?;
    let st = fields.nth(1)?;
    if st != state {
        return None;
    }
    let (_, port) = local.rsplit_once(':')?;
    u16::from_str_radix(port, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_tables() {
        let listen = "   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0";
        assert_eq!(listening_port(listen, TCP_LISTEN), Some(3306));
        let connected = "   1: 0100007F:9C40 0100007F:0CEA 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1";
        assert_eq!(listening_port(connected, TCP_LISTEN), None);
        let tcp6 = "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0";
        assert_eq!(listening_port(tcp6, TCP_LISTEN), Some(22));
        assert_eq!(listening_port("garbage", TCP_LISTEN), None);
    }

    #[test]
    fn a_thread_in_another_namespace_sees_that_namespaces_listeners() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let name = format!("nk-sockets-{}", std::process::id());
        let other = crate::NetNs::create_named(&name).unwrap();
        let seen = other.run(|| listening().unwrap());
        crate::NetNs::delete_named(&name).unwrap();
        // A fresh namespace listens on nothing: the process's own listener is not in it.
        assert_eq!(seen.unwrap(), BTreeSet::new());
        assert!(listening().unwrap().contains(&(Protocol::Tcp, port)));
    }

    #[test]
    fn this_namespace_shows_a_listener_it_opens() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening().unwrap().contains(&(Protocol::Tcp, port)));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        assert!(listening().unwrap().contains(&(Protocol::Udp, port)));
    }
}
