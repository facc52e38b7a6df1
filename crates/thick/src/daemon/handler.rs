//! One CNI call from the socket: the request decoded, the daemon's config copied over the
//! network config, and the same multus commands thin mode runs, with the daemon's API. The
//! answer is upstream's: ADD's result in cniVersion 1.1.0 under `Result`, a CNI error object
//! otherwise.

use std::sync::Arc;

use cni::{CmdArgs, CniError, Code, Version};
use multus::command::{self, Multus};
use multus::config::MultusConf;
use multus::k8s_args::K8sArgs;
use npwg::selection::Selection;

use super::api::Shared;
use super::config::DaemonConfig;
use super::hotplug::HotPlug;
use super::shim_conf::ShimConf;
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
    /// Hot-plug by annotation, unless the config turns it off: told of each sandbox added
    /// and deleted.
    pub hot_plug: Option<Arc<HotPlug>>,
}

impl Handler {
    /// `POST /cni`.
    pub fn cni(&self, body: &[u8]) -> Answer {
        self.answer(body, |handler, request| {
            let ran = handler.run(request);
            if ran.is_ok() {
                handler.tell_hot_plug(request);
            }
            ran
        })
    }

    /// Tells hot-plug of a sandbox the call added or deleted.
    fn tell_hot_plug(&self, request: &CniRequest) {
        let Some(hot_plug) = &self.hot_plug else {
            return;
        };
        let env = |key: &str| request.env.get(key).map_or("", String::as_str);
        match env("CNI_COMMAND") {
            "ADD" => {
                let Ok(k8s) = K8sArgs::parse(env("CNI_ARGS")) else {
                    return;
                };
                let ifname = Some(env("CNI_IFNAME")).filter(|i| !i.is_empty());
                hot_plug.added(
                    (k8s.namespace, k8s.name),
                    &k8s.uid,
                    env("CNI_CONTAINERID"),
                    env("CNI_NETNS"),
                    ifname.unwrap_or("eth0"),
                );
            }
            "DEL" => hot_plug.deleted(env("CNI_CONTAINERID")),
            _ => {}
        }
    }

    /// `POST /delegate`: hot-plug, as upstream's daemon serves it to
    /// multus-dynamic-networks-controller.
    pub fn delegate(&self, body: &[u8]) -> Answer {
        self.answer(body, Self::hot_plug)
    }

    fn answer(
        &self,
        body: &[u8],
        run: fn(&Self, &CniRequest) -> Result<Option<serde_json::Value>, CniError>,
    ) -> Answer {
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
        match run(self, &request) {
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

    /// One hot-plug call: `config` is the network, the sandbox is `CNI_CONTAINERID`'s, and
    /// the multus settings are those `/cni` calls get (the shim's config with the daemon's
    /// keys over it). An empty `CNI_IFNAME` asks for the next `net<N>`; upstream takes `eth0`,
    /// the cluster network's.
    fn hot_plug(&self, request: &CniRequest) -> Result<Option<serde_json::Value>, CniError> {
        let command = request
            .env
            .get("CNI_COMMAND")
            .and_then(|c| cni::Command::parse(c));
        let ifname = request
            .env
            .get("CNI_IFNAME")
            .filter(|n| !n.is_empty())
            .cloned();
        let env = |key: &str| match key {
            "CNI_PATH" => Some(String::from("/")),
            // Only to pass the runtime's checks: the hot-plug commands use `ifname`.
            "CNI_IFNAME" => Some(ifname.clone().unwrap_or_else(|| "eth0".to_owned())),
            _ => request.env.get(key).cloned(),
        };
        let mut args = CmdArgs::from_env(env)?;
        args.path = Vec::new();
        let (stdin, conf) = multus_conf(&self.config)?;
        args.stdin = stdin;
        let config = std::str::from_utf8(&request.config)
            .map_err(|e| CniError::decoding(format!("config is not UTF-8: {e}")))?;
        let k8s = K8sArgs::parse(&args.args).map_err(|e| e.to_cni())?;
        if k8s.namespace.is_empty() || k8s.name.is_empty() {
            return Err(CniError::invalid_config(
                "CNI_ARGS must name the pod (K8S_POD_NAMESPACE and K8S_POD_NAME)",
            ));
        }
        let attributes = request.interface_attributes.clone().unwrap_or_default();
        let selection = Selection {
            // A config without a name is named as upstream's caller names it: by its NAD.
            name: serde_json::from_str::<serde_json::Value>(config)
                .ok()
                .and_then(|c| c.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                .unwrap_or_default(),
            namespace: k8s.namespace.clone(),
            interface: ifname.clone(),
            ips: attributes.ips,
            mac: attributes.mac,
            cni_args: attributes.cni_args,
            ..Selection::default()
        };
        let span = tracing::error_span!(
            "hot-plug",
            command = command.map_or("unknown", cni::Command::as_str),
            pod = %format!("{}/{}", k8s.namespace, k8s.name),
            container = %args.container_id,
            ifname = ifname.as_deref().unwrap_or(""),
        );
        let _guard = span.enter();
        let api = self.shared.api();
        let named = || {
            ifname
                .clone()
                .ok_or_else(|| CniError::invalid_config("CNI_IFNAME must name the interface"))
        };
        let ran = match command {
            Some(cni::Command::Add) => command::run(&args, conf, Some(&api), |inv| {
                command::hot_add(inv, config, &selection)
            })
            .and_then(|result| result.to_value(Version::V1_1_0).map_err(Into::into))
            .map(Some),
            Some(cni::Command::Del) => {
                let ifname = named()?;
                command::run(&args, conf, Some(&api), |inv| {
                    command::hot_del(inv, &ifname, config, &selection)
                })
                .map(|()| None)
            }
            Some(cni::Command::Check) => {
                let ifname = named()?;
                command::run(&args, conf, Some(&api), |inv| {
                    command::hot_check(inv, &ifname)
                })
                .map(|()| None)
            }
            Some(cni::Command::Status) => command::run(&args, conf, Some(&api), |inv| {
                command::hot_status(inv, config, &selection)
            })
            .map(|()| None),
            _ => {
                return Err(CniError::invalid_config(
                    "CNI_COMMAND must be ADD, DEL, CHECK or STATUS on /delegate",
                ))
            }
        };
        ran.map_err(|e| {
            tracing::error!("{e}");
            e.to_cni()
        })
    }
}

/// The multus config of calls the daemon makes itself (hot-plug): the shim's, as the daemon
/// writes it, with the daemon's keys over it as over every call's; its bytes and as read.
pub fn multus_conf(config: &DaemonConfig) -> Result<(Vec<u8>, MultusConf), CniError> {
    let (shim_conf, _) = ShimConf::new(config)
        .render()
        .map_err(|e| CniError::new(Code::TryAgainLater, format!("no multus config yet: {e}")))?;
    let stdin = config.overlay(&shim_conf).map_err(CniError::decoding)?;
    let mut conf = MultusConf::parse(&stdin).map_err(|e| e.to_cni())?;
    conf.node_root.clone_from(&config.chroot_dir);
    Ok((stdin, conf))
}
