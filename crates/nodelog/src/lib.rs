//! The log of the node's processes: multus in each call, the thick daemon, the dhcp daemon,
//! the installer and whereabouts' tools all write the same line,
//!
//! ```text
//! 2026-11-30T01:54:36.791647Z  INFO the message
//! ```
//!
//! at four levels, to stderr and/or a log file rotated by size as multus's `logOptions` ask.
//! Never to stdout: a CNI plugin's result goes there.

mod file;
mod rotation;
mod time;

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

pub use rotation::LogOptions;

use file::LogFile;
use time::timestamp;

/// How much a line matters, most first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => " WARN",
            Level::Info => " INFO",
            Level::Debug => "DEBUG",
        }
    }
}

/// How much a process logs, and whether to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The least important level written; `None` writes nothing.
    pub max: Option<Level>,
    pub to_stderr: bool,
}

impl Default for Settings {
    /// What a process logs before it has read its own settings: information, to stderr.
    fn default() -> Settings {
        Settings {
            max: Some(Level::Info),
            to_stderr: true,
        }
    }
}

/// The log file and its rotation.
struct FileLog {
    file: Mutex<LogFile>,
    path: PathBuf,
    rotation: LogOptions,
}

/// The process's log, as [`init`] or [`init_with_file`] set it up.
struct Log {
    settings: Settings,
    file: Option<FileLog>,
}

static LOG: OnceLock<Log> = OnceLock::new();

/// Sets up this process's log, without a file; the first call wins.
pub fn init(settings: Settings) {
    let _ = LOG.set(Log {
        settings,
        file: None,
    });
}

/// Sets up this process's log, with a file rotated as `rotation` asks (first, if it is due);
/// the first call wins. A file that cannot be opened is left out, and its error returned for
/// the caller to report as it likes: logging must not fail a pod. (Apart from [`init`], so
/// that a process without a file links no rotation.)
pub fn init_with_file(
    settings: Settings,
    path: &std::path::Path,
    rotation: &LogOptions,
) -> std::io::Result<()> {
    let rotation_trouble = rotation::rotate(path, rotation).err();
    let (file, opened) = match LogFile::open(path) {
        Ok(f) => (
            Some(FileLog {
                file: Mutex::new(f),
                path: path.to_owned(),
                rotation: rotation.clone(),
            }),
            Ok(()),
        ),
        Err(e) => (None, Err(e)),
    };
    if LOG.set(Log { settings, file }).is_ok() {
        if let Some(trouble) = rotation_trouble {
            write(Level::Warn, format_args!("log rotation: {trouble}"));
        }
    }
    opened
}

fn log() -> &'static Log {
    LOG.get_or_init(|| Log {
        settings: Settings::default(),
        file: None,
    })
}

/// Whether a line at `level` would be written.
pub fn enabled(level: Level) -> bool {
    log().settings.max.is_some_and(|max| level <= max)
}

/// The least important level this process writes; `None`: nothing.
pub fn max_level() -> Option<Level> {
    log().settings.max
}

/// Writes one line at `level`, if the settings let it through.
pub fn write(level: Level, message: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let line = line(SystemTime::now(), level, &message.to_string());
    let log = log();
    if log.settings.to_stderr {
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    if let Some(file) = &log.file {
        if let Ok(mut f) = file.file.lock() {
            f.append(line.as_bytes());
        }
    }
}

/// One line: the time, the level, and the message with its control characters escaped, so that
/// text from outside (a name, a server's message) can neither start a line of its own nor
/// colour a terminal.
fn line(at: SystemTime, level: Level, message: &str) -> String {
    let mut line = format!("{} {} ", timestamp(at), level.label());
    for c in message.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line.push('\n');
    line
}

/// Rotates the log file when it is due: a long-running process (the thick daemon) calls this
/// now and then, where a process per call rotates once, at its start. The next line goes to
/// the new file.
pub fn maintain() {
    if let Some(file) = &log().file {
        if let Err(trouble) = rotation::rotate(&file.path, &file.rotation) {
            write(Level::Warn, format_args!("log rotation: {trouble}"));
        }
    }
}

/// A line at the error level: `nodelog::error!("cannot {}", what)`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::write($crate::Level::Error, format_args!($($arg)*)) };
}

/// A line at the warning level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::write($crate::Level::Warn, format_args!($($arg)*)) };
}

/// A line at the information level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::write($crate::Level::Info, format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_stays_one_line_and_sends_no_terminal_codes() {
        let at = std::time::UNIX_EPOCH;
        assert_eq!(
            line(at, Level::Warn, "pod a\nb\r\u{1b}[31mred\ttab"),
            "1970-01-01T00:00:00.000000Z  WARN pod a\\nb\\r\\u{1b}[31mred\\ttab\n"
        );
        assert_eq!(
            line(at, Level::Info, "plain é"),
            "1970-01-01T00:00:00.000000Z  INFO plain é\n"
        );
    }
}
