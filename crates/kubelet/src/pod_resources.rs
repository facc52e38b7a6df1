//! The kubelet's pod-resources API (`v1.PodResourcesLister`, gRPC on the unix socket
//! `/var/lib/kubelet/pod-resources/kubelet.sock`): which device IDs of which device plugin
//! resource the kubelet allocated to which pod. Multus calls `List`, as upstream does, and
//! keeps the devices of the pod it attaches.
//!
//! gRPC here is HTTP/2 (the `h2` crate) and the few protobuf messages `List` needs, declared
//! in [`v1`] with prost's derive: fields not declared there are skipped, as protobuf requires.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;

/// Where the kubelet serves the API unless `podResourcesSocket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The gRPC method: package `v1`, service `PodResourcesLister`, method `List`.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// The largest response read (upstream's limit).
const MAX_RESPONSE: usize = 16 << 20;

/// A call that failed or an answer that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("kubelet pod-resources API {}: {msg}", socket.display())]
pub struct PodResourcesError {
    pub socket: PathBuf,
    pub msg: String,
}

/// The device IDs of every resource the kubelet allocated to pod `namespace/name`, over all its
/// containers, as `List` gives them.
pub fn pod_devices(
    socket: &Path,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<BTreeMap<String, Vec<String>>, PodResourcesError> {
    let error = |msg: String| PodResourcesError {
        socket: socket.to_owned(),
        msg,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| error(format!("cannot start the client: {e}")))?;
    let message = runtime
        .block_on(async { tokio::time::timeout(timeout, list(socket)).await })
        .map_err(|_| error(format!("no answer within {} s", timeout.as_secs())))?
        .map_err(error)?;
    decode_list_response(&message, namespace, name).map_err(|e| {
        error(format!(
            "List answered what is not a ListPodResourcesResponse: {e}"
        ))
    })
}

/// Calls `List` and returns the response message.
async fn list(socket: &Path) -> Result<Vec<u8>, String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let (client, connection) = h2::client::handshake(stream)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("pod-resources connection: {e}");
        }
    });
    let mut client = client.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{LIST_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| e.to_string())?;
    let (response, mut send) = client
        .send_request(request, false)
        .map_err(|e| format!("sending List: {e}"))?;
    let request = frame(&v1::ListPodResourcesRequest {}.encode_to_vec())?;
    send.send_data(Bytes::from(request), true)
        .map_err(|e| format!("sending List: {e}"))?;
    let response = response.await.map_err(|e| format!("List failed: {e}"))?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("List answered HTTP status {}", response.status()));
    }
    // A call that fails at once answers with headers only.
    grpc_status(response.headers())?;
    let mut body = response.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("reading the answer to List: {e}"))?;
        data.extend_from_slice(&chunk);
        // Read data no longer counts against the stream's window.
        let _ = body.flow_control().release_capacity(chunk.len());
        if data.len() > MAX_RESPONSE + 5 {
            return Err(format!("the answer to List is over {MAX_RESPONSE} bytes"));
        }
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|e| format!("reading the answer to List: {e}"))?
        .ok_or("the answer to List has no gRPC status")?;
    grpc_status(&trailers)?;
    unframe(&data)
}

/// Fails on a `grpc-status` other than 0 (OK), with the server's `grpc-message`.
fn grpc_status(headers: &http::HeaderMap) -> Result<(), String> {
    let Some(status) = headers.get("grpc-status") else {
        return Ok(());
    };
    if status == "0" {
        return Ok(());
    }
    let message = headers
        .get("grpc-message")
        .map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned())
        .unwrap_or_default();
    Err(format!(
        "List failed with gRPC status {}: {message}",
        String::from_utf8_lossy(status.as_bytes())
    ))
}

/// One uncompressed gRPC message: see [`unframe`].
fn frame(message: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(message.len()).map_err(|_| "a request over 4 GiB".to_owned())?;
    let mut framed = vec![0];
    framed.extend(len.to_be_bytes());
    framed.extend_from_slice(message);
    Ok(framed)
}

