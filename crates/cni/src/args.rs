//! `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`.

use crate::quote::quote;
use crate::CniError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Splits the pairs; a pair without exactly one `=` is an error, as in the reference.
    pub fn parse(raw: &str) -> Result<CniArgs, CniError> {
        let mut pairs = Vec::new();
        if raw.is_empty() {
            return Ok(CniArgs { pairs });
        }
        for pair in raw.split(';') {
            let mut kv = pair.split('=');
            match (kv.next(), kv.next(), kv.next()) {
                (Some(k), Some(v), None) => pairs.push((k.to_owned(), v.to_owned())),
                _ => {
                    return Err(CniError::invalid_config(format!(
                        "CNI_ARGS: invalid pair {}: want KEY=VALUE",
                        quote(pair)
                    )))
                }
            }
        }
        Ok(CniArgs { pairs })
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The value for `key`; a repeated key's last value wins, as in the reference.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rfind(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `IgnoreUnknown` as the reference reads it: 1/true/0/false, any case.
    pub fn ignore_unknown(&self) -> Result<bool, CniError> {
        match self
            .get("IgnoreUnknown")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("0") | Some("false") => Ok(false),
            Some("1") | Some("true") => Ok(true),
            Some(other) => Err(CniError::invalid_config(format!(
                "CNI_ARGS: IgnoreUnknown must be 1, true, 0 or false, not {}",
                quote(other)
            ))),
        }
    }

    /// Fails on keys outside `known` unless `IgnoreUnknown` is set.
    pub fn check_known(&self, known: &[&str]) -> Result<(), CniError> {
        if self.ignore_unknown()? {
            return Ok(());
        }
        let unknown: Vec<&str> = self
            .pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| *k != "IgnoreUnknown" && !known.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        // A few names are enough to see the mistake; the list itself is input.
        const SHOWN: usize = 5;
        let mut names: Vec<String> = unknown.iter().take(SHOWN).map(|k| quote(k)).collect();
        if unknown.len() > SHOWN {
            names.push(format!("and {} more", unknown.len() - SHOWN));
        }
        Err(CniError::invalid_config(format!(
            "CNI_ARGS: unknown args [{}]; set IgnoreUnknown=1 to allow them",
            names.join(", ")
        )))
    }
}
