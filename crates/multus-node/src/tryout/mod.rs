//! `multus try`: a pod on a throwaway node, with no cluster. It builds a node namespace with
//! an uplink to a simulated lan, a cluster network (bridge + host-local) and a pod
//! namespace; runs multus ADD through its normal code path, with the NADs and the pod served
//! from files; shows what the pod got and checks each network; runs DEL and shows that
//! nothing is left.

mod apiserver;
mod dhcp;
mod examples;
mod input;
mod print;
mod report;
mod sandbox;
mod state;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use ipnet::IpNet;
use netkit::netlink::AddrOpts;
use netkit::Netlink;
use serde_json::Value;

use input::{FileApi, Inputs};
use multus::api::{EventKind, Pod};
use multus::command;
use multus::config::MultusConf;
use multus::invocation::Invocation;
use npwg::status::NETWORK_STATUS_ANNOTATION;
use report::{CheckResult, Place, Target, Trial};
use sandbox::Sandbox;
use state::{command_in, Diff, Kernel};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file that cannot be used: what and where.
    #[error("{0}")]
    Input(String),
    /// Building or inspecting the sandbox failed.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// A command-line request that cannot be honoured.
    #[error("{0}")]
    Usage(String),
}

#[derive(clap::Args, Debug)]
pub struct Options {
    /// NetworkAttachmentDefinition and Pod YAML files, or directories of them. Each pod is
    /// tried with all the NADs. Without any: the bundled examples.
    pub paths: Vec<PathBuf>,
    /// Leave the sandbox (namespaces, files, servers) in place with the pod attached, without
    /// DEL, and print how to enter and remove it.
    #[arg(long)]
    pub keep: bool,
    /// Remove every sandbox left by --keep, then exit.
    #[arg(long, conflicts_with_all = ["paths", "keep", "exec", "on_host"])]
    pub clean: bool,
    /// A shell command to run inside the pod once it is attached (sh -c).
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// Attach the pod to this machine's real interfaces (the NADs' masters) instead of a
    /// simulated node. Only macvlan and ipvlan networks with host-local or static addresses
    /// are taken: they create links in the pod's namespace only. `multus lint` runs first;
    /// any finding needs --yes.
    #[arg(long)]
    pub on_host: bool,
    /// Go ahead with --on-host although lint has findings.
    #[arg(long, requires = "on_host")]
    pub yes: bool,
    /// The cni-plugins binary [default: cni-plugins beside this multus binary].
    #[arg(long, value_name = "FILE")]
    pub plugins: Option<PathBuf>,
}

