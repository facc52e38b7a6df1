//! `multus-shim`: thick mode's CNI plugin. The runtime calls it as it would call multus; it
//! hands the call to `multus-daemon` over the daemon's socket and prints the daemon's answer.
//!
//! Unlike upstream's shim, it:
//! - passes the daemon's CNI error on with its code, rather than as code 999;
//! - does DEL itself, from multus's delegate cache as thin mode does, when the daemon does not
//!   answer, so that a node whose daemon is down still removes its pods;
//! - fails ADD at once when the daemon does not answer, naming the socket, instead of polling
//!   for a minute;
//! - sends only the `CNI_*` variables of its environment.

use std::path::PathBuf;
use std::time::Duration;

use cni::{CmdArgs, CniError, CniResult, Code};
use serde_json::Value;

use crate::wire::{self, CniRequest};
use nodekit::http1;

/// How long the shim waits for the daemon's answer: longer than the daemon keeps a request
/// (its queue deadline plus the call), shorter than a runtime waits for a sandbox.
const ANSWER_WAIT: Duration = Duration::from_secs(180);

/// The shim's own keys of its config (the rest is the daemon's).
fn socket_dir(stdin: &[u8]) -> PathBuf {
    serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| v.get("daemonSocketDir")?.as_str().map(PathBuf::from))
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from(wire::DEFAULT_SOCKET_DIR))
}

/// What the daemon made of a call.
enum Answer {
    /// 200, with ADD's result when there is one.
    Done(Option<Value>),
    /// The call failed, as the daemon says.
    Failed(CniError),
    /// No answer came: nothing on the socket, no reply in time, or a reply that could not be
    /// read.
    Missing(http1::ExchangeError),
}

fn ask(args: &CmdArgs, socket: &std::path::Path) -> Answer {
    let request = CniRequest {
        // vars() would panic on a value that is not UTF-8; such a variable is not sent.
        env: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("CNI_"))
            .collect(),
        config: args.stdin.clone(),
        interface_attributes: None,
    };
    let body = match serde_json::to_vec(&request) {
        Ok(b) => b,
        Err(e) => return Answer::Failed(CniError::new(Code::Internal, e.to_string())),
    };
    let (status, reply) = match http1::exchange(socket, "POST", "/cni", &body, ANSWER_WAIT) {
        Ok(r) => r,
        Err(e) => return Answer::Missing(e),
    };
    let parsed: Option<Value> = serde_json::from_slice(&reply).ok();
    if status == 200 {
        return Answer::Done(parsed.as_ref().and_then(wire::result_of).cloned());
    }
    let error = parsed
        .and_then(|v| serde_json::from_value::<CniError>(v).ok())
        .filter(|e| !e.msg.is_empty())
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&reply);
            CniError::new(
                Code::Internal,
                format!(
                    "the multus daemon answered {status}: {}",
                    cni::quote::shorten(text.trim())
                ),
            )
        });
    Answer::Failed(error)
}

fn no_answer(socket: &std::path::Path, why: &http1::ExchangeError, code: Code) -> CniError {
    let socket = socket.display();
    let what = match why {
        http1::ExchangeError::Unreachable(e) => {
            format!("the multus daemon does not answer on {socket} ({e})")
        }
        http1::ExchangeError::Silent(e) => {
            format!("the multus daemon on {socket} took the call and did not answer ({e})")
        }
        http1::ExchangeError::Unreadable(e) => {
            format!("the multus daemon on {socket} answered, and its reply could not be read ({e})")
        }
    };
    CniError::new(
        code,
        format!("multus-shim: {what}: check the multus daemon pod on this node"),
    )
}

/// The shim as a CNI plugin, run under the name `called_as` (`multus-shim`).
pub struct Shim {
    called_as: String,
}

impl Shim {
    /// The socket of the daemon, once the config is known to be the shim's own: a config of
    /// another type (the shim run as a network's IPAM) or with a previous result (as a chained
    /// plugin) is refused before anything else of it is read, the daemon asked nothing and the
    /// delegate cache not touched.
    fn socket(&self, args: &CmdArgs) -> Result<PathBuf, CniError> {
        multus::config::require_own_config(&args.stdin, &self.called_as, args.command)?;
        Ok(wire::socket_path(&socket_dir(&args.stdin)))
    }

    /// Everything but ADD and DEL: the daemon's answer, or an error naming the socket.
    fn forward(&self, args: &CmdArgs, down: Code) -> Result<(), CniError> {
        let socket = self.socket(args)?;
        match ask(args, &socket) {
            Answer::Done(_) => Ok(()),
            Answer::Failed(e) => Err(e),
            Answer::Missing(why) => Err(no_answer(&socket, &why, down)),
        }
    }
}

impl cni::Plugin for Shim {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let socket = self.socket(args)?;
        match ask(args, &socket) {
            Answer::Done(Some(result)) => CniResult::from_value(&result),
            Answer::Done(None) => Err(CniError::new(
                Code::Internal,
                "the multus daemon's ADD reply has no Result",
            )),
            Answer::Failed(e) => Err(e),
            Answer::Missing(why) => Err(no_answer(&socket, &why, Code::TryAgainLater)),
        }
    }

    /// The daemon's DEL; when it does not answer, the shim's own, from the delegate cache, as
    /// thin mode does it.
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // A config that is not the shim's own made nothing at ADD: nothing to delete.
        let socket = match self.socket(args) {
            Ok(socket) => socket,
            Err(e) => {
                eprintln!("DEL does nothing: {}", e.msg);
                return Ok(());
            }
        };
        let why = match ask(args, &socket) {
            Answer::Done(_) => return Ok(()),
            Answer::Failed(e) => return Err(e),
            Answer::Missing(why) => why,
        };
        let conf = multus::config::MultusConf::parse(&args.stdin).map_err(|e| e.to_cni())?;
        multus::log::init(&conf);
        tracing::warn!(
            container = %args.container_id,
            ifname = %args.ifname,
            "the multus daemon on {} did not take DEL ({why}): deleting from the delegate cache",
            socket.display()
        );
        multus::command::run(args, conf, None, multus::command::del).map_err(|e| e.to_cni())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.forward(args, Code::TryAgainLater)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.forward(args, Code::PluginNotAvailable)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.forward(args, Code::TryAgainLater)
    }

    /// The shim's config is multus's, with the cluster network named by path.
    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        multus::config::MultusConf::parse(config)
            .map(drop)
            .map_err(|e| e.to_cni())
    }
}

/// The `multus-shim` binary's entry: a CNI plugin.
pub fn main() -> std::process::ExitCode {
    let about = format!("multus-rs shim v{}", env!("CARGO_PKG_VERSION"));
    let shim = Shim {
        called_as: "multus-shim".to_owned(),
    };
    cni::plugin_main(&shim, &about)
}
