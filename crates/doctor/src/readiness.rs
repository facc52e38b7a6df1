//! Whether the node can take pods: the readiness indicator file, thick mode's daemon, and the
//! answer to STATUS, asked as the runtime asks it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lint::{Place, Report, Severity};
use serde_json::Value;

use crate::configs::{Mode, Multus};
use crate::Node;

pub fn check(node: &Node, bin_dir: &Path, multus: &Multus, report: &mut Report) {
    if let Some(file) = &multus.conf.readiness_indicator_file {
        readiness_file(node, multus, file, report);
    }
    if multus.mode == Mode::Thick {
        daemon(node, multus, report);
    }
    status(node, bin_dir, multus, report);
}

fn readiness_file(node: &Node, multus: &Multus, file: &Path, report: &mut Report) {
    let place = Place {
        file: Some(multus.file.clone()),
        path: "readinessindicatorfile".into(),
        ..Place::default()
    };
    let seen = node.path(file);
    if !node.is_local() && !seen.parent().is_some_and(Path::is_dir) {
        report.add(
            Severity::Note,
            "readiness",
            place,
            format!(
                "the readiness indicator file {} is in a directory not seen from here",
                file.display()
            ),
            "run the doctor on the node",
        );
        return;
    }
    if seen.exists() {
        report.add(
            Severity::Info,
            "readiness",
            place,
            format!("the readiness indicator file {} is there", file.display()),
            "",
        );
    } else {
        report.add(
            Severity::Error,
            "readiness",
            place,
            format!(
                "the readiness indicator file {} is not there: ADD waits for it, then fails, and STATUS says not ready",
                file.display()
            ),
            "check the cluster network's pod on this node: it writes the file once its network is up",
        );
    }
}

fn daemon(node: &Node, multus: &Multus, report: &mut Report) {
    let dir = multus
        .json
        .get("daemonSocketDir")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .unwrap_or(thick::wire::DEFAULT_SOCKET_DIR);
    let socket = thick::wire::socket_path(&PathBuf::from(dir));
    let place = Place {
        file: Some(socket.clone()),
        ..Place::default()
    };
    let answer = nodekit::http1::exchange(
        &node.path(&socket),
        "GET",
        "/readyz",
        b"",
        Duration::from_secs(5),
    );
    match answer {
        Ok((200, _)) => report.add(
            Severity::Info,
            "daemon",
            place,
            "the multus daemon answers, and its caches are filled",
            "",
        ),
        Ok((status, body)) => report.add(
            Severity::Warning,
            "daemon",
            place,
            format!(
                "the multus daemon answers {status}: {}",
                cni::quote::shorten(String::from_utf8_lossy(&body).trim())
            ),
            "wait for it to list the node's pods and the NADs; if it stays so, read its log (`kubectl logs` of the multus DaemonSet's pod)",
        ),
        Err(e) => report.add(
            Severity::Error,
            "daemon",
            place,
            format!("the multus daemon does not answer ({e}): every ADD fails at once with code 11 (DEL still works, from the delegate cache)"),
            "check the multus DaemonSet's pod on this node: `kubectl -n kube-system get pods -o wide`, then its log",
        ),
    }
}

fn status(node: &Node, bin_dir: &Path, multus: &Multus, report: &mut Report) {
    let place = Place {
        file: Some(multus.file.clone()),
        ..Place::default()
    };
    let version = cni::Version::from_config(&multus.conf.cni_version).ok();
    if !version.is_some_and(cni::Version::has_status_and_gc) {
        report.add(
            Severity::Note,
            "status",
            place,
            format!(
                "multus's config is CNI {}, which has no STATUS: the runtime cannot tell that multus is not ready, and starts pods anyway",
                multus.conf.cni_version
            ),
            "with a cluster network of CNI 1.1.0, multus's config is 1.1.0 too, and containerd 2 holds pods until multus answers ready",
        );
        return;
    }
    if !node.is_local() {
        report.add(
            Severity::Note,
            "status",
            place,
            "STATUS is asked only when the doctor runs on the node itself (--host-root /): the config's paths are the node's",
            "",
        );
        return;
    }
    match multus.network.status(&[node.path(bin_dir)]) {
        Ok(_) => report.add(
            Severity::Info,
            "status",
            place,
            format!("{} answers STATUS: ready", multus.plugin),
            "",
        ),
        Err(e) => report.add(
            Severity::Error,
            "status",
            place,
            format!(
                "{} answers STATUS: not ready (code {}): {}; the runtime reports its network not ready and starts no pod",
                multus.plugin,
                e.code,
                cni::quote::shorten(&e.msg)
            ),
            "the message says what is missing; the checks above say more",
        ),
    }
}
