//! The D-Bus wire protocol, as much of it as a call to a system service takes: a connection to
//! the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, or the well-known socket), EXTERNAL
//! authentication, method calls whose arguments are strings, and a reply's first value when it
//! is a string or a boolean. No signals, no properties, no file descriptors.
//!
//! Every call has a deadline ([`CALL_TIMEOUT`]) and a reply is at most [`MAX_REPLY`] bytes: a
//! hung or hostile peer costs a call a bounded wait and a bounded buffer, never the node.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The system bus when `DBUS_SYSTEM_BUS_ADDRESS` is not set, as libdbus has it.
const DEFAULT_SYSTEM_BUS: &str = "unix:path=/var/run/dbus/system_bus_socket";
/// How long a call waits for its reply (and the connection for authentication).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest reply read; the services called here answer in well under a kilobyte.
const MAX_REPLY: usize = 64 * 1024;

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;

const FIELD_PATH: u8 = 1;
const FIELD_INTERFACE: u8 = 2;
const FIELD_MEMBER: u8 = 3;
const FIELD_ERROR_NAME: u8 = 4;
const FIELD_REPLY_SERIAL: u8 = 5;
const FIELD_DESTINATION: u8 = 6;
const FIELD_SIGNATURE: u8 = 8;

/// The first value of a reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Bool(bool),
    /// No value, or one of a type no caller here reads.
    Other,
}

/// One method call: who, which object, which method, and its string arguments.
pub struct Call<'a> {
    pub destination: &'a str,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
    pub args: &'a [&'a str],
}

impl Call<'_> {
    fn name(&self) -> String {
        format!("{}.{}", self.interface, self.member)
    }
}

/// An authenticated connection to a bus, after `Hello`.
pub struct Bus {
    stream: UnixStream,
    serial: u32,
    address: String,
}

impl Bus {
    /// Connects to the system bus and says `Hello`.
    pub fn system() -> Result<Bus> {
        let address = std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
            .ok()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| DEFAULT_SYSTEM_BUS.to_owned());
        Bus::connect(&address)
    }

    /// Connects to the first address of `address` (`;`-separated) that accepts a connection.
    pub fn connect(address: &str) -> Result<Bus> {
        let mut last = Error::Invalid(format!(
            "D-Bus address {address:?} names no unix socket (unix:path= or unix:abstract=)"
        ));
        for entry in address.split(';').filter(|e| !e.is_empty()) {
            let Some(target) = unix_target(entry) else {
                continue;
            };
            match target.connect() {
                Ok(stream) => return Bus::start(stream, entry),
                Err(e) => last = Error::io(format!("connecting to the D-Bus bus at {entry}"), e),
            }
        }
        Err(last)
    }

    fn start(stream: UnixStream, address: &str) -> Result<Bus> {
        let mut bus = Bus {
            stream,
            serial: 0,
            address: address.to_owned(),
        };
        bus.authenticate()?;
        bus.call(&Call {
            destination: "org.freedesktop.DBus",
            path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus",
            member: "Hello",
            args: &[],
        })?;
        Ok(bus)
    }

    fn authenticate(&mut self) -> Result<()> {
        let address = self.address.clone();
        let op = || format!("authenticating to the D-Bus bus at {address}");
        self.set_deadline(Instant::now() + CALL_TIMEOUT)
            .map_err(|e| Error::io(op(), e))?;
        // SAFETY: getuid(2) has no arguments and cannot fail.
        let uid = unsafe { libc::getuid() };
        let hex: String = uid
            .to_string()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.stream
            .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())
            .map_err(|e| Error::io(op(), e))?;
        let line = self.read_line().map_err(|e| Error::io(op(), e))?;
        if !line.starts_with("OK ") {
            return Err(Error::Command {
                op: op(),
                msg: format!("the bus refused EXTERNAL authentication: {line:?}"),
            });
        }
        self.stream
            .write_all(b"BEGIN\r\n")
            .map_err(|e| Error::io(op(), e))
    }

    /// One line of the authentication exchange, at most 512 bytes.
    fn read_line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if line.len() >= 512 {
                return Err(io::Error::other("an authentication line over 512 bytes"));
            }
            if self.stream.read(&mut byte)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            line.push(byte[0]);
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    fn set_deadline(&self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.set_write_timeout(Some(left))
    }

    /// Calls a method and waits for its reply. A D-Bus error reply is [`Error::Dbus`], with the
    /// error's name and message.
    pub fn call(&mut self, call: &Call<'_>) -> Result<Value> {
        let op = || format!("calling {} on {}", call.name(), call.destination);
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        let message = encode_call(call, serial);
        let deadline = Instant::now() + CALL_TIMEOUT;
        let io_error = |e: io::Error| {
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                Error::Command {
                    op: op(),
                    msg: format!("no reply within {} s", CALL_TIMEOUT.as_secs()),
                }
            } else {
                Error::io(op(), e)
            }
        };
        self.set_deadline(deadline).map_err(io_error)?;
        self.stream.write_all(&message).map_err(io_error)?;
        loop {
            self.set_deadline(deadline).map_err(io_error)?;
            let raw = read_message(&mut self.stream).map_err(io_error)?;
            let reply = decode(&raw).map_err(|msg| Error::Decode { op: op(), msg })?;
            if reply.reply_serial != Some(serial) {
                // A signal (NameAcquired after Hello), or a reply to nothing of ours.
                continue;
            }
            return match reply.kind {
                METHOD_RETURN => Ok(reply.value),
                ERROR => Err(Error::Dbus {
                    op: op(),
                    name: reply.error_name.unwrap_or_default(),
                    msg: match reply.value {
                        Value::Str(s) => s,
                        _ => String::new(),
                    },
                }),
                _ => continue,
            };
        }
    }
}

