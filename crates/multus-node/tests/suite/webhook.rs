//! `multus webhook` with a certificate another tool keeps in files (cert-manager's way), run
//! as its Deployment runs it: reviews answered over HTTPS as the API server sends them, bad
//! requests refused, the files replaced while it serves, and SIGTERM.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MULTUS: &str = env!("CARGO_BIN_EXE_multus");

/// A self-signed certificate for localhost, as `tls.crt` and `tls.key` in `dir`.
fn write_certificate(dir: &Path, name: &str) {
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-days", "1", "-subj", &format!("/CN={name}")])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .arg("-keyout")
        .arg(dir.join("tls.key.new"))
        .arg("-out")
        .arg(dir.join("tls.crt.new"))
        .stderr(Stdio::null())
        .status()
        .expect("runs openssl");
    assert!(status.success());
    // Both files replaced at once, as the kubelet swaps a Secret's volume.
    for f in ["tls.key", "tls.crt"] {
        std::fs::rename(dir.join(format!("{f}.new")), dir.join(f)).expect("renames");
    }
}

/// `curl` to the webhook, trusting `ca`: the status, or None when the TLS handshake failed.
fn curl(
    ns: &testkit::Netns,
    port: u16,
    ca: &Path,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    let out = ns
        .command("curl")
        .args(["-s", "-m", "5", "--cacert"])
        .arg(ca)
        .args([
            "-X",
            method,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://localhost:{port}{path}"))
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .output()
        .expect("runs curl");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.parse().ok()?, body.to_owned()))
}

fn review(object: &Value) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "7c3e", "operation": "CREATE", "namespace": "tenant", "name": "n",
                       "kind": {"group": "k8s.cni.cncf.io", "version": "v1",
                                "kind": "NetworkAttachmentDefinition"},
                       "object": object}})
    .to_string()
}

struct Webhook(Child);

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serves_reviews_with_a_certificate_from_files_and_follows_their_replacement() {
    // A namespace of its own, whose loopback carries the calls the API server would make.
    let ns = testkit::Netns::new("webhook");
    let dir = tempfile::tempdir().expect("a directory");
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).expect("mkdir");
    write_certificate(&certs, "first");
    let first_ca = dir.path().join("first.crt");
    std::fs::copy(certs.join("tls.crt"), &first_ca).expect("copies");
    // No API server: the cluster's networks cannot be listed, and the flags' stand.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .expect("writes");
    let port = 18443;
    let child = ns
        .command(MULTUS)
        .args([
            "webhook",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--interval",
            "1",
            "--max-connections",
            "16",
        ])
        .args(["--namespace", "multus", "--certificate-dir"])
        .arg(&certs)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts multus webhook");
    let mut webhook = Webhook(child);
    let started = Instant::now();
    while curl(&ns, port, &first_ca, "GET", "/healthz", "").is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = webhook.0.kill();
            let out =
                std::mem::replace(&mut webhook.0, Command::new("true").spawn().expect("true"))
                    .wait_with_output()
                    .expect("waits");
            panic!(
                "the webhook never answered: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    let troublemaker = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "n"},
        "spec": {"config": r#"{"cniVersion": "0.3.1", "type": "macvlan", "master": "enp1s0", "ipam": {"type": "host-local", "subnet": "10.42.0.0/24"}}"#}});
    let (status, body) = curl(
        &ns,
        port,
        &first_ca,
        "POST",
        "/validate",
        &review(&troublemaker),
    )
    .expect("an answer");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "7c3e");
    assert_eq!(answer["response"]["allowed"], false);
    let message = answer["response"]["status"]["message"]
        .as_str()
        .expect("a message");
    assert!(
        message.contains("[reserved-overlap]") && message.contains("tenant/n"),
        "{message}"
    );

    for (method, path, body, want) in [
        ("POST", "/validate", "{", 400),
        (
            "POST",
            "/validate",
            r#"{"apiVersion":"admission.k8s.io/v1beta1"}"#,
            400,
        ),
        ("GET", "/other", "", 404),
        ("DELETE", "/validate", "", 405),
    ] {
        let (status, text) = curl(&ns, port, &first_ca, method, path, body).expect("an answer");
        assert_eq!(status, want, "{method} {path} {body}: {text}");
    }

    // Bounds: a body over 3 MiB is refused unread; a peer that connects and says nothing is
    // dropped after 10 s, and the others are served meanwhile; past the connection cap (16
    // here) new connections are closed at once, and the webhook serves again once they go.
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(9 << 20));
    let big_file = dir.path().join("big.json");
    std::fs::write(&big_file, big).expect("writes");
    let (status, text) = curl(
        &ns,
        port,
        &first_ca,
        "POST",
        "/validate",
        &format!("@{}", big_file.display()),
    )
    .expect("an answer");
    assert_eq!(status, 413, "{text}");
    let probe = r#"
import socket, sys, time
def connect():
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.setblocking(False)
    return s
def closed(s):
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
idle = connect()
t0 = time.time()
idle.setblocking(True)
idle.settimeout(20)
while idle.recv(1) != b"":
    pass
print("idle dropped after %.1f" % (time.time() - t0))
held = [connect() for _ in range(16)]
time.sleep(0.5)
extra = [connect() for _ in range(4)]
time.sleep(0.5)
print("held closed %d, extra closed %d" % (sum(map(closed, held)), sum(map(closed, extra))))
"#;
    let slow = ns
        .command("python3")
        .args(["-c", probe, &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("runs python3");
    // Served while the idle peer waits.
    std::thread::sleep(Duration::from_secs(2));
    let (status, _) = curl(&ns, port, &first_ca, "GET", "/healthz", "").expect("served meanwhile");
    assert_eq!(status, 200);
    let out = slow.wait_with_output().expect("waits for python3");
    let said = String::from_utf8_lossy(&out.stdout);
    let dropped: f64 = said
        .split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("python3 said {said:?}"));
    assert!((9.0..=12.0).contains(&dropped), "{said}");
    assert!(said.contains("held closed 0, extra closed 4"), "{said}");
    let again = Instant::now();
    while curl(&ns, port, &first_ca, "GET", "/healthz", "").is_none() {
        assert!(
            again.elapsed() < Duration::from_secs(5),
            "not served after the flood"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // cert-manager renews: the new certificate is served within a round, the old one no more.
    write_certificate(&certs, "second");
    let second_ca = certs.join("tls.crt");
    let renewed = Instant::now();
    while curl(&ns, port, &second_ca, "GET", "/healthz", "").is_none() {
        assert!(
            renewed.elapsed() < Duration::from_secs(10),
            "the new certificate is not served"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        curl(&ns, port, &first_ca, "GET", "/healthz", "").is_none(),
        "the old certificate is still served"
    );

    // SIGTERM, as the kubelet stops it: a clean exit that says so.
    // SAFETY: kill(2) on the PID of our own child, which has not been waited for yet.
    let rc = unsafe { libc::kill(i32::try_from(webhook.0.id()).expect("a PID"), libc::SIGTERM) };
    assert_eq!(rc, 0);
    let out = std::mem::replace(&mut webhook.0, Command::new("true").spawn().expect("true"))
        .wait_with_output()
        .expect("waits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("with the certificate in") && stderr.contains("stopped by a signal"),
        "{stderr}"
    );
}
