//! Just enough HTTP/1.1 for API clients: keep-alive, Content-Length or chunked request bodies,
//! `Expect: 100-continue`, and every reply written in one piece (no Nagle + delayed-ACK stall).
//! It also owns the request as both protocols hand it to the routes.

use std::io::{self, BufRead, BufReader, Read, Write};

const MAX_HEAD: usize = 64 * 1024;
pub(super) const MAX_BODY: usize = 16 * 1024 * 1024;

pub(super) struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn new(
        method: &str,
        path: &str,
        query: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Request {
        Request {
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter, decoded.
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.into_owned())
    }

    /// The same request with `body` as its JSON body.
    pub fn with_json_body(&self, body: &serde_json::Value) -> Request {
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("content-type"))
            .cloned()
            .collect();
        headers.push(("content-type".into(), "application/json".into()));
        Request::new(
            &self.method,
            &self.path,
            &self.query,
            headers,
            serde_json::to_vec(body).unwrap_or_default(),
        )
    }

    pub fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn read_line(r: &mut impl BufRead, budget: &mut usize) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(*budget as u64)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    *budget = budget.saturating_sub(n);
    if !line.ends_with(b"\n") {
        return Err(bad("request head too long or cut short"));
    }
    let text = String::from_utf8(line).map_err(|_| bad("request head is not UTF-8"))?;
    Ok(Some(text.trim_end_matches(['\r', '\n']).to_string()))
}

/// Reads one request; `None` when the client closed the connection between requests.
pub(super) fn read_request<S: Read + Write>(r: &mut BufReader<S>) -> io::Result<Option<Request>> {
    let mut budget = MAX_HEAD;
    let Some(start) = read_line(r, &mut budget)? else {
        return Ok(None);
    };
    let mut parts = start.split(' ');
    let (Some(method), Some(target), Some(_version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad(format!("bad request line {start:?}")));
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    loop {
        let line = read_line(r, &mut budget)?.ok_or_else(|| bad("connection closed in headers"))?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("bad header line {line:?}")))?;
        req.headers
            .push((name.trim().to_string(), value.trim().to_string()));
    }
    if req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        let w = r.get_mut();
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        w.flush()?;
    }
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        req.body = read_chunked(r)?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad Content-Length"))?;
        if len > MAX_BODY {
            return Err(bad("request body too large"));
        }
        req.body = vec![0; len];
        r.read_exact(&mut req.body)?;
    }
    Ok(Some(req))
}

fn read_chunked(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut budget = 1024;
        let line = read_line(r, &mut budget)?.ok_or_else(|| bad("connection closed in body"))?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            // Trailers end with an empty line.
            while read_line(r, &mut budget)?.is_some_and(|l| !l.is_empty()) {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let at = body.len();
        body.resize(at + size, 0);
        r.read_exact(&mut body[at..])?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf)?;
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// The head of a streamed reply (a watch): chunked, and the connection closes after it.
pub(super) fn write_stream_head(w: &mut impl Write) -> io::Result<()> {
    w.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )?;
    w.flush()
}

/// One chunk of a streamed reply; an empty one ends it.
pub(super) fn write_chunk(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    w.flush()
}

/// Writes a JSON reply with a single `write_all` of head and body together.
pub(super) fn write_json(
    w: &mut impl Write,
    code: u16,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\nContent-Length: {}\r\n{}\r\n",
        reason(code),
        body.len(),
        if close { "Connection: close\r\n" } else { "" },
    )
    .into_bytes();
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}
