//! One CNI call from the socket: the request decoded, the daemon's config copied over the
//! network config, and the same multus commands thin mode runs, with the daemon's API. The
//! answer is upstream's: ADD's result in cniVersion 1.1.0 under `Result`, a CNI error object
//! otherwise.

use std::sync::Arc;

use cni::{CmdArgs, CniError, Code, Version};
use multus::command::Multus;

use super::api::Shared;
use super::config::DaemonConfig;
use crate::wire::{AddReply, CniRequest};

/// What a handled call answers, and how it is counted.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// `ADD`, `DEL`, ... or `unknown` for a request that never named one.
    pub command: String,
    pub ok: bool,
}

impl Answer {
    pub fn error(command: &str, status: u16, e: &CniError) -> Answer {
        Answer {
            status,
            body: serde_json::to_vec(&e.clone().bounded()).unwrap_or_default(),
            command: command.to_owned(),
            ok: false,
        }
    }
}

pub struct Handler {
    pub config: Arc<DaemonConfig>,
    pub shared: Arc<Shared>,
}

impl Handler {
    /// `POST /cni`.
    pub fn cni(&self, body: &[u8]) -> Answer {
        let request: CniRequest = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => {
                let e = CniError::decoding(format!("the request is not a CNI request: {e}"));
                return Answer::error("unknown", 400, &e);
            }
        };
        // A label of the metrics: only the commands there are, whatever a request says.
        let command = request
            .env
            .get("CNI_COMMAND")
            .and_then(|c| cni::Command::parse(c))
            .map_or("unknown", cni::Command::as_str)
            .to_owned();
        match self.run(&request) {
            Ok(Some(result)) => match serde_json::to_vec(&AddReply { result: &result }) {
                Ok(body) => Answer {
                    status: 200,
                    body,
                    command,
                    ok: true,
                },
                Err(e) => {
                    Answer::error(&command, 400, &CniError::new(Code::Internal, e.to_string()))
                }
            },
            Ok(None) => Answer {
                status: 200,
                body: Vec::new(),
                command,
                ok: true,
            },
            Err(e) => Answer::error(&command, 400, &e),
        }
    }

    fn run(&self, request: &CniRequest) -> Result<Option<serde_json::Value>, CniError> {
        // Delegates come from binDir, as in upstream's daemon: the shim's CNI_PATH is its
        // node's view, and need not be set.
        let env = |key: &str| match key {
            "CNI_PATH" => Some(String::from("/")),
            _ => request.env.get(key).cloned(),
        };
        let mut args = CmdArgs::from_env(env)?;
        args.path = Vec::new();
        args.stdin = self
            .config
            .overlay(&request.config)
            .map_err(CniError::decoding)?;
        let shared = Arc::clone(&self.shared);
        let plugin = Multus {
            called_as: "multus-shim".to_owned(),
            connect: Box::new(move |_| Ok(Some(Box::new(shared.api())))),
            log_per_call: false,
            node_root: self.config.chroot_dir.clone(),
        };
        let mut version = String::new();
        cni::skel::call(&plugin, args, Some(Version::V1_1_0), &mut version, false).map_err(
            |mut e| {
                if e.cni_version.is_empty() {
                    e.cni_version = version;
                }
                e
            },
        )
    }
}
