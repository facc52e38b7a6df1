//! Project tasks: `cargo xtask build` (the static release binaries, by scripts/build.sh),
//! `cargo xtask image` (the container image, built and tried), `cargo xtask package` (the RPMs
//! and the .deb, built and checked), `cargo xtask bench`, `cargo xtask bench-multus`,
//! `cargo xtask bench-whereabouts`, `cargo xtask bench-thick`, `cargo xtask bench-cluster`,
//! `cargo xtask bench-admission`, `cargo xtask bench-hotplug` and
//! `cargo xtask bench-reconcile` (on the real node of scripts/cluster.sh), `cargo xtask bench-probe`,
//! `cargo xtask vm-test` (the tests that need a full kernel), `cargo xtask aarch64-test` (the
//! aarch64 binaries under the integration suites, in qemu-user) and `cargo xtask vm-bench` (the
//! macvlan, ipvlan and vlan benchmarks in that kernel).

mod aarch64;
mod bench;
mod bench_admission;
mod bench_cluster;
mod bench_hotplug;
mod bench_multus;
mod bench_probe;
mod bench_reconcile;
mod bench_thick;
mod bench_whereabouts;
mod dhcp_bench;
mod image;
mod measure;
mod package;
mod srpm;
mod test_build;
mod vm;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
pub use package_layout::{
    cargo, epoch_as, filter, output, source_date_epoch, workspace_root, Arch, VERSION,
};
use package_layout::{manual, sbom};

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
        "bench-whereabouts" => bench_whereabouts::run(&rest),
        "bench-thick" => bench_thick::run(&rest),
        "bench-cluster" => bench_cluster::run(&rest),
        "bench-admission" => bench_admission::run(&rest),
        "bench-hotplug" => bench_hotplug::run(&rest),
        "bench-reconcile" => bench_reconcile::run(&rest),
        "bench-probe" => bench_probe::run(&rest),
        "vm-test" => vm::run(&rest),
        "aarch64-test" => aarch64::run(&rest),
        "image" => image::run(&rest),
        "package" => package::run(&rest),
        "vm-bench" => vm::bench(&rest),
        "vm-memory" => vm::memory(&rest),
        // What `vm-bench` runs inside the VM.
        "bench-in-vm" => bench::run_in_vm(&rest),
        "build" => {
            println!("{}", build_release()?.display());
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <build | image [amd64|index] | package [--image REPO] [--out DIR] | bench [--cycles N] | bench dhcp [--leases N] | bench-multus [--cycles N] [--profile zero|datacenter|edge] | bench-multus --scale N,N,... | bench-whereabouts [--profile zero|datacenter|edge] [--rounds N] | bench-thick [--cycles N] [--profile zero|datacenter|edge] | bench-cluster [--pods N] [--rounds N] | bench-admission [--nads N] [--rounds N] | bench-hotplug [--rounds N] | bench-reconcile [--pods N] | bench-probe [--cycles N] | vm-test [aarch64] [RUN[,RUN...] [FILTER...]] | aarch64-test [SUITE [FILTER...]] | vm-bench [--cycles N] | vm-memory>"
            );
            std::process::exit(2)
        }
    }
}

/// Builds the release `cni-plugins` and `multus` (scripts/build.sh) and returns the path of
/// `cni-plugins`; `multus` is beside it.
pub fn build_release() -> Result<PathBuf> {
    build_release_for(Arch::X86_64)
}
/// [`build_release`] for `arch`.
pub fn build_release_for(arch: Arch) -> Result<PathBuf> {
    let script = workspace_root().join("scripts/build.sh");
    let out = Command::new(&script)
        .arg(arch.rust())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed", script.display());
    }
    let path = String::from_utf8(out.stdout).context("scripts/build.sh printed non-UTF-8")?;
    Ok(PathBuf::from(path.trim_end()))
}
