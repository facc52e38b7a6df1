//! The libcni result cache: one JSON file per attachment at
//! `<cache dir>/results/<network>-<containerID>-<ifname>`, in the format libcni writes, so either
//! implementation can read what the other wrote.
//!
//! Differences from libcni, on purpose: files are replaced atomically (libcni writes them in
//! place, so a crash can leave a torn file), and a file that cannot be read is an error naming
//! it rather than something skipped without a word.

use std::ffi::OsStr;
use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::CniError;

/// Where libcni keeps its cache unless told otherwise.
pub const DEFAULT_DIR: &str = "/var/lib/cni";

/// The `kind` of every file libcni has written since v0.8.
const KIND: &str = "cniCacheV1";

/// What the runtime knew about one attachment when ADD succeeded.
///
/// Field order and names follow libcni's `cachedInfo` struct, which is what the file holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedAttachment {
    #[serde(rename = "containerId", default)]
    pub container_id: String,
    /// The exact config bytes that ADD got; base64 in the file, as Go encodes `[]byte`.
    #[serde(default, with = "base64_bytes")]
    pub config: Vec<u8>,
    #[serde(rename = "ifName", default)]
    pub ifname: String,
    #[serde(default)]
    pub network_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub netns: String,
    /// `CNI_ARGS` as pairs (`[["K","V"],...]` in the file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cni_args: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub capability_args: Map<String, Value>,
    /// The result ADD returned, in its own version's JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// The file: `kind` first, then the attachment.
#[derive(Serialize, Deserialize)]
struct CacheFile<A> {
    #[serde(default)]
    kind: String,
    #[serde(flatten)]
    attachment: A,
}

/// The file for one attachment. The names are checked with the rules libcni applies before it
/// runs a plugin, so nothing can point outside `results/`.
pub fn file_path(
    cache_dir: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<PathBuf, CniError> {
    crate::config::validate_network_name(network)?;
    crate::env::validate_container_id(container_id)?;
    crate::env::validate_ifname(ifname)?;
    Ok(results_dir(cache_dir).join(format!("{network}-{container_id}-{ifname}")))
}

fn results_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("results")
}

/// Writes the attachment's file atomically: a private temp file in the same directory, renamed
/// over the old one. It is not synced to disk (neither is libcni's): a machine crash that loses
/// it only costs DEL its prevResult, and the interface is gone with the crash anyway.
/// Directories are created 0700 and the file 0600, as libcni does.
pub fn write(cache_dir: &Path, attachment: &CachedAttachment) -> Result<(), CniError> {
    let path = file_path(
        cache_dir,
        &attachment.network_name,
        &attachment.container_id,
        &attachment.ifname,
    )?;
    if attachment.result.as_ref().is_some_and(|r| !r.is_object()) {
        return Err(CniError::internal(
            "a cached result must be a JSON object: libcni could not read it otherwise",
        ));
    }
    let bytes = serde_json::to_vec(&CacheFile {
        kind: KIND.to_owned(),
        attachment,
    })
    .map_err(|e| CniError::internal(format!("cannot encode cache entry: {e}")))?;

    let dir = results_dir(cache_dir);
    let io_err = |what: &str, p: &Path, e: std::io::Error| {
        CniError::io(format!("cannot {what} {}: {e}", p.display()))
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io_err("create", &dir, e))?;
    crate::atomic_file::place(&path, &bytes, 0o600)
        .map(drop)
        .map_err(|e| io_err("write", &path, e))
}

