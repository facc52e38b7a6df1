//! SPDX 2.3 documents (JSON) of the release: one per node binary, naming every crate it is
//! built from, and one per package, naming its files and, for the binaries among them, their
//! crates. The crates come from `cargo tree` (the build's own selection of packages, features
//! and target) and their checksums from Cargo.lock.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use crate::Arch;

/// The cargo package each node binary is built from.
pub const BINARIES: [(&str, &str); 2] = [("multus", "multus-node"), ("cni-plugins", "plugins")];

/// One crate a binary is built from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Crate {
    pub name: String,
    pub version: String,
    /// The declared license, as an SPDX expression.
    license: Option<String>,
    /// From crates.io (else one of the workspace's own).
    registry: bool,
    /// Linked into the binary; else it only runs at build time (a build script's dependency or
    /// a proc-macro).
    pub linked: bool,
}

/// The crates of each node binary for `arch`, by binary name.
pub fn crates(arch: Arch) -> Result<BTreeMap<&'static str, Vec<Crate>>> {
    let linked = tree(arch, "normal,no-proc-macro")?;
    let all = tree(arch, "normal,build")?;
    let mut out = BTreeMap::new();
    for (bin, package) in BINARIES {
        let linked = linked
            .get(package)
            .context("cargo tree left out a binary")?;
        let all = all.get(package).context("cargo tree left out a binary")?;
        ensure!(
            linked.is_subset(all),
            "{bin}'s linked crates are not among its crates"
        );
        out.insert(
            bin,
            all.iter()
                .filter(|c| c.name != package || c.registry)
                .map(|c| Crate {
                    linked: linked.contains(c),
                    ..c.clone()
                })
                .collect(),
        );
    }
    Ok(out)
}

/// `cargo tree` over the release build's two packages with edges `edges`: each root package's
/// crates (itself included), by its name.
fn tree(arch: Arch, edges: &str) -> Result<BTreeMap<String, BTreeSet<Crate>>> {
    let mut cmd = Command::new(crate::cargo());
    cmd.current_dir(crate::workspace_root())
        .args(["tree", "-q", "--locked", "--no-dedupe", "--prefix", "depth"])
        .args(["--format", "{p}|{l}", "-e", edges, "--target"])
        .arg(arch.triple());
    for (_, package) in BINARIES {
        cmd.args(["-p", package]);
    }
    let text = crate::output(&mut cmd)?;
    let mut roots: BTreeMap<String, BTreeSet<Crate>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let depth_end = line
            .find(|c: char| !c.is_ascii_digit())
            .with_context(|| format!("cargo tree line {line:?}"))?;
        let (spec, license) = line[depth_end..]
            .split_once('|')
            .with_context(|| format!("cargo tree line {line:?}"))?;
        let mut words = spec.split(' ');
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            anyhow::bail!("cargo tree line {line:?}");
        };
        let krate = Crate {
            name: name.to_owned(),
            version: version.trim_start_matches('v').to_owned(),
            license: spdx_license(license),
            registry: !spec.contains(" (/"),
            linked: false,
        };
        if &line[..depth_end] == "0" {
            current = Some(krate.name.clone());
        }
        let root = current.clone().context("cargo tree began below a root")?;
        roots.entry(root).or_default().insert(krate);
    }
    Ok(roots)
}

/// A crate's license field as an SPDX expression: the old `A/B` form means `A OR B`.
fn spdx_license(field: &str) -> Option<String> {
    let field = field.trim();
    (!field.is_empty()).then(|| {
        field
            .split('/')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" OR ")
    })
}

/// Each crates.io crate's SHA-256 from Cargo.lock, by (name, version).
fn lock_checksums() -> Result<BTreeMap<(String, String), String>> {
    let text = std::fs::read_to_string(crate::workspace_root().join("Cargo.lock"))?;
    let mut sums = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                let (k, v) = l.split_once(" = ")?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        if let (Some(name), Some(version), Some(sum)) =
            (field("name"), field("version"), field("checksum"))
        {
            sums.insert((name, version), sum);
        }
    }
    Ok(sums)
}

/// The SHA-1 and SHA-256 of each of `paths`, in order.
pub fn file_sums(paths: &[&Path]) -> Result<Vec<(String, String)>> {
    let sums = |tool: &str| -> Result<Vec<String>> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let text = crate::output(Command::new(tool).args(paths))?;
        Ok(text
            .lines()
            .map(|l| l.split(' ').next().unwrap_or_default().to_owned())
            .collect())
    };
    let (sha1, sha256) = (sums("sha1sum")?, sums("sha256sum")?);
    ensure!(sha1.len() == paths.len() && sha256.len() == paths.len());
    Ok(sha1.into_iter().zip(sha256).collect())
}

