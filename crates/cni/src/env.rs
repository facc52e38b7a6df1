//! The `CNI_*` environment a runtime sets for a plugin, checked as the reference does.

use std::path::PathBuf;

use crate::{CniError, Code};

/// The operation a runtime asks for (`CNI_COMMAND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }

    /// Whether the command works on one attachment (needs a container ID and an ifname).
    fn is_per_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

/// Everything a plugin is called with.
#[derive(Clone, Debug)]
pub struct CmdArgs {
    pub command: Command,
    pub container_id: String,
    /// Empty for DEL of a namespace that is already gone, and for STATUS/GC.
    pub netns: String,
    pub ifname: String,
    /// Raw `CNI_ARGS`; see [`crate::args::CniArgs`].
    pub args: String,
    pub path: Vec<PathBuf>,
    pub stdin: Vec<u8>,
    /// The node's path roots file, when the runtime names one
    /// ([`crate::path_roots::ROOTS_FILE_ENV`]).
    pub path_roots_file: Option<PathBuf>,
}

impl CmdArgs {
    /// Reads and checks the environment through `get` (so tests need no process env).
    ///
    /// Missing variables are reported together, as the reference does (code 4).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<CmdArgs, CniError> {
        let var = |name: &str| get(name).unwrap_or_default();
        let raw_command = var("CNI_COMMAND");
        let command = Command::parse(&raw_command);
        let mut missing = Vec::new();
        if raw_command.is_empty() {
            missing.push("CNI_COMMAND");
        }
        let per_attachment = command.is_some_and(Command::is_per_attachment);
        let needs_netns = matches!(command, Some(Command::Add | Command::Check));
        let needs_path = command.is_some_and(|c| c != Command::Version);
        let container_id = var("CNI_CONTAINERID");
        let netns = var("CNI_NETNS");
        let ifname = var("CNI_IFNAME");
        let path = var("CNI_PATH");
        if per_attachment {
            if container_id.is_empty() {
                missing.push("CNI_CONTAINERID");
            } else {
                validate_container_id(&container_id)?;
            }
        }
        if needs_netns && netns.is_empty() {
            missing.push("CNI_NETNS");
        }
        if per_attachment {
            if ifname.is_empty() {
                missing.push("CNI_IFNAME");
            } else {
                validate_ifname(&ifname)?;
            }
        }
        if needs_path && path.is_empty() {
            missing.push("CNI_PATH");
        }
        if !missing.is_empty() {
            return Err(CniError::new(
                Code::InvalidEnvironment,
                format!("required env variables [{}] missing", missing.join(",")),
            ));
        }
        let command = command.ok_or_else(|| {
            CniError::new(
                Code::InvalidEnvironment,
                format!("unknown CNI_COMMAND: {}", crate::quote::quote(&raw_command)),
            )
        })?;
        Ok(CmdArgs {
            command,
            container_id,
            netns,
            ifname,
            args: var("CNI_ARGS"),
            path: std::env::split_paths(&path)
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            stdin: Vec::new(),
            path_roots_file: get(crate::path_roots::ROOTS_FILE_ENV)
                .filter(|f| !f.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// `[a-zA-Z0-9][a-zA-Z0-9_.-]*`: the reference's rule for container IDs and network names.
pub fn is_valid_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::new(Code::UnknownContainer, "missing containerID"));
    }
    if !is_valid_name(id) {
        return Err(CniError::new(
            Code::InvalidEnvironment,
            "invalid characters in containerID",
        )
        .with_details(crate::quote::quote(id)));
    }
    Ok(())
}

/// Linux interface name rules: 1 to 15 bytes, not `.` or `..`, no `/`, `:` or whitespace.
pub fn validate_ifname(name: &str) -> Result<(), CniError> {
    let bad = |msg: &str| {
        Err(CniError::new(Code::InvalidEnvironment, msg.to_owned())
            .with_details(format!("interface name {}", crate::quote::quote(name))))
    };
    if name.is_empty() {
        return bad("interface name is empty");
    }
    if name.len() > 15 {
        return bad("interface name is too long: at most 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("interface name is . or ..");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return bad("interface name contains / or : or whitespace");
    }
    Ok(())
}
