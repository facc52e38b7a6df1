//! Support for the fuzz suites: the proptest settings every property runs with, a checked-in
//! seed corpus and deterministic mutations of it, and the bounds an error must stay within.
//!
//! Each crate keeps its corpus in `tests/corpus/<target>/`, one real input per file. A suite
//! feeds every file and a fixed set of its mutants ([`mutants`]) to the parser, then runs
//! proptest properties over arbitrary bytes and randomly mutated corpus files ([`mutated`]).
//! `PROPTEST_CASES` raises (or lowers) the number of cases of every property, and
//! `PROPTEST_RNG_SEED` picks another seed; without them a run is the same every time.

use std::collections::HashMap;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::Value;

/// The seed of every run that does not set `PROPTEST_RNG_SEED`.
const SEED: u64 = 0x6d75_6c74_7573;

/// Longer than this for one input is a hang: the test process aborts, naming the input.
const HANG: Duration = Duration::from_secs(60);

/// The largest CNI error object a parser may return, as pretty-printed JSON
/// (`cni::error::MAX_ENCODED`): what a runtime logs must not grow with the input.
pub const MAX_ERROR_JSON: usize = 4096;

/// Proptest settings: `cases` cases unless `PROPTEST_CASES` says otherwise, a fixed seed unless
/// `PROPTEST_RNG_SEED` says otherwise, and no failure files (a failing input found by a run
/// goes into the corpus instead).
pub fn config(cases: u32) -> Config {
    let env = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            env.cases
        } else {
            cases
        },
        rng_seed: match env.rng_seed {
            RngSeed::Random => RngSeed::Fixed(SEED),
            fixed => fixed,
        },
        failure_persistence: None,
        // A failure is reported in seconds, not after minutes of shrinking.
        max_shrink_iters: 2048,
        ..env
    }
}

/// A temporary directory for one input's files, in memory (/dev/shm) where there is one:
/// thousands of inputs each make and remove a directory, which on a journaled disk costs more
/// than the parsing.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let in_memory = shm
        .is_dir()
        .then(|| tempfile::tempdir_in(shm).ok())
        .flatten();
    in_memory.unwrap_or_else(|| tempfile::tempdir().expect("a temporary directory"))
}

/// The corpus of one target: every file in `dir`, in name order, with its name. Panics when
/// there is none, so that a moved directory cannot make a suite test nothing.
pub fn corpus(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("corpus {}: {e}", p.display()));
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, bytes)
        })
        .collect()
}

/// The corpus files' contents only.
pub fn seeds(dir: &Path) -> Vec<Vec<u8>> {
    corpus(dir).into_iter().map(|(_, bytes)| bytes).collect()
}

/// Feeds every corpus file in `dir`, and each of its [`mutants`], to `check`, which returns
/// `Err` when the parser's answer breaks a property. A panic, a broken property or a hang is
/// reported with the corpus file and the mutation that caused it.
pub fn check_corpus(dir: &Path, check: impl Fn(&[u8]) -> Result<(), String>) {
    let mut failures = Vec::new();
    for (name, seed) in corpus(dir) {
        for (mutation, input) in mutants(&seed) {
            let label = format!("{}/{name} ({mutation})", dir.display());
            let outcome = guarded(&label, || catch_unwind(AssertUnwindSafe(|| check(&input))));
            let problem = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(problem)) => problem,
                Err(panic) => format!("panicked: {}", panic_text(&*panic)),
            };
            failures.push(format!("{label}: {problem}\n  input: {}", show(&input)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} corpus inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// An input as a failure message shows it: text when it is short UTF-8, else hex, cut.
pub fn show(input: &[u8]) -> String {
    const MAX: usize = 300;
    let cut = &input[..input.len().min(MAX)];
    let more = if input.len() > MAX {
        format!("… ({} bytes)", input.len())
    } else {
        String::new()
    };
    match std::str::from_utf8(cut) {
        Ok(text) => format!("{text:?}{more}"),
        Err(_) => {
            let hex: String = cut.iter().map(|b| format!("{b:02x}")).collect();
            format!("hex {hex}{more}")
        }
    }
}

/// Runs `f`; if it takes longer than a minute, the process is aborted with `label` on stderr,
/// so that a hang names its input instead of stalling CI until its own timeout.
pub fn guarded<R>(label: &dyn Display, f: impl FnOnce() -> R) -> R {
    let id = std::thread::current().id();
    let entry = (label.to_string(), Instant::now());
    let previous = lock(watchdog()).insert(id, entry);
    let result = f();
    let mut watched = lock(watchdog());
    match previous {
        Some(outer) => watched.insert(id, outer),
        None => watched.remove(&id),
    };
    result
}

type Watched = Mutex<HashMap<ThreadId, (String, Instant)>>;

fn lock(m: &Watched) -> std::sync::MutexGuard<'_, HashMap<ThreadId, (String, Instant)>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The input each thread is checking, and since when; a thread looks at them once a second.
fn watchdog() -> &'static Watched {
    static SLOT: OnceLock<&'static Watched> = OnceLock::new();
    SLOT.get_or_init(|| {
        let slot: &'static Watched = Box::leak(Box::default());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let hung = lock(slot)
                .values()
                .find(|(_, since)| since.elapsed() > HANG)
                .map(|(label, _)| label.clone());
            if let Some(label) = hung {
                eprintln!("fuzz: {label} has run for over {HANG:?}: a hang");
                std::process::abort();
            }
        });
        slot
    })
}

