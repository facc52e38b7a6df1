//! Rotation by size, as multus's `logOptions` ask.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use flate2::write::GzEncoder;
use flate2::Compression;
use serde::Deserialize;

/// `logOptions`: when the log file is rotated, and what is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogOptions {
    pub max_age: Option<u64>,
    pub max_size: Option<u64>,
    pub max_backups: Option<u64>,
    pub compress: Option<bool>,
}

/// Size-based rotation as `logOptions` asks, with lumberjack's defaults and meanings
/// (`maxSize` 100 MB, `maxBackups` 5, `maxAge` 5 days, `compress` on; a 0 means the default
/// size, every backup, any age): a file past `maxSize` becomes `<file>.1` (`<file>.1.gz` when
/// compressed), older backups move up one, those past `maxBackups` or older than `maxAge` days
/// go, in either form. Many multus processes start at once, so the work is done under a lock
/// on the log's directory and checked again there. Whatever fails is returned to be logged:
/// the log itself is never dropped for it.
/// What a rotation could not do; the log goes on regardless.
#[derive(Debug)]
pub(crate) enum RotationError {
    Lock {
        dir: PathBuf,
        path: PathBuf,
        source: std::io::Error,
    },
    MoveAside {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Backups left uncompressed, with why.
    Compress(Vec<(PathBuf, std::io::Error)>),
}

impl std::fmt::Display for RotationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RotationError::Lock { dir, path, source } => write!(
                f,
                "cannot lock {} to rotate {}: {source}",
                dir.display(),
                path.display()
            ),
            RotationError::MoveAside { path, source } => {
                write!(f, "cannot move {} aside: {source}", path.display())
            }
            RotationError::Compress(failed) => {
                for (i, (plain, source)) in failed.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}cannot compress {}: {source}", plain.display())?;
                }
                write!(f, "; kept uncompressed")
            }
        }
    }
}

pub(crate) fn rotate(path: &Path, opts: &LogOptions) -> Result<(), RotationError> {
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
        .map_err(|source| RotationError::Lock {
            dir: dir.to_owned(),
            path: path.to_owned(),
            source,
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
    fn shift(&self) -> Result<(), RotationError> {
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
        std::fs::rename(self.path, &first).map_err(|source| RotationError::MoveAside {
            path: self.path.to_owned(),
            source,
        })?;
        if !self.compress {
            return Ok(());
        }
        // Backups left uncompressed by an earlier failure get another chance.
        let mut trouble = Vec::new();
        for n in 1..=keep + 1 {
            let [plain, gz] = self.backup(n);
            if plain.exists() {
                if let Err(e) = compress(&plain, &gz) {
                    trouble.push((plain, e));
                }
            }
        }
        if trouble.is_empty() {
            Ok(())
        } else {
            Err(RotationError::Compress(trouble))
        }
    }
}

/// Writes `plain` gzip-compressed to `gz` (by way of a temporary file, so `gz` is whole or
/// absent) and removes `plain`. The exclusive lock waits for processes still appending to
/// `plain` and holds off new appends until it is gone (see [`crate::file::LogFile::append`]).
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
