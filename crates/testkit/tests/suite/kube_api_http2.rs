//! The test API server over HTTPS: HTTP/2 through ALPN, with streams on one connection served
//! side by side, and HTTP/1.1 when the server offers nothing else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use testkit::kube_api::{pod_manifest, Fault, KubeApiServer, Latency, Scheme};

const POD: &str = "/api/v1/namespaces/ns1/pods/web";

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A TLS connection to the server offering `h2` and `http/1.1`, and the protocol agreed.
async fn connect(
    server: &KubeApiServer,
) -> Result<(
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    Vec<u8>,
)> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = server.ca_pem().context("an HTTPS server")?;
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr()).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let alpn = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    Ok((tls, alpn))
}

/// Sends a GET on the connection and reads its status and body.
async fn get(
    mut client: h2::client::SendRequest<Bytes>,
    path: &str,
    token: String,
) -> Result<(u16, serde_json::Value)> {
    let request = http::Request::get(format!("https://localhost{path}"))
        .header("authorization", format!("Bearer {token}"))
        .body(())?;
    let (reply, _) = client.send_request(request, true)?;
    let reply = reply.await?;
    let status = reply.status().as_u16();
    let mut stream = reply.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    Ok((status, serde_json::from_slice(&body)?))
}

/// Four reads on one connection, each delayed 400 ms, finish in well under the 1.6 s they
/// would take one after another; the server saw one connection and four HTTP/2 requests.
#[test]
fn http2_streams_on_one_connection_are_served_side_by_side() -> Result<()> {
    let server = KubeApiServer::https()?;
    server.add_pod(pod_manifest("ns1", "web"));
    server.set_latency(Latency::uniform(Duration::from_millis(400)));
    let token = server.token();
    runtime()?.block_on(async {
        let (tls, alpn) = connect(&server).await?;
        assert_eq!(alpn, b"h2");
        let (client, connection) = h2::client::handshake(tls).await?;
        tokio::spawn(connection);
        let start = Instant::now();
        let gets: Vec<_> = (0..4)
            .map(|_| tokio::spawn(get(client.clone(), POD, token.clone())))
            .collect();
        for got in gets {
            let (status, pod) = got.await??;
            assert_eq!(status, 200);
            assert_eq!(pod["metadata"]["name"], "web");
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(
            took < Duration::from_millis(1200),
            "served one by one: {took:?}"
        );
        anyhow::Ok(())
    })?;
    let versions: Vec<_> = server.requests().iter().map(|r| r.version).collect();
    assert_eq!(versions, [http::Version::HTTP_2; 4]);
    assert_eq!(server.connections(), 1);
    let requests = server.requests();
    assert!(requests
        .iter()
        .all(|r| requests.iter().all(|o| r.overlaps(o))));
    Ok(())
}

/// Failures come back as `Status` objects on their stream, and a fault that closes the
/// connection drops the connection, as over HTTP/1.1.
#[test]
fn http2_status_replies_and_a_dropped_connection() -> Result<()> {
    let server = KubeApiServer::https()?;
    server.add_pod(pod_manifest("ns1", "web"));
    let token = server.token();
    runtime()?.block_on(async {
        let (tls, _) = connect(&server).await?;
        let (client, connection) = h2::client::handshake(tls).await?;
        let connection = tokio::spawn(connection);
        let (status, body) = get(client.clone(), POD, "wrong".into()).await?;
        assert_eq!(
            (status, body["reason"].as_str()),
            (401, Some("Unauthorized"))
        );
        let (status, body) = get(
            client.clone(),
            "/api/v1/namespaces/ns1/pods/gone",
            token.clone(),
        )
        .await?;
        assert_eq!((status, body["reason"].as_str()), (404, Some("NotFound")));
        server.inject(Fault::Close, 1);
        assert!(
            get(client.clone(), POD, token.clone()).await.is_err(),
            "no reply"
        );
        let _ = connection.await;
        let (tls, _) = connect(&server).await?;
        let (client, connection) = h2::client::handshake(tls).await?;
        tokio::spawn(connection);
        assert_eq!(get(client, POD, token.clone()).await?.0, 200);
        anyhow::Ok(())
    })?;
    assert_eq!(server.connections(), 2);
    Ok(())
}

/// A server that offers HTTP/1.1 only agrees on it with a client that offers both, and serves it.
#[test]
fn https_without_http2_agrees_on_http1() -> Result<()> {
    let server = KubeApiServer::start(Scheme::HttpsHttp1Only)?;
    server.add_pod(pod_manifest("ns1", "web"));
    let token = server.token();
    let reply = runtime()?.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut tls, alpn) = connect(&server).await?;
        assert_eq!(alpn, b"http/1.1");
        let request = format!(
            "GET {POD} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        tls.write_all(request.as_bytes()).await?;
        let mut reply = String::new();
        tls.read_to_string(&mut reply).await?;
        anyhow::Ok(reply)
    })?;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    let versions: Vec<_> = server.requests().iter().map(|r| r.version).collect();
    assert_eq!(versions, [http::Version::HTTP_11]);
    Ok(())
}