/// The one message of a gRPC body: a flag byte (0: not compressed), a 4-byte big-endian
/// length, the message.
fn unframe(data: &[u8]) -> Result<Vec<u8>, String> {
    let Some((&[flag, a, b, c, d], rest)) = data.split_first_chunk::<5>() else {
        return Err(format!(
            "the answer to List is {} bytes, short of a gRPC message",
            data.len()
        ));
    };
    if flag != 0 {
        return Err("the answer to List is compressed, which was not asked for".to_owned());
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if rest.len() != len {
        return Err(format!(
            "the answer to List says {len} bytes and holds {}",
            rest.len()
        ));
    }
    Ok(rest.to_vec())
}

/// The kubelet's `v1` pod-resources messages (k8s.io/kubelet/pkg/apis/podresources/v1), with
/// only the fields `List`'s caller reads.
mod v1 {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesRequest {}

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
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerDevices {
        #[prost(string, tag = "1")]
        pub resource_name: String,
        #[prost(string, repeated, tag = "2")]
        pub device_ids: Vec<String>,
    }
}

/// The devices of pod `namespace/name` in a `ListPodResourcesResponse`, over all its
/// containers.
fn decode_list_response(
    buf: &[u8],
    namespace: &str,
    name: &str,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let response = v1::ListPodResourcesResponse::decode(buf).map_err(|e| {
        // The field path and what is wrong; the caller's message says the rest.
        let text = e.to_string();
        text.strip_prefix("failed to decode Protobuf message: ")
            .unwrap_or(&text)
            .to_owned()
    })?;
    let mut devices: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in response.pod_resources {
        if pod.name != name || pod.namespace != namespace {
            continue;
        }
        for d in pod.containers.into_iter().flat_map(|c| c.devices) {
            devices
                .entry(d.resource_name)
                .or_default()
                .extend(d.device_ids);
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    use testkit::pod_resources::{list_response, Allocation};

    fn pod(namespace: &str, name: &str, resource: &str, ids: &[&str]) -> Vec<u8> {
        list_response(&[Allocation {
            namespace: namespace.to_owned(),
            pod: name.to_owned(),
            container: "app".to_owned(),
            resource: resource.to_owned(),
            device_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
        }])
    }

    #[test]
    fn the_pods_devices_from_a_list_response() {
        let mut response = pod("default", "web", "example.com/vf", &["b", "a"]);
        response.extend(pod("other", "web", "example.com/vf", &["c"]));
        response.extend(pod("default", "web", "example.com/gpu", &["g"]));
        // A varint field the message may grow: skipped.
        response.extend([0x10, 0x96, 0x01]);
        let devices = decode_list_response(&response, "default", "web").unwrap();
        assert_eq!(
            devices,
            BTreeMap::from([
                ("example.com/gpu".to_owned(), vec!["g".to_owned()]),
                (
                    "example.com/vf".to_owned(),
                    vec!["b".to_owned(), "a".to_owned()]
                ),
            ])
        );
    }

    /// A `ListPodResourcesResponse` written down by hand from the field numbers of the
    /// kubelet's api.proto, independent of any encoder here. A key byte is (field number << 3)
    /// | wire type (0: varint, 2: length-delimited, followed by the length).
    #[test]
    fn golden_bytes_from_the_kubelets_proto() {
        let message: &[&[u8]] = &[
            &[0x0a, 0x6c], // ListPodResourcesResponse.pod_resources (1), 108 bytes
            &[0x0a, 0x03], // PodResources.name (1), 3 bytes
            b"web",
            &[0x12, 0x03], // PodResources.namespace (2), 3 bytes
            b"ns1",
            &[0x1a, 0x3c], // PodResources.containers (3), 60 bytes
            &[0x0a, 0x03], // ContainerResources.name (1), 3 bytes
            b"app",
            &[0x12, 0x31], // ContainerResources.devices (2), 49 bytes
            &[0x0a, 0x0f], // ContainerDevices.resource_name (1), 15 bytes
            b"intel.com/sriov",
            &[0x12, 0x0c], // ContainerDevices.device_ids (2), 12 bytes
            b"0000:03:02.1",
            &[0x12, 0x0c], // ContainerDevices.device_ids (2), 12 bytes
            b"0000:03:02.3",
            &[0x1a, 0x02, 0x0a, 0x00], // ContainerDevices.topology (3): one NUMANode, skipped
            &[0x1a, 0x02, 0x04, 0x05], // ContainerResources.cpu_ids (3), packed 4 and 5, skipped
            &[0x1a, 0x20],             // PodResources.containers (3), 32 bytes
            &[0x0a, 0x07],             // ContainerResources.name (1), 7 bytes
            b"sidecar",
            &[0x12, 0x15], // ContainerResources.devices (2), 21 bytes
            &[0x0a, 0x0f], // ContainerDevices.resource_name (1), 15 bytes
            b"example.com/gpu",
            &[0x12, 0x02], // ContainerDevices.device_ids (2), 2 bytes
            b"g0",
            &[0x20, 0x07], // PodResources.cpu_ids (4), one varint 7, skipped
            &[0x0a, 0x34], // ListPodResourcesResponse.pod_resources (1), 52 bytes
            &[0x0a, 0x03], // PodResources.name (1), 3 bytes
            b"web",
            &[0x12, 0x05], // PodResources.namespace (2), 5 bytes: another pod
            b"other",
            &[0x1a, 0x26], // PodResources.containers (3), 38 bytes
            &[0x0a, 0x03], // ContainerResources.name (1), 3 bytes
            b"app",
            &[0x12, 0x1f], // ContainerResources.devices (2), 31 bytes
            &[0x0a, 0x0f], // ContainerDevices.resource_name (1), 15 bytes
            b"intel.com/sriov",
            &[0x12, 0x0c], // ContainerDevices.device_ids (2), 12 bytes
            b"0000:03:02.7",
        ];
        let message = message.concat();
        assert_eq!(message.len(), 2 + 108 + 2 + 52);
        assert_eq!(
            decode_list_response(&message, "ns1", "web").unwrap(),
            BTreeMap::from([
                ("example.com/gpu".to_owned(), vec!["g0".to_owned()]),
                (
                    "intel.com/sriov".to_owned(),
                    vec!["0000:03:02.1".to_owned(), "0000:03:02.3".to_owned()]
                ),
            ])
        );
        assert_eq!(
            decode_list_response(&message, "other", "web").unwrap(),
            BTreeMap::from([(
                "intel.com/sriov".to_owned(),
                vec!["0000:03:02.7".to_owned()]
            )])
        );
    }

    #[test]
    fn a_cut_message_is_an_error() {
        let response = pod("default", "web", "example.com/vf", &["a"]);
        let err =
            decode_list_response(&response[..response.len() - 1], "default", "web").unwrap_err();
        assert_eq!(
            err,
            "ListPodResourcesResponse.pod_resources: buffer underflow"
        );
        assert_eq!(
            unframe(&[0, 0, 0, 0, 2, 1]).unwrap_err(),
            "the answer to List says 2 bytes and holds 1"
        );
        assert_eq!(unframe(&[0, 0, 0, 0, 1, 7]).unwrap(), [7]);
    }

    // Fuzzing the decoder: a kubelet's answer (tests/corpus/pod_resources, with fields this
    // module skips), its mutants and arbitrary bytes give devices or a short error, never a
    // panic; what testkit's encoder writes decodes to the devices it holds.

    use proptest::prelude::*;
    use testkit::fuzz;

    fn corpus() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/pod_resources")
    }

    fn check(message: &[u8]) -> Result<(), String> {
        let mut framed = vec![0];
        framed.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
        framed.extend_from_slice(message);
        for answer in [unframe(&framed), unframe(message)] {
            match answer.and_then(|m| decode_list_response(&m, "ns1", "web")) {
                Ok(_) => {}
                Err(e) => fuzz::short("an error", &e, 200)?,
            }
        }
        Ok(())
    }

    #[test]
    fn the_corpus_and_its_mutants() {
        fuzz::check_corpus(&corpus(), check);
        let kubelet = std::fs::read(corpus().join("kubelet-1.30")).unwrap();
        let devices = decode_list_response(&kubelet, "ns1", "web").unwrap();
        assert_eq!(
            devices,
            BTreeMap::from([(
                "intel.com/sriov_netdevice".to_owned(),
                vec!["0000:03:02.1".to_owned(), "0000:03:02.3".to_owned()]
            )])
        );
    }

    fn allocation() -> impl Strategy<Value = Allocation> {
        let one_of = |names: &'static [&'static str]| {
            proptest::sample::select(names).prop_map(str::to_owned)
        };
        (
            one_of(&["ns1", "other"]),
            one_of(&["web", "db"]),
            ".{0,8}",
            one_of(&["intel.com/sriov", "example.com/gpu"]),
            proptest::collection::vec(".{0,20}", 0..4),
        )
            .prop_map(
                |(namespace, pod, container, resource, device_ids)| Allocation {
                    namespace,
                    pod,
                    container,
                    resource,
                    device_ids,
                },
            )
    }

    proptest! {
        #![proptest_config(fuzz::config(256))]

        #[test]
        fn arbitrary_answers(message in fuzz::junk(512)) {
            check(&message).map_err(TestCaseError::fail)?;
        }

        #[test]
        fn mutated_answers(message in fuzz::mutated(fuzz::seeds(&corpus()))) {
            check(&message).map_err(TestCaseError::fail)?;
        }

        #[test]
        fn encoded_answers_decode_to_their_devices(
            allocations in proptest::collection::vec(allocation(), 0..6)
        ) {
            let message = list_response(&allocations);
            let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for a in allocations.iter().filter(|a| a.namespace == "ns1" && a.pod == "web") {
                want.entry(a.resource.clone()).or_default().extend(a.device_ids.clone());
            }
            prop_assert_eq!(decode_list_response(&message, "ns1", "web"), Ok(want));
            for (_, m) in fuzz::mutants(&message) {
                check(&m).map_err(TestCaseError::fail)?;
            }
        }
    }
}
