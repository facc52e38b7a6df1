//! `multus lint`: catches a NetworkAttachmentDefinition that would hurt a pod or the node
//! before it is applied. It reads NAD files (and pod files, for what their networks annotation
//! asks), checks every plugin's options by asking the plugins themselves, and flags what a
//! valid config can still break. docs/lint.md describes every check.

mod network;
mod plugins;
mod pods;
mod report;

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use ipnet::IpNet;
use serde_json::Value;

use k8s::NetworkAttachmentDefinition;
use network::{Context, Network, Reserved, Uplink};
use nodekit::documents::{self, Document};
use plugins::Plugins;
use pods::PodMeta;
pub use report::{Finding, Place, Report, Severity};

#[derive(Args, Debug, Clone)]
pub struct Options {
    /// NAD files (YAML or JSON, many documents each) or directories of them; pod files given
    /// too have their networks annotation checked against the NADs.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// How to print the findings.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// The cluster's pod network (repeat for more than one).
    #[arg(long = "pod-cidr", value_name = "CIDR", default_value = "10.42.0.0/16")]
    pub pod_cidrs: Vec<IpNet>,
    /// The cluster's service network (repeat for more than one).
    #[arg(
        long = "service-cidr",
        value_name = "CIDR",
        default_value = "10.43.0.0/16"
    )]
    pub service_cidrs: Vec<IpNet>,
    /// The node's uplink (the interface of its default route) [default: read from this host's
    /// routes].
    #[arg(long, value_name = "IFNAME")]
    pub default_route_interface: Option<String>,
    /// The dhcp daemon runs with -broadcast, so ipvlan with dhcp needs nothing more.
    #[arg(long)]
    pub dhcp_broadcast: bool,
    /// Where plugin binaries are, for the plugins that are not built in (and for cni-plugins
    /// when it is not beside this binary).
    #[arg(long, value_name = "DIR", default_value = "/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The namespace of objects that name none.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// Lints, prints the report, and returns the exit status: 0 clean, 1 warnings, 2 errors.
/// Whatever cannot be read is a finding, so lint itself never fails.
pub fn run(opts: &Options) -> ExitCode {
    let report = lint(opts);
    match opts.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        ),
    }
    ExitCode::from(report.exit_status())
}

pub fn lint(opts: &Options) -> Report {
    let mut report = Report::default();
    let read = documents::read(&opts.paths);
    for u in read.unreadable {
        let severity = if u.is_error {
            Severity::Error
        } else {
            Severity::Warning
        };
        let place = Place {
            file: Some(u.file),
            document: u.document,
            ..Place::default()
        };
        report.add(severity, u.check, place, u.problem, u.fix);
    }
    let docs = read.documents;
    let plugins = Plugins::find(&opts.cni_bin_dir).unwrap_or_else(|e| {
        report.add(
            Severity::Note,
            "not-checked",
            Place::default(),
            format!("{e}: no plugin's options were checked"),
            "install cni-plugins beside multus, or name the directory it is in with --cni-bin-dir",
        );
        Plugins::without_builtin(&opts.cni_bin_dir)
    });
    let ctx = Context {
        reserved: reserved(opts),
        uplink: match &opts.default_route_interface {
            Some(name) => Uplink::Given(name.clone()),
            None => Uplink::FromHost(OnceCell::new()),
        },
        dhcp_broadcast: opts.dhcp_broadcast,
        plugins: &plugins,
    };
    let mut networks = BTreeMap::new();
    let mut pods = Vec::new();
    for doc in &docs {
        match kind_of(doc, &mut report) {
            Some("NetworkAttachmentDefinition") => {
                report.nads += 1;
                if let Some((key, network)) = check_nad(&ctx, doc, opts, &mut report) {
                    networks.insert(key, network);
                }
            }
            Some(kind) => match pod_meta(doc, kind, opts) {
                Some(pod) => pods.push(pod),
                None => report.add(
                    Severity::Note,
                    "input",
                    Place::of(doc),
                    format!("kind {kind} is neither a NetworkAttachmentDefinition nor a pod (or pod template): ignored"),
                    "",
                ),
            },
            None => {}
        }
    }
    report.pods = pods.len();
    for pod in &pods {
        pods::check(pod, &networks, &mut report);
    }
    report
}

