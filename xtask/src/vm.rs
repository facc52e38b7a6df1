//! `cargo xtask vm-test [aarch64]`: runs the test binaries that have VLAN, ipvlan, dummy, vrf and
//! 8021q parts under Debian's cloud kernel in qemu, because the kernel of the development and CI
//! machines lacks them and cannot load modules. The kernel package is downloaded once into
//! `<target>/vm`; the initramfs (busybox, the tools the tests run, the test binaries at their own
//! absolute paths) is rebuilt on every run. Inside the VM `MULTUS_RS_VM=1` turns the tests' "this
//! kernel cannot" skips into failures. With `aarch64` the same runs happen in an arm64 guest
//! (Debian's arm64 cloud kernel under qemu-system-aarch64): the test binaries and `cni-plugins`
//! cross-built, the reference plugins built for arm64, and the tools and their libraries from
//! Debian's arm64 packages (scripts/deps.sh).
//!
//! `cargo xtask vm-memory` boots a guest of each architecture, x86_64 and aarch64 (Debian's arm64
//! cloud kernel under qemu-system-aarch64), and measures there what a plugin call costs in
//! memory: under qemu-user a process's RSS would be the emulator's.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::Arch;

/// The runs in the VM: the parts of the test binaries that only a full kernel can run. Each
/// names its binary by package and target (`lib` for the crate's unit tests, `suite` for its
/// integration tests) and gives the libtest arguments that pick those parts.
struct VmRun {
    name: &'static str,
    package: &'static str,
    target: &'static str,
    args: &'static [&'static str],
}

/// The VM's CPUs for the tests, and the tests run at once: the machines have two cores, and
/// nothing else runs while the VM does.
const TEST_CPUS: u32 = 2;

const RUNS: &[VmRun] = &[
    VmRun {
        name: "netlink",
        package: "netkit",
        target: "suite",
        args: &["netlink::"],
    },
    VmRun {
        name: "plugins",
        package: "plugins",
        target: "lib",
        args: &[],
    },
    VmRun {
        name: "link_plugins",
        package: "plugins",
        target: "suite",
        args: &[
            "bridge::",
            "conflict_probe::",
            "macvlan::",
            "ipvlan::",
            "dhcp_macvlan_ipvlan::",
            "dummy::",
            "vlan::",
            "vrf::",
            "--skip",
            "node_bridge::",
        ],
    },
    // The other comparisons run whole on this kernel, in `cargo test`; under TCG they would
    // take most of the VM's time. bridge's has the VLAN-filtering cases.
    VmRun {
        name: "side_by_side",
        package: "plugins",
        target: "suite",
        args: &[
            "--exact",
            "side_by_side::bridge_matches_the_reference",
            "side_by_side::dummy_matches_the_reference",
            "side_by_side::ipvlan_matches_the_reference",
            "side_by_side::vlan_matches_the_reference",
            "side_by_side::vrf_matches_the_reference",
        ],
    },
];

/// Kernel modules to load (with their dependencies): the link types, tun, the traffic
/// control bandwidth uses, and netfilter for ipMasq (nft and iptables-nft), the spoof check
/// (meta in the bridge family), portmap and firewall.
const MODULES: &[&str] = &[
    "bridge",
    "veth",
    "macvlan",
    "ipvlan",
    "8021q",
    "dummy",
    "vrf",
    "tun",
    "ifb",
    "sch_tbf",
    "sch_ingress",
    "cls_u32",
    "act_mirred",
    "nf_tables",
    "nft_chain_nat",
    "nft_masq",
    "nft_compat",
    "xt_MASQUERADE",
    "xt_comment",
    "xt_addrtype",
    "xt_multiport",
    "xt_mark",
    "xt_conntrack",
    "xt_nat",
    "xt_tcpudp",
    "nft_meta_bridge",
];

/// Programs the tests run, found on this machine's PATH and put at the same path in the VM.
const TOOLS: &[&str] = &[
    "ip",
    "bridge",
    "nft",
    "iptables",
    "ip6tables",
    "iptables-save",
    "ip6tables-save",
    "iptables-restore",
    "ip6tables-restore",
    "ping",
    "dnsmasq",
    "tc",
];

/// PATH inside the VM and for finding the tools here: /usr/sbin first, so iproute2 wins over
/// any busybox applet of the same name.
const PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// TCG runs the whole set in about 10 minutes (most of it the side-by-side cases where the
/// reference waits for IPv6 DAD); this is the point where a hang is assumed.
const TIMEOUT: Duration = Duration::from_secs(1800);

