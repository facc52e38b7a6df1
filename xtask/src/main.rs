//! Project tasks: `cargo xtask demo` (the main job) and `cargo xtask bench`.

mod bench;
mod demo;
mod measure;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    // Release builds abort on panic, so namespaces are removed here rather than by Drop.
    if cfg!(panic = "abort") {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default_hook(info);
            testkit::delete_all_of_this_process();
        }));
    }
    let mut args = std::env::args().skip(1);
    let task = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "demo" => demo::run(),
        "bench" => bench::run(&rest),
        _ => {
            eprintln!("usage: cargo xtask <demo | bench [--cycles N]>");
            std::process::exit(2)
        }
    }
}

/// Builds the release binaries and returns the path of `cni-plugins`.
pub fn build_release() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "plugins"])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release -p plugins failed");
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace root")?
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("release/cni-plugins"))
}