/// Tokens that parsers of text formats treat specially, spliced into inputs.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"=",
    b";",
    b"/",
    b"@",
    b"\0",
    b"\xff",
    b"\r\n",
    b"\n- ",
    b"null",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"::ffff:10.0.0.1",
    b"0.0.0.0/0",
    b"10.42.0.100/24",
    b"\xe2\x80\xae",
];

/// A small deterministic generator (splitmix64), seeded by the input it mutates.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (which is not 0).
    fn below(&mut self, n: usize) -> usize {
        let n64 = u64::try_from(n).expect("a usize fits a u64");
        usize::try_from(self.next() % n64).expect("a number below a usize is one")
    }
}

/// The same mutants of `seed` on every run, each named by how it was made: the seed itself,
/// truncations, byte flips, duplications, deletions, and tokens spliced in.
pub fn mutants(seed: &[u8]) -> Vec<(String, Vec<u8>)> {
    let hash = seed.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut mix = Mix(hash);
    let len = seed.len();
    let mut out = vec![("as is".to_owned(), seed.to_vec())];
    for k in 0..8 {
        let at = len * k / 8;
        out.push((format!("cut at {at}"), seed[..at].to_vec()));
    }
    if len > 0 {
        out.push((format!("cut at {}", len - 1), seed[..len - 1].to_vec()));
        out.push(("first byte gone".to_owned(), seed[1..].to_vec()));
        for _ in 0..24 {
            let at = mix.below(len);
            let mut m = seed.to_vec();
            let (what, byte) = match mix.below(4) {
                0 => ("xor 0xff", m[at] ^ 0xff),
                1 => ("xor 0x01", m[at] ^ 0x01),
                2 => ("xor 0x80", m[at] ^ 0x80),
                _ => ("set 0", 0),
            };
            m[at] = byte;
            out.push((format!("byte {at} {what}"), m));
        }
        for _ in 0..6 {
            let start = mix.below(len);
            let end = (start + 1 + mix.below(len - start)).min(len);
            let mut m = seed[..end].to_vec();
            m.extend_from_slice(&seed[start..]);
            out.push((format!("bytes {start}..{end} twice"), m));
            let mut m = seed[..start].to_vec();
            m.extend_from_slice(&seed[end..]);
            out.push((format!("bytes {start}..{end} gone"), m));
        }
    }
    out.push(("twice".to_owned(), seed.repeat(2)));
    if let Ok(doc) = serde_json::from_slice::<Value>(seed) {
        out.extend(json_mutants(&doc));
    }
    for _ in 0..12 {
        let at = mix.below(len + 1);
        let token = TOKENS[mix.below(TOKENS.len())];
        let mut m = seed[..at].to_vec();
        m.extend_from_slice(token);
        m.extend_from_slice(&seed[at..]);
        out.push((format!("{} at {at}", show(token)), m));
    }
    out
}

