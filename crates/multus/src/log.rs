//! Logging as multus's `logFile`, `logLevel` and `logToStderr` ask: lines go to stderr and/or
//! the file, never to stdout (the runtime reads the result there).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tracing_subscriber::filter::LevelFilter;

use crate::config::{LogLevel, LogOptions, MultusConf};

/// Where each line goes.
#[derive(Clone)]
struct Sinks {
    stderr: bool,
    file: Option<Arc<Mutex<File>>>,
}

impl Write for Sinks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stderr {
            let _ = std::io::stderr().write_all(buf);
        }
        if let Some(file) = &self.file {
            if let Ok(mut f) = file.lock() {
                let _ = f.write_all(buf);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the logger for this process. A log file that cannot be opened is reported on
/// stderr (when allowed) and otherwise ignored: logging must not fail a pod.
pub fn init(conf: &MultusConf) {
    let level = match conf.log_level {
        LogLevel::Panic => LevelFilter::OFF,
        LogLevel::Error => LevelFilter::WARN,
        LogLevel::Verbose => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    };
    let file = conf.log_file.as_ref().and_then(|path| {
        rotate(path, &conf.log_options);
        match OpenOptions::new().create(true).append(true).open(path) {
            Ok(f) => Some(Arc::new(Mutex::new(f))),
            Err(e) => {
                if conf.log_to_stderr {
                    eprintln!("multus: cannot open logFile {}: {e}", path.display());
                }
                None
            }
        }
    });
    let sinks = Sinks {
        stderr: conf.log_to_stderr,
        file,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false)
        .with_writer(move || sinks.clone())
        .try_init();
}

/// Size-based rotation as `logOptions` asks (upstream's defaults: 100 MB, 5 backups, 5 days):
/// a file past `maxSize` becomes `<file>.1`, older backups move up one, those past
/// `maxBackups` or older than `maxAge` days go. Backups are not compressed.
fn rotate(path: &Path, opts: &LogOptions) {
    let max_bytes = opts.max_size.unwrap_or(100).saturating_mul(1 << 20);
    let backups = opts.max_backups.unwrap_or(5);
    let max_age = Duration::from_secs(opts.max_age.unwrap_or(5).saturating_mul(86_400));
    let backup = |n: u64| -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    let now = SystemTime::now();
    for n in 1..=backups {
        let expired = std::fs::metadata(backup(n))
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > max_age));
        if expired {
            let _ = std::fs::remove_file(backup(n));
        }
    }
    if std::fs::metadata(path).map_or(true, |m| m.len() < max_bytes) {
        return;
    }
    if backups == 0 {
        let _ = std::fs::remove_file(path);
        return;
    }
    for n in (1..backups).rev() {
        let _ = std::fs::rename(backup(n), backup(n + 1));
    }
    let _ = std::fs::rename(path, backup(1));
}
