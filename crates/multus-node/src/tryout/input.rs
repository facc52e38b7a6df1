//! The files `multus try` reads (with `multus lint`'s reader): NetworkAttachmentDefinitions and
//! pods; and the [`Api`] that serves them to multus and records what multus writes back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;

use super::Error;
use multus::api::{self, Api, EventKind, Pod};
use nodekit::documents::{self, Documents};

const NAD_KIND: &str = "NetworkAttachmentDefinition";

/// A NAD as read from a file.
#[derive(Clone, Debug)]
pub struct Nad {
    pub namespace: String,
    pub name: String,
    pub config: String,
}

/// The NADs and pods of one set of files.
#[derive(Debug, Default)]
pub struct Inputs {
    pub nads: Vec<Nad>,
    pub pods: Vec<(Pod, String)>,
}

#[derive(Deserialize)]
struct Doc {
    kind: Option<String>,
    metadata: Option<Meta>,
    spec: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl Inputs {
    /// Reads files, and the YAML and JSON files of directories, as `multus lint` reads them.
    pub fn read(paths: &[PathBuf]) -> Result<Inputs, Error> {
        let mut inputs = Inputs::default();
        inputs.add(documents::read(paths))?;
        Ok(inputs)
    }

    /// Adds the documents of one file's text; `origin` names it in errors.
    pub fn add_text(&mut self, origin: &str, text: &str) -> Result<(), Error> {
        let mut read = Documents::default();
        read.add_text(Path::new(origin), text);
        self.add(read)
    }

    fn add(&mut self, read: Documents) -> Result<(), Error> {
        let unreadable: Vec<String> = read
            .unreadable
            .iter()
            .filter(|u| u.is_error)
            .map(ToString::to_string)
            .collect();
        if !unreadable.is_empty() {
            return Err(Error::Input(unreadable.join("\n")));
        }
        for doc in read.documents {
            let at = format!("{}, document {}", doc.file.display(), doc.index);
            let doc: Doc = serde_json::from_value(doc.value)
                .map_err(|e| Error::Input(format!("{at}: {e}")))?;
            let meta = doc.metadata.unwrap_or_default();
            let name = meta
                .name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| Error::Input(format!("{at}: metadata.name is missing")))?;
            let namespace = meta
                .namespace
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".to_owned());
            match doc.kind.as_deref() {
                Some(NAD_KIND) => {
                    let config = nad_config(&at, &namespace, &name, doc.spec.as_ref())?;
                    self.nads.push(Nad {
                        namespace,
                        name,
                        config,
                    });
                }
                Some("Pod") => {
                    let uid = meta.uid.unwrap_or_else(|| {
                        format!("00000000-0000-4000-8000-{:012}", self.pods.len())
                    });
                    let pod = Pod {
                        namespace,
                        name,
                        uid,
                        annotations: meta.annotations,
                    };
                    self.pods.push((pod, at));
                }
                other => {
                    return Err(Error::Input(format!(
                        "{at}: kind {:?} is neither a Pod nor a {NAD_KIND}",
                        other.unwrap_or("(none)")
                    )))
                }
            }
        }
        Ok(())
    }
}

/// `spec.config` of a NAD, checked to be a JSON object so a typo is reported with its file.
fn nad_config(
    at: &str,
    namespace: &str,
    name: &str,
    spec: Option<&serde_json::Value>,
) -> Result<String, Error> {
    let what = format!("{at}: {NAD_KIND} {namespace}/{name}");
    let config = match spec.and_then(|s| s.get("config")) {
        None => return Ok(String::new()),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(Error::Input(format!(
                "{what}: spec.config must be a string"
            )))
        }
    };
    match serde_json::from_str::<serde_json::Value>(&config) {
        Ok(serde_json::Value::Object(_)) => Ok(config),
        Ok(_) => Err(Error::Input(format!(
            "{what}: spec.config must be a JSON object"
        ))),
        Err(e) => Err(Error::Input(format!(
            "{what}: spec.config is not valid JSON: {e}"
        ))),
    }
}

/// An event multus recorded on the pod.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventKind,
    pub reason: String,
    pub message: String,
}

/// The Kubernetes API as multus sees it during a try: the pod and the NADs from the files;
/// annotation writes and events are recorded.
pub struct FileApi {
    pub pod: Pod,
    /// `(namespace, name)` to the config multus gets (rewritten for the sandbox).
    pub nads: BTreeMap<(String, String), String>,
    pub annotations: Mutex<BTreeMap<String, String>>,
    pub events: Mutex<Vec<Event>>,
}

impl Api for FileApi {
    fn pod(&self, namespace: &str, name: &str, _uid: &str) -> multus::Result<Option<Pod>> {
        Ok((self.pod.namespace == namespace && self.pod.name == name).then(|| self.pod.clone()))
    }

    fn nad(&self, namespace: &str, name: &str) -> multus::Result<Option<api::Nad>> {
        Ok(self
            .nads
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|config| api::Nad {
                config: config.clone(),
                resource_name: None,
            }))
    }

    fn set_pod_annotations(
        &self,
        _pod: &Pod,
        annotations: &BTreeMap<String, String>,
    ) -> multus::Result<()> {
        if let Ok(mut held) = self.annotations.lock() {
            held.extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Ok(())
    }

    fn record_events<'a>(&self, events: &'a [api::Event]) -> Vec<(&'a api::Event, multus::Error)> {
        if let Ok(mut held) = self.events.lock() {
            held.extend(events.iter().map(|e| Event {
                kind: e.kind,
                reason: e.reason.clone(),
                message: e.message.clone(),
            }));
        }
        Vec::new()
    }
}