/// Values put in place of each node of a JSON seed by [`mutants`].
fn fixed_odd_values() -> Vec<(&'static str, Value)> {
    vec![
        ("a long string", Value::from("x".repeat(5000))),
        (
            "a long string to escape",
            Value::from("\u{1b}\"".repeat(2000)),
        ),
        ("null", Value::Null),
        ("-1", Value::from(-1)),
        ("2^64-1", Value::from(u64::MAX)),
        ("an empty object", Value::Object(Default::default())),
        ("a long list", Value::Array(vec![Value::from(1); 2000])),
    ]
}

/// The nodes of a JSON seed that [`mutants`] edits one by one: enough for every key of a
/// config, few enough for a suite that runs in seconds.
const MAX_NODES: usize = 120;

/// Every string of `v` 3000 bytes longer.
fn stretch_strings(v: &mut Value) {
    match v {
        Value::String(s) => s.push_str(&"x".repeat(3000)),
        Value::Array(items) => items.iter_mut().for_each(stretch_strings),
        Value::Object(map) => map.values_mut().for_each(stretch_strings),
        _ => {}
    }
}

/// Each node of `doc` (up to [`MAX_NODES`]) replaced by each of [`fixed_odd_values`], each key made
/// long, and, with every string made long, each node dropped: an error that one node causes
/// must not quote another whole.
fn json_mutants(doc: &Value) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut long = doc.clone();
    stretch_strings(&mut long);
    for node in 0..nodes(&long).min(MAX_NODES) {
        let mut m = long.clone();
        edit_node(&mut m, &mut node.clone(), &JsonEdit::Drop);
        if let Ok(bytes) = serde_json::to_vec(&m) {
            out.push((
                format!("every string long, JSON node {node} dropped"),
                bytes,
            ));
        }
    }
    let long_key = JsonEdit::Rename("k".repeat(3000));
    for node in 0..nodes(doc).min(MAX_NODES) {
        let edits = fixed_odd_values()
            .into_iter()
            .map(|(what, v)| (what, JsonEdit::Replace(v)))
            .chain([
                ("a long key", long_key.clone()),
                ("dropped", JsonEdit::Drop),
            ]);
        for (what, edit) in edits {
            let mut m = doc.clone();
            let mut target = node;
            edit_node(&mut m, &mut target, &edit);
            if m == *doc {
                continue;
            }
            if let Ok(bytes) = serde_json::to_vec(&m) {
                out.push((format!("JSON node {node}: {what}"), bytes));
            }
        }
    }
    out
}

/// One edit of a random mutation: where (a fraction of the length) and what.
#[derive(Clone, Debug)]
enum Edit {
    Flip(u16, u8),
    Cut(u16),
    Splice(u16, usize),
    Repeat(u16, u16),
    Remove(u16, u16),
    /// The byte at a place repeated: a long string, number or run of spaces.
    Stretch(u16, u16),
}

fn position(fraction: u16, len: usize) -> usize {
    len * usize::from(fraction) / usize::from(u16::MAX)
}

fn apply(edit: &Edit, input: &mut Vec<u8>) {
    let len = input.len();
    match *edit {
        Edit::Flip(at, mask) if len > 0 => {
            let at = position(at, len - 1);
            input[at] ^= mask.max(1);
        }
        Edit::Cut(at) => input.truncate(position(at, len)),
        Edit::Splice(at, token) => {
            let at = position(at, len);
            let token = TOKENS[token % TOKENS.len()];
            input.splice(at..at, token.iter().copied());
        }
        Edit::Repeat(a, b) | Edit::Remove(a, b) => {
            let (a, b) = (position(a, len), position(b, len));
            let (start, end) = (a.min(b), a.max(b));
            if matches!(edit, Edit::Repeat(..)) {
                let chunk = input[start..end].to_vec();
                input.splice(end..end, chunk);
            } else {
                input.drain(start..end);
            }
        }
        Edit::Stretch(at, count) if len > 0 => {
            let at = position(at, len - 1);
            let run = vec![input[at]; usize::from(count)];
            input.splice(at..at, run);
        }
        Edit::Flip(..) | Edit::Stretch(..) => {}
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<u16>(), any::<u8>()).prop_map(|(a, m)| Edit::Flip(a, m)),
        1 => any::<u16>().prop_map(Edit::Cut),
        3 => (any::<u16>(), any::<usize>()).prop_map(|(a, t)| Edit::Splice(a, t)),
        1 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Edit::Repeat(a, b)),
        1 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Edit::Remove(a, b)),
        1 => (any::<u16>(), 0..10_000u16).prop_map(|(a, n)| Edit::Stretch(a, n)),
    ]
}

