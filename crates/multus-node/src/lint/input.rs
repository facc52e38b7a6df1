//! Reading the files lint is given: YAML (or JSON) files, many documents each, or directories
//! of them; `kind: List` objects are opened up.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::report::{Place, Report, Severity};

/// One object from a file.
pub struct Document {
    pub file: PathBuf,
    /// The YAML document in the file, from 1.
    pub index: usize,
    pub value: Value,
}

impl Document {
    pub fn place(&self) -> Place {
        Place {
            file: Some(self.file.clone()),
            document: Some(self.index),
            ..Place::default()
        }
    }
}

/// Files in a directory that are read: YAML and JSON.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Every object in `paths`, in order; what cannot be read is reported.
pub fn read(paths: &[PathBuf], report: &mut Report) -> Vec<Document> {
    let mut docs = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            let mut files = Vec::new();
            if let Err(e) = collect_dir(path, &mut files) {
                report.add(
                    Severity::Error,
                    "input",
                    file_place(path),
                    format!("cannot read directory: {e}"),
                    "check the path and its permissions",
                );
            }
            if files.is_empty() {
                report.add(
                    Severity::Warning,
                    "input",
                    file_place(path),
                    "no .yaml, .yml or .json file in this directory",
                    "name the files to check, or the directory that holds them",
                );
            }
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            read_file(&file, &mut docs, report);
        }
    }
    docs
}

fn file_place(path: &Path) -> Place {
    Place {
        file: Some(path.to_owned()),
        ..Place::default()
    }
}

/// The directory's YAML and JSON files and those of its subdirectories, sorted.
fn collect_dir(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect_dir(&entry, out)?;
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
        {
            out.push(entry);
        }
    }
    Ok(())
}

fn read_file(file: &Path, docs: &mut Vec<Document>, report: &mut Report) {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            report.add(
                Severity::Error,
                "input",
                file_place(file),
                format!("cannot read file: {e}"),
                "check the path and its permissions",
            );
            return;
        }
    };
    read_text(file, &text, docs, report);
}

/// The objects of one file's text; `file` names it in documents and findings.
pub fn read_text(file: &Path, text: &str, docs: &mut Vec<Document>, report: &mut Report) {
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        match Value::deserialize(de) {
            // An empty document (a stray `---`).
            Ok(Value::Null) => {}
            Ok(value) => push_object(file, index, value, docs),
            Err(e) => {
                report.add(
                    Severity::Error,
                    "yaml",
                    Place {
                        document: Some(index),
                        ..file_place(file)
                    },
                    format!("not valid YAML: {e}"),
                    "correct the YAML at the line and column given (indentation, quoting, a \
                     missing colon); `kubectl apply --dry-run=client -f` shows the same",
                );
                // The parser cannot find where the next document starts after this.
                return;
            }
        }
    }
}

fn push_object(file: &Path, index: usize, value: Value, docs: &mut Vec<Document>) {
    if value.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(Value::Array(items)) = value.get("items") {
            for item in items {
                push_object(file, index, item.clone(), docs);
            }
            return;
        }
    }
    docs.push(Document {
        file: file.to_owned(),
        index,
        value,
    });
}
