//! A fake kubelet pod-resources API: gRPC `v1.PodResourcesLister/List` over HTTP/2 on a unix
//! socket, answering with the device allocations the test gives, or with a gRPC error. It
//! records the method of every call.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use bytes::Bytes;

/// Devices of one resource the kubelet allocated to one container of a pod.
#[derive(Clone, Debug)]
pub struct Allocation {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub resource: String,
    pub device_ids: Vec<String>,
}

/// What the server answers to `List`.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A `ListPodResourcesResponse` with one `PodResources` per allocation.
    Allocations(Vec<Allocation>),
    /// A failed call: gRPC status code and message.
    Error(u32, String),
}

pub struct PodResourcesServer {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    calls: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl PodResourcesServer {
    /// Serves `answer` on `socket` until dropped.
    pub fn start(socket: &Path, answer: Answer) -> Result<PodResourcesServer> {
        let listener = std::os::unix::net::UnixListener::bind(socket)
            .with_context(|| format!("binding {}", socket.display()))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let (thread_stop, thread_calls) = (stop.clone(), calls.clone());
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::UnixListener::from_std(listener) else {
                    return;
                };
                while let Ok((stream, _)) = listener.accept().await {
                    if thread_stop.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::spawn(serve(stream, answer.clone(), thread_calls.clone()));
                }
            });
        });
        Ok(PodResourcesServer {
            socket: socket.to_owned(),
            stop,
            calls,
            thread: Some(thread),
        })
    }

    /// The path of every call so far.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Drop for PodResourcesServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = StdUnixStream::connect(&self.socket);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

async fn serve(stream: tokio::net::UnixStream, answer: Answer, calls: Arc<Mutex<Vec<String>>>) {
    let Ok(mut connection) = h2::server::handshake(stream).await else {
        return;
    };
    while let Some(Ok((request, mut respond))) = connection.accept().await {
        if let Ok(mut calls) = calls.lock() {
            calls.push(request.uri().path().to_owned());
        }
        let mut body = request.into_body();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let response = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc");
        match &answer {
            Answer::Error(code, message) => {
                // A trailers-only answer, as gRPC servers send for a failed call.
                if let Ok(response) = response
                    .header("grpc-status", code.to_string())
                    .header("grpc-message", message.as_str())
                    .body(())
                {
                    let _ = respond.send_response(response, true);
                }
            }
            Answer::Allocations(allocations) => {
                let Ok(response) = response.body(()) else {
                    return;
                };
                let Ok(mut send) = respond.send_response(response, false) else {
                    return;
                };
                let message = list_response(allocations);
                let mut framed = vec![0];
                framed.extend(u32::try_from(message.len()).unwrap_or(0).to_be_bytes());
                framed.extend(message);
                let _ = send.send_data(Bytes::from(framed), false);
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                let _ = send.send_trailers(trailers);
            }
        }
    }
}

/// A protobuf length-delimited field.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![number << 3 | 2];
    let mut len = bytes.len();
    // Seven bits a byte, low first; the top bit says another byte follows.
    while len >= 0x80 {
        out.push(len.to_le_bytes()[0] & 0x7f | 0x80);
        len >>= 7;
    }
    out.push(len.to_le_bytes()[0]);
    out.extend_from_slice(bytes);
    out
}

/// `ListPodResourcesResponse`, with a topology and CPU IDs the client is to skip.
pub fn list_response(allocations: &[Allocation]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in allocations {
        let mut devices = field(1, a.resource.as_bytes());
        for id in &a.device_ids {
            devices.extend(field(2, id.as_bytes()));
        }
        devices.extend(field(3, &field(1, &[0x08, 0x00])));
        let mut container = field(1, a.container.as_bytes());
        container.extend(field(2, &devices));
        container.extend(field(3, &[0x04, 0x05]));
        let mut pod = field(1, a.pod.as_bytes());
        pod.extend(field(2, a.namespace.as_bytes()));
        pod.extend(field(3, &container));
        out.extend(field(1, &pod));
    }
    out
}