/// Runs `multus try`; exit status 1 when a trial failed (the output says why).
pub fn run(opts: &Options) -> Result<ExitCode, Error> {
    Ok(if trials(opts)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The trials, or `--clean`; false when one failed.
fn trials(opts: &Options) -> Result<bool, Error> {
    if opts.clean {
        return clean();
    }
    if opts.on_host && opts.paths.is_empty() {
        return Err(Error::Usage(
            "--on-host needs NAD and pod files: the bundled examples name a simulated node's \
             interfaces"
                .into(),
        ));
    }
    // A panic (a closed stdout, say) aborts without destructors: the hook removes this run's
    // sandboxes first.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        let ours = format!("{}{}-", sandbox::PREFIX, std::process::id());
        for name in sandbox::existing().iter().filter(|n| n.starts_with(&ours)) {
            sandbox::remove(name);
        }
    }));
    let plugins = plugins_binary(opts)?;
    if opts.on_host {
        lint_for_host(opts, &plugins)?;
    }
    // The whereabouts plugin, run by the interface plugins this process execs, reads the flat
    // file each NAD's `configuration_path` names in its sandbox (under a directory this makes
    // trusted), and keeps its node record here. Set before this process starts a thread.
    std::env::set_var("WHEREABOUTS_CONFIG_DIR", sandbox::STATE_ROOT);
    std::env::set_var("WHEREABOUTS_STATE_DIR", sandbox::whereabouts_records());
    // The stores and sockets the sandboxes' configs name are in their state directories.
    std::env::set_var(cni::path_roots::ROOTS_FILE_ENV, sandbox::path_roots_file()?);
    // (title, files, why the set is skipped)
    let mut sets: Vec<(String, Inputs, Option<&str>)> = Vec::new();
    if opts.paths.is_empty() {
        for ex in examples::ALL {
            let mut inputs = Inputs::default();
            for (file, text) in ex.files {
                inputs.add_text(&format!("examples/{}/{file}", ex.name), text)?;
            }
            let skip = if ex.needs_ipvlan && !kernel_has_ipvlan() {
                Some("this kernel has no ipvlan support (CONFIG_IPVLAN)")
            } else if ex.needs_dhcp && !dhcp::plugin_available(&plugins) {
                Some("this cni-plugins binary has no dhcp plugin")
            } else {
                None
            };
            sets.push((format!("example {}", ex.name), inputs, skip));
        }
    } else {
        let inputs = Inputs::read(&opts.paths)?;
        if inputs.pods.is_empty() {
            return Err(Error::Input(
                "no Pod in the given files: add the pod that uses the networks".into(),
            ));
        }
        if opts.on_host {
            for nad in &inputs.nads {
                on_host_allows(&nad.config).map_err(|msg| {
                    Error::Usage(format!("--on-host: {}/{}: {msg}", nad.namespace, nad.name))
                })?;
            }
        }
        sets.push((String::new(), inputs, None));
    }
    let mut all_ok = true;
    let mut n = 0;
    for (title, inputs, skip) in &sets {
        if let Some(why) = skip {
            println!("=== {title}: SKIPPED: {why}\n");
            continue;
        }
        for (pod, origin) in &inputs.pods {
            let name = format!("{}{}-{n}", sandbox::PREFIX, std::process::id());
            n += 1;
            let heading = if title.is_empty() {
                format!("pod {}/{} from {origin}", pod.namespace, pod.name)
            } else {
                format!("{title}: pod {}/{}", pod.namespace, pod.name)
            };
            let mut trial = Trial {
                heading,
                sandbox: name,
                ..Trial::default()
            };
            let gathered = gather(opts, &plugins, inputs, pod, &mut trial);
            // What was found before a sandbox failure is shown above its error.
            print!("{}", print::trial(&trial));
            gathered?;
            print!("{}", print::verdict(&trial));
            all_ok &= trial.passed();
        }
    }
    Ok(all_ok)
}

/// `multus lint` on the files, against this machine's routes, before --on-host: it must be
/// clean, or the user confirms with --yes having seen the findings.
fn lint_for_host(opts: &Options, plugins: &Path) -> Result<(), Error> {
    #[derive(clap::Parser)]
    struct Lint {
        #[command(flatten)]
        opts: lint::Options,
    }
    let mut args = vec!["lint".into(), "--cni-bin-dir".into()];
    args.push(
        plugins
            .parent()
            .unwrap_or(Path::new("/"))
            .as_os_str()
            .to_owned(),
    );
    args.extend(opts.paths.iter().map(|p| p.as_os_str().to_owned()));
    let lint = <Lint as clap::Parser>::try_parse_from(args)
        .map_err(|e| Error::Usage(format!("lint: {e}")))?;
    let report = lint::lint(&lint.opts);
    println!("--- multus lint (against this machine)");
    print!("{}", report.to_text());
    match (report.exit_status(), opts.yes) {
        (0, _) => Ok(()),
        (_, true) => {
            println!("--on-host goes ahead with these findings: confirmed with --yes\n");
            Ok(())
        }
        (_, false) => Err(Error::Usage(
            "--on-host puts the pod on this machine's real network, and lint has findings \
             (above): fix them, or confirm with --yes"
                .into(),
        )),
    }
}

/// Refuses, for --on-host, any network that would create something outside the pod's
/// namespace or need a server of ours: only macvlan and ipvlan with a named master, and
/// host-local or static addresses.
fn on_host_allows(config: &str) -> Result<(), String> {
    let value: Value = serde_json::from_str(config).map_err(|e| format!("spec.config: {e}"))?;
    for p in sandbox::plugin_configs(&value) {
        let kind = p["type"].as_str().unwrap_or("");
        if kind != "macvlan" && kind != "ipvlan" {
            return Err(format!(
                "type {kind:?}: only macvlan and ipvlan, which create links in the pod only"
            ));
        }
        if p["master"].as_str().is_none_or(str::is_empty) {
            return Err("name the master interface: --on-host never guesses one".into());
        }
        if p.get("linkInContainer").and_then(Value::as_bool) == Some(true) {
            return Err("linkInContainer: the master must be on the host".into());
        }
        match p["ipam"]["type"].as_str() {
            None | Some("host-local") | Some("static") => {}
            Some(other) => {
                return Err(format!(
                    "ipam type {other:?}: only host-local and static on the host"
                ))
            }
        }
    }
    Ok(())
}

