//! What `multus lint` found, and its two output forms: text for people, JSON for tools.

use std::fmt::Write as _;
use std::path::PathBuf;

use nodekit::documents::Document;
use serde::Serialize;

/// How bad a finding is. The exit status is that of the worst one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// What was found, and is as it should be (`multus doctor` says what it saw).
    #[serde(rename = "ok")]
    Info,
    /// Something lint could not check (it says why); not a pass.
    Note,
    /// Works, but very likely not what was meant, or works only with node settings lint
    /// cannot see.
    Warning,
    /// The NAD will fail, or will break the pod's or the node's networking.
    Error,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "ok",
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Where a finding is: the file, the YAML document in it (from 1), the object, and the key.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Place {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<usize>,
    /// `NetworkAttachmentDefinition`, `Pod`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `namespace/name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// The offending key: `spec.config.plugins[0].ipam.ranges[0][0].subnet`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
}

impl Place {
    /// The file and document an object came from.
    pub fn of(doc: &Document) -> Place {
        Place {
            file: Some(doc.file.clone()),
            document: Some(doc.index),
            ..Place::default()
        }
    }
}

impl Place {
    /// The same object, another key.
    pub fn at(&self, path: impl Into<String>) -> Place {
        Place {
            path: path.into(),
            ..self.clone()
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// A stable name for the check, for tools and for docs/lint.md.
    pub check: &'static str,
    #[serde(flatten)]
    pub place: Place,
    pub problem: String,
    /// What to change; empty for a note that needs nothing done.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

/// Everything one run found.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// NetworkAttachmentDefinitions read.
    pub nads: usize,
    /// Pods (and pod templates) read.
    pub pods: usize,
}

impl Report {
    pub fn add(
        &mut self,
        severity: Severity,
        check: &'static str,
        place: Place,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.findings.push(Finding {
            severity,
            check,
            place,
            problem: problem.into(),
            fix: fix.into(),
        });
    }

    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// 0 clean (notes allowed), 1 warnings, 2 errors.
    pub fn exit_status(&self) -> u8 {
        match self.findings.iter().map(|f| f.severity).max() {
            Some(Severity::Error) => 2,
            Some(Severity::Warning) => 1,
            _ => 0,
        }
    }

    /// `{"findings": [...], "summary": {...}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "findings": self.findings,
            "summary": {
                "nads": self.nads,
                "pods": self.pods,
                "errors": self.count(Severity::Error),
                "warnings": self.count(Severity::Warning),
                "notes": self.count(Severity::Note),
                "exitStatus": self.exit_status(),
            },
        })
    }

    /// One block per finding, then a summary line.
    pub fn to_text(&self) -> String {
        let mut out = self.findings_text();
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let _ = writeln!(
            out,
            "{}, {}, {} in {} and {}",
            plural(self.count(Severity::Error), "error"),
            plural(self.count(Severity::Warning), "warning"),
            plural(self.count(Severity::Note), "note"),
            plural(self.nads, "NetworkAttachmentDefinition"),
            plural(self.pods, "pod"),
        );
        out
    }

    /// One block per finding: where, how bad, the check, the problem, and the fix.
    pub fn findings_text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let mut head = Vec::new();
            if let Some(file) = &f.place.file {
                match f.place.document {
                    Some(doc) => head.push(format!("{} (document {doc})", file.display())),
                    None => head.push(file.display().to_string()),
                }
            }
            if let (Some(kind), Some(object)) = (&f.place.kind, &f.place.object) {
                head.push(format!("{kind} {object}"));
            }
            if !f.place.path.is_empty() {
                head.push(f.place.path.clone());
            }
            let head = if head.is_empty() {
                String::new()
            } else {
                format!("{}: ", head.join(": "))
            };
            let _ = writeln!(
                out,
                "{head}{} [{}]: {}",
                f.severity.as_str(),
                f.check,
                f.problem
            );
            if !f.fix.is_empty() {
                let _ = writeln!(out, "    fix: {}", f.fix);
            }
        }
        out
    }
}
