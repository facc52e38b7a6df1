//! The HTTP stack under kube's client: HTTP/2 when the API server agrees to it in ALPN (as
//! kube-apiserver does), so the calls of one process share one connection and one TLS
//! handshake; HTTP/1.1 otherwise, with a connection per request in flight. kube's own stack
//! speaks HTTP/1.1 only.

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use rustls::pki_types::ServerName;
use tower::{BoxError, ServiceBuilder};

/// An HTTP client for `config`'s server with its credentials, ready for `kube::Client::new`.
/// Must be called inside the tokio runtime the client will run on.
pub(crate) fn service(
    config: &kube::Config,
    keep_alive: crate::KeepAlive,
) -> Result<
    impl tower::Service<
            http::Request<Body>,
            Response = http::Response<hyper::body::Incoming>,
            Error = BoxError,
            Future = impl Send,
        > + Send
        + 'static,
    Box<dyn std::error::Error + Send + Sync>,
> {
    if let Some(proxy) = &config.proxy_url {
        return Err(
            format!("proxy-url {proxy} is not supported; reach the API server directly").into(),
        );
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(config.connect_timeout);
    let tls = config.rustls_client_config()?;
    let mut https = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = ServerName::try_from(name.clone())
            .map_err(|e| format!("tls-server-name {name:?}: {e}"))?;
        https = https.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let https = https.enable_all_versions().wrap_connector(tcp);
    // HTTP/2 keeps one connection for every attempt, so one that went silent must be noticed
    // and dropped, or every retry waits on it: a ping unanswered in time closes it, and the
    // next attempt connects again. How soon is the process's policy.
    let (ping_after, ping_timeout) = keep_alive.ping_after_and_timeout();
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(ping_after)
        .http2_keep_alive_timeout(ping_timeout)
        .http2_keep_alive_while_idle(true)
        .build(https);
    Ok(ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client))
}
