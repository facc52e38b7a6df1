//! The node's path roots: the directories beneath which a network's config may name a file or a
//! directory (host-local's and tuning's `dataDir`, dhcp's `daemonSocketPath`). A network's
//! config is a tenant's. What it names is opened beneath a root one component at a time, never
//! through a symlink and never out through `..`, so a link planted in a directory a tenant can
//! write (another pod's emptyDir) cannot send a root plugin's write anywhere else.
//!
//! The roots are the node admin's: `/var/lib/cni`, `/run/cni` and `/var/run/cni`, unless the
//! file [`ROOTS_FILE`] (or the one `MULTUS_RS_PATH_ROOTS` names in the runtime's environment)
//! lists others, as `{"roots": ["/var/lib/cni", "/run/cni", "/data/cni"]}`. A root itself is
//! opened as the admin wrote it, symlinks included.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};

use crate::dir::{self, Dir};
use crate::quote::quote;
use crate::CniError;

/// Where the node admin lists the roots.
pub const ROOTS_FILE: &str = "/etc/cni/net.d/multus.d/path-roots.json";
/// The environment variable naming another roots file (the runtime's, so the admin's).
pub const ROOTS_FILE_ENV: &str = "MULTUS_RS_PATH_ROOTS";
/// The roots without a roots file: where upstream's plugins keep their state and sockets.
pub const DEFAULT_ROOTS: [&str; 3] = ["/var/lib/cni", "/run/cni", "/var/run/cni"];

/// Why a path a config names cannot be used.
#[derive(Debug)]
pub enum PathError {
    /// Not a path the config may name: outside every root, relative, with `..`, or through a
    /// symlink. The config is at fault (code 7).
    Refused { key: String, msg: String },
    /// The path is one the config may name, and opening it failed.
    Io { path: PathBuf, source: io::Error },
}

impl PathError {
    /// Whether the path (or a directory on the way to it) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, PathError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::Refused { key, msg } => write!(f, "{key}: {msg}"),
            PathError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for PathError {}

impl From<PathError> for CniError {
    fn from(e: PathError) -> CniError {
        match e {
            PathError::Refused { .. } => CniError::invalid_config(e.to_string()),
            PathError::Io { .. } => CniError::io(e.to_string()),
        }
    }
}

/// The roots, and where they were read from (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRoots {
    roots: Vec<PathBuf>,
    source: String,
}

impl PathRoots {
    /// The node's roots: those of `file` (the runtime's [`ROOTS_FILE_ENV`]) or
    /// [`ROOTS_FILE`], or [`DEFAULT_ROOTS`] when that does not exist. A roots file that cannot
    /// be read is an error naming it: the admin meant something by it.
    pub fn of_node(file: Option<&Path>) -> Result<PathRoots, CniError> {
        let file = file.unwrap_or(Path::new(ROOTS_FILE));
        match crate::input::read_file(file) {
            Ok(bytes) => PathRoots::parse(&bytes, file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(PathRoots::new(
                DEFAULT_ROOTS.iter().map(PathBuf::from).collect(),
                format!(
                    "the defaults: the node admin may list others in {}",
                    file.display()
                ),
            )),
            Err(e) => Err(CniError::io(format!(
                "the node's path roots {}: {e}",
                file.display()
            ))),
        }
    }

    /// The roots of the node a call runs on.
    pub fn for_call(args: &crate::CmdArgs) -> Result<PathRoots, CniError> {
        PathRoots::of_node(args.path_roots_file.as_deref())
    }

    /// `roots`, read from `source`.
    pub fn new(roots: Vec<PathBuf>, source: String) -> PathRoots {
        PathRoots { roots, source }
    }

    fn parse(bytes: &[u8], file: &Path) -> Result<PathRoots, CniError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RootsFile {
            roots: Vec<PathBuf>,
        }
        let bad = |msg: String| {
            CniError::invalid_config(format!("the node's path roots {}: {msg}", file.display()))
        };
        let parsed: RootsFile = crate::decode::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if let Some(root) = parsed.roots.iter().find(|r| !is_plain_absolute(r)) {
            return Err(bad(format!(
                "root {} must be an absolute path without . or ..",
                quote(&root.to_string_lossy())
            )));
        }
        Ok(PathRoots::new(
            parsed.roots,
            format!("as the node admin lists them in {}", file.display()),
        ))
    }

