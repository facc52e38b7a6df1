//! A raw HTTP/1.1 client for the test API server's tests: one keep-alive connection.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use testkit::kube_api::KubeApiServer;

/// One keep-alive connection that sends raw requests and reads `(status, json body)` replies.
pub struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    pub fn open(server: &KubeApiServer) -> Result<Conn> {
        let stream = TcpStream::connect(server.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Conn {
            reader: BufReader::new(stream),
        })
    }

    pub fn send(&mut self, raw: &str) -> Result<(u16, Value)> {
        self.reader.get_mut().write_all(raw.as_bytes())?;
        self.read_reply()
    }

    pub fn read_reply(&mut self) -> Result<(u16, Value)> {
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line)?;
        let code: u16 = status_line.split(' ').nth(1).unwrap_or_default().parse()?;
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse()?;
            }
        }
        if code == 100 {
            return self.read_reply();
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        Ok((code, serde_json::from_slice(&body)?))
    }
}
