//! HTTP/1.1 as the node's small servers and clients speak it: thick mode's daemon and shim, and
//! `multus try`'s API server. One request per connection (every reply says `Connection:
//! close`), a size cap on everything read and a deadline on every wait.
//!
//! Requests carry a `Content-Length` (a chunked one gets 411). A reply may also be chunked, as
//! Go's server (upstream's daemon) sends any body over 2 KiB, or run to the end of the stream.
//! One reader takes every body, requests' and replies', each within its cap.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest request or reply head read.
const MAX_HEAD: u64 = 16 * 1024;
/// The largest body read: a CNI config with its environment is a few KiB; a reply with a
/// result, or an API object, is no bigger.
pub const MAX_BODY: usize = 4 << 20;

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

/// How a message's body is delimited, as its head says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// `Content-Length` bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: a reply's body runs to the end of the stream; a request has none.
    ToEnd,
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// The body is over the reader's cap.
    #[error("{0}")]
    TooLarge(String),
    /// The chunked framing is broken.
    #[error("{0}")]
    Malformed(String),
    /// The stream failed, or ended before the body did.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<BodyError> for io::Error {
    fn from(e: BodyError) -> io::Error {
        match e {
            BodyError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// The longest chunk-size line read, extensions included.
const MAX_CHUNK_LINE: u64 = 4 * 1024;

fn cut_short(what: &str) -> BodyError {
    BodyError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the body is cut short: the stream ends {what}"),
    ))
}

/// One line of the chunked framing (a chunk size or a trailer), without its line end, read
/// from `r` within `left` bytes, which it counts down; `limit` names the bound in errors.
fn framing_line(
    r: &mut impl BufRead,
    left: &mut u64,
    what: &str,
    limit: u64,
) -> Result<Vec<u8>, BodyError> {
    let mut line = Vec::new();
    let n = r.take(*left).read_until(b'\n', &mut line)?;
    *left = left.saturating_sub(n as u64);
    if line.last() != Some(&b'\n') {
        return Err(if *left == 0 {
            BodyError::Malformed(format!("the {what} is longer than {limit} bytes"))
        } else {
            cut_short(&format!("in the {what}"))
        });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}

/// A chunk-size line's size: hexadecimal digits, then optional `;` extensions (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, BodyError> {
    let text = String::from_utf8_lossy(line);
    let digits = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim_matches([' ', '\t']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BodyError::Malformed(format!(
            "the chunk size {} is not a hexadecimal number",
            cni::quote::quote(&text)
        )));
    }
    digits
        .bytes()
        .try_fold(0u64, |size, digit| {
            let value = char::from(digit).to_digit(16)?;
            size.checked_mul(16)?.checked_add(u64::from(value))
        })
        .ok_or_else(|| {
            BodyError::TooLarge(format!(
                "the chunk size {} is over any cap",
                cni::quote::quote(digits)
            ))
        })
}

/// A `Transfer-Encoding: chunked` body of at most `max` bytes in all: chunk-size lines with
/// optional extensions, each chunk's data and CRLF, the last (zero-size) chunk, then trailer
/// fields, which are read (at most [`MAX_HEAD`] bytes of them) and dropped.
fn read_chunked(r: &mut impl BufRead, max: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    loop {
        let mut left = MAX_CHUNK_LINE;
        let line = framing_line(r, &mut left, "chunk-size line", MAX_CHUNK_LINE)?;
        let size = chunk_size(&line)?;
        if size == 0 {
            break;
        }
        // The body so far is within `max`.
        let room = max.saturating_sub(body.len()) as u64;
        if size > room {
            return Err(BodyError::TooLarge(format!(
                "a chunk of {size} bytes takes the body past {max} bytes; at most {max} are read"
            )));
        }
        let got = r.take(size).read_to_end(&mut body)?;
        if (got as u64) < size {
            return Err(cut_short(&format!("{got} bytes into a chunk of {size}")));
        }
        let mut end = [0u8; 2];
        r.read_exact(&mut end).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => cut_short("after a chunk's data"),
            _ => BodyError::Io(e),
        })?;
        if &end != b"\r\n" {
            return Err(BodyError::Malformed(format!(
                "a chunk of {size} bytes is not followed by CRLF"
            )));
        }
    }
    let mut left = MAX_HEAD;
    while !framing_line(r, &mut left, "trailer section", MAX_HEAD)?.is_empty() {}
    Ok(body)
}