fn plugins_binary(opts: &Options) -> Result<PathBuf, Error> {
    let path = match &opts.plugins {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| Error::Usage(format!("cannot find this binary: {e}")))?
            .with_file_name("cni-plugins"),
    };
    if !path.is_file() {
        return Err(Error::Usage(format!(
            "{} not found: build it (scripts/build.sh) or name it with --plugins",
            path.display()
        )));
    }
    path.canonicalize()
        .map_err(|e| Error::Usage(format!("{}: {e}", path.display())))
}

/// Whether this kernel can make an ipvlan link (tried in a namespace of our own).
fn kernel_has_ipvlan() -> bool {
    let name = format!("{}{}-probe", sandbox::PREFIX, std::process::id());
    let Ok(ns) = netkit::NetNs::create_named(&name) else {
        return false;
    };
    let works = (|| -> Option<()> {
        let nl = Netlink::in_ns(&ns).ok()?;
        nl.add_bridge("probe0", &netkit::netlink::BridgeOpts::default())
            .ok()?;
        let parent = nl.link("probe0").ok()?;
        nl.add_ipvlan(
            "probe1",
            parent.index,
            netkit::netlink::IpvlanMode::L2,
            None,
            None,
        )
        .ok()
    })()
    .is_some();
    let _ = netkit::NetNs::delete_named(&name);
    works
}

fn clean() -> Result<bool, Error> {
    // whereabouts' records of kept sandboxes, and the path roots of the runs.
    let _ = std::fs::remove_dir_all(sandbox::whereabouts_records());
    let _ = std::fs::remove_file(Path::new(sandbox::STATE_ROOT).join(sandbox::PATH_ROOTS_FILE));
    let names = sandbox::existing();
    if names.is_empty() {
        println!("no sandboxes to remove");
    }
    let mut ok = true;
    for name in names {
        let failed = sandbox::remove(&name);
        if failed.is_empty() {
            println!("removed {name}");
        } else {
            ok = false;
            println!("could not fully remove {name}: {}", failed.join("; "));
        }
    }
    Ok(ok)
}

const CLUSTER_NETWORK: &str = "cluster";
const CLUSTER_SUBNET: &str = "10.42.0.0/24";

/// The multus configuration of the sandbox: the cluster network inline, state in the
/// sandbox's directory.
fn multus_conf(sb: &Sandbox) -> Result<MultusConf, Error> {
    let cluster = if sb.lan.is_some() {
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": CLUSTER_NETWORK,
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": CLUSTER_SUBNET}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": sb.ipam_dir(),
            }
        })
    } else {
        // On the host: a macvlan on a parent inside the pod, so nothing lands on the host.
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": CLUSTER_NETWORK,
            "type": "macvlan",
            "master": sandbox::ON_HOST_CLUSTER_PARENT,
            "linkInContainer": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": CLUSTER_SUBNET}]],
                "dataDir": sb.ipam_dir(),
            }
        })
    };
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "multus-cni-network",
        "type": "multus",
        "cniDir": sb.multus_dir(),
        "binDir": sb.bin_dir(),
        "confDir": sb.dir.join("net.d"),
        "delegates": [cluster],
    });
    MultusConf::parse(conf.to_string().as_bytes())
        .map_err(|e| Error::Sandbox(format!("multus config: {e}")))
}

