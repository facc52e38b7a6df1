//! Fuzzing what multus reads from outside: the pod's annotations, its own config, the delegate
//! cache, the kubeconfig, API bodies (pods and NetworkAttachmentDefinitions, decoded as the
//! client decodes them and fetched from the test API server), the kubelet's device checkpoint,
//! device-info files and `CNI_ARGS`. For the corpus in tests/corpus/, its fixed mutants,
//! arbitrary bytes and randomly broken corpus files, each gives a value or an error whose CNI
//! object is under 4 KB; never a panic or a hang. Where multus writes what it reads (the
//! delegate cache, device-info files), the written file reads back the same. The pod-resources
//! protobuf decoder is fuzzed in the kubelet crate (crates/kubelet/src/pod_resources.rs).

// A test's helpers fail it by panicking, with what they were doing.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use k8s::{ClientOptions, KubeClient, NetworkAttachmentDefinition};
use kube::core::DynamicObject;
use multus::cache;
use multus::delegate::Delegate;
use multus::{config::MultusConf, Error};
use npwg::selection::{self, Selection, NETWORKS_ANNOTATION};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use testkit::fuzz::{self, check_corpus, json_mutated, junk, mutated, seeds};
use testkit::kube_api::{KubeApiServer, KubeconfigAuth};

fn corpus(target: &str) -> PathBuf {
    fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), target)
}

fn bounded(e: &Error) -> Result<(), String> {
    let e = e.to_cni();
    fuzz::bounded_error(
        &e.msg,
        &e.details,
        &serde_json::to_value(&e).expect("serialises"),
    )
}

fn text(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

/// A selection in the annotation's JSON form.
fn element(s: &Selection) -> Value {
    let mut e = json!({"name": s.name, "namespace": s.namespace, "ips": s.ips,
        "default-route": s.default_route});
    let optional = [
        ("interface", s.interface.clone().map(Value::from)),
        ("mac", s.mac.clone().map(Value::from)),
        (
            "infiniband-guid",
            s.infiniband_guid.clone().map(Value::from),
        ),
        ("portMappings", s.port_mappings.clone()),
        ("bandwidth", s.bandwidth.clone()),
        ("deviceID", s.device_id.clone().map(Value::from)),
        ("cni-args", s.cni_args.clone().map(Value::Object)),
    ];
    for (key, value) in optional {
        if let Some(v) = value {
            e[key] = v;
        }
    }
    e
}

/// The networks annotation; what parses is written in the JSON form (and, when it has only
/// names and interfaces, in the text form) and parses back the same.
fn check_annotation(input: &[u8]) -> Result<(), String> {
    let selections = match selection::parse(NETWORKS_ANNOTATION, &text(input), "default") {
        Ok(s) => s,
        Err(e) => return bounded(&Error::from(e)),
    };
    let json = Value::Array(selections.iter().map(element).collect()).to_string();
    let back = selection::parse(NETWORKS_ANNOTATION, &json, "default")
        .map_err(|e| format!("the JSON form {json} does not parse: {e}"))?;
    if back != selections {
        return Err(format!("{selections:?} came back as {back:?}"));
    }
    let plain = selections.iter().all(|s| {
        element(s).as_object().map(Map::len) == Some(4 + usize::from(s.interface.is_some()))
            && s.ips.is_empty()
            && s.default_route.is_empty()
    });
    if plain && !selections.is_empty() {
        let items: Vec<String> = selections
            .iter()
            .map(|s| match &s.interface {
                Some(i) => format!("{}/{}@{i}", s.namespace, s.name),
                None => format!("{}/{}", s.namespace, s.name),
            })
            .collect();
        let back = selection::parse(NETWORKS_ANNOTATION, &items.join(","), "default")
            .map_err(|e| format!("the text form does not parse: {e}"))?;
        if back != selections {
            return Err(format!("{selections:?} came back as {back:?}"));
        }
    }
    Ok(())
}

fn check_default_network(input: &[u8]) -> Result<(), String> {
    match selection::parse_default_network(&text(input), "kube-system") {
        Ok(s) if s.namespace.is_empty() => Err(format!("no namespace: {s:?}")),
        Ok(_) => Ok(()),
        Err(e) => bounded(&Error::from(e)),
    }
}

fn check_multus_conf(input: &[u8]) -> Result<(), String> {
    match MultusConf::parse(input) {
        Ok(conf) => {
            // Its inline delegates are the networks multus runs.
            for d in &conf.delegates {
                let bytes = serde_json::to_vec(d).expect("serialises");
                if let Err(e) = Delegate::from_config(&bytes, "delegates") {
                    bounded(&e)?;
                }
            }
            Ok(())
        }
        Err(e) => bounded(&e),
    }
}

/// A delegate cache file with these bytes: read, saved again, read back the same.
fn check_delegate_cache(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let (planted, copy) = (dir.path().join("planted"), dir.path().join("copy"));
    std::fs::create_dir(&planted).expect("creates a test directory");
    std::fs::write(cache::path(&planted, "c0ffee"), input).expect("writes a test file");
    let delegates = match cache::load(&planted, "c0ffee", "1.0.0") {
        Ok(Some(d)) => d,
        Ok(None) if input.is_empty() => return Ok(()),
        Ok(None) => return Err("a cache file read as none".into()),
        Err(e) => return bounded(&e),
    };
    cache::save(&copy, "c0ffee", delegates.iter())
        .and_then(cache::CacheSync::wait)
        .map_err(|e| format!("saving: {e}"))?;
    let back = cache::load(&copy, "c0ffee", "1.0.0")
        .map_err(|e| format!("a saved cache does not read: {e}"))?;
    if back.as_ref() != Some(&delegates) {
        return Err(format!("{delegates:?} came back as {back:?}"));
    }
    Ok(())
}

fn options(kubeconfig: &Path) -> ClientOptions {
    ClientOptions {
        kubeconfig: Some(kubeconfig.to_owned()),
        timeout: Duration::from_secs(2),
        retries: 0,
        ..ClientOptions::default()
    }
}

/// A kubeconfig with this text: a client, or an error; nothing is called.
fn check_kubeconfig(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let path = dir.path().join("multus.kubeconfig");
    std::fs::write(&path, input).expect("writes a test file");
    match KubeClient::new(&options(&path)) {
        Ok(_) => Ok(()),
        Err(e) => bounded(&Error::from(e)),
    }
}

/// A NAD as the client decodes the API's answer, then its config as multus reads it for a
/// selection.
fn check_nad_body(input: &[u8]) -> Result<(), String> {
    let Ok(nad) = serde_json::from_slice::<NetworkAttachmentDefinition>(input) else {
        return Ok(());
    };
    let selection = Selection {
        name: "net".into(),
        namespace: "default".into(),
        ..Selection::default()
    };
    match Delegate::for_selection(&nad.spec.config, &selection, Some("0000:03:02.1")) {
        Ok(_) => Ok(()),
        Err(e) => bounded(&e),
    }
}

/// A pod as the client decodes it, then its annotations as multus reads them.
fn check_pod_body(input: &[u8]) -> Result<(), String> {
    let Ok(pod) = serde_json::from_slice::<DynamicObject>(input) else {
        return Ok(());
    };
    let annotations = pod.metadata.annotations.unwrap_or_default();
    if let Some(networks) = annotations.get(NETWORKS_ANNOTATION) {
        check_annotation(networks.as_bytes())?;
    }
    if let Some(default) = annotations.get(selection::DEFAULT_NETWORK_ANNOTATION) {
        check_default_network(default.as_bytes())?;
    }
    Ok(())
}

type Api = (KubeApiServer, tempfile::TempDir, KubeClient);

/// One test API server (plain HTTP) for the whole suite, and a client of it.
fn api() -> MutexGuard<'static, Api> {
    static API: OnceLock<Mutex<Api>> = OnceLock::new();
    API.get_or_init(|| {
        let server = KubeApiServer::http().expect("starts the test server");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("kubeconfig");
        server
            .write_kubeconfig(&path, KubeconfigAuth::Token)
            .expect("writes the kubeconfig");
        let client = KubeClient::new(&options(&path)).expect("sets up the client");
        Mutex::new((server, dir, client))
    })
    .lock()
    .unwrap_or_else(PoisonError::into_inner)
}

