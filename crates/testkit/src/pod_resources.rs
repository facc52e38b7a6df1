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

/// The kubelet's `v1` messages as a kubelet sends them, with fields the client is to skip
/// (CPU IDs, topology).
mod v1 {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesResponse {
        #[prost(message, repeated, tag = "1")]
        pub pod_resources: Vec<PodResources>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodResources {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub namespace: String,
        #[prost(message, repeated, tag = "3")]
        pub containers: Vec<ContainerResources>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerResources {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, repeated, tag = "2")]
        pub devices: Vec<ContainerDevices>,
        #[prost(int64, repeated, tag = "3")]
        pub cpu_ids: Vec<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerDevices {
        #[prost(string, tag = "1")]
        pub resource_name: String,
        #[prost(string, repeated, tag = "2")]
        pub device_ids: Vec<String>,
        #[prost(message, optional, tag = "3")]
        pub topology: Option<TopologyInfo>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TopologyInfo {
        #[prost(message, repeated, tag = "1")]
        pub nodes: Vec<NumaNode>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NumaNode {
        #[prost(int64, tag = "1")]
        pub id: i64,
    }
}

/// `ListPodResourcesResponse` with one `PodResources` per allocation, each device on NUMA
/// node 0 and each container with CPUs 4 and 5.
pub fn list_response(allocations: &[Allocation]) -> Vec<u8> {
    let pod_resources = allocations
        .iter()
        .map(|a| v1::PodResources {
            name: a.pod.clone(),
            namespace: a.namespace.clone(),
            containers: vec![v1::ContainerResources {
                name: a.container.clone(),
                devices: vec![v1::ContainerDevices {
                    resource_name: a.resource.clone(),
                    device_ids: a.device_ids.clone(),
                    topology: Some(v1::TopologyInfo {
                        nodes: vec![v1::NumaNode { id: 0 }],
                    }),
                }],
                cpu_ids: vec![4, 5],
            }],
        })
        .collect();
    prost::Message::encode_to_vec(&v1::ListPodResourcesResponse { pod_resources })
}
