//! The kubelet's pod-resources API (`v1.PodResourcesLister`, gRPC on the unix socket
//! `/var/lib/kubelet/pod-resources/kubelet.sock`): which device IDs of which device plugin
//! resource the kubelet allocated to which pod. Multus calls `List`, as upstream does, and
//! keeps the devices of the pod it attaches.
//!
//! gRPC here is HTTP/2 (the `h2` crate) and the few protobuf messages `List` needs, decoded by
//! hand: fields this module does not read are skipped, as protobuf requires.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

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
    // An empty ListPodResourcesRequest in one uncompressed gRPC frame.
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
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

/// A protobuf field's value, as far as the messages here need it.
enum Value<'a> {
    Varint,
    Bytes(&'a [u8]),
    Fixed,
}

/// Calls `f` with each field (number and value) of the message in `buf`.
fn fields<'a>(
    mut buf: &'a [u8],
    mut f: impl FnMut(u64, Value<'a>) -> Result<(), String>,
) -> Result<(), String> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let value = match key & 7 {
            0 => varint(&mut buf).map(|_| Value::Varint)?,
            1 => skip(&mut buf, 8).map(|_| Value::Fixed)?,
            2 => {
                let len = usize::try_from(varint(&mut buf)?)
                    .map_err(|_| "a field longer than memory".to_owned())?;
                Value::Bytes(skip(&mut buf, len)?)
            }
            5 => skip(&mut buf, 4).map(|_| Value::Fixed)?,
            wire => return Err(format!("field {} has wire type {wire}", key >> 3)),
        };
        f(key >> 3, value)?;
    }
    Ok(())
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or("a varint cut short")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a varint of more than 10 bytes".to_owned())
}

fn skip<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], String> {
    if buf.len() < len {
        return Err(format!("a field of {len} bytes with {} left", buf.len()));
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

fn string(value: Value<'_>, what: &str) -> Result<String, String> {
    match value {
        Value::Bytes(bytes) => {
            String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
        }
        _ => Err(format!("{what} is not a string")),
    }
}

fn message<'a>(value: Value<'a>, what: &str) -> Result<&'a [u8], String> {
    match value {
        Value::Bytes(bytes) => Ok(bytes),
        _ => Err(format!("{what} is not a message")),
    }
}

/// `ListPodResourcesResponse {repeated PodResources pod_resources = 1}` with
/// `PodResources {string name = 1; string namespace = 2; repeated ContainerResources
/// containers = 3}`: the devices of pod `namespace/name`.
fn decode_list_response(
    buf: &[u8],
    namespace: &str,
    name: &str,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut devices: BTreeMap<String, Vec<String>> = BTreeMap::new();
    fields(buf, |number, value| {
        if number != 1 {
            return Ok(());
        }
        let (mut pod_name, mut pod_namespace, mut containers) =
            (String::new(), String::new(), vec![]);
        fields(message(value, "pod_resources")?, |number, value| {
            match number {
                1 => pod_name = string(value, "PodResources.name")?,
                2 => pod_namespace = string(value, "PodResources.namespace")?,
                3 => containers.push(message(value, "PodResources.containers")?),
                _ => {}
            }
            Ok(())
        })?;
        if pod_name == name && pod_namespace == namespace {
            for container in containers {
                container_devices(container, &mut devices)?;
            }
        }
        Ok(())
    })?;
    Ok(devices)
}

/// `ContainerResources {repeated ContainerDevices devices = 2; ...}` with `ContainerDevices
/// {string resource_name = 1; repeated string device_ids = 2; ...}`.
fn container_devices(
    buf: &[u8],
    devices: &mut BTreeMap<String, Vec<String>>,
) -> Result<(), String> {
    fields(buf, |number, value| {
        if number != 2 {
            return Ok(());
        }
        let (mut resource, mut ids) = (String::new(), Vec::new());
        fields(
            message(value, "ContainerResources.devices")?,
            |number, value| {
                match number {
                    1 => resource = string(value, "ContainerDevices.resource_name")?,
                    2 => ids.push(string(value, "ContainerDevices.device_ids")?),
                    _ => {}
                }
                Ok(())
            },
        )?;
        devices.entry(resource).or_default().extend(ids);
        Ok(())
    })
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

    #[test]
    fn a_cut_message_is_an_error() {
        let response = pod("default", "web", "example.com/vf", &["a"]);
        let err =
            decode_list_response(&response[..response.len() - 1], "default", "web").unwrap_err();
        assert!(err.starts_with("a field of "), "{err}");
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