const MARK: &str = "=== vm-test";

/// `args`: `aarch64` first for the arm64 guest; then none for every run, or runs' names
/// (`netlink,link_plugins`) and libtest arguments for them instead of their own, for a quicker
/// run of some tests while working on them.
pub fn run(args: &[String]) -> Result<()> {
    let (arch, args) = match args.split_first() {
        Some((first, rest)) if first == "aarch64" => (Arch::Aarch64, rest),
        _ => (Arch::X86_64, args),
    };
    let mut built = build(arch)?;
    let mut chosen: Option<&[String]> = None;
    if let Some((only, rest)) = args.split_first() {
        let names: Vec<&str> = only.split(',').collect();
        for name in &names {
            ensure!(
                RUNS.iter().any(|r| r.name == *name),
                "vm-test: no run {name:?}; they are {:?}",
                RUNS.iter().map(|r| r.name).collect::<Vec<_>>()
            );
        }
        built
            .runs
            .retain(|(name, _)| names.contains(&name.as_str()));
        chosen = Some(rest);
    }
    let mut jobs = Vec::new();
    for (name, exe) in &built.runs {
        let defaults = RUNS
            .iter()
            .find(|r| r.name == name)
            .map_or(&[][..], |r| r.args);
        let mut filters = String::new();
        match chosen {
            Some(rest) if !rest.is_empty() => {
                rest.iter().try_for_each(|f| write!(filters, " {f}"))?
            }
            _ => defaults.iter().try_for_each(|f| write!(filters, " {f}"))?,
        }
        jobs.push(Job {
            name: name.clone(),
            command: format!("{} --test-threads={TEST_CPUS}{filters}", exe.display()),
        });
    }
    let mut files = vec![built.plugins_bin];
    let binaries: BTreeSet<&PathBuf> = built.runs.iter().map(|(_, exe)| exe).collect();
    files.extend(binaries.into_iter().cloned());
    let log = run_in_vm("vm-test", &test_contents(arch, files)?, &jobs, TEST_CPUS)?;
    report(&log, &built.runs)
}

/// `cargo xtask vm-bench [--cycles N]`: the macvlan, ipvlan, vlan, dummy and vrf benchmarks (`bench-in-vm`, see
/// [`crate::bench::run_in_vm`]) inside the VM, with the static release binary.
pub fn bench(args: &[String]) -> Result<()> {
    let cycles: usize = match args {
        [flag, n] if flag == "--cycles" => n.parse().context("--cycles N")?,
        _ => 50,
    };
    let bin = crate::build_release()?;
    let xtask = std::env::current_exe().context("this program's path")?;
    let job = Job {
        name: "bench".into(),
        command: format!(
            "{} bench-in-vm --bin {} --cycles {cycles}",
            xtask.display(),
            bin.display()
        ),
    };
    // One CPU: the figures stay comparable with those measured before.
    let log = run_in_vm(
        "vm-bench",
        &test_contents(Arch::X86_64, vec![xtask, bin])?,
        std::slice::from_ref(&job),
        1,
    )?;
    match job_exit(&log, &job.name) {
        Some("0") => Ok(()),
        code => bail!(
            "vm-bench: the benchmark exited with {}",
            code.unwrap_or("nothing")
        ),
    }
}

/// The calls `vm-memory` measures: a name, the binary (`multus` or a plugin of `cni-plugins`),
/// CNI_COMMAND, and the network configuration on stdin. ADD and DEL run in a network namespace
/// of their own each round.
const MEMORY_CALLS: &[(&str, &str, &str, &str)] = &[
    ("multus VERSION", "multus", "VERSION", "{}"),
    ("cni-plugins bridge VERSION", "bridge", "VERSION", "{}"),
    ("bridge + host-local ADD", "bridge", "ADD", MEMORY_BRIDGE),
    ("bridge + host-local DEL", "bridge", "DEL", MEMORY_BRIDGE),
];

const MEMORY_BRIDGE: &str = r#"{"cniVersion":"1.0.0","name":"mem","type":"bridge","bridge":"mem0","isGateway":true,"ipam":{"type":"host-local","subnet":"10.99.0.0/24"}}"#;

/// Rounds of each call; the median is kept.
const MEMORY_ROUNDS: usize = 7;