    /// Opens the directory `path`, which config key `key` names, beneath a root. With
    /// `create`, the directories missing on the way are made with that mode (a missing root
    /// too, as the admin's).
    pub fn dir(&self, key: &str, path: &Path, create: Option<u32>) -> Result<Dir, PathError> {
        let (root, below) = self.split(key, path)?;
        let io_error = |at: &Path, source| PathError::Io {
            path: at.to_owned(),
            source,
        };
        let mut dir = match (Dir::open(root), create) {
            (Err(e), Some(mode)) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(mode)
                    .create(root)
                    .map_err(|e| io_error(root, e))?;
                Dir::open(root).map_err(|e| io_error(root, e))?
            }
            (opened, _) => opened.map_err(|e| io_error(root, e))?,
        };
        for name in below {
            let next = match create {
                Some(mode) => dir.open_or_create_dir(&name, mode),
                None => dir.open_dir(&name),
            };
            dir = next.map_err(|e| {
                if dir::is_symlink_refusal(&e) {
                    PathError::Refused {
                        key: key.to_owned(),
                        msg: format!(
                            "{} is a symbolic link on the way to {}: a network's path never \
                             goes through one",
                            dir.join(&name).display(),
                            path.display()
                        ),
                    }
                } else {
                    io_error(&dir.join(&name), e)
                }
            })?;
        }
        Ok(dir)
    }

    /// The directory holding the file `path` names, opened beneath a root as [`Self::dir`]
    /// opens it, and the file's name in it.
    pub fn parent(
        &self,
        key: &str,
        path: &Path,
        create: Option<u32>,
    ) -> Result<(Dir, OsString), PathError> {
        let refused = |msg: String| PathError::Refused {
            key: key.to_owned(),
            msg,
        };
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(refused(format!("{} does not name a file", path.display())));
        };
        if self.split(key, path)?.1.is_empty() {
            return Err(refused(format!(
                "{} is a root of the node's paths, not a file beneath one",
                path.display()
            )));
        }
        Ok((self.dir(key, parent, create)?, name.to_owned()))
    }

    /// Connects to the unix socket `path` that config key `key` names, beneath a root. Only a
    /// socket is connected to; the one found is the one connected to, whatever is put at its
    /// path meanwhile.
    pub fn connect(&self, key: &str, path: &Path) -> Result<UnixStream, PathError> {
        let (dir, name) = self.parent(key, path, None)?;
        let io_error = |source| PathError::Io {
            path: path.to_owned(),
            source,
        };
        let found = dir.open_path(&name).map_err(|e| {
            if dir::is_symlink_refusal(&e) {
                PathError::Refused {
                    key: key.to_owned(),
                    msg: format!(
                        "{} is a symbolic link, which is never followed here",
                        path.display()
                    ),
                }
            } else {
                io_error(e)
            }
        })?;
        let meta = found.metadata().map_err(io_error)?;
        if !meta.file_type().is_socket() {
            return Err(PathError::Refused {
                key: key.to_owned(),
                msg: format!("{} is not a unix socket", path.display()),
            });
        }
        UnixStream::connect(format!("/proc/self/fd/{}", found.as_raw_fd())).map_err(io_error)
    }

    /// Fails when `path`, which config key `key` names, is not one beneath a root: what
    /// [`Self::dir`] refuses before it opens anything.
    pub fn check(&self, key: &str, path: &Path) -> Result<(), PathError> {
        self.split(key, path).map(drop)
    }

    /// The root `path` is beneath (the deepest, when roots nest) and the names below it.
    fn split<'r>(&'r self, key: &str, path: &Path) -> Result<(&'r Path, Vec<OsString>), PathError> {
        let refused = |msg: String| PathError::Refused {
            key: key.to_owned(),
            msg,
        };
        if !is_plain_absolute(path) {
            return Err(refused(format!(
                "{} must be an absolute path without . or ..",
                quote(&path.to_string_lossy())
            )));
        }
        let root = self
            .roots
            .iter()
            .filter(|root| path.starts_with(root))
            .max_by_key(|root| root.components().count())
            .ok_or_else(|| {
                refused(format!(
                    "{} is not beneath one of the node's path roots ({}; {}): a network's config \
                     may name files only there",
                    path.display(),
                    self.roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.source
                ))
            })?;
        let below = path
            .components()
            .skip(root.components().count())
            .map(|c| c.as_os_str().to_owned())
            .collect();
        Ok((root, below))
    }
}

