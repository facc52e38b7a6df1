//! Build script of the two node binaries (`multus`, `cni-plugins`): sets `MULTUS_RS_COMMIT`,
//! the git commit they are built from, for `--version`. A build outside a git checkout (from a
//! source archive) takes it from the `MULTUS_RS_COMMIT` environment variable, else "unknown".
//! Nothing else of the build's machine or time goes in, so builds of one commit are identical.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=MULTUS_RS_COMMIT");
    let commit = match std::env::var("MULTUS_RS_COMMIT") {
        Ok(commit) if !commit.is_empty() => commit,
        _ => {
            // Run again when HEAD moves: HEAD itself, the branch it names, and packed refs.
            // Only files that exist: cargo takes a missing one as changed on every build.
            let rerun_if_changed = |path: &str| {
                if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
                    if std::path::Path::new(&p).exists() {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
            };
            rerun_if_changed("HEAD");
            rerun_if_changed("packed-refs");
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                rerun_if_changed(&branch);
            }
            git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=MULTUS_RS_COMMIT={commit}");
}