/// `cargo xtask vm-memory`: each call of [`MEMORY_CALLS`] by the release binaries of x86_64 and
/// of aarch64, each on its own architecture's kernel in a guest, under busybox's `time`; the
/// median peak RSS of each, side by side.
pub fn memory(args: &[String]) -> Result<()> {
    ensure!(args.is_empty(), "usage: cargo xtask vm-memory");
    let mut figures: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for arch in Arch::ALL {
        let plugins = crate::build_release_for(arch)?;
        let multus = plugins.with_file_name("multus");
        let job = Job {
            name: "memory".into(),
            command: memory_script(&plugins, &multus),
        };
        let contents = Contents {
            arch,
            files: [plugins, multus].map(|p| (p.clone(), p)).into(),
            tools: &[],
            foreign_tools: None,
            modules: &["bridge", "veth"],
        };
        let log = run_in_vm("vm-memory", &contents, std::slice::from_ref(&job), 1)?;
        ensure!(
            job_exit(&log, &job.name) == Some("0"),
            "vm-memory on {arch:?}: a call failed (the console log above has its error)"
        );
        // busybox 1.35's `time` takes ru_maxrss, which is in KB, for pages, and multiplies it
        // by the page size in KB: divided back here.
        let page_kb: u64 = log
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{MARK} page-kb ")))
            .context("the guest did not report its page size")?
            .trim()
            .parse()?;
        for (name, ..) in MEMORY_CALLS {
            let prefix = format!("{MARK} rss {name}: ");
            let mut kb: Vec<u64> = log
                .iter()
                .filter_map(|l| l.strip_prefix(&prefix))
                .map(|v| v.trim().parse::<u64>().map(|v| v / page_kb))
                .collect::<Result<_, _>>()?;
            ensure!(
                kb.len() == MEMORY_ROUNDS,
                "{arch:?}: {} figures for {name}, not {MEMORY_ROUNDS}",
                kb.len()
            );
            kb.sort_unstable();
            figures.entry(name).or_default().push(kb[MEMORY_ROUNDS / 2]);
        }
    }
    println!("\nPeak RSS of a call, KB (median of {MEMORY_ROUNDS}, each on its own architecture's kernel):");
    println!("| call | x86_64 | aarch64 | aarch64 / x86_64 |\n|---|---|---|---|");
    for (name, ..) in MEMORY_CALLS {
        if let Some([x86, arm]) = figures.get(name).map(Vec::as_slice) {
            println!(
                "| {name} | {x86} | {arm} | {:.2} |",
                *arm as f64 / *x86 as f64
            );
        }
    }
    Ok(())
}

/// The guest's shell commands for [`memory`]: each call [`MEMORY_ROUNDS`] times, one line of
/// peak RSS per call.
fn memory_script(plugins: &Path, multus: &Path) -> String {
    let (plugins, multus) = (plugins.display(), multus.display());
    let mut s = format!(
        "mkdir -p /opt/cni/bin\n\
         ln -s {plugins} /opt/cni/bin/bridge\n\
         ln -s {plugins} /opt/cni/bin/host-local\n\
         ln -s {multus} /opt/cni/bin/multus\n\
         echo \"{MARK} page-kb $(grep -m1 KernelPageSize /proc/self/smaps | awk '{{print $2}}')\"\n\
         status=0\n\
         for round in $(seq {MEMORY_ROUNDS}); do\n\
         touch /run/netns/n$round && unshare --net=/run/netns/n$round true || status=1\n"
    );
    for (name, bin, command, conf) in MEMORY_CALLS {
        let env = format!(
            "CNI_COMMAND={command} CNI_CONTAINERID=c$round CNI_NETNS=/run/netns/n$round \
             CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin"
        );
        let _ = write!(
            s,
            "echo '{conf}' >/tmp/conf\n\
             if {env} time -f %M -o /tmp/rss /opt/cni/bin/{bin} </tmp/conf >/tmp/out 2>&1; then\n\
             \x20 echo \"{MARK} rss {name}: $(cat /tmp/rss)\"\n\
             else\n\
             \x20 echo \"{MARK} call-failed {name}\"; cat /tmp/out; status=1\n\
             fi\n"
        );
    }
    s.push_str("done\n(exit $status)");
    s
}

/// A command the VM's init runs, with markers around it.
struct Job {
    name: String,
    command: String,
}

