//! Logging as multus's `logFile`, `logLevel` and `logToStderr` ask: lines go to stderr and/or
//! the file, never to stdout (the runtime reads the result there).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing_subscriber::filter::LevelFilter;

use crate::config::{LogLevel, MultusConf};

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