/// `input` (a JSON object, else nothing is sent) served by the API server as a pod and as a
/// NAD, and fetched by the client: each is decoded or an error of bounded size.
fn check_served(input: &[u8]) -> Result<(), String> {
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(input) else {
        return Ok(());
    };
    let api = api();
    let (server, client) = (&api.0, &api.2);
    // The test server keeps objects by their metadata: that much stays well-formed.
    let mut metadata = match object.remove("metadata") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    metadata.insert("name".into(), json!("web"));
    metadata.insert("namespace".into(), json!("ns1"));
    object.insert("metadata".into(), Value::Object(metadata.clone()));
    server.add_pod(Value::Object(object.clone()));
    if let Err(e) = client.get_pod("ns1", "web") {
        bounded(&Error::from(e))?;
    }
    let annotations = metadata.remove("annotations").unwrap_or(json!({}));
    let spec = object.remove("spec").unwrap_or(Value::Null);
    server.add_annotated_nad("ns1", "net", annotations, spec);
    if let Err(e) = client.get_nad("ns1", "net") {
        bounded(&Error::from(e))?;
    }
    Ok(())
}

const POD_UID: &str = "7d1c3a52-0000-4000-8000-000000000001";

fn check_checkpoint(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let path = dir.path().join("kubelet_internal_checkpoint");
    std::fs::write(&path, input).expect("writes a test file");
    match kubelet::checkpoint::pod_devices(&path, POD_UID) {
        Ok(_) => Ok(()),
        Err(source) => bounded(&Error::Checkpoint {
            network: "default/sriov".into(),
            source,
        }),
    }
}