/// What goes into a guest besides busybox and its init.
struct Contents {
    arch: Arch,
    /// Files of this machine (this machine's path, the guest's path), with the shared libraries
    /// they need on x86_64.
    files: Vec<(PathBuf, PathBuf)>,
    /// Programs of this machine's PATH, put where its PATH has them.
    tools: &'static [&'static str],
    /// For a guest of another architecture: a tree of its Debian packages unpacked, from which
    /// the tools and every library under it come instead.
    foreign_tools: Option<PathBuf>,
    /// Kernel modules to load, with what they depend on.
    modules: &'static [&'static str],
}

/// The guest of the tests: the test binaries and what they call (`binaries`, each at its own
/// path), the tools, the reference plugins and the modules the tests use.
fn test_contents(arch: Arch, binaries: Vec<PathBuf>) -> Result<Contents> {
    let mut files: Vec<(PathBuf, PathBuf)> = binaries.into_iter().map(|p| (p.clone(), p)).collect();
    let foreign_tools = match arch {
        Arch::X86_64 => {
            // iptables loads its matches and targets (MASQUERADE, comment) from here at run
            // time. (A foreign guest gets its libraries' whole tree.)
            let xtables = Path::new("/usr/lib/x86_64-linux-gnu/xtables");
            for e in fs::read_dir(xtables).with_context(|| format!("{}", xtables.display()))? {
                let path = e?.path();
                files.push((path.clone(), path));
            }
            None
        }
        Arch::Aarch64 => Some(Path::new(PACKAGE_CACHE).join("arm64/tools/root")),
    };
    // The reference plugins of the guest's architecture, at the path the side-by-side tests
    // run them from (scripts/peers.sh builds arm64's into arm64/).
    let reference = testkit::reference_dir();
    let built = match arch {
        Arch::X86_64 => reference.clone(),
        Arch::Aarch64 => reference.join("arm64"),
    };
    for e in fs::read_dir(&built).with_context(|| format!("{}", built.display()))? {
        let e = e?;
        if e.file_type()?.is_file() {
            files.push((e.path(), reference.join(e.file_name())));
        }
    }
    Ok(Contents {
        arch,
        files,
        tools: TOOLS,
        foreign_tools,
        modules: MODULES,
    })
}

/// Stages the guest's `contents`, boots it, runs the jobs in order on `cpus` virtual CPUs, and
/// returns the console log.
fn run_in_vm(task: &str, contents: &Contents, jobs: &[Job], cpus: u32) -> Result<Vec<String>> {
    let arch = contents.arch;
    let vm = crate::test_build::target_dir()?.join("vm");
    fs::create_dir_all(&vm)?;
    let kernel = Kernel::unpack(&vm, &kernel_deb(arch)?)?;
    let root = vm.join(format!("root-{}", arch.rust()));
    stage(&root, &kernel, &busybox(arch, &vm)?, contents, jobs)?;
    let initrd = vm.join(format!("initramfs-{}.cpio", arch.rust()));
    pack(&root, &initrd)?;

    println!(
        "{task}: booting {} under qemu (TCG, {cpus} CPUs)",
        kernel.version
    );
    let started = Instant::now();
    let log = boot(arch, &kernel.vmlinuz(), &initrd, cpus)?;
    println!(
        "{task}: VM wall time {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(log)
}

/// The exit status the VM's init recorded for a job.
fn job_exit<'a>(log: &'a [String], name: &str) -> Option<&'a str> {
    let exit = format!("{MARK} exit {name} ");
    log.iter().find_map(|l| l.strip_prefix(&exit))
}

/// The runs, each with its test binary, and the `cni-plugins` binary they call.
struct Built {
    runs: Vec<(String, PathBuf)>,
    plugins_bin: PathBuf,
}

fn build(arch: Arch) -> Result<Built> {
    let built = crate::test_build::build(arch, &["netkit", "plugins"])?;
    let runs = RUNS
        .iter()
        .map(|r| Ok((r.name.to_owned(), built.test(r.package, r.target)?)))
        .collect::<Result<_>>()?;
    Ok(Built {
        runs,
        plugins_bin: built.bin("cni-plugins")?,
    })
}

/// Debian's cloud kernel, unpacked from its package.
struct Kernel {
    tree: PathBuf,
    version: String,
}

impl Kernel {
    /// Unpacks the kernel package `deb`, unless already unpacked.
    fn unpack(vm: &Path, deb: &Path) -> Result<Kernel> {
        let tree = unpacked(vm, deb)?;
        let package = tree.file_name().unwrap_or_default().to_string_lossy();
        let mut versions = fs::read_dir(tree.join("lib/modules"))?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<_>>>()?;
        ensure!(versions.len() == 1, "{package}: modules for {versions:?}");
        Ok(Kernel {
            tree,
            version: versions.remove(0),
        })
    }