/// Structured but broken inputs: one of `seeds`, with one to eight random edits.
pub fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "no seeds to mutate");
    (0..seeds.len(), proptest::collection::vec(edit(), 1..8)).prop_map(move |(i, edits)| {
        let mut input = seeds[i].clone();
        for e in &edits {
            apply(e, &mut input);
        }
        input
    })
}

/// A JSON value that is likely to be wrong where it lands: of another type, out of range,
/// long, deep, or a near miss of a valid value.
fn odd_value() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        Just(String::new()),
        Just("10.42.0.100/24".to_owned()),
        Just("10.42.0.100".to_owned()),
        Just("::ffff:10.1.2.3".to_owned()),
        Just("fd00::/129".to_owned()),
        Just("0.0.0.0/0".to_owned()),
        Just("../../etc/passwd".to_owned()),
        Just("eth0".to_owned()),
        Just("x\u{0}\n\u{1b}[31m\u{202e}".to_owned()),
        ".{0,40}",
        (any::<char>(), 1..20_000usize).prop_map(|(c, n)| c.to_string().repeat(n)),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(-1i64),
            Just(0),
            Just(i64::MIN),
            Just(i64::MAX),
            any::<i64>()
        ]
        .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(1e300)),
        Just(Value::from(0.5)),
        text.prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            proptest::collection::btree_map(".{0,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        8 => value,
        // Deeper than any config, but within serde_json's limit of 128.
        1 => (1..120usize).prop_map(|depth| {
            (0..depth).fold(Value::from(1), |v, _| Value::Array(vec![v]))
        }),
    ]
}

/// How a JSON node is changed.
#[derive(Clone, Debug)]
enum JsonEdit {
    Replace(Value),
    /// An object's key renamed (to `Value`'s text, when a string), or the node put in a list.
    Rename(String),
    Wrap,
    /// The node dropped from its object or list.
    Drop,
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    prop_oneof![
        6 => odd_value().prop_map(JsonEdit::Replace),
        1 => prop_oneof![".{0,12}", "x{64,300}"].prop_map(JsonEdit::Rename),
        1 => Just(JsonEdit::Wrap),
        1 => Just(JsonEdit::Drop),
    ]
}

/// The number of nodes in `v`, itself included.
fn nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(nodes).sum(),
        Value::Object(map) => map.values().map(nodes).sum(),
        _ => 0,
    }
}

/// Applies `edit` to node `target` (in pre-order) under `v`; `Drop` and `Rename` act on the
/// node's place in its parent. Returns whether it was found.
fn edit_node(v: &mut Value, target: &mut usize, edit: &JsonEdit) -> bool {
    if *target == 0 {
        match edit {
            JsonEdit::Replace(new) => *v = new.clone(),
            JsonEdit::Wrap => *v = Value::Array(vec![v.take()]),
            // The root has no parent: nothing to drop or rename.
            JsonEdit::Drop | JsonEdit::Rename(_) => {}
        }
        return true;
    }
    *target -= 1;
    match v {
        Value::Array(items) => {
            for i in 0..items.len() {
                if *target == 0 && matches!(edit, JsonEdit::Drop) {
                    items.remove(i);
                    return true;
                }
                if edit_node(&mut items[i], target, edit) {
                    return true;
                }
            }
            false
        }
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                match edit {
                    JsonEdit::Drop if *target == 0 => {
                        map.remove(&key);
                        return true;
                    }
                    JsonEdit::Rename(name) if *target == 0 => {
                        if let Some(value) = map.remove(&key) {
                            map.insert(name.clone(), value);
                        }
                        return true;
                    }
                    _ => {}
                }
                if let Some(child) = map.get_mut(&key) {
                    if edit_node(child, target, edit) {
                        return true;
                    }
                }
            }
            false
        }
        _ => false,
    }
}