/// Absolute, and only names after the first `/`: no `.` or `..` anywhere.
fn is_plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)))
        // `components` drops inner `.`: look at the text.
        && !path
            .to_string_lossy()
            .split('/')
            .any(|part| part == "." || part == "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(tmp: &Path) -> PathRoots {
        PathRoots::new(vec![tmp.join("root")], "the test".into())
    }

    #[test]
    fn a_path_beneath_a_root_is_opened_and_made() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        let want = tmp.path().join("root/a/b");
        let dir = r.dir("dataDir", &want, Some(0o755)).unwrap();
        dir.open_write("f", 0o600).unwrap();
        assert!(want.join("f").exists());
        r.dir("dataDir", &want, None).unwrap();
        r.dir("dataDir", &tmp.path().join("root"), None).unwrap();
        let e = r
            .dir("dataDir", &tmp.path().join("root/missing"), None)
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let (parent, name) = r.parent("daemonSocketPath", &want.join("f"), None).unwrap();
        assert_eq!(name, "f");
        assert_eq!(parent.path(), want);
    }

    #[test]
    fn a_symlink_on_the_way_is_refused_and_nothing_is_written_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        std::fs::create_dir_all(tmp.path().join("root/tenant")).unwrap();
        std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(
            tmp.path().join("elsewhere"),
            tmp.path().join("root/tenant/link"),
        )
        .unwrap();
        for create in [None, Some(0o755)] {
            let e = r
                .dir("dataDir", &tmp.path().join("root/tenant/link/net"), create)
                .unwrap_err();
            let PathError::Refused { key, msg } = &e else {
                panic!("{e}")
            };
            assert_eq!(key, "dataDir");
            assert!(msg.contains("tenant/link is a symbolic link"), "{msg}");
        }
        assert_eq!(
            std::fs::read_dir(tmp.path().join("elsewhere"))
                .unwrap()
                .count(),
            0
        );
        assert_eq!(
            CniError::from(
                r.parent("f", &tmp.path().join("root/tenant/link/x"), None)
                    .unwrap_err()
            )
            .code,
            crate::Code::InvalidConfig as u32
        );
    }

    #[test]
    fn a_socket_beneath_a_root_is_connected_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        let root = tmp.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(root.join("d.sock")).unwrap();
        r.connect("daemonSocketPath", &root.join("d.sock")).unwrap();
        assert!(listener.accept().is_ok());
        std::fs::write(root.join("file"), b"").unwrap();
        std::os::unix::fs::symlink(root.join("d.sock"), root.join("link")).unwrap();
        for (name, want) in [("file", "is not a unix socket"), ("link", "symbolic link")] {
            let e = r.connect("daemonSocketPath", &root.join(name)).unwrap_err();
            assert!(matches!(e, PathError::Refused { .. }), "{name}: {e}");
            assert!(e.to_string().contains(want), "{name}: {e}");
        }
        let outside = tmp.path().join("outside.sock");
        let _other = std::os::unix::net::UnixListener::bind(&outside).unwrap();
        let e = r.connect("daemonSocketPath", &outside).unwrap_err();
        assert!(e.to_string().contains("not beneath"), "{e}");
        assert!(r
            .connect("daemonSocketPath", &root.join("none.sock"))
            .unwrap_err()
            .is_not_found());
    }

    #[test]
    fn paths_outside_the_roots_or_climbing_out_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        std::fs::create_dir_all(tmp.path().join("root/a")).unwrap();
        let root = tmp.path().join("root");
        for bad in [
            tmp.path().join("other"),
            root.join("a/../../other"),
            root.join("./a"),
            PathBuf::from("relative/path"),
            tmp.path().join("rootx"),
        ] {
            let e = r.dir("dataDir", &bad, Some(0o755)).unwrap_err();
            assert!(
                matches!(e, PathError::Refused { .. }),
                "{}: {e}",
                bad.display()
            );
        }
        let e = r.parent("daemonSocketPath", &root, None).unwrap_err();
        assert!(e.to_string().contains("not a file beneath one"), "{e}");
        let e = r
            .dir("dataDir", &tmp.path().join("other"), None)
            .unwrap_err();
        assert!(e.to_string().contains("; the test)"), "{e}");
        assert!(!tmp.path().join("other").exists());
    }

    #[test]
    fn a_root_is_the_admins_and_may_be_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("root")).unwrap();
        let r = roots(tmp.path());
        r.dir("dataDir", &tmp.path().join("root/a"), Some(0o755))
            .unwrap();
        assert!(tmp.path().join("real/a").is_dir());
    }

    #[test]
    fn the_node_file_replaces_the_defaults_and_its_absence_keeps_them() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("roots.json");
        let missing = PathRoots::of_node(Some(&file)).unwrap();
        assert_eq!(
            missing.roots,
            DEFAULT_ROOTS.map(PathBuf::from).to_vec(),
            "{}",
            missing.source
        );
        std::fs::write(&file, r#"{"roots": ["/data/cni"]}"#).unwrap();
        let listed = PathRoots::of_node(Some(&file)).unwrap();
        assert_eq!(listed.roots, [PathBuf::from("/data/cni")]);
        assert!(listed
            .check("dataDir", Path::new("/var/lib/cni/networks"))
            .is_err());
    }

    #[test]
    fn the_roots_file_is_read_checked_and_optional() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("roots.json");
        let parsed =
            PathRoots::parse(br#"{"roots": ["/data/cni", "/var/lib/cni"]}"#, &file).unwrap();
        assert_eq!(
            parsed.roots,
            [Path::new("/data/cni"), Path::new("/var/lib/cni")]
        );
        for bad in [
            r#"{"roots": ["data"]}"#,
            r#"{"roots": ["/a/../b"]}"#,
            r#"{"root": ["/a"]}"#,
            "[]",
        ] {
            let e = PathRoots::parse(bad.as_bytes(), &file).unwrap_err();
            assert_eq!(e.code, crate::Code::InvalidConfig as u32, "{bad}");
            assert!(e.msg.contains("roots.json"), "{bad}: {}", e.msg);
        }
    }
}