/// What a document describes: its element's identifier and its file's SHA-256.
pub struct Subject {
    id: String,
    sha256: String,
}

/// A document under construction: its elements and how they relate.
pub struct Document {
    packages: Vec<Value>,
    files: Vec<Value>,
    relationships: Vec<Value>,
    ids: BTreeSet<String>,
    checksums: BTreeMap<(String, String), String>,
}

/// An SPDX identifier from `parts`: letters, digits, `.` and `-` only.
fn id(parts: &[&str]) -> String {
    let text: String = parts
        .join("-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("SPDXRef-{text}")
}

impl Document {
    pub fn new() -> Result<Document> {
        Ok(Document {
            packages: Vec::new(),
            files: Vec::new(),
            relationships: Vec::new(),
            ids: BTreeSet::new(),
            checksums: lock_checksums()?,
        })
    }

    fn relate(&mut self, from: &str, kind: &str, to: &str) {
        self.relationships.push(json!({
            "spdxElementId": from,
            "relationshipType": kind,
            "relatedSpdxElement": to,
        }));
    }

    /// `element` (a binary's package or file) linked from `crates`, or built with them.
    fn add_crates(&mut self, element: &str, crates: &[Crate]) -> Result<()> {
        for c in crates {
            let crate_id = id(&["Crate", &c.name, &c.version]);
            if self.ids.insert(crate_id.clone()) {
                let mut package = json!({
                    "SPDXID": crate_id,
                    "name": c.name,
                    "versionInfo": c.version,
                    "downloadLocation": "NOASSERTION",
                    "filesAnalyzed": false,
                    "licenseConcluded": "NOASSERTION",
                    "licenseDeclared": c.license.as_deref().unwrap_or("NOASSERTION"),
                    "copyrightText": "NOASSERTION",
                    "primaryPackagePurpose": "LIBRARY",
                });
                if c.registry {
                    let sum = self
                        .checksums
                        .get(&(c.name.clone(), c.version.clone()))
                        .with_context(|| {
                            format!("no checksum in Cargo.lock for {} {}", c.name, c.version)
                        })?;
                    package["downloadLocation"] = json!(format!(
                        "https://crates.io/api/v1/crates/{}/{}/download",
                        c.name, c.version
                    ));
                    package["checksums"] = json!([{ "algorithm": "SHA256", "checksumValue": sum }]);
                    package["externalRefs"] = json!([{
                        "referenceCategory": "PACKAGE-MANAGER",
                        "referenceType": "purl",
                        "referenceLocator": format!("pkg:cargo/{}@{}", c.name, c.version),
                    }]);
                }
                self.packages.push(package);
            }
            if c.linked {
                self.relate(element, "STATIC_LINK", &crate_id);
            } else {
                self.relate(&crate_id, "BUILD_DEPENDENCY_OF", element);
            }
        }
        Ok(())
    }

    /// A node binary: the file `path`, built by this project from `crates`.
    pub fn binary(&mut self, name: &str, path: &Path, crates: &[Crate]) -> Result<Subject> {
        let sums = file_sums(&[path])?;
        let binary_id = id(&["Binary", name]);
        self.packages.push(json!({
            "SPDXID": binary_id,
            "name": name,
            "versionInfo": crate::VERSION,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "checksums": [
                { "algorithm": "SHA1", "checksumValue": sums[0].0 },
                { "algorithm": "SHA256", "checksumValue": sums[0].1 },
            ],
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "Apache-2.0",
            "copyrightText": "NOASSERTION",
            "primaryPackagePurpose": "APPLICATION",
        }));
        self.add_crates(&binary_id, crates)?;
        Ok(Subject {
            id: binary_id,
            sha256: sums[0].1.clone(),
        })
    }

    /// A package (the file `path`, named `name`) holding the files under `root`, where it was
    /// unpacked; `crates` gives the crates of the binaries among them, by file name.
    pub fn package(
        &mut self,
        name: &str,
        path: &Path,
        root: &Path,
        crates: &BTreeMap<&str, Vec<Crate>>,
    ) -> Result<Subject> {
        let mut files = Vec::new();
        collect_files(root, root, &mut files)?;
        files.sort();
        let paths: Vec<std::path::PathBuf> = files.iter().map(|f| root.join(f)).collect();
        let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
        let sums = file_sums(&refs)?;
        let package_id = id(&["Package", name]);
        let mut has_files = Vec::new();
        let mut sha1s = Vec::new();
        for (n, (file, (sha1, sha256))) in files.iter().zip(sums).enumerate() {
            let file_id = id(&["File", &n.to_string()]);
            self.files.push(json!({
                "SPDXID": file_id,
                "fileName": format!("./{file}"),
                "checksums": [
                    { "algorithm": "SHA1", "checksumValue": sha1 },
                    { "algorithm": "SHA256", "checksumValue": sha256 },
                ],
                "licenseConcluded": "NOASSERTION",
                "copyrightText": "NOASSERTION",
            }));
            let base = file.rsplit('/').next().unwrap_or(file);
            if let Some(crates) = crates.get(base) {
                self.add_crates(&file_id, crates)?;
            }
            has_files.push(file_id);
            sha1s.push(sha1);
        }
        // SPDX's package verification code: the SHA-1 of the files' sorted SHA-1s.
        sha1s.sort();
        let code = sha1_of(sha1s.concat().as_bytes())?;
        let sums = file_sums(&[path])?;
        self.packages.push(json!({
            "SPDXID": package_id,
            "name": name,
            "packageFileName": path.file_name().map(|n| n.to_string_lossy()),
            "versionInfo": crate::VERSION,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": true,
            "hasFiles": has_files,
            "packageVerificationCode": { "packageVerificationCodeValue": code },
            "checksums": [
                { "algorithm": "SHA1", "checksumValue": sums[0].0 },
                { "algorithm": "SHA256", "checksumValue": sums[0].1 },
            ],
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "Apache-2.0",
            "licenseInfoFromFiles": ["NOASSERTION"],
            "copyrightText": "NOASSERTION",
            "primaryPackagePurpose": "INSTALL",
        }));
        for file_id in &has_files {
            self.relate(&package_id, "CONTAINS", file_id);
        }
        Ok(Subject {
            id: package_id,
            sha256: sums[0].1.clone(),
        })
    }

    /// The finished document, named `name`, describing `subject`, made at `epoch`.
    pub fn finish(mut self, name: &str, subject: &Subject, epoch: &str) -> Result<String> {
        self.relate("SPDXRef-DOCUMENT", "DESCRIBES", &subject.id);
        let created = crate::epoch_as(epoch, "%Y-%m-%dT%H:%M:%SZ")?;
        // Unique for each subject: its checksum is in the name space.
        let subject_sum = &subject.sha256;
        let doc = json!({
            "spdxVersion": "SPDX-2.3",
            "dataLicense": "CC0-1.0",
            "SPDXID": "SPDXRef-DOCUMENT",
            "name": name,
            "documentNamespace": format!("https://multus-rs.invalid/spdx/{name}-{subject_sum}"),
            "creationInfo": {
                "created": created,
                "creators": ["Organization: multus-rs", "Tool: cargo-xtask-package"],
            },
            "packages": self.packages,
            "files": self.files,
            "relationships": self.relationships,
        });
        Ok(serde_json::to_string_pretty(&doc)? + "\n")
    }
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect_files(root, &entry.path(), out)?;
        } else if kind.is_file() {
            let rel = entry.path();
            let rel = rel.strip_prefix(root)?;
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

fn sha1_of(data: &[u8]) -> Result<String> {
    let out = crate::filter(&mut Command::new("sha1sum"), data)?;
    Ok(String::from_utf8_lossy(&out)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// Checks `documents` with the SPDX project's validator (spdx-tools, whose command line exits
/// 0 even for a document it finds invalid: its library is asked instead).
pub fn validate(documents: &[&Path]) -> Result<()> {
    const CHECK: &str = "
import sys
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
bad = 0
for path in sys.argv[1:]:
    for m in validate_full_spdx_document(parse_file(path)):
        print(f'{path}: {m.validation_message}')
        bad += 1
sys.exit(1 if bad else 0)
";
    crate::output(Command::new(PYTHON).args(["-c", CHECK]).args(documents))
        .context("the SPDX validator refused an SBOM")
        .map(drop)
}

/// The virtualenv scripts/deps.sh installs spdx-tools into.
const PYTHON: &str = "/var/cache/multus-rs/venv/bin/python";
