//! Logging as multus's `logFile`, `logLevel` and `logToStderr` ask: lines go to stderr and/or
//! the file, never to stdout (the runtime reads the result there).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use flate2::write::GzEncoder;
use flate2::Compression;
use tracing_subscriber::filter::LevelFilter;

use crate::config::{LogLevel, LogOptions, LogSettings, MultusConf};

/// Where each line goes.
#[derive(Clone)]
struct Sinks {
    stderr: bool,
    file: Option<Arc<Mutex<LogFile>>>,
}

impl Write for Sinks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stderr {
            let _ = std::io::stderr().write_all(buf);
        }
        if let Some(file) = &self.file {
            if let Ok(mut f) = file.lock() {
                f.append(buf);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `logFile` as this process opened it.
struct LogFile {
    path: PathBuf,
    file: File,
}

impl LogFile {
    /// Opens `path` for appending, creating its directory (0755) first if it is missing, as
    /// upstream does.
    fn open(path: &Path) -> std::io::Result<LogFile> {
        let file = match open_append(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(dir)?;
                }
                open_append(path)?
            }
            other => other?,
        };
        Ok(LogFile {
            path: path.to_owned(),
            file,
        })
    }

    /// Appends a line under a shared lock: another process compressing the file this one
    /// opened (rotated meanwhile) holds it exclusively, and once the file is no longer the
    /// one at the path (renamed or removed by a rotation), the line goes to the new log
    /// instead.
    fn append(&mut self, buf: &[u8]) {
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        let moved = || {
            self.file.metadata().ok().map(id) != std::fs::symlink_metadata(&self.path).ok().map(id)
        };
        if self.file.lock_shared().is_ok() && moved() {
            if let Ok(file) = open_append(&self.path) {
                let _ = self.file.unlock();
                self.file = file;
                let _ = self.file.lock_shared();
            }
        }
        let _ = self.file.write_all(buf);
        let _ = self.file.unlock();
    }
}

/// The log may sit in a directory others can write (`/tmp`): a symlink planted at its name is
/// never followed.
fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Installs the logger for this process. A log file that cannot be opened is reported on
/// stderr (when allowed) and otherwise ignored: logging must not fail a pod.
pub fn init(conf: &MultusConf) {
    init_with(&conf.log);
}

/// The log file and its rotation, for [`maintain`].
static ROTATION: std::sync::OnceLock<(PathBuf, LogOptions)> = std::sync::OnceLock::new();

/// Rotates the log file when it is due: a long-running process (the thick daemon) calls this
/// now and then, where a process per call rotates once, at its start. The next line goes to
/// the new file.
pub fn maintain() {
    if let Some((path, options)) = ROTATION.get() {
        if let Err(trouble) = rotate(path, options) {
            tracing::warn!("log rotation: {trouble}");
        }
    }
}

/// [`init`] from the settings themselves (a daemon's, read from its own config).
pub fn init_with(settings: &LogSettings) {
    let log_options = &settings.options;
    let log_to_stderr = settings.to_stderr;
    let level = match settings.level {
        LogLevel::Panic => LevelFilter::OFF,
        LogLevel::Error => LevelFilter::WARN,
        LogLevel::Verbose => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    };
    let mut rotation_trouble = None;
    let file = settings.file.as_deref().and_then(|path| {
        rotation_trouble = rotate(path, log_options).err();
        let _ = ROTATION.set((path.to_owned(), log_options.clone()));
        match LogFile::open(path) {
            Ok(f) => Some(Arc::new(Mutex::new(f))),
            Err(e) => {
                if log_to_stderr {
                    eprintln!("multus: cannot open logFile {}: {e}", path.display());
                }
                None
            }
        }
    });
    let sinks = Sinks {
        stderr: log_to_stderr,
        file,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false)
        .with_writer(move || sinks.clone())
        .try_init();
    if let Some(trouble) = rotation_trouble {
        tracing::warn!("log rotation: {trouble}");
    }
}