    fn vmlinuz(&self) -> PathBuf {
        self.tree.join(format!("boot/vmlinuz-{}", self.version))
    }

    fn modules_dir(&self) -> PathBuf {
        self.tree.join("lib/modules").join(&self.version)
    }

    /// `wanted` and what they depend on (each module's `depends=`), in load order, with the
    /// path of each `.ko` or `.ko.xz`. The package has no modules.dep.
    fn modules_in_load_order(&self, wanted: &[&str]) -> Result<Vec<(String, PathBuf)>> {
        let dir = self.modules_dir();
        let mut files = HashMap::new();
        walk(&dir.join("kernel"), &mut |path| {
            let file = path.file_name().unwrap_or_default().to_string_lossy();
            if let Some(stem) = file
                .strip_suffix(".ko")
                .or_else(|| file.strip_suffix(".ko.xz"))
            {
                files.insert(stem.replace('-', "_"), path.to_owned());
            }
        })?;
        let builtin: HashSet<String> = fs::read_to_string(dir.join("modules.builtin"))?
            .lines()
            .filter_map(|l| l.rsplit('/').next()?.strip_suffix(".ko"))
            .map(|m| m.replace('-', "_"))
            .collect();
        let mut order = Vec::new();
        for m in wanted {
            visit(&m.replace('-', "_"), &files, &builtin, &mut order)?;
        }
        Ok(order)
    }
}

fn visit(
    module: &str,
    files: &HashMap<String, PathBuf>,
    builtin: &HashSet<String>,
    order: &mut Vec<(String, PathBuf)>,
) -> Result<()> {
    if builtin.contains(module) || order.iter().any(|(m, _)| m == module) {
        return Ok(());
    }
    let path = files
        .get(module)
        .with_context(|| format!("kernel module {module} not in the package"))?;
    for dep in module_depends(&module_bytes(path)?) {
        visit(&dep, files, builtin, order)?;
    }
    order.push((module.to_owned(), path.clone()));
    Ok(())
}

/// The module as `insmod` takes it: Debian 12 ships plain `.ko`, later releases `.ko.xz`.
fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    if path.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz").arg("-dc").arg(path).output()?;
        ensure!(out.status.success(), "xz -dc {}", path.display());
        Ok(out.stdout)
    } else {
        Ok(fs::read(path)?)
    }
}

/// The `depends=` entry of a module's .modinfo strings.
fn module_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|&b| b == 0)
        .find_map(|s| s.strip_prefix(b"depends="))
        .map(|list| {
            String::from_utf8_lossy(list)
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// Where scripts/deps.sh keeps the guests' Debian packages: the amd64 cloud kernel at the top,
/// the arm64 kernel and busybox under `arm64/`. (The download happens there: `cargo xtask` runs
/// in a namespace with no network.)
const PACKAGE_CACHE: &str = "/var/cache/multus-rs";

/// The Debian architecture name.
fn debian_arch(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "amd64",
        Arch::Aarch64 => "arm64",
    }
}

/// The newest package named `prefix*_<arch>.deb` that scripts/deps.sh downloaded for `arch`.
fn cached_deb(arch: Arch, prefix: &str) -> Result<PathBuf> {
    let dir = match arch {
        Arch::X86_64 => PathBuf::from(PACKAGE_CACHE),
        Arch::Aarch64 => Path::new(PACKAGE_CACHE).join("arm64"),
    };
    let suffix = format!("_{}.deb", debian_arch(arch));
    let mut debs: Vec<PathBuf> = fs::read_dir(&dir)
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().unwrap_or_default().to_string_lossy();
                    name.starts_with(prefix) && name.ends_with(&suffix)
                })
                .collect()
        })
        .unwrap_or_default();
    debs.sort();
    debs.pop().with_context(|| {
        format!(
            "no {prefix}*{suffix} in {}: run scripts/deps.sh, which downloads it",
            dir.display()
        )
    })
}

/// Debian's cloud kernel package for `arch`.
fn kernel_deb(arch: Arch) -> Result<PathBuf> {
    cached_deb(arch, "linux-image-")
}