/// A device plugin's device-info file: read, copied for the attachment, read back the same.
fn check_devinfo(input: &[u8]) -> Result<(), String> {
    let dir = fuzz::scratch_dir();
    let dp = npwg::devinfo::dp_path(dir.path(), "intel.com/sriov", "0000:03:02.1");
    std::fs::create_dir_all(dp.parent().expect("has a parent directory"))
        .expect("creates a test directory");
    std::fs::write(&dp, input).expect("writes a test file");
    let info = match npwg::devinfo::load(&dp) {
        Ok(info) => info,
        Err(e) => return fuzz::short("a device-info error", &e.to_string(), 1024),
    };
    let cni = npwg::devinfo::cni_path(dir.path(), "default/sriov", "c0ffee", "net1");
    let copied = npwg::devinfo::copy(&dp, &cni).map_err(|e| e.to_string())?;
    let back = npwg::devinfo::load(&cni).map_err(|e| e.to_string())?;
    if copied != info.is_some() || (copied && back != info) {
        return Err(format!("{info:?} came back as {back:?}"));
    }
    Ok(())
}

fn check_k8s_args(raw: &str) -> Result<(), String> {
    match multus::k8s_args::K8sArgs::parse(raw) {
        Ok(args) => {
            let name = args
                .pairs
                .iter()
                .rfind(|(k, _)| k == "K8S_POD_NAME")
                .map(|(_, v)| v.clone());
            if name.unwrap_or_default() != args.name {
                return Err(format!("K8S_POD_NAME read as {:?}", args.name));
            }
            Ok(())
        }
        Err(e) => bounded(&e),
    }
}

#[test]
fn annotation_corpus() {
    check_corpus(&corpus("annotation"), check_annotation);
}

#[test]
fn default_network_corpus() {
    check_corpus(&corpus("default_network"), check_default_network);
}

#[test]
fn multus_conf_corpus() {
    check_corpus(&corpus("multus_conf"), check_multus_conf);
}

#[test]
fn delegate_cache_corpus() {
    check_corpus(&corpus("delegate_cache"), check_delegate_cache);
}

#[test]
fn kubeconfig_corpus() {
    check_corpus(&corpus("kubeconfig"), check_kubeconfig);
}

#[test]
fn nad_and_pod_body_corpus() {
    for target in ["nad", "pod"] {
        check_corpus(&corpus(target), |input| {
            check_nad_body(input)?;
            check_pod_body(input)
        });
    }
}

#[test]
fn served_objects_corpus() {
    for target in ["nad", "pod"] {
        for (_, seed) in fuzz::corpus(&corpus(target)) {
            for (what, input) in fuzz::mutants(&seed) {
                check_served(&input)
                    .map_err(|e| format!("{what}: {e}"))
                    .unwrap();
            }
        }
    }
}

#[test]
fn checkpoint_corpus() {
    check_corpus(&corpus("checkpoint"), check_checkpoint);
}

#[test]
fn devinfo_corpus() {
    check_corpus(&corpus("devinfo"), check_devinfo);
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn annotation_arbitrary(input in junk(256)) {
        check_annotation(&input).map_err(TestCaseError::fail)?;
        check_default_network(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn annotation_mutated(input in mutated(seeds(&corpus("annotation")))) {
        check_annotation(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn annotation_json_mutated(input in json_mutated(seeds(&corpus("annotation")))) {
        check_annotation(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn multus_conf_mutated(input in json_mutated(seeds(&corpus("multus_conf")))) {
        check_multus_conf(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn multus_conf_arbitrary(input in junk(256)) {
        check_multus_conf(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn delegate_cache_mutated(input in json_mutated(seeds(&corpus("delegate_cache")))) {
        check_delegate_cache(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn delegate_cache_arbitrary(input in junk(256)) {
        check_delegate_cache(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn nad_and_pod_bodies_mutated(
        input in json_mutated([seeds(&corpus("nad")), seeds(&corpus("pod"))].concat())
    ) {
        check_nad_body(&input).map_err(TestCaseError::fail)?;
        check_pod_body(&input).map_err(TestCaseError::fail)?;
        check_served(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn checkpoint_mutated(input in json_mutated(seeds(&corpus("checkpoint")))) {
        check_checkpoint(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn devinfo_mutated(input in json_mutated(seeds(&corpus("devinfo")))) {
        check_devinfo(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn k8s_args_arbitrary(raw in ".{0,200}") {
        check_k8s_args(&raw).map_err(TestCaseError::fail)?;
        check_k8s_args(&format!("K8S_POD_NAMESPACE=ns1;K8S_POD_NAME={raw}"))
            .map_err(TestCaseError::fail)?;
    }
}

proptest! {
    // A client is set up per case (a runtime, TLS settings): fewer cases.
    #![proptest_config(fuzz::config(64))]

    #[test]
    fn kubeconfig_mutated(input in mutated(seeds(&corpus("kubeconfig")))) {
        check_kubeconfig(&input).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn kubeconfig_json_mutated(input in json_mutated(seeds(&corpus("kubeconfig")))) {
        check_kubeconfig(&input).map_err(TestCaseError::fail)?;
    }
}
