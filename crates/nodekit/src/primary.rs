//! The node's primary network, as multus finds and wraps it: the installer writes multus's
//! config around it, and thick mode's daemon writes the shim's.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The network name runtimes are pointed at (CRI-O's `cni_default_network`).
pub const MULTUS_NETWORK_NAME: &str = "multus-cni-network";

/// The primary network's config in `dir`: the first `.conf` or `.conflist` by name, multus's
/// own (`00-multus.*`) and hidden files aside. The error says what is awaited.
pub fn primary_in(dir: &Path) -> Result<PathBuf, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("a CNI config in {}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && !n.starts_with("00-multus"))
        .filter(|n| n.ends_with(".conf") || n.ends_with(".conflist"))
        .collect();
    names.sort();
    names
        .first()
        .map(|n| dir.join(n))
        .ok_or_else(|| format!("a CNI config in {}", dir.display()))
}

/// The capabilities a network's plugins declare, merged, so multus declares them for it and the
/// runtime passes their args on: the config's own, or, for a conflist, those of all its
/// plugins.
pub fn capabilities(delegate: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let mut all = Map::new();
    let sources: Vec<(String, &Value)> = match delegate.get("plugins") {
        Some(Value::Array(plugins)) => plugins
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.get("capabilities").map(|c| (format!("plugins[{i}]"), c)))
            .collect(),
        Some(_) => return Err("plugins is not a list".into()),
        None => delegate
            .get("capabilities")
            .map(|c| vec![(String::new(), c)])
            .unwrap_or_default(),
    };
    for (at, caps) in sources {
        let at = if at.is_empty() { at } else { format!("{at}.") };
        let caps = caps
            .as_object()
            .ok_or_else(|| format!("{at}capabilities is not an object"))?;
        for (key, value) in caps {
            if !value.is_boolean() {
                return Err(format!(
                    "{at}capabilities.{key} is {value}, not true or false"
                ));
            }
            all.insert(key.clone(), value.clone());
        }
    }
    Ok(all)
}
