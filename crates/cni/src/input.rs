//! Bounded reads of outside input: stdin and the files a plugin or multus reads (configs,
//! caches, kubeconfigs, checkpoints). A Kubernetes object is at most about 1.5 MB, so no
//! legitimate input comes near the cap; a larger one is refused before it is held in memory.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::CniError;

/// The largest stdin or file read: 2 MiB.
pub const MAX_INPUT: u64 = 2 << 20;

/// Reads all of `reader`, refusing more than `MAX_INPUT` bytes; `what` names it in errors.
pub fn read_capped(reader: &mut dyn Read, what: &str) -> Result<Vec<u8>, CniError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CniError::io(format!("error reading {what}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT {
        return Err(too_large(what));
    }
    Ok(bytes)
}

/// Reads the file at `path` as [`read_capped`] does. It must be a regular file: what is there
/// is looked at before it is opened for reading, since opening a device can act on it (a
/// watchdog starts counting) and opening a FIFO waits for a writer, holding the call and its
/// locks.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let found = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)?;
    read_regular(found)
}

/// Reads all of the file `found` (opened with `O_PATH`, so not yet opened for reading) when it
/// is a regular file, refusing anything else and more than `MAX_INPUT` bytes.
pub fn read_regular(found: std::fs::File) -> std::io::Result<Vec<u8>> {
    if !found.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    // The file itself, through its descriptor: whatever is at its path now is not looked at.
    let mut file = std::fs::File::open(format!("/proc/self/fd/{}", found.as_raw_fd()))?;
    let mut bytes = Vec::new();
    (&mut file).take(MAX_INPUT + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB, the most read of any input",
                MAX_INPUT >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// [`read_file`] as UTF-8 text.
pub fn read_file_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_file(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn too_large(what: &str) -> CniError {
    CniError::decoding(format!(
        "{what} is larger than {} MiB, the most a CNI call reads: no network config or \
         Kubernetes object is that large",
        MAX_INPUT >> 20
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_up_to_the_cap_is_read_and_more_is_refused() {
        let at_cap = vec![b' '; usize::try_from(MAX_INPUT).unwrap()];
        assert_eq!(
            read_capped(&mut at_cap.as_slice(), "stdin").map(|b| b.len()),
            Ok(at_cap.len())
        );
        let over = vec![b' '; at_cap.len() + 1];
        let e = read_capped(&mut over.as_slice(), "stdin").unwrap_err();
        assert_eq!(e.code, crate::Code::Decoding as u32);
        assert!(e.msg.starts_with("stdin is larger than 2 MiB"), "{}", e.msg);
    }

    #[test]
    fn a_file_that_is_not_regular_is_refused_without_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `name` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        // Nobody writes to the FIFO: a blocking open would never return.
        let e = read_file(&fifo).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        // A device is not opened at all: opening one can act on it.
        for other in [tmp.path(), Path::new("/dev/null")] {
            let e = read_file(other).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file");
        }
        std::fs::write(tmp.path().join("f"), b"x").unwrap();
        assert_eq!(read_file(&tmp.path().join("f")).unwrap(), b"x");
    }
}
