//! Project tasks: `cargo xtask build` (the static release binaries; scripts/demo.sh runs
//! `multus try` with them), `cargo xtask image` (the container image, built and tried),
//! `cargo xtask package` (the RPMs and the .deb, built and checked), `cargo xtask bench`, `cargo xtask bench-multus`, `cargo xtask vm-test` (the tests that need
//! a full kernel) and `cargo xtask vm-bench` (the macvlan, ipvlan and vlan benchmarks in that kernel).

mod bench;
mod bench_multus;
mod dhcp_bench;
mod image;
mod measure;
mod package;
mod vm;

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
        "bench" => match rest.split_first() {
            Some((first, dhcp_args)) if first == "dhcp" => dhcp_bench::run_alone(dhcp_args),
            _ => bench::run(&rest),
        },
        "bench-multus" => bench_multus::run(&rest),
        "vm-test" => vm::run(&rest),
        "image" => image::run(),
        "package" => package::run(&rest),
        "vm-bench" => vm::bench(&rest),
        // What `vm-bench` runs inside the VM.
        "bench-in-vm" => bench::run_in_vm(&rest),
        "build" => {
            println!("{}", build_release()?.display());
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <build | image | package [--image REPO] [--out DIR] | bench [--cycles N] | bench dhcp [--leases N] | bench-multus [--cycles N] [--profile zero|datacenter|edge] | bench-multus --scale N,N,... | vm-test [TEST [FILTER...]] | vm-bench [--cycles N]>"
            );
            std::process::exit(2)
        }
    }
}

/// The target the node binaries are built for: this machine's, named explicitly so that
/// `RUSTFLAGS` reach the binaries and not the build's proc-macros.
const NODE_TARGET: &str = "x86_64-unknown-linux-gnu";

/// Builds the release `cni-plugins` and `multus`, statically linked, and returns the path of
/// `cni-plugins`; `multus` is beside it.
///
/// Static linking keeps a plugin call's memory at about 2.2 MB: a dynamically linked process
/// also maps (and counts) ld.so and the whole of libc.so.
pub fn build_release() -> Result<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace root")?
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    build_release_into(&target)
}

/// [`build_release`] into the target directory `target`.
pub fn build_release_into(target: &std::path::Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "plugins",
            "-p",
            "multus-node",
            "--target",
            NODE_TARGET,
        ])
        // sha2's compact software SHA-512: masquerade chain names hash a few bytes a call.
        .env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static --cfg sha2_backend=\"soft\" --cfg sha2_backend_soft=\"compact\"",
        )
        .env("CARGO_TARGET_DIR", target)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release -p plugins -p multus-node failed");
    }
    Ok(target.join(NODE_TARGET).join("release/cni-plugins"))
}