/// The guest's busybox: this machine's on x86_64, Debian's arm64 build on aarch64.
fn busybox(arch: Arch, vm: &Path) -> Result<PathBuf> {
    match arch {
        Arch::X86_64 => Ok(PathBuf::from("/bin/busybox")),
        Arch::Aarch64 => {
            Ok(unpacked(vm, &cached_deb(arch, "busybox-static_")?)?.join("bin/busybox"))
        }
    }
}

/// The package `deb` unpacked under `vm`, in a directory named after it; unpacked once.
fn unpacked(vm: &Path, deb: &Path) -> Result<PathBuf> {
    let file = deb.file_name().unwrap_or_default().to_string_lossy();
    let package = format!(
        "{}-{}",
        file.split('_').next().unwrap_or_default(),
        file.rsplit('_')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".deb")
    );
    let tree = vm.join(&package);
    if !tree.is_dir() {
        fs::create_dir_all(vm)?;
        // Unpacked beside and renamed, so an interrupted run leaves no half tree.
        let partial = vm.join(format!("{package}.partial"));
        let _ = fs::remove_dir_all(&partial);
        run_ok(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&partial))?;
        fs::rename(&partial, &tree)?;
    }
    Ok(tree)
}

fn walk(dir: &Path, f: &mut impl FnMut(&Path)) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        if e.file_type()?.is_dir() {
            walk(&e.path(), f)?;
        } else {
            f(&e.path());
        }
    }
    Ok(())
}

