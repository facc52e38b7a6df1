//! `multus lint`: catches a NetworkAttachmentDefinition that would hurt a pod or the node
//! before it is applied. It reads NAD files (and pod files, for what their networks annotation
//! asks), checks every plugin's options by asking the plugins themselves, and flags what a
//! valid config can still break. docs/lint.md describes every check.

mod network;
mod plugins;
mod pods;
pub mod policy;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::{Args, ValueEnum};
use ipnet::IpNet;
use serde_json::Value;

use k8s::NetworkAttachmentDefinition;
pub use network::Uplink;
use network::{Context, Network, Reserved};
use nodekit::documents::{self, Document};
use plugins::Plugins;
use pods::PodMeta;
pub use policy::Policy;
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
    #[command(flatten)]
    pub networks: ClusterNetworks,
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
    /// The admin's policy, as the admission webhook applies it: a policy file, or the
    /// ConfigMap that holds it (docs/admission.md). Its podCIDRs and serviceCIDRs, when
    /// given, replace --pod-cidr and --service-cidr.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

/// The cluster's networks as flags, for lint and the webhook: MicroShift's by default.
#[derive(Args, Debug, Clone)]
pub struct ClusterNetworks {
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
    let policy = match &opts.policy {
        Some(path) => match Policy::read(path) {
            Ok(policy) => policy,
            Err(e) => {
                report.add(
                    Severity::Error,
                    "policy",
                    Place {
                        file: Some(path.clone()),
                        ..Place::default()
                    },
                    e.to_string(),
                    "correct the policy: docs/admission.md lists its keys and values",
                );
                return report;
            }
        },
        None => Policy::default(),
    };
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
    let linter = Linter::new(Setting {
        pod_cidrs: opts.networks.pod_cidrs.clone(),
        service_cidrs: opts.networks.service_cidrs.clone(),
        uplink: match &opts.default_route_interface {
            Some(name) => Uplink::Given(name.clone()),
            None => Uplink::FromHost(OnceLock::new()),
        },
        dhcp_broadcast: opts.dhcp_broadcast,
        cni_bin_dir: opts.cni_bin_dir.clone(),
        namespace: opts.namespace.clone(),
        policy,
    });
    linter.check(&read.documents, &mut report);
    report
}

/// What the checks know beyond the objects: the cluster, the node and the admin's policy.
pub struct Setting {
    /// The cluster's pod networks, unless the policy names them.
    pub pod_cidrs: Vec<IpNet>,
    /// The cluster's service networks, unless the policy names them.
    pub service_cidrs: Vec<IpNet>,
    pub uplink: Uplink,
    pub dhcp_broadcast: bool,
    /// Where plugin binaries are, and `cni-plugins` when it is not beside this binary.
    pub cni_bin_dir: PathBuf,
    /// The namespace of objects that name none.
    pub namespace: String,
    pub policy: Policy,
}

/// The checks, set up once (the plugins found, the reserved space known) for any number of
/// runs: lint's one, or one per admission request.
pub struct Linter {
    ctx: Context,
    namespace: String,
    /// Why the plugins' own checks cannot run.
    plugins_missing: Option<String>,
}

impl Linter {
    pub fn new(setting: Setting) -> Linter {
        Linter::with_plugins(setting, true)
    }

    /// The policy's checks as the node applies them at a pod's ADD: no plugin is run or asked
    /// about its config, the uplink is this host's, and the cluster's networks are the
    /// policy's or `cluster_cidrs`.
    pub fn policy_only(policy: Policy, cluster_cidrs: Vec<IpNet>) -> Linter {
        let setting = Setting {
            pod_cidrs: cluster_cidrs,
            service_cidrs: Vec::new(),
            uplink: Uplink::FromHost(OnceLock::new()),
            dhcp_broadcast: false,
            cni_bin_dir: PathBuf::new(),
            namespace: String::new(),
            policy,
        };
        Linter::with_plugins(setting, false)
    }