/// The CIDRs from the flags, and link-local space.
fn reserved(opts: &Options) -> Vec<Reserved> {
    let cluster = |nets: &[IpNet], what, flag| {
        nets.iter()
            .map(move |net| Reserved {
                net: net.trunc(),
                what,
                severity: Severity::Error,
                flag: Some(flag),
            })
            .collect::<Vec<_>>()
    };
    let mut reserved = cluster(&opts.pod_cidrs, "the cluster's pod network", "--pod-cidr");
    reserved.extend(cluster(
        &opts.service_cidrs,
        "the cluster's service network",
        "--service-cidr",
    ));
    for net in ["169.254.0.0/16", "fe80::/10"] {
        if let Ok(net) = net.parse() {
            reserved.push(Reserved {
                net,
                what: "link-local space",
                severity: Severity::Warning,
                flag: None,
            });
        }
    }
    reserved
}

/// The document's kind; a document that is not a Kubernetes object is reported.
fn kind_of<'a>(doc: &'a Document, report: &mut Report) -> Option<&'a str> {
    match doc.value.get("kind").and_then(Value::as_str) {
        Some(kind) => Some(kind),
        None => {
            report.add(
                Severity::Error,
                "input",
                Place::of(doc),
                "not a Kubernetes object: it has no \"kind\"",
                "give the document apiVersion: k8s.cni.cncf.io/v1 and kind: \
                 NetworkAttachmentDefinition, or remove it",
            );
            None
        }
    }
}

fn namespace_of(meta: Option<&Value>, opts: &Options) -> String {
    meta.and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(&opts.namespace)
        .to_owned()
}

fn check_nad(
    ctx: &Context,
    doc: &Document,
    opts: &Options,
    report: &mut Report,
) -> Option<((String, String), Network)> {
    let mut place = Place::of(doc);
    place.kind = Some("NetworkAttachmentDefinition".into());
    let nad: NetworkAttachmentDefinition = match serde_json::from_value(doc.value.clone()) {
        Ok(nad) => nad,
        Err(e) => {
            report.add(
                Severity::Error,
                "nad",
                place,
                format!("not a valid NetworkAttachmentDefinition: {e}"),
                "spec.config must be a string holding the CNI config's JSON (in YAML, a `|` \
                 block)",
            );
            return None;
        }
    };
    let namespace = nad
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| opts.namespace.clone());
    let Some(name) = nad.metadata.name.clone().filter(|n| !n.is_empty()) else {
        report.add(
            Severity::Error,
            "nad",
            place.at("metadata.name"),
            "the NetworkAttachmentDefinition has no name: pods could not refer to it",
            "set metadata.name",
        );
        return None;
    };
    place.object = Some(format!("{namespace}/{name}"));
    let network = network::check(ctx, &place, &name, &nad.spec.config, report)?;
    Some(((namespace, name), network))
}

/// A pod's metadata, or a workload's pod template's.
fn pod_meta<'a>(doc: &'a Document, kind: &str, opts: &Options) -> Option<PodMeta<'a>> {
    let meta = doc.value.get("metadata");
    let (meta_path, pod_meta) = if kind == "Pod" {
        ("metadata", meta?)
    } else {
        (
            "spec.template.metadata",
            doc.value.get("spec")?.get("template")?.get("metadata")?,
        )
    };
    let namespace = namespace_of(meta, opts);
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut place = Place::of(doc);
    place.kind = Some(kind.to_owned());
    place.object = Some(format!("{namespace}/{name}"));
    Some(PodMeta {
        place,
        meta_path,
        meta: pod_meta,
        namespace,
    })
}
