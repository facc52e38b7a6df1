//! The wire between `multus-shim` and `multus-daemon`, as upstream's: HTTP/1.1 over the unix
//! socket `<daemonSocketDir>/multus.sock`, one request per connection (every reply says
//! `Connection: close`). This module owns the format: the `POST /cni` body, the replies, and the
//! HTTP framing both ends use, with a size cap on everything read and a deadline on every wait.
//!
//! - Request body: `{"env": {"CNI_COMMAND": ..., ...}, "config": "<stdin, base64>",
//!   "interfaceAttributes": {...}}` (the last only on `/delegate`).
//! - ADD's reply: 200 `{"Result": <the CNI result, cniVersion 1.1.0>}`; other commands: 200 with
//!   an empty body.
//! - A failure: 400 with a CNI error object `{"code", "msg", "details"}`; upstream's daemon may
//!   also answer plain text.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const SOCKET_NAME: &str = "multus.sock";
/// `daemonSocketDir` (the shim) and `socketDir` (the daemon) when not set.
pub const DEFAULT_SOCKET_DIR: &str = "/run/multus/";

/// The longest request or reply head read.
const MAX_HEAD: u64 = 16 * 1024;
/// The largest body read: a CNI config with its environment is a few KiB; a reply with a
/// result is no bigger.
pub const MAX_BODY: usize = 4 << 20;

pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET_NAME)
}

/// The body of `POST /cni`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CniRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The runtime's stdin to the shim: the network config.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "to_base64",
        deserialize_with = "from_base64"
    )]
    pub config: Vec<u8>,
    /// Hot-plug's requested IPs, MAC and CNI args (`/delegate` only).
    #[serde(
        default,
        rename = "interfaceAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub interface_attributes: Option<Value>,
}

fn to_base64<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn from_base64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = Option::<String>::deserialize(d)?.unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|e| serde::de::Error::custom(format!("config is not base64: {e}")))
}

/// ADD's reply: upstream's `Response` has no JSON tag, so the key is `Result`.
#[derive(Serialize)]
pub struct AddReply<'a> {
    #[serde(rename = "Result")]
    pub result: &'a Value,
}

/// The result in ADD's reply; Go decodes keys regardless of case, so `result` is taken too.
pub fn result_of(reply: &Value) -> Option<&Value> {
    reply
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("result"))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

/// A request as the daemon reads it.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// Why a request could not be read, and the status to answer with (if any can be sent).
#[derive(Debug)]
pub enum BadRequest {
    /// The peer went away, or said nothing in time: nothing to answer.
    Gone(io::Error),
    /// 400, 411 or 413 with this text.
    Refused(u16, String),
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// A request line or status line, then the headers: the first line and the body's length.
fn read_head(r: &mut impl BufRead) -> io::Result<(String, Option<usize>, bool)> {
    let mut head = r.take(MAX_HEAD);
    let mut first = String::new();
    if head.read_line(&mut first)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "nothing was sent",
        ));
    }
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut line = String::new();
        if head.read_line(&mut line)? == 0 {
            return Err(invalid("the head is cut short or longer than 16 KiB"));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid("a header line has no ':'"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| invalid("Content-Length is not a number"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = !value.eq_ignore_ascii_case("identity");
        }
    }
    Ok((first.trim_end().to_owned(), length, chunked))
}

/// Reads one request: `Content-Length` bodies only (as Go's client sends), at most
/// `max_body` bytes.
pub fn read_request(r: &mut impl BufRead, max_body: usize) -> Result<Request, BadRequest> {
    let (line, length, chunked) = read_head(r).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => BadRequest::Refused(400, e.to_string()),
        _ => BadRequest::Gone(e),
    })?;
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return Err(BadRequest::Refused(400, "not an HTTP request line".into()));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(BadRequest::Refused(
            400,
            format!("{version:?} is not HTTP/1"),
        ));
    }
    if chunked {
        return Err(BadRequest::Refused(
            411,
            "send the body with a Content-Length".into(),
        ));
    }
    let length = length.unwrap_or(0);
    if length > max_body {
        return Err(BadRequest::Refused(
            413,
            format!("the body is {length} bytes; at most {max_body} are read"),
        ));
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).map_err(BadRequest::Gone)?;
    Ok(Request {
        method: method.to_owned(),
        path: target.split('?').next().unwrap_or_default().to_owned(),
        body,
    })
}

