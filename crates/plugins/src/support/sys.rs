//! Mapping kernel and system failures to CNI errors, and opening the pod's namespace: shared by
//! every interface plugin so the same failure gets the same code everywhere.

use cni::{CniError, Code};
use netkit::NetNs;

/// A kernel or system failure, with the text that says what and where (errno kept).
pub fn sys(e: netkit::Error) -> CniError {
    let code = match (&e, e.errno()) {
        (netkit::Error::Invalid(_), _) => Code::InvalidConfig,
        // The kernel is busy; the runtime may retry the whole call.
        (_, Some(libc::EAGAIN | libc::EBUSY)) => Code::TryAgainLater,
        _ => Code::Internal,
    };
    CniError::new(code, e.to_string())
}

/// The same, with the step that failed in front.
pub fn sys_ctx(what: impl std::fmt::Display) -> impl FnOnce(netkit::Error) -> CniError {
    move |e| {
        let mut err = sys(e);
        err.msg = format!("{what}: {}", err.msg);
        err
    }
}

/// How long a call waits for another call on the same pod.
const POD_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Opens the pod's namespace (code 8 when it cannot be used), locked for this call: two calls
/// on one pod (a runtime retrying an ADD, say) never interleave, so neither undoes the other's
/// half-made interface. Past [`POD_LOCK_WAIT`], code 11.
pub fn open_netns(path: &str) -> Result<NetNs, CniError> {
    let ns = NetNs::open(path).map_err(|e| netns_error(path, &e))?;
    lock(ns)
}

fn lock(ns: NetNs) -> Result<NetNs, CniError> {
    ns.lock(POD_LOCK_WAIT)
        .map_err(|e| CniError::new(Code::TryAgainLater, e.to_string()))?;
    Ok(ns)
}

/// Opens the pod's namespace for DEL: `None` when `CNI_NETNS` is empty or the namespace is
/// gone (its path no longer exists, or is the plain file an unmount leaves behind), so DEL
/// only releases what is left.
pub fn open_netns_for_del(path: &str) -> Result<Option<NetNs>, CniError> {
    if path.is_empty() {
        return Ok(None);
    }
    match NetNs::open(path) {
        Ok(ns) => lock(ns).map(Some),
        Err(e) if e.errno() == Some(libc::ENOENT) || matches!(e, netkit::Error::Invalid(_)) => {
            Ok(None)
        }
        Err(e) => Err(netns_error(path, &e)),
    }
}

fn netns_error(path: &str, e: &netkit::Error) -> CniError {
    CniError::new(
        Code::InvalidNetns,
        format!("cannot open the pod's network namespace {path:?} (CNI_NETNS): {e}"),
    )
}

/// Adds the failures of a cleanup to the error that caused it, in its details.
pub fn with_cleanup_failures(mut err: CniError, failures: &[String]) -> CniError {
    if failures.is_empty() {
        return err;
    }
    let cleanup = format!(
        "cleaning up after the failure also failed: {}",
        failures.join("; ")
    );
    err.details = if err.details.is_empty() {
        cleanup
    } else {
        format!("{}; {cleanup}", err.details)
    };
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netkit_errors_map_to_codes_a_runtime_can_act_on() {
        let busy = netkit::Error::Netlink {
            op: "adding link".into(),
            errno: libc::EBUSY,
            msg: String::new(),
        };
        assert!(sys(busy).is(Code::TryAgainLater));
        assert!(sys(netkit::Error::Invalid("bad name".into())).is(Code::InvalidConfig));
        let exists = netkit::Error::Netlink {
            op: "adding link".into(),
            errno: libc::EEXIST,
            msg: String::new(),
        };
        let err = sys(exists);
        assert!(err.is(Code::Internal));
        assert!(err.msg.contains("adding link"), "{err}");
    }

    #[test]
    fn cleanup_failures_go_into_the_details() {
        let e = with_cleanup_failures(CniError::internal("boom"), &[]);
        assert!(e.details.is_empty());
        let e = with_cleanup_failures(
            CniError::internal("boom").with_details("first"),
            &["x".into()],
        );
        assert_eq!(
            e.details,
            "first; cleaning up after the failure also failed: x"
        );
    }

    #[test]
    fn del_tolerates_a_missing_namespace() {
        assert!(open_netns_for_del("").unwrap().is_none());
        assert!(open_netns_for_del("/nonexistent/netns").unwrap().is_none());
    }
}