fn run_ok(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

/// The initramfs tree, which mirrors this machine's paths.
struct Root {
    dir: PathBuf,
    copied: HashSet<PathBuf>,
}

impl Root {
    fn path(&self, abs: &Path) -> PathBuf {
        self.dir.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    fn write(&self, abs: &str, text: &str) -> Result<()> {
        let p = self.path(Path::new(abs));
        fs::create_dir_all(p.parent().context("no parent")?)?;
        Ok(fs::write(p, text)?)
    }

    /// Copies the host file `src` to the guest's path `at`, with the shared libraries it needs
    /// (none for a static binary or another architecture's, which ldd does not read).
    fn install(&mut self, src: &Path, at: &Path) -> Result<()> {
        if !self.copied.insert(at.to_owned()) {
            return Ok(());
        }
        self.copy(src, at)
            .with_context(|| format!("putting {} into the initramfs", src.display()))
    }

    fn copy(&mut self, src: &Path, at: &Path) -> Result<()> {
        let dst = self.path(at);
        fs::create_dir_all(dst.parent().context("no parent")?)?;
        if dst.is_symlink() {
            // An absolute link would lead the copy out of the tree.
            fs::remove_file(&dst)?;
        }
        fs::copy(src, &dst)?;
        let out = Command::new("ldd").arg(src).output()?;
        for lib in String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter(|w| w.starts_with('/'))
        {
            self.install(Path::new(lib), Path::new(lib))?;
        }
        Ok(())
    }

    /// Every file and link under `tree`'s lib/ and usr/lib/ (a foreign guest's libraries, and
    /// what they load at run time, such as iptables's xtables), at the same paths in the guest.
    /// glibc's character set converters are left out: nothing here converts, and they are a
    /// third of the tree.
    fn install_libraries(&mut self, tree: &Path) -> Result<()> {
        let mut found = Vec::new();
        for top in ["lib", "usr/lib"] {
            walk(&tree.join(top), &mut |p| found.push(p.to_owned()))?;
        }
        for path in found {
            let rel = path.strip_prefix(tree)?;
            if rel.components().any(|c| c.as_os_str() == "gconv") {
                continue;
            }
            let dst = self.dir.join(rel);
            fs::create_dir_all(dst.parent().context("no parent")?)?;
            // lib/ and usr/lib/ are one directory in the guest: the same name may come twice.
            if dst.symlink_metadata().is_ok() {
                fs::remove_file(&dst)?;
            }
            match fs::read_link(&path) {
                Ok(target) => symlink(target, &dst),
                Err(_) => fs::copy(&path, &dst).map(drop),
            }
            .with_context(|| format!("putting {} into the initramfs", path.display()))?;
        }
        Ok(())
    }

    /// Installs the program found as `name` on this machine's PATH, at the same path; a symlink
    /// (alternatives, multi-call binaries) becomes a link to the real file, so the program
    /// still sees its own name. With `foreign`, the program is that tree's file of the same
    /// name, found at the real file's path or the same path outside /usr (the packages are
    /// not merged into /usr; this machine is).
    fn install_tool(&mut self, name: &str, foreign: Option<&Path>) -> Result<PathBuf> {
        let found = PATH
            .split(':')
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
            .with_context(|| format!("{name} is not installed (scripts/deps.sh installs it)"))?;
        let real = fs::canonicalize(&found)?;
        let src = match foreign {
            None => real.clone(),
            Some(tree) => {
                let rel = real.strip_prefix("/")?;
                [rel, rel.strip_prefix("usr").unwrap_or(rel)]
                    .iter()
                    .map(|r| tree.join(r))
                    .find(|p| p.exists())
                    .with_context(|| {
                        format!(
                            "{}: no {} (scripts/deps.sh unpacks it)",
                            tree.display(),
                            real.display()
                        )
                    })?
            }
        };
        self.install(&src, &real)?;
        if real != found {
            let link = self.path(&found);
            if link.symlink_metadata().is_err() {
                fs::create_dir_all(link.parent().context("no parent")?)?;
                symlink(&real, &link)?;
            }
        }
        Ok(real)
    }
}

fn stage(
    dir: &Path,
    kernel: &Kernel,
    busybox: &Path,
    contents: &Contents,
    jobs: &[Job],
) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    fs::create_dir_all(dir)?;
    let mut root = Root {
        dir: dir.to_owned(),
        copied: HashSet::new(),
    };
    // The same /bin, /lib ... symlinks as here (merged /usr), so every path a binary or library
    // knows itself by is valid in the VM too.
    for top in ["bin", "sbin", "lib", "lib64"] {
        let host = Path::new("/").join(top);
        match fs::read_link(&host) {
            Ok(target) => {
                // Relative, so that nothing written into the tree lands on this machine.
                let target = target.strip_prefix("/").unwrap_or(&target);
                fs::create_dir_all(dir.join(target))?;
                symlink(target, dir.join(top))?;
            }
            Err(_) => fs::create_dir_all(dir.join(top))?,
        }
    }
    for d in [
        "dev",
        "proc",
        "sys",
        "run/netns",
        "tmp",
        "var/lib",
        "root",
        "usr/sbin",
    ] {
        fs::create_dir_all(dir.join(d))?;
    }
    root.write(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )?;
    root.write("/etc/group", "root:x:0:\nnogroup:x:65534:\n")?;

    root.install(busybox, busybox)?;
    let foreign = contents.foreign_tools.as_deref();
    if let Some(tree) = foreign {
        root.install_libraries(tree)?;
    }
    for tool in contents.tools {
        root.install_tool(tool, foreign)?;
    }
    for (src, at) in &contents.files {
        root.install(src, at)?;
    }

    // Last, so that no file is copied through one of these links. (The arm64 busybox runs here
    // under qemu-user, which scripts/deps.sh registers with binfmt.)
    let applets = Command::new(busybox).arg("--list").output()?;
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        let link = dir.join("bin").join(applet);
        if !contents.tools.contains(&applet) && link.symlink_metadata().is_err() {
            symlink(busybox, link)?;
        }
    }

    let modules = kernel.modules_in_load_order(contents.modules)?;
    let mod_dir = format!("/lib/modules/{}", kernel.version);
    for (name, path) in &modules {
        let dst = root.path(Path::new(&format!("{mod_dir}/{name}.ko")));
        fs::create_dir_all(dst.parent().context("no parent")?)?;
        fs::write(dst, module_bytes(path)?)?;
    }
    let names: Vec<&str> = modules.iter().map(|(n, _)| n.as_str()).collect();
    root.write("/init", &init_script(&mod_dir, &names, jobs))?;
    let init = root.path(Path::new("/init"));
    let mut perm = fs::metadata(&init)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    fs::set_permissions(init, perm)?;
    Ok(())
}