/// The body as `framing` delimits it, at most `max` bytes.
fn read_body(r: &mut impl BufRead, framing: Framing, max: usize) -> Result<Vec<u8>, BodyError> {
    match framing {
        Framing::Length(n) if n > max => Err(BodyError::TooLarge(format!(
            "the body is {n} bytes; at most {max} are read"
        ))),
        Framing::Length(n) => {
            let mut body = Vec::with_capacity(n);
            let got = r.take(n as u64).read_to_end(&mut body)?;
            if got < n {
                return Err(cut_short(&format!("{got} bytes into a body of {n}")));
            }
            Ok(body)
        }
        Framing::Chunked => read_chunked(r, max),
        Framing::ToEnd => {
            let mut body = Vec::new();
            r.take(max as u64 + 1).read_to_end(&mut body)?;
            if body.len() > max {
                return Err(BodyError::TooLarge(format!(
                    "the body runs past {max} bytes; at most {max} are read"
                )));
            }
            Ok(body)
        }
    }
}

/// A request line or status line, then the headers: the first line and the body's framing.
fn read_head(r: &mut impl BufRead) -> io::Result<(String, Framing)> {
    let mut head = r.take(MAX_HEAD);
    let mut first = String::new();
    if head.read_line(&mut first)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "nothing was sent",
        ));
    }
    let (mut length, mut coding) = (None, None::<String>);
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
            // Repeated fields make one list.
            coding = Some(match coding {
                Some(before) => format!("{before}, {value}"),
                None => value.to_owned(),
            });
        }
    }
    // Transfer-Encoding wins over Content-Length; `identity` is the obsolete "none".
    let framing = match coding {
        Some(c) if c.eq_ignore_ascii_case("chunked") => Framing::Chunked,
        Some(c) if !c.eq_ignore_ascii_case("identity") => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "Transfer-Encoding {} is not read: only chunked is",
                    cni::quote::quote(&c)
                ),
            ))
        }
        _ => length.map_or(Framing::ToEnd, Framing::Length),
    };
    Ok((first.trim_end().to_owned(), framing))
}

/// Reads one request: `Content-Length` bodies only (as Go's client sends; a chunked one gets
/// 411), at most `max_body` bytes.
pub fn read_request(r: &mut impl BufRead, max_body: usize) -> Result<Request, BadRequest> {
    let (line, framing) = read_head(r).map_err(|e| match e.kind() {
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
    let framing = match framing {
        Framing::Chunked => {
            return Err(BadRequest::Refused(
                411,
                "send the body with a Content-Length".into(),
            ))
        }
        // A request without a length has no body.
        Framing::ToEnd => Framing::Length(0),
        length => length,
    };
    let body = read_body(r, framing, max_body).map_err(|e| match e {
        BodyError::TooLarge(why) => BadRequest::Refused(413, why),
        BodyError::Malformed(why) => BadRequest::Refused(400, why),
        BodyError::Io(e) => BadRequest::Gone(e),
    })?;
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
) -> Result<(u16, Vec<u8>), ExchangeError> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: dummy\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let stream = UnixStream::connect(socket)
        .and_then(|mut stream| {
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            stream.write_all(&request)?;
            Ok(stream)
        })
        .map_err(ExchangeError::Unreachable)?;
    read_response(&mut BufReader::new(stream)).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ExchangeError::Silent(e),
        _ => ExchangeError::Unreadable(e),
    })
}

/// Why [`exchange`] got no reply: the three call for different words to the user.
#[derive(Debug)]
pub enum ExchangeError {
    /// The request could not be sent: no socket, nobody listening, or the connection refused.
    Unreachable(io::Error),
    /// The request went out and no reply came within the deadline.
    Silent(io::Error),
    /// A reply came and could not be read: cut short, too large, or not HTTP.
    Unreadable(io::Error),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Unreachable(e) => write!(f, "{e}"),
            ExchangeError::Silent(e) => write!(f, "no reply in time: {e}"),
            ExchangeError::Unreadable(e) => write!(f, "its reply could not be read: {e}"),
        }
    }
}