/// One pod on a fresh sandbox, recorded in `t` as it goes: an error leaves what was found
/// before it.
fn gather(
    opts: &Options,
    plugins: &Path,
    inputs: &Inputs,
    pod: &Pod,
    t: &mut Trial,
) -> Result<(), Error> {
    let node = Node::set_up(opts, plugins, inputs, pod, t)?;
    let dirs = node.state_dirs();
    let dir_refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let sb = &node.sandbox;
    let node_before = state::snapshot(&sb.node, &dir_refs)?;
    let pod_before = state::snapshot(&sb.pod, &[])?;
    let kept_after_add = node.add_and_del(opts, pod, t)?;
    if kept_after_add {
        return Ok(());
    }
    t.left = Some(report::Leftovers {
        pod: Diff::between(&pod_before, &state::snapshot(&sb.pod, &[])?),
        node: Diff::between(&node_before, &state::snapshot(&sb.node, &dir_refs)?),
        leases: dhcp::leases(&sb.dir),
        allocations: node
            .whereabouts_api
            .as_ref()
            .map(apiserver::ApiServer::held)
            .unwrap_or_default(),
    });
    if opts.keep {
        t.kept = Some(kept(sb));
    }
    Ok(())
}

/// A trial's node: the sandbox, the servers its networks need, and the API multus reads. The
/// sandbox goes last, after what runs in it.
struct Node {
    api: FileApi,
    conf: MultusConf,
    whereabouts_api: Option<apiserver::ApiServer>,
    sandbox: Sandbox,
}

impl Node {
    /// The sandbox, a DHCP server when a network asks for dhcp, an API for whereabouts' pools
    /// when one asks for whereabouts, and the NADs localized to them.
    fn set_up(
        opts: &Options,
        plugins: &Path,
        inputs: &Inputs,
        pod: &Pod,
        t: &mut Trial,
    ) -> Result<Node, Error> {
        let name = t.sandbox.clone();
        let configs: Vec<&str> = inputs.nads.iter().map(|n| n.config.as_str()).collect();
        let mut sb = if opts.on_host {
            Sandbox::on_host(&name, plugins)?
        } else {
            Sandbox::create(&name, plugins, &sandbox::masters(&configs))?
        };
        sb.keep = opts.keep;
        if dhcp::wanted(&configs) {
            sb.servers = dhcp::start(&sb)?;
            t.dhcp = Some(report::Dhcp {
                subnet: dhcp::SUBNET.into(),
                socket: dhcp::socket(&sb.dir),
            });
        }
        // whereabouts keeps its pools in the Kubernetes API: one in this process, on the node.
        let (whereabouts_api, flat_file) = if whereabouts_wanted(&configs) {
            let (server, flat_file) = whereabouts_api(&sb)?;
            t.whereabouts_api = Some(server.url());
            (Some(server), Some(flat_file))
        } else {
            (None, None)
        };
        let local = sandbox::Local {
            ipam_dir: sb.ipam_dir(),
            dhcp_socket: dhcp::socket(&sb.dir),
            whereabouts_flat_file: flat_file,
        };
        let api = FileApi {
            pod: pod.clone(),
            nads: inputs
                .nads
                .iter()
                .map(|n| {
                    (
                        (n.namespace.clone(), n.name.clone()),
                        sandbox::localize(&n.config, &local),
                    )
                })
                .collect(),
            annotations: Mutex::new(BTreeMap::new()),
            events: Mutex::new(Vec::new()),
        };
        let conf = multus_conf(&sb)?;
        t.node = Some(if sb.lan.is_some() {
            report::Node::Simulated {
                uplink: sandbox::UPLINK.into(),
                lan_bridge: sandbox::LAN_BRIDGE.into(),
            }
        } else {
            report::Node::OnHost {
                cluster_parent: sandbox::ON_HOST_CLUSTER_PARENT.into(),
            }
        });
        Ok(Node {
            api,
            conf,
            whereabouts_api,
            sandbox: sb,
        })
    }

    /// The directories whose files a trial compares before and after.
    fn state_dirs(&self) -> [PathBuf; 4] {
        let sb = &self.sandbox;
        [
            sb.multus_dir(),
            sb.ipam_dir(),
            dhcp::state_dir(&sb.dir),
            sandbox::whereabouts_records(),
        ]
    }