/// A stream whose reads can be given a timeout.
pub trait TimedRead: Read {
    fn read_timeout(&self, left: Duration) -> io::Result<()>;
}

impl TimedRead for UnixStream {
    fn read_timeout(&self, left: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(left))
    }
}

impl TimedRead for TcpStream {
    fn read_timeout(&self, left: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(left))
    }
}

/// A stream read against one deadline over all its reads: a peer that sends a byte at a time
/// still has only the deadline in all.
struct ReadBy<S> {
    stream: S,
    until: Instant,
}

impl<S: TimedRead> Read for ReadBy<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request did not arrive in time",
            ));
        }
        self.stream.read_timeout(left)?;
        self.stream.read(buf)
    }
}

/// [`read_request`] from a connection, whole within `wait`.
pub fn read_request_within(
    stream: impl TimedRead,
    wait: Duration,
    max_body: usize,
) -> Result<Request, BadRequest> {
    let until = Instant::now() + wait;
    read_request(&mut BufReader::new(ReadBy { stream, until }), max_body)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        _ => "Unknown",
    }
}

/// Writes a whole reply in one write (no Nagle or partial-write stalls for the peer).
pub fn write_response(
    w: &mut impl Write,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Sends one request on the socket and reads the reply: its status and body. `timeout`
/// bounds each read and write.
pub fn exchange(
    socket: &Path,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> io::Result<(u16, Vec<u8>)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: dummy\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    let mut reader = BufReader::new(stream);
    let (line, length, chunked) = read_head(&mut reader)?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("the reply's status line has no status"))?;
    if chunked {
        return Err(invalid("the reply is chunked"));
    }
    let mut body = Vec::new();
    match length {
        Some(n) if n > MAX_BODY => return Err(invalid("the reply is larger than 4 MiB")),
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body)?;
        }
        // Connection: close: the body runs to the end.
        None => {
            reader.take(MAX_BODY as u64 + 1).read_to_end(&mut body)?;
            if body.len() > MAX_BODY {
                return Err(invalid("the reply is larger than 4 MiB"));
            }
        }
    }
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_body_in_upstreams_shape() {
        let mut req = CniRequest::default();
        req.env.insert("CNI_COMMAND".into(), "ADD".into());
        req.config = br#"{"cniVersion":"1.0.0"}"#.to_vec();
        let text = serde_json::to_value(&req).unwrap();
        assert_eq!(
            text,
            serde_json::json!({"env": {"CNI_COMMAND": "ADD"},
                               "config": "eyJjbmlWZXJzaW9uIjoiMS4wLjAifQ=="})
        );
        let back: CniRequest = serde_json::from_value(text).unwrap();
        assert_eq!(back, req);
        let bad = serde_json::from_str::<CniRequest>(r#"{"config": "***"}"#).unwrap_err();
        assert!(bad.to_string().contains("config is not base64"), "{bad}");
        let reply = serde_json::json!({"Result": {"cniVersion": "1.1.0"}});
        assert_eq!(
            result_of(&reply),
            Some(&serde_json::json!({"cniVersion": "1.1.0"}))
        );
        assert_eq!(result_of(&serde_json::json!({"result": null})), None);
    }

    #[test]
    fn requests_are_read_within_their_caps() {
        let read = |text: &str| read_request(&mut text.as_bytes(), MAX_BODY);
        let ok =
            read("POST /cni?x=1 HTTP/1.1\r\nHost: dummy\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((ok.method.as_str(), ok.path.as_str()), ("POST", "/cni"));
        assert_eq!(ok.body, b"{}");
        let refused = |text: &str| match read(text) {
            Err(BadRequest::Refused(code, _)) => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused("GARBAGE\r\n\r\n"), 400);
        assert_eq!(refused("POST /cni SPDY/3\r\n\r\n"), 400);
        assert_eq!(
            refused("POST /cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            411
        );
        assert_eq!(
            refused("POST /cni HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"),
            413
        );
        assert_eq!(
            refused("POST /cni HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            400
        );
        let long = format!("POST /cni HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
        assert_eq!(refused(&long), 400);
        assert!(matches!(read(""), Err(BadRequest::Gone(_))));
        assert!(matches!(
            read("POST /cni HTTP/1.1\r\nContent-Length: 5\r\n\r\n{}"),
            Err(BadRequest::Gone(_))
        ));
    }
}
