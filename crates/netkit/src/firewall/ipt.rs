//! What the iptables users (masquerade, host ports, forwarding) share: each family's tools, and
//! reading an `iptables-save` listing and writing an `iptables-restore` script, so a change is
//! one save and one restore per family.
//!
//! Calls on other pods run at the same time, with no lock between the save and the restore, so
//! a script writes only what is its caller's own: a chain every pod shares is made with `-N`,
//! never declared (`:CHAIN` in a `--noflush` script empties a chain that exists, and with it
//! the rules other pods put there). When another call made the chain after the listing was
//! read, `-N` fails the whole script, and [`update`] reads the table again and starts over.

use crate::error::{Error, Result};
use crate::tool;

/// The tools of one address family.
pub(crate) struct Tools {
    pub save: &'static str,
    pub restore: &'static str,
    pub cmd: &'static str,
}

pub(crate) const V4: Tools = Tools {
    save: "iptables-save",
    restore: "iptables-restore",
    cmd: "iptables",
};

pub(crate) const V6: Tools = Tools {
    save: "ip6tables-save",
    restore: "ip6tables-restore",
    cmd: "ip6tables",
};

/// The tools of IPv4 (`true`) or IPv6.
pub(crate) fn tools(v4: bool) -> &'static Tools {
    if v4 {
        &V4
    } else {
        &V6
    }
}

/// A word of an iptables-restore line, in double quotes.
pub(crate) fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `table`'s listing; `None` when the tool is not installed.
pub(crate) fn save(t: &Tools, table: &str) -> Result<Option<String>> {
    tool::run(t.save, &["-t", table], None)
}

/// `table`'s listing; a missing tool is an error.
pub(crate) fn listing(t: &Tools, table: &str) -> Result<String> {
    save(t, table)?.ok_or_else(|| tool::not_installed(format!("listing the {table} table"), t.save))
}

/// Applies `lines` to `table` in one transaction, leaving the rest of the table as it is.
pub(crate) fn restore(t: &Tools, table: &str, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let script = format!("*{table}\n{}\nCOMMIT\n", lines.join("\n"));
    tool::run_installed(t.restore, &["-w", "--noflush"], Some(&script)).map(drop)
}

/// How often [`update`] starts over because other calls made the chains it was making.
const ATTEMPTS: usize = 5;

/// Applies to `table` the lines `change` makes of its current listing, reading it again and
/// starting over when the script failed because a chain it makes (`-N`) was made meanwhile.
pub(crate) fn update(t: &Tools, table: &str, change: impl Fn(&str) -> Vec<String>) -> Result<()> {
    let mut saved = listing(t, table)?;
    let mut attempt = 1;
    loop {
        let lines = change(&saved);
        let Err(e) = restore(t, table, &lines) else {
            return Ok(());
        };
        saved = listing(t, table)?;
        let raced = lines
            .iter()
            .filter_map(|l| l.strip_prefix("-N "))
            .any(|chain| declared(&saved, chain));
        if !raced || attempt == ATTEMPTS {
            return Err(e);
        }
        attempt += 1;
    }
}

/// The lines that make what `saved` lacks of `chains` (first) and `rules`.
pub(crate) fn missing(saved: &str, chains: &[&str], rules: &[SharedRule]) -> Vec<String> {
    let made = chains.iter().filter_map(|c| create(saved, c));
    let added = rules
        .iter()
        .filter(|r| !r.is_in(saved))
        .map(SharedRule::line);
    made.chain(added).collect()
}

/// The line that makes `chain` when `saved` does not have it, without touching one that
/// another call makes in the meantime.
pub(crate) fn create(saved: &str, chain: &str) -> Option<String> {
    (!declared(saved, chain)).then(|| format!("-N {chain}"))
}

/// A rule in a chain every pod shares: found in a listing by some of its words (another
/// release may have written the rest differently), added when missing, first in its chain or
/// last.
pub(crate) struct SharedRule {
    pub chain: String,
    pub first: bool,
    pub words: Vec<String>,
    /// Without `-A CHAIN`.
    pub rule: String,
}

impl SharedRule {
    /// The iptables-restore line that adds it.
    pub fn line(&self) -> String {
        let (chain, rule) = (&self.chain, &self.rule);
        if self.first {
            format!("-I {chain} 1 {rule}")
        } else {
            format!("-A {chain} {rule}")
        }
    }

    /// Whether `saved` has it.
    pub fn is_in(&self, saved: &str) -> bool {
        let words: Vec<&str> = self.words.iter().map(String::as_str).collect();
        has_rule(saved, &self.chain, &words)
    }

    /// The error naming it, missing from a listing of `t`'s.
    pub fn missing(&self, t: &Tools) -> Error {
        Error::NotFound {
            what: format!("{} rule {:?} in chain {}", t.cmd, self.rule, self.chain),
        }
    }
}

/// Whether `saved` declares `chain`.
pub(crate) fn declared(saved: &str, chain: &str) -> bool {
    saved.lines().any(|l| l.starts_with(&format!(":{chain} ")))
}

/// Whether a rule of `saved` in `chain` has every one of `words`.
pub(crate) fn has_rule(saved: &str, chain: &str, words: &[&str]) -> bool {
    rules_of(saved, chain).any(|l| words.iter().all(|w| l.split_whitespace().any(|x| x == *w)))
}

/// Whether `saved` has exactly `rule` (as iptables-save prints it) in `chain`.
pub(crate) fn has_exact(saved: &str, chain: &str, rule: &str) -> bool {
    rules_of(saved, chain).any(|l| l.strip_prefix(&format!("-A {chain} ")) == Some(rule))
}

/// The `-D` lines removing every rule of `saved` in `from` that jumps to `chain`.
pub(crate) fn jumps_to(saved: &str, from: &str, chain: &str) -> Vec<String> {
    rules_of(saved, from)
        .filter(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).any(|w| w == ["-j", chain])
        })
        .map(|l| format!("-D{}", &l[2..]))
        .collect()
}

fn rules_of<'a>(saved: &'a str, chain: &str) -> impl Iterator<Item = &'a str> {
    let head = format!("-A {chain} ");
    saved.lines().filter(move |l| l.starts_with(&head))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = "*nat\n:CNI-X - [0:0]\n-A POSTROUTING -s 10.0.0.5/32 -m comment --comment \"a b\" -j CNI-X\n-A CNI-X -d 10.0.0.0/24 -j ACCEPT\nCOMMIT\n";

    #[test]
    fn listings_are_read() {
        assert!(declared(SAVED, "CNI-X") && !declared(SAVED, "CNI-Y"));
        assert_eq!(create(SAVED, "CNI-X"), None);
        assert_eq!(create(SAVED, "CNI-Y").as_deref(), Some("-N CNI-Y"));
        assert!(has_rule(SAVED, "POSTROUTING", &["-s", "CNI-X"]));
        assert!(!has_rule(SAVED, "CNI-X", &["MASQUERADE"]));
        assert!(has_exact(SAVED, "CNI-X", "-d 10.0.0.0/24 -j ACCEPT"));
        assert_eq!(
            jumps_to(SAVED, "POSTROUTING", "CNI-X"),
            ["-D POSTROUTING -s 10.0.0.5/32 -m comment --comment \"a b\" -j CNI-X"]
        );
        assert_eq!(quote(r#"a "b""#), r#""a \"b\"""#);
    }
}
