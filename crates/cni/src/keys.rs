//! The keys a plugin reads from its config, and the keys a config carries that nobody reads.
//! A misspelt option (`"masqall"` for `"masqAll"`) is ignored by every plugin, here as in the
//! reference, so the pod comes up without what was asked for; `cni-plugins validate` and
//! `multus lint` warn about each such key, with the known key it most resembles.
//!
//! A plugin's keys come from the serde structs it decodes its config with, so the list cannot
//! drift from what the plugin reads. The warning's text is written and read back here only:
//! `portmap: unknown key "masqall" (did you mean "masqAll"?)`.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::Value;

use crate::decode::{show_path, Segment};
use crate::quote::quote;

/// Keys every plugin config may carry besides [`crate::NetConf`]'s: the 1.1.0 spec's name for
/// GC's attachments, and the device multus injects into every plugin of a network.
const INJECTED: &[&str] = &["cni.dev/attachments", "deviceID", "pciBusID"];

/// The key of an `ipam` object that every IPAM plugin has.
const IPAM_TYPE: &str = "type";

/// The keys of one object of a config, and, for some of them, the keys of the object they hold
/// (or of each object of the list they hold).
#[derive(Clone, Debug, Default)]
pub struct Keys {
    names: Vec<&'static str>,
    inner: Vec<(&'static str, Keys)>,
}

impl Keys {
    /// The keys `T` (a struct deriving `Deserialize`) reads.
    pub fn of<'de, T: Deserialize<'de>>() -> Keys {
        Keys::default().and::<T>()
    }

    /// These keys and those `T` reads.
    pub fn and<'de, T: Deserialize<'de>>(mut self) -> Keys {
        self.names.extend_from_slice(fields::<T>());
        self
    }

    /// These keys and `names`.
    pub fn named(mut self, names: &[&'static str]) -> Keys {
        self.names.extend_from_slice(names);
        self
    }

    /// These keys without `name`.
    pub fn without(mut self, name: &str) -> Keys {
        self.names.retain(|n| *n != name);
        self
    }

    /// These keys, and `key` holding an object (or a list of them) with the keys `inner`.
    pub fn with(mut self, key: &'static str, inner: Keys) -> Keys {
        self.inner.push((key, inner));
        self
    }

    /// These keys, and `ipam` holding an object with an IPAM plugin's keys `ipam`.
    pub fn with_ipam(self, ipam: Keys) -> Keys {
        self.with("ipam", ipam.named(&[IPAM_TYPE]))
    }

    fn all_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.names
            .iter()
            .chain(self.inner.iter().map(|(k, _)| k))
            .copied()
    }

    fn knows(&self, key: &str) -> bool {
        self.all_names().any(|k| k == key)
    }
}

/// A key no one reads: where it is, and the known key it most resembles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKey {
    /// As messages show key paths: `ipam.ranges[0][0].rangestart`.
    pub path: String,
    pub suggestion: Option<&'static str>,
}

impl fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown key {}", quote(&self.path))?;
        match self.suggestion {
            Some(known) => write!(f, " (did you mean {}?)", quote(known)),
            None => Ok(()),
        }
    }
}

impl UnknownKey {
    /// The warning about this key in `plugin`'s config.
    pub fn warning(&self, plugin: &str) -> String {
        format!("{plugin}: {self}")
    }

    /// The key path a [`UnknownKey::warning`] of `plugin` names, when it is shown whole (a
    /// path that quoting escaped or cut is not read back).
    pub fn path_in_warning<'a>(plugin: &str, warning: &'a str) -> Option<&'a str> {
        let rest = warning
            .strip_prefix(plugin)?
            .strip_prefix(": unknown key \"")?;
        let (path, _) = rest.split_once('"')?;
        let whole = !path.contains(['\\', '…']);
        whole.then_some(path)
    }
}

/// The keys of a plugin's config that neither `keys` nor every config has, from its top down.
pub fn unknown(config: &Value, keys: &Keys) -> Vec<UnknownKey> {
    let top = keys.clone().and::<crate::NetConf>().named(INJECTED);
    let mut found = Vec::new();
    walk(config, &top, &[], &mut found);
    found
}

/// The keys of `config`'s `ipam` object that an IPAM plugin reading `ipam` does not have.
pub fn unknown_in_ipam(config: &Value, ipam: Keys) -> Vec<UnknownKey> {
    let mut found = Vec::new();
    if let Some(value) = config.get("ipam") {
        let path = [Segment::Key("ipam".into())];
        walk(value, &ipam.named(&[IPAM_TYPE]), &path, &mut found);
    }
    found
}

/// Looks for unknown keys in `value` (an object with `keys`, or a list of them) at `path`.
fn walk(value: &Value, keys: &Keys, path: &[Segment], found: &mut Vec<UnknownKey>) {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, keys, &[path, &[Segment::Index(i)]].concat(), found);
            }
        }
        Value::Object(map) => {
            for (key, inner_value) in map {
                let here = [path, &[Segment::Key(key.clone())]].concat();
                if !keys.knows(key) {
                    found.push(UnknownKey {
                        path: show_path(&here),
                        suggestion: closest(key, keys.all_names()),
                    });
                }
                if let Some((_, inner)) = keys.inner.iter().find(|(k, _)| k == key) {
                    walk(inner_value, inner, &here, found);
                }
            }
        }
        _ => {}
    }
}