/// Reads one reply: its status and body, at most [`MAX_BODY`] bytes, whether sent with a
/// `Content-Length`, chunked (as Go's server sends a body over 2 KiB) or up to the end of the
/// stream.
fn read_response(r: &mut impl BufRead) -> io::Result<(u16, Vec<u8>)> {
    let (line, framing) = read_head(r)?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("the reply's status line has no status"))?;
    let body = read_body(r, framing, MAX_BODY).map_err(|e| {
        let e = io::Error::from(e);
        io::Error::new(e.kind(), format!("the reply: {e}"))
    })?;
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            refused("POST /cni HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
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

    /// A reply's head, as Go's server sends a large one.
    const CHUNKED: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                           Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n";

    fn reply(text: &str) -> io::Result<(u16, Vec<u8>)> {
        read_response(&mut text.as_bytes())
    }

    /// The error's kind and text.
    fn reply_err(text: &str) -> (io::ErrorKind, String) {
        match reply(text) {
            Ok((status, body)) => panic!("read: {status} {}", String::from_utf8_lossy(&body)),
            Err(e) => (e.kind(), e.to_string()),
        }
    }

    #[test]
    fn a_chunked_reply_in_several_chunks_is_read_whole() {
        let body = format!(
            r#"{{"Result":{{"cniVersion":"1.1.0","ips":[{}]}}}}"#,
            "1".repeat(3000)
        );
        let (first, rest) = body.split_at(2048);
        let (second, third) = rest.split_at(900);
        let text = format!(
            "{CHUNKED}{:x}\r\n{first}\r\n{:X}\r\n{second}\r\n{:x}\r\n{third}\r\n0\r\n\r\n",
            first.len(),
            second.len(),
            third.len()
        );
        let (status, got) = reply(&text).unwrap();
        assert_eq!(status, 200);
        assert_eq!(String::from_utf8(got).unwrap(), body);
        // Bytes after the body are not read as part of it.
        let (_, got) = reply(&format!("{CHUNKED}2\r\n{{}}\r\n0\r\n\r\nHTTP/1.1 200")).unwrap();
        assert_eq!(got, b"{}");
        // An empty chunked body.
        assert_eq!(
            reply(&format!("{CHUNKED}0\r\n\r\n")).unwrap(),
            (200, vec![])
        );
    }

    #[test]
    fn chunk_extensions_and_trailers_are_skipped() {
        let text = format!(
            "{CHUNKED}3;name=value;other\r\nabc\r\n2 ; quoted=\"a;b\"\r\nde\r\n\
             0;last\r\nX-Checksum: 1234\r\nX-Other: yes\r\n\r\n"
        );
        assert_eq!(reply(&text).unwrap(), (200, b"abcde".to_vec()));
        // Trailers are bounded too.
        let long = format!(
            "{CHUNKED}1\r\na\r\n0\r\nX-Pad: {}\r\n\r\n",
            "p".repeat(16 * 1024)
        );
        let (kind, msg) = reply_err(&long);
        assert_eq!(kind, io::ErrorKind::InvalidData, "{msg}");
        assert!(
            msg.contains("the trailer section is longer than 16384 bytes"),
            "{msg}"
        );
    }

    #[test]
    fn a_chunked_reply_over_the_cap_is_refused() {
        // One chunk past the cap: refused before its data is read.
        let (kind, msg) = reply_err(&format!("{CHUNKED}{:x}\r\n", MAX_BODY + 1));
        assert_eq!(kind, io::ErrorKind::InvalidData, "{msg}");
        assert!(
            msg.contains(&format!(
                "a chunk of {} bytes takes the body past {MAX_BODY} bytes",
                MAX_BODY + 1
            )),
            "{msg}"
        );
        // Chunks within the cap, whose sum is not.
        let chunk = "x".repeat(1 << 20);
        let mut text = CHUNKED.to_owned();
        for _ in 0..5 {
            text.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
        }
        text.push_str("0\r\n\r\n");
        let (_, msg) = reply_err(&text);
        assert!(
            msg.contains(&format!("at most {MAX_BODY} are read")),
            "{msg}"
        );
        // A size too large to count.
        let (kind, msg) = reply_err(&format!("{CHUNKED}{}\r\n", "f".repeat(40)));
        assert_eq!(kind, io::ErrorKind::InvalidData, "{msg}");
        assert!(msg.contains("is over any cap"), "{msg}");
        // Exactly the cap is read.
        let mut text = CHUNKED.to_owned();
        for _ in 0..4 {
            text.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
        }
        text.push_str("0\r\n\r\n");
        assert_eq!(reply(&text).unwrap().1.len(), MAX_BODY);
        // The other framings keep the same cap.
        let (_, msg) = reply_err(&format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        ));
        assert!(
            msg.contains(&format!("at most {MAX_BODY} are read")),
            "{msg}"
        );
        let (_, msg) = reply_err(&format!(
            "HTTP/1.1 200 OK\r\n\r\n{}",
            "y".repeat(MAX_BODY + 1)
        ));
        assert!(
            msg.contains(&format!("runs past {MAX_BODY} bytes")),
            "{msg}"
        );
    }

    #[test]
    fn a_malformed_chunk_size_is_refused_naming_it() {
        for (size, shown) in [
            ("zz", r#"the chunk size "zz" is not"#),
            ("", r#"the chunk size "" is not"#),
            ("+5", r#"the chunk size "+5" is not"#),
            ("0x5", r#"the chunk size "0x5" is not"#),
            ("-1;ext", r#"the chunk size "-1;ext" is not"#),
        ] {
            let (kind, msg) = reply_err(&format!("{CHUNKED}{size}\r\nhello\r\n0\r\n\r\n"));
            assert_eq!(kind, io::ErrorKind::InvalidData, "{size}: {msg}");
            assert!(msg.contains(shown), "{size}: {msg}");
            assert!(msg.starts_with("the reply: "), "{msg}");
        }
        // Data that does not end where its size says.
        let (kind, msg) = reply_err(&format!("{CHUNKED}3\r\nhello\r\n0\r\n\r\n"));
        assert_eq!(kind, io::ErrorKind::InvalidData, "{msg}");
        assert!(
            msg.contains("a chunk of 3 bytes is not followed by CRLF"),
            "{msg}"
        );
        // A size line without end.
        let (_, msg) = reply_err(&format!("{CHUNKED}5;{}", "e".repeat(5000)));
        assert!(
            msg.contains("the chunk-size line is longer than 4096 bytes"),
            "{msg}"
        );
        // A coding other than chunked is not read as if it were plain.
        let (kind, msg) = reply_err(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        );
        assert_eq!(kind, io::ErrorKind::InvalidData, "{msg}");
        assert!(
            msg.contains(r#"Transfer-Encoding "gzip, chunked" is not read"#),
            "{msg}"
        );
    }

    #[test]
    fn a_truncated_chunked_reply_is_refused() {
        for (text, shown) in [
            ("", "in the chunk-size line"),
            ("a", "in the chunk-size line"),
            ("a\r\nhello", "5 bytes into a chunk of 10"),
            ("5\r\nhello", "after a chunk's data"),
            ("5\r\nhello\r", "after a chunk's data"),
            ("5\r\nhello\r\n", "in the chunk-size line"),
            ("5\r\nhello\r\n0\r\n", "in the trailer section"),
            (
                "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n",
                "in the trailer section",
            ),
        ] {
            let (kind, msg) = reply_err(&format!("{CHUNKED}{text}"));
            assert_eq!(kind, io::ErrorKind::UnexpectedEof, "{text:?}: {msg}");
            assert!(
                msg.contains("the body is cut short: the stream ends") && msg.contains(shown),
                "{text:?}: {msg}"
            );
        }
        // And a Content-Length body, likewise.
        let (kind, msg) = reply_err("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}");
        assert_eq!(kind, io::ErrorKind::UnexpectedEof, "{msg}");
        assert!(msg.contains("2 bytes into a body of 9"), "{msg}");
    }
}
