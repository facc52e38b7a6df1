//! `--relay-log`: the lines multus appends to its log file, copied to this process's stdout, so
//! `kubectl logs` of the node's multus pod shows every CNI call of that node. It only reads the
//! file: a CNI call never waits for it, and a stdout that blocks stops only this thread. It
//! follows the file across rotation (a new file at the path) and truncation, starting at the
//! end of what is there when it starts.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the file is looked at when nothing new came.
const POLL: Duration = Duration::from_millis(200);
/// The longest line kept whole; a longer one is passed on in pieces of this size.
const MAX_LINE: usize = 64 * 1024;

/// Follows `path` on a thread of its own, for the life of the process.
pub fn spawn(path: PathBuf) {
    std::thread::spawn(move || follow(&path, &mut std::io::stdout(), || false));
}

/// The file being read: its inode, to notice a new file at the path.
struct Open {
    file: File,
    ino: u64,
}

fn open(path: &Path, at_end: bool) -> Option<Open> {
    let mut file = File::open(path).ok()?;
    let ino = file.metadata().ok()?.ino();
    if at_end {
        file.seek(SeekFrom::End(0)).ok()?;
    }
    Some(Open { file, ino })
}

/// Copies whole lines appended to `path` to `out` until `stop()`.
pub fn follow(path: &Path, out: &mut impl Write, stop: impl Fn() -> bool) {
    let mut current = open(path, true);
    let mut line: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; MAX_LINE];
    while !stop() {
        let Some(open_file) = current.as_mut() else {
            std::thread::sleep(POLL);
            current = open(path, false);
            continue;
        };
        match open_file.file.read(&mut buf) {
            Ok(n) if n > 0 => {
                for &b in &buf[..n] {
                    line.push(b);
                    if b == b'\n' || line.len() >= MAX_LINE {
                        let _ = out.write_all(&line);
                        line.clear();
                    }
                }
                let _ = out.flush();
                continue;
            }
            _ => {}
        }
        // Nothing new in this file: has the path moved on to another, or been cut short?
        match std::fs::metadata(path) {
            Ok(meta) if meta.ino() != open_file.ino => current = open(path, false),
            Ok(meta) => {
                let read_to = open_file.file.stream_position().unwrap_or(0);
                if meta.len() < read_to {
                    let _ = open_file.file.seek(SeekFrom::Start(0));
                    line.clear();
                }
                std::thread::sleep(POLL);
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// A `Write` the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
        }

        /// Waits until the relayed text ends with `tail`.
        fn wait_for(&self, tail: &str) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.text().ends_with(tail) {
                assert!(Instant::now() < deadline, "relayed: {:?}", self.text());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open log");
        f.write_all(text.as_bytes()).expect("append");
    }

    #[test]
    fn whole_lines_are_relayed_across_rotation_and_truncation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("multus.log");
        append(&log, "before the relay started\n");
        let out = Shared::default();
        let stop = Arc::new(AtomicBool::new(false));
        let relay = {
            let (log, mut out, stop) = (log.clone(), out.clone(), stop.clone());
            std::thread::spawn(move || follow(&log, &mut out, || stop.load(Ordering::Relaxed)))
        };
        std::thread::sleep(POLL * 2);
        append(&log, "ADD one\nhalf a ");
        out.wait_for("ADD one\n");
        append(&log, "line\n");
        out.wait_for("half a line\n");
        // Rotation as multus does it: the file becomes a backup, the next call starts anew.
        std::fs::rename(&log, dir.path().join("multus.log.1")).expect("rotate");
        append(&log, "ADD after rotation\n");
        out.wait_for("ADD after rotation\n");
        std::fs::write(&log, "").expect("truncate");
        std::thread::sleep(POLL * 2);
        append(&log, "ADD after truncation\n");
        out.wait_for("ADD after truncation\n");
        // A line past the cap comes through in pieces, not as a growing buffer.
        append(&log, &format!("{}\n", "x".repeat(MAX_LINE + 10)));
        out.wait_for("xxxxxxxxxx\n");
        stop.store(true, Ordering::Relaxed);
        relay.join().expect("relay");
        let text = out.text();
        assert!(!text.contains("before the relay started"), "{text}");
        assert!(
            text.starts_with("ADD one\nhalf a line\nADD after rotation\nADD after truncation\n"),
            "{text}"
        );
    }
}