    fn with_plugins(setting: Setting, ask_plugins: bool) -> Linter {
        let (plugins, plugins_missing) = if ask_plugins {
            match Plugins::find(&setting.cni_bin_dir) {
                Ok(plugins) => (plugins, None),
                Err(e) => (Plugins::without_builtin(&setting.cni_bin_dir), Some(e)),
            }
        } else {
            (Plugins::without_builtin(&setting.cni_bin_dir), None)
        };
        Linter {
            ctx: Context {
                reserved: reserved(&setting),
                uplink: setting.uplink,
                dhcp_broadcast: setting.dhcp_broadcast,
                plugins,
                ask_plugins,
                policy: setting.policy,
            },
            namespace: setting.namespace,
            plugins_missing,
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.ctx.policy
    }

    /// Checks one network's config, `network` naming it in the findings.
    pub fn check_config(&self, network: &str, config: &str, report: &mut Report) {
        let place = Place {
            kind: Some("NetworkAttachmentDefinition".into()),
            object: Some(network.to_owned()),
            ..Place::default()
        };
        network::check(&self.ctx, &place, network, config, report);
    }

    /// Checks NADs, and pods' networks annotations against the NADs among `docs`.
    pub fn check(&self, docs: &[Document], report: &mut Report) {
        if let Some(e) = &self.plugins_missing {
            report.add(
                Severity::Note,
                "not-checked",
                Place::default(),
                format!("{e}: no plugin's options were checked"),
                "install cni-plugins beside multus, or name the directory it is in with --cni-bin-dir",
            );
        }
        let mut networks = BTreeMap::new();
        let mut pods = Vec::new();
        for doc in docs {
            match kind_of(doc, report) {
                Some("NetworkAttachmentDefinition") => {
                    report.nads += 1;
                    if let Some((key, network)) = self.check_nad(doc, report) {
                        networks.insert(key, network);
                    }
                }
                Some(kind) => match pod_meta(doc, kind, &self.namespace) {
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
        report.pods += pods.len();
        for pod in &pods {
            pods::check(pod, &networks, &self.ctx.policy, report);
        }
    }

    fn check_nad(
        &self,
        doc: &Document,
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
            .unwrap_or_else(|| self.namespace.clone());
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
        let network = network::check(&self.ctx, &place, &name, &nad.spec.config, report)?;
        Some(((namespace, name), network))
    }
}

/// The cluster's networks (the policy's, else the setting's), the policy's denied subnets,
/// and link-local space.
fn reserved(setting: &Setting) -> Vec<Reserved> {
    let policy = &setting.policy;
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
    let pick = |from_policy: &'_ [IpNet], given: &'_ [IpNet]| {
        if from_policy.is_empty() {
            given.to_vec()
        } else {
            from_policy.to_vec()
        }
    };
    let pods = pick(&policy.pod_cidrs, &setting.pod_cidrs);
    let services = pick(&policy.service_cidrs, &setting.service_cidrs);
    let mut reserved = cluster(
        &pods,
        "the cluster's pod network",
        "--pod-cidr or the policy's podCIDRs",
    );
    reserved.extend(cluster(
        &services,
        "the cluster's service network",
        "--service-cidr or the policy's serviceCIDRs",
    ));
    reserved.extend(policy.denied_subnets.iter().map(|net| Reserved {
        net: net.trunc(),
        what: "a subnet the policy denies (deniedSubnets)",
        severity: Severity::Error,
        flag: None,
    }));
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

fn namespace_of(meta: Option<&Value>, default: &str) -> String {
    meta.and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(default)
        .to_owned()
}

/// A pod's metadata, or a workload's pod template's.
fn pod_meta<'a>(doc: &'a Document, kind: &str, default_namespace: &str) -> Option<PodMeta<'a>> {
    let meta = doc.value.get("metadata");
    let (meta_path, pod_meta) = if kind == "Pod" {
        ("metadata", meta?)
    } else {
        (
            "spec.template.metadata",
            doc.value.get("spec")?.get("template")?.get("metadata")?,
        )
    };
    let namespace = namespace_of(meta, default_namespace);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// At a pod's ADD no plugin's own checks run (an exec each, or whereabouts' in-process
    /// ones): a config only whereabouts would refuse passes, what the policy denies does not.
    #[test]
    fn the_node_applies_the_policy_without_the_plugins_checks() {
        let policy = Policy::parse("deniedSubnets: [10.77.0.0/16]", "p").unwrap();
        let linter = Linter::policy_only(policy, Vec::new());
        let mut report = Report::default();
        let refused_by_whereabouts = r#"{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1",
            "ipam": {"type": "whereabouts", "range": "10.88.0.0/24", "range_start": "not an address"}}"#;
        linter.check_config("default/wb", refused_by_whereabouts, &mut report);
        // Notes (this host's uplink) aside.
        report.findings.retain(|f| f.severity != Severity::Note);
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        let denied = r#"{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1",
            "ipam": {"type": "whereabouts", "range": "10.77.1.0/24"}}"#;
        linter.check_config("default/wb", denied, &mut report);
        report.findings.retain(|f| f.severity != Severity::Note);
        let checks: Vec<&str> = report.findings.iter().map(|f| f.check).collect();
        assert_eq!(checks, ["reserved-overlap"]);
    }
}
