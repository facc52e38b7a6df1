//! Kubernetes object files as `kubectl apply -f` takes them: YAML (or JSON) files, many
//! documents each, or directories of them; `kind: List` objects are opened up. `multus lint`
//! and `multus try` read their files here.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// One object from a file.
pub struct Document {
    pub file: PathBuf,
    /// The YAML document in the file, from 1.
    pub index: usize,
    pub value: Value,
}

/// What could not be read, where, and what to do about it.
#[derive(Debug)]
pub struct Unreadable {
    pub file: PathBuf,
    /// The YAML document, from 1, when the file was read but one of its documents is not YAML.
    pub document: Option<usize>,
    /// Whether objects were lost; a directory without object files is only worth a warning.
    pub is_error: bool,
    /// `input` (a file or directory) or `yaml` (a document).
    pub check: &'static str,
    pub problem: String,
    pub fix: &'static str,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(document) = self.document {
            write!(f, " (document {document})")?;
        }
        write!(f, ": {}\n    fix: {}", self.problem, self.fix)
    }
}

/// The objects of some files, in order, and what could not be read.
#[derive(Default)]
pub struct Documents {
    pub documents: Vec<Document>,
    pub unreadable: Vec<Unreadable>,
}

/// Files in a directory that are read: YAML and JSON.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Every object in `paths`, in order.
pub fn read(paths: &[PathBuf]) -> Documents {
    let mut read = Documents::default();
    for path in paths {
        let files = if path.is_dir() {
            let mut files = Vec::new();
            if let Err(e) = collect_dir(path, &mut files) {
                read.unreadable.push(Unreadable {
                    file: path.clone(),
                    document: None,
                    is_error: true,
                    check: "input",
                    problem: format!("cannot read directory: {e}"),
                    fix: "check the path and its permissions",
                });
            }
            if files.is_empty() {
                read.unreadable.push(Unreadable {
                    file: path.clone(),
                    document: None,
                    is_error: false,
                    check: "input",
                    problem: "no .yaml, .yml or .json file in this directory".into(),
                    fix: "name the files to check, or the directory that holds them",
                });
            }
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => read.add_text(&file, &text),
                Err(e) => read.unreadable.push(Unreadable {
                    file,
                    document: None,
                    is_error: true,
                    check: "input",
                    problem: format!("cannot read file: {e}"),
                    fix: "check the path and its permissions",
                }),
            }
        }
    }
    read
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

impl Documents {
    /// The objects of one file's text; `file` names it in documents and problems.
    pub fn add_text(&mut self, file: &Path, text: &str) {
        for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
            let index = i + 1;
            match Value::deserialize(de) {
                // An empty document (a stray `---`).
                Ok(Value::Null) => {}
                Ok(value) => self.push_object(file, index, value),
                Err(e) => {
                    self.unreadable.push(Unreadable {
                        file: file.to_owned(),
                        document: Some(index),
                        is_error: true,
                        check: "yaml",
                        problem: format!("not valid YAML: {e}"),
                        fix: "correct the YAML at the line and column given (indentation, \
                              quoting, a missing colon); `kubectl apply --dry-run=client -f` \
                              shows the same",
                    });
                    // The parser cannot find where the next document starts after this.
                    return;
                }
            }
        }
    }

    fn push_object(&mut self, file: &Path, index: usize, value: Value) {
        if value.get("kind").and_then(Value::as_str) == Some("List") {
            if let Some(Value::Array(items)) = value.get("items") {
                for item in items {
                    self.push_object(file, index, item.clone());
                }
                return;
            }
        }
        self.documents.push(Document {
            file: file.to_owned(),
            index,
            value,
        });
    }
}
