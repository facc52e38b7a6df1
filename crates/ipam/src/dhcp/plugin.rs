//! The `dhcp` plugin: a thin, synchronous client of the daemon, which holds the leases.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni::path_roots::{PathError, PathRoots};
use cni::{CmdArgs, CniError, CniResult, Code, GcAttachment, Plugin};

use super::config::DhcpConf;
use super::wire::{Op, Request, Response, MAX_LINE};
use crate::error::{Error, Result};

/// How long the plugin waits for the daemon's answer. The daemon answers within its own
/// `-timeout`; this only bounds a daemon that hangs.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The dhcp IPAM plugin.
pub struct Dhcp;

impl Plugin for Dhcp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        match call(args, Op::Add)? {
            Some(result) => Ok(result),
            None => Err(CniError::internal(
                "the dhcp daemon answered ADD without a result",
            )),
        }
    }

    /// DEL. A config that cannot be read, or whose socket this node refuses, never reached
    /// the daemon at ADD: there is no lease to release, and DEL says so on stderr instead of
    /// failing forever.
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = match DhcpConf::parse(&args.stdin, &args.args, &args.container_id, &args.ifname)
        {
            Ok(conf) => conf,
            Err(e) => {
                eprintln!("DEL asks the daemon nothing: {}", CniError::from(e).msg);
                return Ok(());
            }
        };
        let stream = match connect(args, &conf.socket_path) {
            Err(Error::Config(msg)) => {
                eprintln!("DEL asks the daemon nothing: {msg}");
                return Ok(());
            }
            connected => connected?,
        };
        let request = request(args, conf, Op::Del, Vec::new())?;
        exchange(stream, &request.0, &request.1)?;
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        call(args, Op::Check).map(drop)
    }

    /// Available when the daemon answers.
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        match call(args, Op::Status) {
            Err(e) if e.is(Code::TryAgainLater) => {
                Err(CniError::new(Code::PluginNotAvailable, e.msg))
            }
            other => other.map(drop),
        }
    }

    /// Releases the network's leases whose attachment is not in `cni.dev/valid-attachments`.
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let net: cni::NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        match net.valid_attachments {
            Some(valid) => send(args, Op::Gc, valid).map(drop),
            // Without the list there is no telling which leases are stale.
            None => Ok(()),
        }
    }

    /// The config as the plugin reads it; `fromArg` values come at ADD and are not checked.
    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        DhcpConf::parse(config, "", "", "")?;
        Ok(())
    }
}

fn call(args: &CmdArgs, op: Op) -> Result<Option<CniResult>, CniError> {
    send(args, op, Vec::new())
}

fn send(args: &CmdArgs, op: Op, valid: Vec<GcAttachment>) -> Result<Option<CniResult>, CniError> {
    let conf = DhcpConf::parse(&args.stdin, &args.args, &args.container_id, &args.ifname)?;
    let stream = connect(args, &conf.socket_path)?;
    let (socket, request) = request(args, conf, op, valid)?;
    match exchange(stream, &socket, &request)? {
        Response::Ok(result) => Ok(result),
        Response::Error(e) => Err(e),
    }
}

/// The request for `op`, and the daemon's socket it goes to.
fn request(
    args: &CmdArgs,
    conf: DhcpConf,
    op: Op,
    valid: Vec<GcAttachment>,
) -> Result<(PathBuf, Request)> {
    let netns = if args.netns.is_empty() {
        String::new()
    } else {
        std::path::absolute(&args.netns)
            .map_err(|e| Error::io(format!("making CNI_NETNS {:?} absolute", args.netns), e))?
            .display()
            .to_string()
    };
    let request = Request {
        op,
        container_id: args.container_id.clone(),
        network: conf.network,
        ifname: args.ifname.clone(),
        netns,
        params: conf.params,
        valid,
    };
    Ok((conf.socket_path, request))
}

/// The config key naming the daemon's socket, a tenant's path.
const SOCKET_KEY: &str = "ipam.daemonSocketPath";

/// Connects to the daemon's socket, which must be beneath the node's path roots: a socket
/// elsewhere, or through a symlink, is a config error (code 7); nothing listening there is
/// the daemon being unreachable (code 11).
fn connect(args: &CmdArgs, socket: &Path) -> Result<UnixStream> {
    PathRoots::for_call(args)?
        .connect(SOCKET_KEY, socket)
        .map_err(|e| match e {
            PathError::Io { source, .. } => Error::DaemonUnreachable {
                socket: socket.to_path_buf(),
                source,
            },
            refused => refused.into(),
        })
}

/// Sends `request` to the daemon at `socket` on `stream` and reads its answer.
fn exchange(mut stream: UnixStream, socket: &Path, request: &Request) -> Result<Response> {
    let talk = |e| {
        Error::io(
            format!("talking to the dhcp daemon at {}", socket.display()),
            e,
        )
    };
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(talk)?;
    let mut line = serde_json::to_vec(request)
        .map_err(|e| CniError::internal(format!("cannot encode a request to the daemon: {e}")))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(talk)?;
    let mut answer = Vec::new();
    BufReader::new(stream.take(MAX_LINE as u64))
        .read_until(b'\n', &mut answer)
        .map_err(talk)?;
    if answer.is_empty() {
        return Err(Error::Cni(CniError::internal(format!(
            "the dhcp daemon at {} closed the connection without an answer; see its log",
            socket.display()
        ))));
    }
    serde_json::from_slice(&answer).map_err(|e| {
        let start = String::from_utf8_lossy(&answer[..answer.len().min(60)])
            .trim()
            .to_owned();
        Error::Cni(CniError::new(
            Code::Decoding,
            format!(
                "the daemon at {} does not speak this plugin's protocol ({e}; it answered \
                 {}). The reference's Go dhcp daemon cannot serve this plugin: run \
                 `cni-plugins dhcp daemon` from the same release",
                socket.display(),
                cni::quote::quote(&start)
            ),
        ))
    })
}