    /// ADD as the runtime runs it, what the pod got and its events, a check per network, the
    /// `--exec` command, then DEL. True when `--keep` kept the pod after ADD, without a DEL.
    fn add_and_del(&self, opts: &Options, pod: &Pod, t: &mut Trial) -> Result<bool, Error> {
        let (sb, api, conf) = (&self.sandbox, &self.api, &self.conf);
        let container_id = format!("{}-sandbox", t.sandbox);
        let cni_args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={container_id};K8S_POD_UID={}",
            pod.namespace, pod.name, pod.uid
        );
        let call = |command: cni::Command| cni::CmdArgs {
            command,
            container_id: container_id.clone(),
            netns: sb.pod.path().display().to_string(),
            ifname: "eth0".into(),
            args: cni_args.clone(),
            path: vec![sb.bin_dir()],
            stdin: Vec::new(),
            path_roots_file: None,
        };
        let added = call_multus(sb, conf, api, call(cni::Command::Add))?;
        t.add = Some(outcome(&added));
        let annotations = api
            .annotations
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default();
        let network_status = annotations.get(NETWORK_STATUS_ANNOTATION);
        if added.is_ok() {
            t.attached = Some(attached(sb, network_status.cloned())?);
        }
        t.events = api
            .events
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|e| report::Event {
                warning: matches!(e.kind, EventKind::Warning),
                reason: e.reason,
                message: e.message,
            })
            .collect();
        if added.is_err() {
            return Ok(false);
        }
        let statuses: Value = network_status
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or(Value::Null);
        let checks = t.connectivity.insert(Vec::new());
        for entry in statuses.as_array().into_iter().flatten() {
            if let Some(check) = check_network(sb, entry)? {
                checks.push(check);
            }
        }
        if let Some(command) = &opts.exec {
            t.exec = Some(exec_in_pod(sb, command)?);
        }
        if opts.keep {
            // Everything ADD made lives in the sandbox: --clean removes it without a DEL.
            t.del = Some(report::Del::NotRun);
            t.kept = Some(kept(sb));
            return Ok(true);
        }
        t.del = Some(match call_multus(sb, conf, api, call(cni::Command::Del))? {
            Ok(()) => report::Del::Ok,
            Err(e) => report::Del::Failed(e.to_string()),
        });
        Ok(false)
    }
}

fn whereabouts_wanted(configs: &[&str]) -> bool {
    configs.iter().any(|c| {
        serde_json::from_str::<Value>(c).is_ok_and(|v| {
            sandbox::plugin_configs(&v)
                .iter()
                .any(|p| p["ipam"]["type"].as_str() == Some("whereabouts"))
        })
    })
}

/// whereabouts' API server on the node, and the flat file that names its kubeconfig.
fn whereabouts_api(sb: &Sandbox) -> Result<(apiserver::ApiServer, PathBuf), Error> {
    let server = apiserver::ApiServer::start(&sb.node)?;
    let dir = sb.dir.join("whereabouts.d");
    let failed = |e: std::io::Error| Error::Sandbox(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let kubeconfig = dir.join("whereabouts.kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let flat_file = dir.join("whereabouts.conf");
    let flat = serde_json::json!({"datastore": "kubernetes",
                                  "kubernetes": {"kubeconfig": kubeconfig}});
    std::fs::write(&flat_file, flat.to_string()).map_err(failed)?;
    Ok((server, flat_file))
}

fn outcome(r: &multus::Result<()>) -> report::Outcome {
    match r {
        Ok(()) => report::Outcome::Ok,
        Err(e) => report::Outcome::Failed(e.to_string()),
    }
}

/// multus ADD or DEL in the node namespace, through the same code the runtime's call takes;
/// the outer error is a sandbox failure, the inner one multus's answer.
fn call_multus(
    sb: &Sandbox,
    conf: &MultusConf,
    api: &FileApi,
    args: cni::CmdArgs,
) -> Result<multus::Result<()>, Error> {
    let conf = conf.clone();
    let cni_command: fn(&Invocation) -> multus::Result<()> = match args.command {
        cni::Command::Del => command::del,
        _ => |inv| command::add(inv).map(drop),
    };
    sb.node
        .run(move || command::run(&args, conf, Some(api), cni_command))
        .map_err(|e| Error::Sandbox(format!("entering the node: {e}")))
}

/// The most of `--exec`'s output kept for the report.
const EXEC_OUTPUT_MAX: usize = 1 << 20;
/// How long, once the command has exited, its output may take to end.
const EXEC_OUTPUT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// `sh -c command` in the pod, with its output captured for the report.
fn exec_in_pod(sb: &Sandbox, command: &str) -> Result<report::Exec, Error> {
    let failed = |e: std::io::Error| Error::Sandbox(format!("running sh -c {command:?}: {e}"));
    // One pipe for stdout and stderr keeps their lines in the order the command wrote them.
    let (mut reader, writer) = std::io::pipe().map_err(failed)?;
    let mut cmd = command_in(&sb.pod, "sh")?;
    cmd.args(["-c", command])
        .stdout(writer.try_clone().map_err(failed)?)
        .stderr(writer);
    let mut child = cmd.spawn().map_err(failed)?;
    // The writers must be gone from this process, or the read never sees the end.
    drop(cmd);
    let output = Arc::new(Mutex::new(Vec::new()));
    let (done, finished) = std::sync::mpsc::channel();
    let collected = Arc::clone(&output);
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n @ 1..) = std::io::Read::read(&mut reader, &mut chunk) {
            let mut out = collected.lock().unwrap_or_else(PoisonError::into_inner);
            let room = EXEC_OUTPUT_MAX.saturating_sub(out.len());
            out.extend_from_slice(&chunk[..n.min(room)]);
        }
        // The receiver may be gone: try went on without the rest.
        let _ = done.send(());
    });
    let status = child.wait().map_err(failed)?;
    // A process the command left in the background may hold the output open: its output
    // is not waited for.
    let complete = finished.recv_timeout(EXEC_OUTPUT_GRACE).is_ok();
    let mut output = output
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if output.len() >= EXEC_OUTPUT_MAX {
        output.extend_from_slice(b"\n(output cut at 1 MiB)\n");
    } else if !complete {
        output.extend_from_slice(
            b"\n(a process the command left running still holds its output: not waited for)\n",
        );
    }
    Ok(report::Exec {
        command: command.to_owned(),
        output: String::from_utf8_lossy(&output).into_owned(),
        status: status.to_string(),
        success: status.success(),
    })
}