/// Valid JSON that is wrong in one to four places: one of `seeds` (each a JSON document;
/// others are used as they are), with nodes replaced by odd values, renamed, wrapped in a list
/// or dropped.
pub fn json_mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "no seeds to mutate");
    let docs: Vec<Option<Value>> = seeds
        .iter()
        .map(|s| serde_json::from_slice(s).ok())
        .collect();
    (
        0..seeds.len(),
        proptest::collection::vec((any::<usize>(), json_edit()), 1..4),
    )
        .prop_map(move |(i, edits)| {
            let Some(mut doc) = docs[i].clone() else {
                return seeds[i].clone();
            };
            for (at, edit) in &edits {
                let mut target = at % nodes(&doc);
                edit_node(&mut doc, &mut target, edit);
            }
            serde_json::to_vec(&doc).unwrap_or_default()
        })
}

/// Arbitrary bytes, or arbitrary text (which gets further into text parsers), up to `max` long.
pub fn junk(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..max),
        proptest::collection::vec(any::<char>(), 0..max)
            .prop_map(|c| c.into_iter().collect::<String>().into_bytes()),
    ]
}

/// `Err` when a message built from outside input is too long for a log line: over `max`
/// bytes.
pub fn short(what: &str, message: &str, max: usize) -> Result<(), String> {
    if message.len() > max {
        return Err(format!(
            "{what} of {} bytes (at most {max}): {}",
            message.len(),
            show(message.as_bytes())
        ));
    }
    Ok(())
}

/// `Err` when `message` holds a raw control character or one that hides itself (a
/// bidirectional override, a zero-width space): quoted input is escaped, so that it cannot
/// break or forge a log line.
pub fn escaped(what: &str, message: &str) -> Result<(), String> {
    let hidden = |c: char| matches!(c as u32, 0x061c | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2069 | 0xfeff);
    match message.chars().find(|&c| c.is_control() || hidden(c)) {
        Some(c) => Err(format!(
            "{what} holds the raw character {c:?}: {}",
            show(message.as_bytes())
        )),
        None => Ok(()),
    }
}

/// A crate's seed corpus for `target`: `<manifest_dir>/tests/corpus/<target>`.
pub fn corpus_dir(manifest_dir: &str, target: &str) -> std::path::PathBuf {
    std::path::Path::new(manifest_dir)
        .join("tests/corpus")
        .join(target)
}

/// `Err` unless a CNI error object (`object`, with its `msg` and `details`) is fit for a log
/// line, an event and the runtime's log: escaped, and under [`MAX_ERROR_JSON`] bytes.
pub fn bounded_error(msg: &str, details: &str, object: &serde_json::Value) -> Result<(), String> {
    escaped("an error message", msg)?;
    escaped("an error's details", details)?;
    bounded_error_json(&serde_json::to_vec_pretty(object).unwrap_or_default())
}

/// `Err` when the JSON of a CNI error object is [`MAX_ERROR_JSON`] bytes or more.
pub fn bounded_error_json(json: &[u8]) -> Result<(), String> {
    if json.len() >= MAX_ERROR_JSON {
        return Err(format!(
            "an error object of {} bytes (under {MAX_ERROR_JSON} expected): {}",
            json.len(),
            show(json)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_are_the_same_every_time_and_differ_from_the_seed() {
        let seed = br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#;
        let a = mutants(seed);
        assert_eq!(a, mutants(seed));
        assert!(a.len() > 50, "{}", a.len());
        assert!(a.iter().skip(1).all(|(_, m)| m != seed));
        // An empty seed still gets spliced tokens.
        assert!(mutants(b"").len() > 5);
    }

    #[test]
    fn edits_stay_in_bounds() {
        let mut runner = proptest::test_runner::TestRunner::new(config(256));
        let strategy = mutated(vec![Vec::new(), b"ab".to_vec(), vec![7; 300]]);
        runner
            .run(&strategy, |input| {
                prop_assert!(input.len() < 1 << 20);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn json_edits_keep_json() {
        let mut runner = proptest::test_runner::TestRunner::new(config(256));
        let seeds = vec![
            br#"{"a":[1,{"b":"c"}],"d":null}"#.to_vec(),
            b"[]".to_vec(),
            b"not json".to_vec(),
        ];
        runner
            .run(&json_mutated(seeds), |input| {
                if input != b"not json" {
                    prop_assert!(serde_json::from_slice::<Value>(&input).is_ok());
                }
                Ok(())
            })
            .unwrap();
    }
}