/// Where a `unix:` address entry points.
enum UnixTarget {
    Path(String),
    Abstract(String),
}

impl UnixTarget {
    fn connect(&self) -> io::Result<UnixStream> {
        match self {
            UnixTarget::Path(path) => UnixStream::connect(path),
            UnixTarget::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                UnixStream::connect_addr(&addr)
            }
        }
    }
}

/// The socket of one address entry (`unix:path=/run/dbus/system_bus_socket,guid=...`), its
/// value unescaped; `None` for other transports.
fn unix_target(entry: &str) -> Option<UnixTarget> {
    let keys = entry.strip_prefix("unix:")?;
    for pair in keys.split(',') {
        let (key, value) = pair.split_once('=')?;
        let value = unescape(value)?;
        match key {
            "path" => return Some(UnixTarget::Path(value)),
            "abstract" => return Some(UnixTarget::Abstract(value)),
            _ => {}
        }
    }
    None
}

/// An address value: `%xx` escapes decoded.
fn unescape(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A little-endian message under construction; alignment is from its start.
struct Writer(Vec<u8>);

impl Writer {
    fn pad(&mut self, align: usize) {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
    }
    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn string(&mut self, s: &str) {
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
    }
    fn signature(&mut self, s: &str) {
        self.0.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
    }
    /// A header field: a struct of its code and a variant.
    fn field(&mut self, code: u8, kind: &str, value: &str) {
        self.pad(8);
        self.0.push(code);
        self.signature(kind);
        match kind {
            "g" => self.signature(value),
            _ => self.string(value),
        }
    }
}

fn encode_call(call: &Call<'_>, serial: u32) -> Vec<u8> {
    let mut body = Writer(Vec::new());
    for arg in call.args {
        body.string(arg);
    }
    let signature = "s".repeat(call.args.len());

    let mut fields = Writer(Vec::new());
    fields.field(FIELD_PATH, "o", call.path);
    fields.field(FIELD_INTERFACE, "s", call.interface);
    fields.field(FIELD_MEMBER, "s", call.member);
    fields.field(FIELD_DESTINATION, "s", call.destination);
    if !signature.is_empty() {
        fields.field(FIELD_SIGNATURE, "g", &signature);
    }

    let mut m = Writer(vec![b'l', METHOD_CALL, 0, 1]);
    m.u32(u32::try_from(body.0.len()).unwrap_or(u32::MAX));
    m.u32(serial);
    m.u32(u32::try_from(fields.0.len()).unwrap_or(u32::MAX));
    // The fields were written as if from offset 0; at offset 16 their alignment is the same.
    m.0.extend_from_slice(&fields.0);
    m.pad(8);
    m.0.extend_from_slice(&body.0);
    m.0
}

/// Reads one whole message: the fixed header says how long the rest is.
fn read_message(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut head = [0u8; 16];
    stream.read_exact(&mut head)?;
    let big = match head[0] {
        b'l' => false,
        b'B' => true,
        other => {
            return Err(io::Error::other(format!(
                "not a D-Bus message: endianness byte {other:#04x}"
            )))
        }
    };
    let word = |at: usize| {
        let b = [head[at], head[at + 1], head[at + 2], head[at + 3]];
        usize::try_from(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
        .unwrap_or(usize::MAX)
    };
    let (body_len, fields_len) = (word(4), word(12));
    let total = 16usize
        .saturating_add(fields_len)
        .saturating_add(7)
        .saturating_div(8)
        .saturating_mul(8)
        .saturating_add(body_len);
    if total > MAX_REPLY {
        return Err(io::Error::other(format!(
            "a reply of {total} bytes, over the {MAX_REPLY} read"
        )));
    }
    let mut message = head.to_vec();
    message.resize(total, 0);
    stream.read_exact(&mut message[16..])?;
    Ok(message)
}

/// What a caller needs of a received message.
struct Reply {
    kind: u8,
    reply_serial: Option<u32>,
    error_name: Option<String>,
    value: Value,
}

/// A cursor over a received message, in its byte order.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    big: bool,
}

impl Reader<'_> {
    fn align(&mut self, n: usize) -> std::result::Result<(), String> {
        self.at = self.at.div_ceil(n) * n;
        if self.at > self.data.len() {
            return Err("truncated message".into());
        }
        Ok(())
    }
    fn bytes(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or("truncated message")?;
        let b = &self.data[self.at..end];
        self.at = end;
        Ok(b)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        self.align(4)?;
        let b = self.bytes(4)?;
        let b = [b[0], b[1], b[2], b[3]];
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    fn text(&mut self, len: usize) -> std::result::Result<String, String> {
        let b = self.bytes(len)?.to_vec();
        if self.u8()? != 0 {
            return Err("a string without its NUL".into());
        }
        String::from_utf8(b).map_err(|_| "a string that is not UTF-8".into())
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let len = usize::try_from(self.u32()?).map_err(|_| "string length")?;
        self.text(len)
    }
    fn signature(&mut self) -> std::result::Result<String, String> {
        let len = usize::from(self.u8()?);
        self.text(len)
    }
}

fn decode(data: &[u8]) -> std::result::Result<Reply, String> {
    let mut r = Reader {
        data,
        at: 12,
        big: data.first() == Some(&b'B'),
    };
    let kind = data.get(1).copied().ok_or("truncated message")?;
    let fields_len = usize::try_from(r.u32()?).map_err(|_| "header length")?;
    let fields_end = 16usize.saturating_add(fields_len);
    let (mut reply_serial, mut error_name, mut signature) = (None, None, String::new());
    while r.at < fields_end {
        r.align(8)?;
        let code = r.u8()?;
        let kind = r.signature()?;
        match (code, kind.as_str()) {
            (FIELD_REPLY_SERIAL, "u") => reply_serial = Some(r.u32()?),
            (FIELD_ERROR_NAME, "s") => error_name = Some(r.string()?),
            (FIELD_SIGNATURE, "g") => signature = r.signature()?,
            (_, "s" | "o") => {
                r.string()?;
            }
            (_, "g") => {
                r.signature()?;
            }
            (_, "u") => {
                r.u32()?;
            }
            (_, other) => return Err(format!("a header field of type {other:?}")),
        }
    }
    r.at = fields_end;
    r.align(8)?;
    let value = match signature.chars().next() {
        Some('s') => Value::Str(r.string()?),
        Some('b') => Value::Bool(r.u32()? != 0),
        _ => Value::Other,
    };
    Ok(Reply {
        kind,
        reply_serial,
        error_name,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn addresses() {
        assert!(matches!(
            unix_target("unix:path=/run/dbus/system_bus_socket"),
            Some(UnixTarget::Path(p)) if p == "/run/dbus/system_bus_socket"
        ));
        assert!(matches!(
            unix_target("unix:guid=00,abstract=/tmp/dbus%2dx"),
            Some(UnixTarget::Abstract(p)) if p == "/tmp/dbus-x"
        ));
        assert!(unix_target("tcp:host=localhost,port=1").is_none());
        assert!(unix_target("unix:path=/bad%zz").is_none());
        let err = Bus::connect("tcp:host=localhost")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("names no unix socket")));
    }

    /// A reply as a bus would send it, in either byte order.
    fn reply(big: bool, kind: u8, reply_serial: u32, error: Option<&str>, body: Value) -> Vec<u8> {
        let u32b = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut fields = Vec::new();
        let pad = |v: &mut Vec<u8>, n: usize| {
            while !v.len().is_multiple_of(n) {
                v.push(0)
            }
        };
        fields.extend_from_slice(&[FIELD_REPLY_SERIAL, 1, b'u', 0]);
        fields.extend_from_slice(&u32b(reply_serial));
        if let Some(name) = error {
            pad(&mut fields, 8);
            fields.extend_from_slice(&[FIELD_ERROR_NAME, 1, b's', 0]);
            fields.extend_from_slice(&u32b(u32::try_from(name.len()).expect("short")));
            fields.extend_from_slice(name.as_bytes());
            fields.push(0);
        }
        let (sig, mut body_bytes) = match body {
            Value::Str(s) => {
                let mut b = u32b(u32::try_from(s.len()).expect("short")).to_vec();
                b.extend_from_slice(s.as_bytes());
                b.push(0);
                ("s", b)
            }
            Value::Bool(v) => ("b", u32b(u32::from(v)).to_vec()),
            Value::Other => ("", Vec::new()),
        };
        if !sig.is_empty() {
            pad(&mut fields, 8);
            fields.extend_from_slice(&[FIELD_SIGNATURE, 1, b'g', 0, 1, sig.as_bytes()[0], 0]);
        }
        let mut m = vec![if big { b'B' } else { b'l' }, kind, 0, 1];
        m.extend_from_slice(&u32b(u32::try_from(body_bytes.len()).expect("short")));
        m.extend_from_slice(&u32b(7));
        m.extend_from_slice(&u32b(u32::try_from(fields.len()).expect("short")));
        m.extend_from_slice(&fields);
        pad(&mut m, 8);
        m.append(&mut body_bytes);
        m
    }

    #[test]
    fn replies_decode_in_both_byte_orders() {
        for big in [false, true] {
            let r = decode(&reply(
                big,
                METHOD_RETURN,
                3,
                None,
                Value::Str("trusted".into()),
            ))
            .expect("decoded");
            assert_eq!((r.kind, r.reply_serial), (METHOD_RETURN, Some(3)));
            assert_eq!(r.value, Value::Str("trusted".into()));
            let r = decode(&reply(big, METHOD_RETURN, 4, None, Value::Bool(true))).expect("bool");
            assert_eq!(r.value, Value::Bool(true));
            let r = decode(&reply(
                big,
                ERROR,
                5,
                Some("org.fedoraproject.FirewallD1.Exception"),
                Value::Str("INVALID_ZONE: x".into()),
            ))
            .expect("error");
            assert_eq!(
                r.error_name.as_deref(),
                Some("org.fedoraproject.FirewallD1.Exception")
            );
        }
    }

    #[test]
    fn truncated_and_malformed_replies_are_errors_not_panics() {
        let whole = reply(false, ERROR, 5, Some("a.b"), Value::Str("msg".into()));
        for cut in 0..whole.len() {
            let _ = decode(&whole[..cut]);
        }
        let mut bad = whole.clone();
        bad[16 + 1] = 9; // a field's signature length running past the message
        assert!(decode(&bad).is_err());
    }

    /// A bus that accepts one connection, authenticates it, then leaves it to `then`: its
    /// address, the directory its socket is in, and the thread.
    fn fake_bus(
        then: impl FnOnce(UnixStream) + Send + 'static,
    ) -> (String, tempfile::TempDir, std::thread::JoinHandle<()>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bus");
        let listener = UnixListener::bind(&path).expect("bind");
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).expect("auth");
            assert!(buf[..n].starts_with(b"\0AUTH EXTERNAL "));
            s.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
                .expect("ok");
            then(s);
        });
        (format!("unix:path={}", path.display()), dir, server)
    }

    /// A bus that reads and never answers: the call ends at the deadline.
    #[test]
    fn a_silent_bus_costs_a_call_its_deadline_and_no_more() {
        let (address, _dir, server) = fake_bus(|mut s| {
            let mut buf = [0u8; 256];
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let started = Instant::now();
        let err = Bus::connect(&address)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let waited = started.elapsed();
        assert!(err.contains("org.freedesktop.DBus.Hello"), "{err}");
        assert!(err.contains("no reply within 5 s"), "{err}");
        assert!(
            waited >= CALL_TIMEOUT && waited < CALL_TIMEOUT * 2,
            "{waited:?}"
        );
        server.join().expect("server");
    }

    /// A reply that claims to be huge is refused before anything is allocated for it.
    #[test]
    fn an_oversized_reply_is_refused() {
        let (address, _dir, server) = fake_bus(|mut s| {
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let mut head = vec![b'l', METHOD_RETURN, 0, 1];
            head.extend_from_slice(&u32::MAX.to_le_bytes());
            head.extend_from_slice(&1u32.to_le_bytes());
            head.extend_from_slice(&8u32.to_le_bytes());
            let _ = s.write_all(&head);
            // Held open until the client hangs up, so its Hello never meets a closed socket.
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let err = Bus::connect(&address)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("over the 65536 read"), "{err}");
        server.join().expect("server");
    }
}
