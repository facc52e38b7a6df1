//! Fuzzing the protocol's parsers: configs and config lists, results of every version,
//! `CNI_ARGS`, the `CNI_*` environment, the libcni result cache and versions. For the corpus
//! in tests/corpus/, its fixed mutants, arbitrary bytes and randomly broken corpus files, each
//! parser returns a value or a CNI error of bounded size; never a panic or a hang. Where there
//! is a writer too, what it writes parses back to the same value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cni::args::CniArgs;
use cni::network::Network;
use cni::{cache, CmdArgs, CniError, CniResult, NetConf, NetConfList, Version};
use proptest::prelude::*;
use testkit::fuzz::{self, check_corpus, json_mutated, junk, mutated, seeds};

fn corpus(target: &str) -> PathBuf {
    fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), target)
}

/// A parser's error: small enough for a log line, an event and the runtime's log.
fn bounded(e: &CniError) -> Result<(), String> {
    fuzz::bounded_error(
        &e.msg,
        &e.details,
        &serde_json::to_value(e).expect("an error encodes"),
    )
}

fn text(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

/// Configs: the generic readers, `NetConf`, `NetConfList` and `Network`. A list that parses
/// is written and parsed again to the same list, and so is a plugin config.
fn check_config(input: &[u8]) -> Result<(), String> {
    if let Err(e) = cni::decode::read_any(input) {
        fuzz::short("a decode error", &e.to_string(), 1024)?;
    }
    if let Err(e) = cni::decode::read_object(input) {
        bounded(&CniError::from(e))?;
    }
    match cni::config::parse_plugin_config::<NetConf>(input) {
        Ok(conf) => {
            let again: NetConf = cni::config::parse_plugin_config(
                &serde_json::to_vec(&conf).expect("a parsed config encodes"),
            )
            .map_err(|e| format!("a written NetConf does not parse: {e}"))?;
            if again != conf {
                return Err(format!(
                    "NetConf changed on a round trip: {conf:?} {again:?}"
                ));
            }
            if let Err(e) = conf.version() {
                bounded(&e)?;
            }
        }
        Err(e) => bounded(&e)?,
    }
    match NetConfList::parse(input) {
        Ok(list) => {
            let again =
                NetConfList::parse(&serde_json::to_vec(&list).expect("a parsed list encodes"))
                    .map_err(|e| format!("a written list does not parse: {e}"))?;
            if again != list {
                return Err(format!("list changed on a round trip: {list:?} {again:?}"));
            }
            if let Err(e) = list.effective_version() {
                bounded(&e)?;
            }
        }
        Err(e) => bounded(&e)?,
    }
    match Network::parse(input) {
        Ok(net) => {
            if net.plugins().is_empty() || net.bytes() != input {
                return Err("a network without plugins, or not its own bytes".into());
            }
        }
        Err(e) => bounded(&e)?,
    }
    Ok(())
}

/// Results: any version read, written in every version, read back to the same JSON.
fn check_result(input: &[u8]) -> Result<(), String> {
    let result = match CniResult::from_slice(input) {
        Ok(r) => r,
        Err(e) => return bounded(&e),
    };
    for v in Version::ALL {
        let first = match result.to_value(v) {
            Ok(json) => json,
            Err(e) => {
                bounded(&e)?;
                continue;
            }
        };
        let back = CniResult::from_value(&first)
            .map_err(|e| format!("{v}: a written result does not parse: {e}"))?;
        let second = back.to_value(v).map_err(|e| e.to_string())?;
        if second != first {
            return Err(format!("{v}: {first} came back as {second}"));
        }
    }
    Ok(())
}

/// `CNI_ARGS`: pairs that parse are joined and split again to the same pairs.
fn check_args(raw: &str) -> Result<(), String> {
    let args = match CniArgs::parse(raw) {
        Ok(args) => args,
        Err(e) => return bounded(&e),
    };
    let joined: Vec<String> = args
        .pairs()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let again = CniArgs::parse(&joined.join(";")).map_err(|e| e.to_string())?;
    if again != args {
        return Err(format!("{args:?} came back as {again:?}"));
    }
    for e in [
        args.ignore_unknown().err(),
        args.check_known(&["IP", "MAC"]).err(),
    ]
    .into_iter()
    .flatten()
    {
        bounded(&e)?;
    }
    Ok(())
}

/// The environment as `VAR=value` lines.
fn check_env(input: &[u8]) -> Result<(), String> {
    let vars: HashMap<String, String> = text(input)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    match CmdArgs::from_env(|k| vars.get(k).cloned()) {
        Ok(args) => {
            let id = vars.get("CNI_CONTAINERID").cloned().unwrap_or_default();
            if args.container_id != id || !args.path.iter().all(|p| !p.as_os_str().is_empty()) {
                return Err(format!("read as {args:?}"));
            }
        }
        Err(e) => bounded(&e)?,
    }
    for value in vars.values() {
        for e in [
            cni::env::validate_container_id(value).err(),
            cni::env::validate_ifname(value).err(),
        ]
        .into_iter()
        .flatten()
        {
            bounded(&e)?;
        }
    }
    Ok(())
}

/// A result cache file with these bytes: read, written back, read again to the same entry.
fn check_cache(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let (planted, copy) = (dir.path().join("planted"), dir.path().join("copy"));
    let results = planted.join("results");
    std::fs::create_dir_all(&results).expect("create the results dir");
    std::fs::write(results.join("net-c0ffee-eth0"), input).expect("write the cache file");
    read_write_read(&planted, &copy, input)
}

fn read_write_read(planted: &Path, copy: &Path, input: &[u8]) -> Result<(), String> {
    let listed = cache::list(planted).map_err(|e| e.to_string())?;
    let read = cache::read(planted, "net", "c0ffee", "eth0");
    match (&read, listed.as_slice()) {
        (Ok(Some(a)), [Ok(b)]) if a == b => {}
        (Ok(None), [_]) if input.is_empty() => {}
        (Err(e), [Err(f)]) if e == f => {}
        other => return Err(format!("read and list disagree: {other:?}")),
    }
    let attachment = match read {
        Ok(Some(a)) => a,
        Ok(None) => return Ok(()),
        Err(e) => return bounded(&e),
    };
    // Names a file cannot have (too long), or a result libcni could not read: refused, with
    // the path it could not write.
    if cache::write(copy, &attachment).is_err() {
        return Ok(());
    }
    let back = cache::read(
        copy,
        &attachment.network_name,
        &attachment.container_id,
        &attachment.ifname,
    )
    .map_err(|e| format!("a written cache file does not read: {e}"))?;
    if back.as_ref() != Some(&attachment) {
        return Err(format!("{attachment:?} came back as {back:?}"));
    }
    Ok(())
}

fn check_version(input: &[u8]) -> Result<(), String> {
    let s = text(input);
    match Version::from_config(&s) {
        Ok(v) if s.is_empty() => (v == Version::V0_1_0)
            .then_some(())
            .ok_or_else(|| format!("empty read as {v}")),
        Ok(v) => (v.as_str() == s && s.parse::<Version>() == Ok(v))
            .then_some(())
            .ok_or_else(|| format!("{s:?} read as {v}")),
        Err(e) => bounded(&e),
    }
}

#[test]
fn config_corpus() {
    check_corpus(&corpus("config"), check_config);
}

#[test]
fn result_corpus() {
    check_corpus(&corpus("result"), check_result);
}

#[test]
fn cni_args_corpus() {
    check_corpus(&corpus("cni_args"), |input| check_args(&text(input)));
}

#[test]
fn env_corpus() {
    check_corpus(&corpus("env"), check_env);
}

#[test]
fn cache_corpus() {
    check_corpus(&corpus("cache"), check_cache);
}

#[test]
fn version_corpus() {
    check_corpus(&corpus("version"), check_version);
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn config_arbitrary(input in junk(512)) {
        check_config(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn config_mutated(input in mutated(seeds(&corpus("config")))) {
        check_config(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn config_json_mutated(input in json_mutated(seeds(&corpus("config")))) {
        check_config(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn result_arbitrary(input in junk(512)) {
        check_result(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn result_json_mutated(input in json_mutated(seeds(&corpus("result")))) {
        check_result(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cni_args_arbitrary(raw in ".{0,200}") {
        check_args(&raw).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cni_args_mutated(input in mutated(seeds(&corpus("cni_args")))) {
        check_args(&text(&input)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cni_args_pairs_round_trip(
        pairs in proptest::collection::vec(("[^;=]{0,12}", "[^;=]{0,12}"), 1..8)
    ) {
        let raw: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let args = CniArgs::parse(&raw.join(";")).unwrap();
        prop_assert_eq!(args.pairs(), pairs.as_slice());
    }

    #[test]
    fn env_mutated(input in mutated(seeds(&corpus("env")))) {
        check_env(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cache_mutated(input in mutated(seeds(&corpus("cache")))) {
        check_cache(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cache_json_mutated(input in json_mutated(seeds(&corpus("cache")))) {
        check_cache(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn version_arbitrary(input in junk(16)) {
        check_version(&input).map_err(TestCaseError::fail)?;
    }
}
