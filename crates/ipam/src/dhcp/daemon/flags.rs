//! `dhcp daemon` flags, in the reference's single-dash Go spelling (`-socketpath PATH`,
//! `-socketpath=PATH`; a double dash works too), with Go durations (`10s`, `1m30s`, `500ms`).

use std::path::PathBuf;
use std::time::Duration;

use super::store::DEFAULT_STATE_DIR;
use crate::dhcp::config::DEFAULT_SOCKET_PATH;

pub const USAGE: &str = "usage: dhcp daemon [flags]
  -socketpath PATH     unix socket to listen on (default /run/cni/dhcp.sock); a socket handed
                       over by systemd (LISTEN_FDS) is used instead when present
  -pidfile PATH        write the daemon's PID to this absolute path
  -hostprefix PATH     prefix for the socket and the pods' netns paths (daemon in a container)
  -statedir PATH       where leases are kept across restarts (default /var/lib/cni/dhcp)
  -broadcast           set the BOOTP broadcast flag for every network (ipvlan)
  -timeout DURATION    how long acquiring a lease may take before ADD fails (default 10s)
  -resendmax DURATION  longest pause between two resends (default 62s)
  -resendtimeout DURATION  how long one renewal attempt may take (default 208s)
  -loglevel LEVEL      error, info or debug (default info) (ours)";

#[derive(Clone, Debug, PartialEq)]
pub struct Flags {
    pub socket_path: PathBuf,
    pub pidfile: Option<PathBuf>,
    pub host_prefix: String,
    pub state_dir: PathBuf,
    pub broadcast: bool,
    pub timeout: Duration,
    pub resend_max: Duration,
    pub resend_timeout: Duration,
    pub log_level: nodelog::Level,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            socket_path: PathBuf::from(DEFAULT_SOCKET_PATH),
            pidfile: None,
            host_prefix: String::new(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            broadcast: false,
            timeout: Duration::from_secs(10),
            resend_max: Duration::from_secs(62),
            log_level: nodelog::Level::Info,
            resend_timeout: Duration::from_secs(208),
        }
    }
}

/// A command line the daemon does not take, or a request for help.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("-h asks for the usage")]
    Help,
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    #[error("-broadcast={0}: want true or false")]
    NotABool(String),
    #[error("flag -{0} needs a value")]
    NoValue(String),
    #[error("unknown flag -{0}")]
    Unknown(String),
    #[error("-pidfile {}: the path must be absolute", .0.display())]
    RelativePidfile(PathBuf),
    #[error("-loglevel {0:?}: want error, info or debug")]
    NotALevel(String),
    #[error("-{flag} {text:?}: want a duration such as 10s, 500ms or 1m30s")]
    NotADuration { flag: String, text: String },
}

impl Flags {
    pub fn parse(args: &[String]) -> Result<Flags, FlagError> {
        let mut flags = Flags::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                return Err(FlagError::Unexpected(arg.clone()));
            };
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (flag, None),
            };
            if name == "broadcast" {
                flags.broadcast = match inline.as_deref() {
                    None | Some("true") | Some("1") => true,
                    Some("false") | Some("0") => false,
                    Some(v) => return Err(FlagError::NotABool(v.to_owned())),
                };
                continue;
            }
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next().cloned())
                    .ok_or_else(|| FlagError::NoValue(name.to_owned()))
            };
            match name {
                "socketpath" => flags.socket_path = PathBuf::from(value()?),
                "pidfile" => flags.pidfile = Some(PathBuf::from(value()?)),
                "hostprefix" => flags.host_prefix = value()?,
                "statedir" => flags.state_dir = PathBuf::from(value()?),
                "timeout" => flags.timeout = duration(name, &value()?)?,
                "resendmax" => flags.resend_max = duration(name, &value()?)?,
                "resendtimeout" => flags.resend_timeout = duration(name, &value()?)?,
                "loglevel" => {
                    flags.log_level = match value()?.as_str() {
                        "error" => nodelog::Level::Error,
                        "info" => nodelog::Level::Info,
                        "debug" => nodelog::Level::Debug,
                        other => return Err(FlagError::NotALevel(other.to_owned())),
                    }
                }
                "h" | "help" => return Err(FlagError::Help),
                _ => return Err(FlagError::Unknown(name.to_owned())),
            }
        }
        if flags.socket_path.as_os_str().is_empty() {
            flags.socket_path = PathBuf::from(DEFAULT_SOCKET_PATH);
        }
        if let Some(p) = &flags.pidfile {
            if !p.is_absolute() {
                return Err(FlagError::RelativePidfile(p.clone()));
            }
        }
        Ok(flags)
    }
}

/// A positive Go duration: numbers with units h, m, s, ms, us, ns, e.g. `1m30s`.
fn duration(flag: &str, text: &str) -> Result<Duration, FlagError> {
    cni::go_duration::parse(text)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| FlagError::NotADuration {
            flag: flag.to_owned(),
            text: text.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reference_spelling() {
        let f = Flags::parse(&args(&[
            "-socketpath",
            "/tmp/x.sock",
            "-pidfile=/run/d.pid",
            "-broadcast",
            "-timeout",
            "2s",
            "--resendmax=1m30s",
            "-hostprefix",
            "/host",
            "-resendtimeout",
            "500ms",
            "-loglevel=debug",
        ]))
        .unwrap();
        assert_eq!(f.socket_path, PathBuf::from("/tmp/x.sock"));
        assert_eq!(f.pidfile, Some(PathBuf::from("/run/d.pid")));
        assert!(f.broadcast);
        assert_eq!(f.timeout, Duration::from_secs(2));
        assert_eq!(f.resend_max, Duration::from_secs(90));
        assert_eq!(f.resend_timeout, Duration::from_millis(500));
        assert_eq!(f.host_prefix, "/host");
        assert_eq!(f.log_level, nodelog::Level::Debug);
        assert_eq!(Flags::parse(&[]).unwrap(), Flags::default());
    }

    #[test]
    fn bad_flags() {
        for a in [
            &["-timeout", "ten"][..],
            &["-timeout", "0s"],
            &["-timeout"],
            &["-nosuch"],
            &["stray"],
            &["-pidfile", "relative.pid"],
            &["-loglevel", "verbose"],
            &["-broadcast=maybe"],
        ] {
            assert!(Flags::parse(&args(a)).is_err(), "{a:?}");
        }
    }
}
