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
    use serde::{Deserialize, Deserializer, Serializer};

    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(Vec::new()),
            Some(text) => decode(&text).map_err(serde::de::Error::custom),
        }
    }

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = u32::from_be_bytes([0, b[0], b[1], b[2]]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Like Go's `StdEncoding`: padding required, CR and LF ignored.
    pub fn decode(text: &str) -> Result<Vec<u8>, String> {
        let clean: Vec<u8> = text
            .bytes()
            .filter(|b| !matches!(b, b'\r' | b'\n'))
            .collect();
        if !clean.len().is_multiple_of(4) {
            return Err(format!(
                "config: base64 length {} is not a multiple of 4",
                clean.len()
            ));
        }
        let mut out = Vec::with_capacity(clean.len() / 4 * 3);
        let quads = clean.len() / 4;
        for (q, quad) in clean.chunks(4).enumerate() {
            let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
            if pad > 2 || (pad > 0 && q + 1 != quads) {
                return Err("config: misplaced base64 padding".to_owned());
            }
            let mut n = 0u32;
            for &c in &quad[..4 - pad] {
                let v = ALPHABET
                    .iter()
                    .position(|&a| a == c)
                    .ok_or_else(|| format!("config: invalid base64 character {:?}", c as char))?;
                n = (n << 6) | v as u32;
            }
            n <<= 6 * pad as u32;
            out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
        }
        Ok(out)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn matches_known_vectors() {
            let vectors: [(&[u8], &str); 7] = [
                (b"", ""),
                (b"f", "Zg=="),
                (b"fo", "Zm8="),
                (b"foo", "Zm9v"),
                (b"foob", "Zm9vYg=="),
                (b"fooba", "Zm9vYmE="),
                (b"\xff\xfe\x00{}", "//4Ae30="),
            ];
            for (raw, text) in vectors {
                assert_eq!(encode(raw), text);
                assert_eq!(decode(text).as_deref(), Ok(raw));
            }
        }

        #[test]
        fn decode_ignores_newlines_and_rejects_garbage() {
            assert_eq!(decode("Zm9v\r\nYg==").as_deref(), Ok(&b"foob"[..]));
            for bad in ["Zm9", "Zm=v", "Zg==Zg==", "Z===", "Zm9*"] {
                assert!(decode(bad).is_err(), "{bad}");
            }
        }

        #[test]
        fn round_trips_every_length() {
            let data: Vec<u8> = (0..=255).collect();
            for len in 0..data.len() {
                assert_eq!(decode(&encode(&data[..len])).as_deref(), Ok(&data[..len]));
            }
        }
    }
}