/// The name `key` was most likely meant to be: the same but for case, else one at most two
/// edits away (and less than half of the shorter one's length). No known key is longer than
/// [`SUGGEST_MAX`] characters.
fn closest(key: &str, names: impl Iterator<Item = &'static str>) -> Option<&'static str> {
    let key: Vec<char> = key.to_lowercase().chars().collect();
    if key.len() > SUGGEST_MAX {
        return None;
    }
    names
        .map(|n| {
            (
                edits(&key, &n.to_lowercase().chars().collect::<Vec<_>>()),
                n,
            )
        })
        .filter(|(d, n)| *d <= 2 && *d * 2 < key.len().min(n.chars().count()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// The longest key a suggestion is looked for.
const SUGGEST_MAX: usize = 64;

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
fn edits(a: &[char], b: &[char]) -> usize {
    // d[i][j]: edits between the first i of a and the first j of b.
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The field names of `T` as serde reads them (after renames); none for a type that is not a
/// struct. serde hands them to the deserializer, which here keeps them and stops.
fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let seen = Cell::new(&[][..]);
    let _ = T::deserialize(FieldNames(&seen));
    seen.get()
}

/// A deserializer that only records the field names of the struct asked of it.
struct FieldNames<'a>(&'a Cell<&'static [&'static str]>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("only a struct's field names are read"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.set(fields);
        self.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Raw {
        masq_all: bool,
        #[serde(rename = "vlanId")]
        vlan: u16,
        ranges: Vec<Vec<Range>>,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Range {
        range_start: String,
    }

    fn keys() -> Keys {
        Keys::of::<Raw>().with("ranges", Keys::of::<Range>())
    }

    #[test]
    fn field_names_are_serdes() {
        assert_eq!(fields::<Raw>(), ["masqAll", "vlanId", "ranges"]);
        assert_eq!(fields::<String>(), [] as [&str; 0]);
    }

    #[test]
    fn every_unknown_key_with_the_known_one_it_resembles() {
        let config = json!({
            "cniVersion": "1.0.0", "name": "n", "type": "x", "args": {"cni": {"any": 1}},
            "runtimeConfig": {"anything": true}, "deviceID": "0000:01:00.1",
            "masqall": true, "vlanid": 3, "colour": "blue", "nmae": "typo",
            "ranges": [[{"rangeStart": "a", "rangestart": "b"}], [{"gateway": "c"}]],
        });
        let found: Vec<String> = unknown(&config, &keys())
            .iter()
            .map(|u| u.warning("p"))
            .collect();
        assert_eq!(
            found,
            [
                r#"p: unknown key "masqall" (did you mean "masqAll"?)"#,
                r#"p: unknown key "vlanid" (did you mean "vlanId"?)"#,
                r#"p: unknown key "colour""#,
                r#"p: unknown key "nmae" (did you mean "name"?)"#,
                r#"p: unknown key "ranges[0][0].rangestart" (did you mean "rangeStart"?)"#,
                r#"p: unknown key "ranges[1][0].gateway""#,
            ]
        );
    }

    #[test]
    fn an_ipam_object_is_checked_alone() {
        let config = json!({"type": "bridge", "bridgee": 1,
            "ipam": {"type": "host-local", "masqAll": 1, "rnages": []}});
        let found = unknown_in_ipam(&config, Keys::of::<Raw>());
        let paths: Vec<&str> = found.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(paths, ["ipam.rnages"]);
        assert_eq!(found[0].suggestion, Some("ranges"));
        let nested = unknown(&config, &Keys::default().with_ipam(Keys::of::<Raw>()));
        let paths: Vec<&str> = nested.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(paths, ["bridgee", "ipam.rnages"]);
    }

    #[test]
    fn the_path_is_read_back_from_the_warning() {
        let warning = UnknownKey {
            path: "ipam.rangestart".into(),
            suggestion: Some("rangeStart"),
        }
        .warning("host-local");
        assert_eq!(
            UnknownKey::path_in_warning("host-local", &warning),
            Some("ipam.rangestart")
        );
        assert_eq!(UnknownKey::path_in_warning("bridge", &warning), None);
        let odd = unknown(&json!({"a \"b\"": 1}), &Keys::default());
        let warning = odd[0].warning("p");
        assert_eq!(warning, r#"p: unknown key "[\"a \\\"b\\\"\"]""#);
        assert_eq!(UnknownKey::path_in_warning("p", &warning), None);
    }

    #[test]
    fn suggestions_are_close() {
        let names = ["mtu", "mac", "master", "ingressRate"];
        assert_eq!(closest("mastr", names.into_iter()), Some("master"));
        assert_eq!(
            closest("ingresrate", names.into_iter()),
            Some("ingressRate")
        );
        assert_eq!(closest("mtv", names.into_iter()), Some("mtu"));
        assert_eq!(closest("ip", names.into_iter()), None);
        assert_eq!(closest("zzzzzz", names.into_iter()), None);
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(edits(&chars("kitten"), &chars("sitting")), 3);
        assert_eq!(edits(&chars("nmae"), &chars("name")), 1);
        assert_eq!(closest(&"x".repeat(65), names.into_iter()), None);
    }
}