/// Reads one attachment's file; `None` when there is none, or when it is empty: written but
/// lost to a machine crash before it reached the disk.
pub fn read(
    cache_dir: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<Option<CachedAttachment>, CniError> {
    let path = file_path(cache_dir, network, container_id, ifname)?;
    match crate::input::read_file(&path) {
        Ok(bytes) if bytes.is_empty() => Ok(None),
        Ok(bytes) => parse(&path, &bytes).map(Some),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CniError::io(format!("cannot read {}: {e}", path.display()))),
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<CachedAttachment, CniError> {
    let corrupt = |why: String| {
        CniError::decoding(format!("corrupt CNI cache file {}: {why}", path.display()))
    };
    if bytes.is_empty() {
        return Err(corrupt(
            "empty: written, but lost to a machine crash before it reached the disk".to_owned(),
        ));
    }
    // serde_json quotes a misplaced string whole: cut it.
    let file: CacheFile<CachedAttachment> = serde_json::from_slice(bytes)
        .map_err(|e| corrupt(crate::quote::shorten(&e.to_string())))?;
    if file.kind != KIND {
        return Err(corrupt(format!(
            "kind is {}, expected {KIND:?}",
            crate::quote::quote(&file.kind)
        )));
    }
    let a = file.attachment;
    if a.network_name.is_empty() || a.container_id.is_empty() || a.ifname.is_empty() {
        return Err(corrupt(
            "networkName, containerId and ifName must all be set".to_owned(),
        ));
    }
    Ok(a)
}

/// Removes one attachment's file; removing one that is not there succeeds.
pub fn remove(
    cache_dir: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<(), CniError> {
    let path = file_path(cache_dir, network, container_id, ifname)?;
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(CniError::io(format!(
            "cannot remove {}: {e}",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Removes the temp files that [`write`] calls killed mid-write left for the attachments of
/// `container_id`, and returns their paths. The caller holds the container: no ADD of it runs.
pub fn remove_temp_files(cache_dir: &Path, container_id: &str) -> Result<Vec<PathBuf>, CniError> {
    let dir = results_dir(cache_dir);
    crate::atomic_file::remove_temp_files(&dir, |file| is_of_container(file, container_id)).map_err(
        |e| {
            CniError::io(format!(
                "cannot remove temporary files in {}: {e}",
                dir.display()
            ))
        },
    )
}

/// Whether the file name `<network>-<containerID>-<ifname>` can be `container_id`'s. Network
/// and interface names may hold `-` too, so every place the ID could be is tried.
fn is_of_container(file: &OsStr, container_id: &str) -> bool {
    let Some(file) = file.to_str() else {
        return false;
    };
    let needle = format!("-{container_id}-");
    let mut from = 0;
    while let Some(found) = file[from..].find(&needle) {
        let at = from + found;
        let (network, ifname) = (&file[..at], &file[at + needle.len()..]);
        if crate::config::validate_network_name(network).is_ok()
            && crate::env::validate_ifname(ifname).is_ok()
        {
            return true;
        }
        // Past the `-` just found, always a character boundary.
        from = at + 1;
    }
    false
}

/// Every cached attachment, in file name order (for GC). The outer error is an unreadable
/// directory; each file that cannot be read is its own error, so one bad file neither stops
/// nor silently shrinks a sweep.
pub fn list(cache_dir: &Path) -> Result<Vec<Result<CachedAttachment, CniError>>, CniError> {
    let dir = results_dir(cache_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CniError::io(format!("cannot list {}: {e}", dir.display()))),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| CniError::io(format!("cannot list {}: {e}", dir.display())))?;
        let is_temp = entry.file_name().as_encoded_bytes().starts_with(b".");
        if !is_temp && entry.file_type().is_ok_and(|t| t.is_file()) {
            paths.push(entry.path());
        }
    }
    paths.sort();
    Ok(paths
        .iter()
        .map(|p| {
            crate::input::read_file(p)
                .map_err(|e| CniError::io(format!("cannot read {}: {e}", p.display())))
                .and_then(|bytes| parse(p, &bytes))
        })
        .collect())
}

/// Go's encoding of `[]byte` in JSON (standard base64 with padding; `null` is empty), for
/// `#[serde(with = ...)]` wherever a file written by Go holds bytes.
pub mod base64_bytes {
    use base64::alphabet::STANDARD;
    use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
    use base64::engine::DecodePaddingMode;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Go's `StdEncoding`: padding written and required, and (not being strict) the unused bits
    /// of the last character ignored.
    const GO_STD: GeneralPurpose = GeneralPurpose::new(
        &STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
            .with_decode_allow_trailing_bits(true),
    );

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&GO_STD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(Vec::new());
        };
        // Go's decoder skips CR and LF wherever they are.
        let clean: Vec<u8> = text
            .bytes()
            .filter(|b| !matches!(b, b'\r' | b'\n'))
            .collect();
        GO_STD
            .decode(clean)
            .map_err(|e| serde::de::Error::custom(format!("config: invalid base64: {e}")))
    }
}