/// PID 1 in the VM: mounts, modules, each job with an exit marker, power off.
fn init_script(mod_dir: &str, modules: &[&str], jobs: &[Job]) -> String {
    // The root is already a writable tmpfs: /tmp and /var/lib need no mounts of their own, and
    // binaries whose path is under /tmp stay visible. devtmpfs has no /dev/stdin, which `nft -f -`
    // opens.
    let mut s = format!(
        "#!/bin/sh\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         ln -s /proc/self/fd /dev/fd\n\
         ln -s fd/0 /dev/stdin\n\
         ln -s fd/1 /dev/stdout\n\
         ln -s fd/2 /dev/stderr\n\
         export PATH={PATH} HOME=/root MULTUS_RS_VM=1 RUST_BACKTRACE=1\n\
         echo \"{MARK} kernel $(uname -r)\"\n\
         for m in {}; do\n\
         \x20 insmod {mod_dir}/$m.ko || echo \"{MARK} module-failed $m\"\n\
         done\n\
         cd /tmp\n",
        modules.join(" ")
    );
    for job in jobs {
        let name = &job.name;
        let _ = writeln!(
            s,
            "echo \"{MARK} start {name}\"\n{}\necho \"{MARK} exit {name} $?\"",
            job.command
        );
    }
    let _ = writeln!(s, "echo \"{MARK} done\"\npoweroff -f");
    s
}

/// An uncompressed newc archive: TCG is slow at decompressing, fast at copying.
fn pack(root: &Path, out: &Path) -> Result<()> {
    let file = fs::File::create(out)?;
    run_ok(
        Command::new("sh")
            .args(["-c", "find . | cpio -o -H newc --quiet"])
            .current_dir(root)
            .stdout(file),
    )
}

/// Boots the VM and returns its serial console output, echoed as it arrives.
fn boot(arch: Arch, kernel: &Path, initrd: &Path, cpus: u32) -> Result<Vec<String>> {
    // /dev/kvm here is kvm_pvm, which cannot run a stock kernel: software emulation, one host
    // thread per virtual CPU. The initramfs (the debug test binaries, about 700 MB) is held
    // twice while it unpacks. On arm64, qemu's "virt" board, whose serial port is a PL011, and
    // a Cortex-A72: `max` would add pointer authentication, slow under TCG.
    let (qemu, machine, console): (_, &[&str], _) = match arch {
        Arch::X86_64 => ("qemu-system-x86_64", &["-cpu", "max"], "ttyS0"),
        Arch::Aarch64 => (
            "qemu-system-aarch64",
            &["-M", "virt", "-cpu", "cortex-a72"],
            "ttyAMA0",
        ),
    };
    let mut child = Command::new(qemu)
        .args(machine)
        .args(["-accel", "tcg,thread=multi", "-m", "4096"])
        .args(["-smp", &cpus.to_string()])
        .args(["-nodefaults", "-no-user-config", "-display", "none"])
        .args(["-serial", "stdio", "-no-reboot"])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            &format!("console={console} quiet panic=-1 rdinit=/init"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {qemu} (scripts/deps.sh installs it)"))?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
            buf.clear();
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + TIMEOUT;
    let mut log = Vec::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                println!("{line}");
                log.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the VM did not finish within {} s", TIMEOUT.as_secs());
            }
        }
    }
    let status = child.wait()?;
    ensure!(status.success(), "qemu failed: {status}");
    Ok(log)
}

/// One line per test binary from the markers and libtest's output; an error if any failed.
fn report(log: &[String], runs: &[(String, PathBuf)]) -> Result<()> {
    let mut problems = Vec::new();
    for line in log {
        if let Some(m) = line.strip_prefix(&format!("{MARK} module-failed ")) {
            problems.push(format!("module {m} did not load"));
        }
    }
    if !log.iter().any(|l| l == &format!("{MARK} done")) {
        problems.push("the VM stopped before running every test binary".into());
    }
    println!("vm-test results ({}):", kernel_line(log));
    for (name, _) in runs {
        let start = format!("{MARK} start {name}");
        let exit = format!("{MARK} exit {name} ");
        let body: Vec<&String> = log
            .iter()
            .skip_while(|l| **l != start)
            .take_while(|l| !l.starts_with(&exit))
            .collect();
        let code = job_exit(log, name);
        let summary = body
            .iter()
            .rev()
            .find(|l| l.starts_with("test result:"))
            .map_or("no test result", |l| l.as_str());
        let failed: BTreeSet<&str> = body
            .iter()
            .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
            .collect();
        let ok = code == Some("0");
        println!(
            "  {name:<14} {:<6} {summary}",
            if ok { "ok" } else { "FAILED" }
        );
        for t in &failed {
            println!("      failed: {t}");
        }
        if !ok {
            problems.push(format!("{name} exited with {}", code.unwrap_or("nothing")));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("vm-test failed: {}", problems.join("; "))
    }
}

fn kernel_line(log: &[String]) -> &str {
    log.iter()
        .find_map(|l| l.strip_prefix(&format!("{MARK} kernel ")))
        .unwrap_or("kernel unknown")
}
