//! HTTP/2, as kube-apiserver serves it to a client that offers `h2` in ALPN: each stream is
//! answered on its own task, so requests on one connection wait out their latency side by side.

use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

use super::http1::{Request, MAX_BODY};
use super::{answer, run_watch, start_watch, ticket, Fault, Shared, STALL};

/// Serves one connection until the client closes it, the server goes down, or a fault drops it.
pub(super) async fn serve<S>(shared: Arc<Shared>, io: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(mut connection) = h2::server::handshake(io).await else {
        return;
    };
    // A fault that closes the connection drops it here, with every stream still on it; a
    // stall first leaves it unpolled, so nothing on it is read or answered, pings included.
    let (drop_tx, mut drop_rx) = tokio::sync::mpsc::channel::<bool>(1);
    loop {
        tokio::select! {
            next = connection.accept() => {
                let Some(Ok((request, respond))) = next else { return };
                tokio::spawn(serve_stream(Arc::clone(&shared), request, respond, drop_tx.clone()));
            }
            stall = drop_rx.recv() => {
                if stall == Some(true) {
                    tokio::time::sleep(STALL).await;
                }
                return;
            }
        }
    }
}

async fn serve_stream(
    shared: Arc<Shared>,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    drop_connection: tokio::sync::mpsc::Sender<bool>,
) {
    let (parts, mut stream) = request.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = stream.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = stream.flow_control().release_capacity(chunk.len());
        if body.len() + chunk.len() > MAX_BODY {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            return;
        }
        body.extend_from_slice(&chunk);
    }
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        })
        .collect();
    let req = Request::new(
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
        headers,
        body,
    );
    let ticket = ticket(&shared, &req);
    if !ticket.delay.is_zero() {
        // tokio's timers round up to the next millisecond; a thread's sleep is as exact as
        // the HTTP/1.1 path's.
        let delay = ticket.delay;
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(delay)).await;
    }
    if let Some(Fault::Hold(gate)) = &ticket.fault {
        let gate = gate.clone();
        let _ = tokio::task::spawn_blocking(move || gate.hold()).await;
    }
    if let Some(w) = start_watch(&shared, &req, &ticket, http::Version::HTTP_2) {
        let Ok(head) = http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(())
        else {
            return;
        };
        let Ok(mut send) = respond.send_response(head, false) else {
            return;
        };
        // The watch waits on the server's state, a blocking wait: on a thread of its own,
        // handing its lines over a channel.
        let (lines, mut to_send) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
        let watching = Arc::clone(&shared);
        let watcher = tokio::task::spawn_blocking(move || {
            run_watch(&watching, w, |line| {
                lines.blocking_send(line.to_vec()).is_ok()
            });
        });
        while let Some(line) = to_send.recv().await {
            if send.send_data(Bytes::from(line), false).is_err() {
                break;
            }
        }
        drop(to_send);
        let _ = watcher.await;
        let _ = send.send_data(Bytes::new(), true);
        return;
    }
    let stall = matches!(ticket.fault, Some(Fault::Stall));
    let Some((code, body)) = answer(&shared, &req, ticket, http::Version::HTTP_2) else {
        let _ = drop_connection.send(stall).await;
        if stall {
            // Holding the stream: dropping it would reset it, which a silent server does not.
            tokio::time::sleep(STALL).await;
            drop(respond);
        }
        return;
    };
    let Ok(head) = http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .header("content-length", body.len())
        .body(())
    else {
        return;
    };
    if let Ok(mut send) = respond.send_response(head, false) {
        let _ = send.send_data(Bytes::from(body), true);
    }
}