/// How to look at a kept sandbox and remove it.
fn kept(sb: &Sandbox) -> report::Kept {
    report::Kept {
        pod_netns: format!("{}-pod", sb.name),
        node_netns: sb.lan.as_ref().map(|_| format!("{}-node", sb.name)),
        dir: sb.dir.clone(),
    }
}

/// The pod's interfaces with their addresses, its routes, and the network-status multus
/// wrote.
fn attached(sb: &Sandbox, network_status: Option<String>) -> Result<report::Attached, Error> {
    let k = Kernel::read(&sb.pod)?;
    let interfaces = k
        .links
        .iter()
        .filter(|l| l.name != "lo")
        .map(|l| report::Interface {
            name: l.name.clone(),
            kind: l.kind.clone().unwrap_or_else(|| "device".into()),
            mac: l.mac.as_ref().map(netkit::format_mac).unwrap_or_default(),
            mtu: l.mtu,
            up: l.up,
            addresses: k
                .addrs
                .iter()
                .filter(|(dev, _)| *dev == l.name)
                .map(|(_, a)| *a)
                .collect(),
        })
        .collect();
    let routes = k
        .routes
        .into_iter()
        .filter(|(dev, line)| {
            dev != "lo" && !line.contains(" table ") && !line.starts_with("fe80::/64")
        })
        .map(|(_, line)| line)
        .collect();
    Ok(report::Attached {
        interfaces,
        routes,
        network_status,
    })
}