/// Size-based rotation as `logOptions` asks, with lumberjack's defaults and meanings
/// (`maxSize` 100 MB, `maxBackups` 5, `maxAge` 5 days, `compress` on; a 0 means the default
/// size, every backup, any age): a file past `maxSize` becomes `<file>.1` (`<file>.1.gz` when
/// compressed), older backups move up one, those past `maxBackups` or older than `maxAge` days
/// go, in either form. Many multus processes start at once, so the work is done under a lock
/// on the log's directory and checked again there. Whatever fails is returned to be logged:
/// the log itself is never dropped for it.
fn rotate(path: &Path, opts: &LogOptions) -> Result<(), String> {
    let rotation = Rotation::new(path, opts);
    if !rotation.is_due() && rotation.expired().is_empty() {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let lock = File::open(dir)
        .and_then(|d| d.lock().map(|()| d))
        .map_err(|e| {
            format!(
                "cannot lock {} to rotate {}: {e}",
                dir.display(),
                path.display()
            )
        })?;
    for old in rotation.expired() {
        let _ = std::fs::remove_file(old);
    }
    let outcome = if rotation.is_due() {
        rotation.shift()
    } else {
        Ok(())
    };
    drop(lock);
    outcome
}

struct Rotation<'a> {
    path: &'a Path,
    max_bytes: u64,
    /// `None`: keep every backup.
    max_backups: Option<u64>,
    /// `None`: keep backups of any age.
    max_age: Option<Duration>,
    compress: bool,
}

impl Rotation<'_> {
    fn new<'a>(path: &'a Path, opts: &LogOptions) -> Rotation<'a> {
        let nonzero = |v: Option<u64>| v.filter(|v| *v > 0);
        Rotation {
            path,
            max_bytes: nonzero(opts.max_size)
                .unwrap_or(100)
                .saturating_mul(1 << 20),
            max_backups: nonzero(opts.max_backups.or(Some(5))),
            max_age: nonzero(opts.max_age.or(Some(5)))
                .map(|days| Duration::from_secs(days.saturating_mul(86_400))),
            compress: opts.compress.unwrap_or(true),
        }
    }

    fn is_due(&self) -> bool {
        std::fs::metadata(self.path).is_ok_and(|m| m.len() >= self.max_bytes)
    }

    /// Backup `n` in both forms: `<file>.<n>` and `<file>.<n>.gz`.
    fn backup(&self, n: u64) -> [PathBuf; 2] {
        let mut plain = self.path.as_os_str().to_owned();
        plain.push(format!(".{n}"));
        let mut gz = plain.clone();
        gz.push(".gz");
        [PathBuf::from(plain), PathBuf::from(gz)]
    }

    /// The highest backup number in use (backups are numbered without gaps).
    fn last_backup(&self) -> u64 {
        (1..)
            .find(|n| !self.backup(*n).iter().any(|p| p.exists()))
            .map_or(0, |n| n - 1)
    }

    fn expired(&self) -> Vec<PathBuf> {
        let Some(max_age) = self.max_age else {
            return Vec::new();
        };
        let now = SystemTime::now();
        (1..=self.last_backup())
            .flat_map(|n| self.backup(n))
            .filter(|p| {
                std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > max_age))
            })
            .collect()
    }

    /// Moves the log to backup 1 (compressing it when asked) and the backups up one.
    fn shift(&self) -> Result<(), String> {
        let last = self.last_backup();
        let keep = self.max_backups.map_or(last, |max| last.min(max - 1));
        for n in keep + 1..=last {
            for p in self.backup(n) {
                let _ = std::fs::remove_file(p);
            }
        }
        for n in (1..=keep).rev() {
            for (from, to) in self.backup(n).into_iter().zip(self.backup(n + 1)) {
                let _ = std::fs::rename(from, to);
            }
        }
        let [first, _] = self.backup(1);
        std::fs::rename(self.path, &first)
            .map_err(|e| format!("cannot move {} aside: {e}", self.path.display()))?;
        if !self.compress {
            return Ok(());
        }
        // Backups left uncompressed by an earlier failure get another chance.
        let mut trouble = Vec::new();
        for n in 1..=keep + 1 {
            let [plain, gz] = self.backup(n);
            if plain.exists() {
                if let Err(e) = compress(&plain, &gz) {
                    trouble.push(format!("cannot compress {}: {e}", plain.display()));
                }
            }
        }
        if trouble.is_empty() {
            Ok(())
        } else {
            Err(format!("{}; kept uncompressed", trouble.join("; ")))
        }
    }
}

/// Writes `plain` gzip-compressed to `gz` (by way of a temporary file, so `gz` is whole or
/// absent) and removes `plain`. The exclusive lock waits for processes still appending to
/// `plain` and holds off new appends until it is gone (see [`LogFile::append`]).
fn compress(plain: &Path, gz: &Path) -> std::io::Result<()> {
    let mut source = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(plain)?;
    source.lock()?;
    let mut tmp = gz.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    // A stale (or planted) temporary file goes first; the new one is made, never opened.
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mode = source.metadata()?.permissions().mode();
        let out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        let mut encoder = GzEncoder::new(BufWriter::new(out), Compression::default());
        std::io::copy(&mut source, &mut encoder)?;
        let out = encoder.finish()?.into_inner().map_err(|e| e.into_error())?;
        out.sync_all()?;
        std::fs::rename(&tmp, gz)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::remove_file(plain)
}
