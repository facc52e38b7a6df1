//! multus(1), the manual page the node packages install: made from the binary's own help (the
//! top level's and each command's), so it says what that build does.

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Result};

use crate::{epoch_as, filter, output};

/// Where the packages install the page.
pub const PATH: &str = "usr/share/man/man1/multus.1.gz";

/// The page for the binary `multus`, dated `epoch`, compressed as Debian's policy asks (gzip -9
/// with no name or time in the header, so the same input gives the same bytes).
pub fn page(multus: &Path, epoch: &str) -> Result<Vec<u8>> {
    let help = |args: &[&str]| output(Command::new(multus).args(args));
    let top = help(&["--help"])?;
    let commands = commands(&top);
    ensure!(
        commands.len() >= 5,
        "multus --help lists {} commands: {top}",
        commands.len()
    );
    let mut sections = Vec::new();
    for name in &commands {
        sections.push((name.clone(), help(&[name, "--help"])?));
    }
    let version = help(&["--version"])?;
    let roff = render(
        &top,
        &sections,
        version.trim(),
        &epoch_as(epoch, "%Y-%m-%d")?,
    );
    filter(
        Command::new("gzip").args(["-9", "-n", "-c"]),
        roff.as_bytes(),
    )
}

/// The command names under `Commands:` in clap's help, but `help`.
fn commands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A command's line starts two spaces in; a wrapped description is indented further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

fn render(top: &str, sections: &[(String, String)], version: &str, date: &str) -> String {
    let summary = top.lines().next().unwrap_or_default();
    let summary = summary.split_once(": ").map_or(summary, |(_, s)| s);
    let mut page = format!(
        ".TH MULTUS 1 \"{date}\" \"{}\" \"User Commands\"\n",
        escape(version)
    );
    page += &format!(".SH NAME\nmultus \\- {}\n", escape(summary));
    page += ".SH SYNOPSIS\n.B multus\n.I command\n.RI [ options ]\n";
    page += ".SH DESCRIPTION\n";
    page += "The node's tools of multus\\-rs, and the multus CNI plugin: the same binary, \
installed as /usr/lib/cni/multus (/usr/libexec/cni/multus on RPM systems), is the plugin \
when a container runtime runs it with CNI_COMMAND set, thick mode's daemon and shim when \
run as multus\\-daemon and multus\\-shim, and the whereabouts IPAM plugin as whereabouts.\n";
    page += ".SH COMMANDS\n";
    for (name, help) in sections {
        page += &format!(".SS {}\n.nf\n{}\n.fi\n", escape(name), preformatted(help));
    }
    page += ".SH OVERVIEW\n.nf\n";
    page += &preformatted(top);
    page += "\n.fi\n.SH SEE ALSO\n";
    page += "\\fBmultus\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR for a command's own help.\n";
    page
}

/// Text for a filled line: backslashes and dashes as roff reads them.
fn escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// Lines for a no-fill block: escaped, and none read as a request.
fn preformatted(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|l| {
            let l = escape(l);
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_from_clap_help() {
        let top = "multus-rs: pods\n\nUsage: multus <COMMAND>\n\nCommands:\n  install   Install\n  \
                   lint      Check NADs, and a long\n            wrapped line\n  help      Print\n\n\
                   Options:\n  -h, --help  Print help\n";
        assert_eq!(commands(top), ["install", "lint"]);
    }

    #[test]
    fn requests_and_escapes_stay_text() {
        let page = render(
            "multus-rs: pods on more than one network\n",
            &[(
                "lint".into(),
                ".TH not a request\n'x\nC:\\path --flag".into(),
            )],
            "multus-rs 0.1.0",
            "2026-12-05",
        );
        assert!(page.contains("\n\\&.TH not a request\n\\&'x\nC:\\epath \\-\\-flag\n"));
        assert!(page.starts_with(".TH MULTUS 1 \"2026-12-05\" \"multus\\-rs 0.1.0\""));
        assert!(page.contains(".SH NAME\nmultus \\- pods on more than one network\n"));
    }
}