/// Pings, from the pod interface of one network-status entry, its gateway or a peer in its
/// subnet; a peer address is put on the lan (macvlan, ipvlan) or the node's bridge for the
/// check and removed after. `None` for an entry without an interface.
fn check_network(sb: &Sandbox, entry: &Value) -> Result<Option<report::Check>, Error> {
    let network = entry["name"].as_str().unwrap_or("?");
    let Some(ifname) = entry["interface"].as_str() else {
        return Ok(None);
    };
    let check = |result| {
        Ok(Some(report::Check {
            interface: ifname.to_owned(),
            network: network.to_owned(),
            result,
        }))
    };
    let k = Kernel::read(&sb.pod)?;
    let Some(link) = k.links.iter().find(|l| l.name == ifname) else {
        return check(CheckResult::NoSuchInterface);
    };
    let Some(own) = k
        .addrs
        .iter()
        .filter(|(dev, a)| dev == ifname && !is_link_local(a.addr()))
        .map(|(_, a)| *a)
        .next()
    else {
        return check(CheckResult::NoAddress);
    };
    let gateway = entry["gateway"]
        .as_array()
        .and_then(|g| {
            g.iter()
                .filter_map(Value::as_str)
                .find_map(|g| g.parse::<IpAddr>().ok())
        })
        .or_else(|| cached_gateway(sb, ifname, own));
    if sb.lan.is_none() && (gateway.is_none() || network == CLUSTER_NETWORK) {
        return check(CheckResult::NotChecked);
    }
    let on_node = sb.node_addr_in(own)?;
    let (target, what) = match (gateway, on_node) {
        (Some(g), _) => (g, Target::Gateway),
        (None, Some(n)) => (n, Target::NodeAddress),
        (None, None) => (peer_in(own), Target::Peer),
    };
    let mut cleanup: Option<(u32, IpNet)> = None;
    let place = if sb.node_has(target)? {
        Place::Node
    } else if sb.lan.is_none() {
        Place::RealNetwork
    } else {
        let with_prefix = IpNet::new(target, own.prefix_len())
            .map_err(|e| Error::Sandbox(format!("{target}: {e}")))?;
        if link.kind.as_deref() == Some("veth") {
            // The pod's veth peer is a port of a bridge on the node: the peer goes there.
            let node =
                Netlink::in_ns(&sb.node).map_err(|e| Error::Sandbox(format!("node: {e}")))?;
            let bridge = link
                .link
                .and_then(|peer| node.link_by_index(peer).ok().flatten())
                .and_then(|p| p.master);
            match bridge {
                Some(b) => {
                    let opts = AddrOpts {
                        nodad: true,
                        ..AddrOpts::default()
                    };
                    node.add_addr(b, with_prefix, opts)
                        .map_err(|e| Error::Sandbox(format!("node bridge: {e}")))?;
                    cleanup = Some((b, with_prefix));
                    Place::NodeBridge
                }
                None => Place::Nowhere,
            }
        } else {
            sb.lan_peer(with_prefix)?;
            Place::Lan
        }
    };
    let reached = ping(sb, ifname, target)?;
    if let Some((b, addr)) = cleanup {
        let node = Netlink::in_ns(&sb.node).map_err(|e| Error::Sandbox(format!("node: {e}")))?;
        node.del_addr(b, addr)
            .map_err(|e| Error::Sandbox(format!("node bridge: {e}")))?;
    }
    check(CheckResult::Pinged {
        what,
        target,
        place,
        reached,
    })
}

/// The gateway the delegate's result gave `ifname` for `own`'s family, from the result cache
/// multus wrote (network-status only names gateways of default routes).
fn cached_gateway(sb: &Sandbox, ifname: &str, own: IpNet) -> Option<IpAddr> {
    let cached = cni::cache::list(&sb.multus_dir()).ok()?;
    let result = cached
        .into_iter()
        .flatten()
        .find(|a| a.ifname == ifname)?
        .result?;
    result["ips"]
        .as_array()?
        .iter()
        .filter_map(|ip| ip["gateway"].as_str()?.parse::<IpAddr>().ok())
        .find(|g| g.is_ipv4() == own.addr().is_ipv4())
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// An address in `own`'s subnet other than `own`: the last host, or the one before it.
fn peer_in(own: IpNet) -> IpAddr {
    let mut hosts: Vec<IpAddr> = own.hosts().rev().take(2).collect();
    hosts.retain(|h| *h != own.addr());
    hosts.first().copied().unwrap_or(own.addr())
}

/// Three echo requests from `ifname`, one second apart; true on the first reply.
fn ping(sb: &Sandbox, ifname: &str, target: IpAddr) -> Result<bool, Error> {
    for _ in 0..3 {
        let out = command_in(&sb.pod, "ping")?
            .args([
                "-n",
                "-c",
                "1",
                "-W",
                "1",
                "-I",
                ifname,
                &target.to_string(),
            ])
            .output()
            .map_err(|e| Error::Sandbox(format!("running ping: {e}")))?;
        if out.status.success() {
            return Ok(true);
        }
    }
    Ok(false)
}
