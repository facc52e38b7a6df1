//! `cargo xtask package [--image REPO] [--out DIR]`: the packages of this commit, for x86_64
//! and aarch64, from the static release binaries, into target/package (or DIR), with the image
//! index `cargo xtask image` saved (which they name by digest) and a SHA256SUMS of them all:
//!
//! - RPMs from packaging/rpm/multus-rs.spec with Debian's rpmbuild: `multus-rs` (the node
//!   binaries in /usr/libexec/cni, links in /opt/cni/bin, the dhcp daemon's units),
//!   `multus-rs-microshift` (in place of microshift-multus) and
//!   `multus-rs-microshift-release-info`;
//! - a .deb of the node binaries in /usr/lib/cni, with dpkg-deb;
//! - the source RPM: the spec with the release's facts, the source tree and the vendored crates
//!   (srpm.rs).
//!
//! Then it checks them: their file lists, an install into a scratch root (manifests rendered
//! and validated, release info against the manifests' images, `--version`, the units), an
//! upgrade that keeps an edited config, that a second build gives the same bytes, and that the
//! source RPM, rebuilt for x86_64, gives the same RPMs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::{epoch_as, output, sbom, Arch, VERSION};
use package_layout::{
    put, read, settle_times, stage_node, stage_rpm, Inputs, DOC_DIR, MANIFESTS, MULTUS_PLUGINS,
    RPM_CNI_DIR, RPM_LICENSE,
};

/// The repository the packages name the image in when no `--image` is given: where a release
/// pushes the index `cargo xtask image` saved (docs/install.md). The digests are that index's.
const DEFAULT_IMAGE: &str = "ghcr.io/multus-rs/multus-rs";
/// The reference plugins' release ours match (the peers' pin): the packages provide
/// containernetworking-plugins at it, and replace every release before the next.
const PLUGINS_VERSION: &str = "1.9.1";
/// Below every 1.9.2 release, Debian's `1.9.2+ds1-1` and `1.9.2~rc1` included, and above every
/// 1.9.1 one.
const PLUGINS_NEXT: &str = "1.9.2~";
/// The .deb's lintian overrides: findings that are so by design, each with its reason.
const DEB_LINTIAN_OVERRIDES: &str = "usr/share/lintian/overrides/multus-rs";
/// Who the packages name as their maintainer.
const MAINTAINER: &str = "multus-rs developers <multus-rs@localhost>";
const DEB_CNI_DIR: &str = "usr/lib/cni";

struct Options {
    image: String,
    out: PathBuf,
}

/// The four files `build` makes.
pub struct Packages {
    pub node_rpm: PathBuf,
    pub microshift_rpm: PathBuf,
    pub release_info_rpm: PathBuf,
    pub deb: PathBuf,
}

impl Packages {
    /// Each package with its name.
    fn named(&self) -> [(&'static str, &Path); 4] {
        [
            ("multus-rs", &self.node_rpm),
            ("multus-rs-microshift", &self.microshift_rpm),
            ("multus-rs-microshift-release-info", &self.release_info_rpm),
            ("multus-rs", &self.deb),
        ]
    }

    fn all(&self) -> [&Path; 4] {
        [
            &self.node_rpm,
            &self.microshift_rpm,
            &self.release_info_rpm,
            &self.deb,
        ]
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let root = crate::workspace_root();
    let mut opts = Options {
        image: DEFAULT_IMAGE.to_owned(),
        out: root.join("target/package"),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--image" => opts.image = it.next().context("--image REPO")?.clone(),
            "--out" => opts.out = PathBuf::from(it.next().context("--out DIR")?),
            other => {
                bail!("unknown flag {other:?}: cargo xtask package [--image REPO] [--out DIR]")
            }
        }
    }
    let index = crate::build_release()?.with_file_name(crate::image::INDEX_ARCHIVE);
    let digests = crate::image::index_digests(&index)?;
    let commit = output(
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["rev-parse", "HEAD"]),
    )?
    .trim()
    .to_owned();
    // Both read once: the same commit, the same packages, whatever lands while they build.
    let epoch = crate::source_date_epoch()?;
    // The release info is noarch: each architecture's build makes it, and their files must
    // agree (the headers name the build's platform).
    let mut release_info: Option<String> = None;
    let mut artifacts = Vec::new();
    for arch in Arch::ALL {
        let bins = crate::build_release_for(arch)?
            .parent()
            .context("release dir")?
            .to_path_buf();
        let inputs = Inputs::new(
            arch,
            bins,
            &opts.image,
            digests.clone(),
            commit.clone(),
            epoch.clone(),
        )?;
        let packages = build(&inputs, &opts.out, 1)?;
        for p in packages.all() {
            let kb = std::fs::metadata(p)?.len().div_ceil(1024);
            println!("{} ({kb} KB)", p.display());
        }
        let info = output(
            Command::new("rpm")
                .args(["-qp", "--dump"])
                .arg(&packages.release_info_rpm),
        )?;
        ensure!(
            release_info.as_ref().is_none_or(|first| *first == info),
            "{}'s files differ between the architectures' builds",
            packages.release_info_rpm.display()
        );
        release_info = Some(info);
        check(&inputs, &packages)?;
        // One source RPM serves both architectures. It is rebuilt for x86_64 only: a rebuild
        // compiles everything from nothing, and aarch64's second one would double the step's
        // time in the test command (docs/install.md).
        if arch == Arch::X86_64 {
            let srpm = source_rpm(&inputs, &opts.out)?;
            rebuilt_from_source(&inputs, &packages, &srpm)?;
            artifacts.push(srpm);
        }
        println!("{} packages checked", arch.rust());
        artifacts.extend(packages.all().map(Path::to_path_buf));
        artifacts.extend(write_sboms(&inputs, &packages, &opts.out)?);
    }
    // The images the packages name, as the release ships them, and a checksum of every file.
    let index_copy = opts
        .out
        .join(format!("multus-rs-image-index-{VERSION}.tar"));
    std::fs::copy(&index, &index_copy)?;
    artifacts.push(index_copy);
    artifacts.sort();
    artifacts.dedup();
    write_sums(&opts.out, &artifacts)
}

/// Findings of lintian (the .deb) and rpmlint (the RPMs) that `lint` lets pass, each with its
/// reason in docs/install.md; the ones that are so by design are overridden in the packages
/// (packaging/deb/lintian-overrides, packaging/rpm/rpmlint.toml) instead.
const LINTIAN_LEFT: &[&str] = &[
    // The maintainer address is a placeholder until the project has one of its own.
    "bogus-mail-host",
    "bogus-mail-host-in-debian-changelog",
];

/// lintian and rpmlint find no error and no warning in the packages.
fn lint(p: &Packages) -> Result<()> {
    let lintian = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--suppress-tags"])
        .arg(LINTIAN_LEFT.join(","))
        .arg(&p.deb)
        .output()
        .context("running lintian")?;
    ensure!(
        lintian.status.success(),
        "lintian on {}:\n{}",
        p.deb.display(),
        String::from_utf8_lossy(&lintian.stdout)
    );
    let rpmlint = Command::new("rpmlint")
        .arg("-c")
        .arg(crate::workspace_root().join("packaging/rpm/rpmlint.toml"))
        .args([&p.node_rpm, &p.microshift_rpm, &p.release_info_rpm])
        .output()
        .context("running rpmlint")?;
    let report = String::from_utf8_lossy(&rpmlint.stdout);
    ensure!(
        rpmlint.status.success() && report.contains(" 0 errors, 0 warnings"),
        "rpmlint:\n{report}"
    );
    Ok(())
}

/// Writes the SBOMs beside the packages: each binary's, as the node packages hold it, and each
/// package's; checks them with the SPDX validator, and against the binaries and packages they
/// describe. Returns their paths.
fn write_sboms(inputs: &Inputs, p: &Packages, out: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (bin, doc) in &inputs.sboms {
        let path = out.join(format!("{bin}-{VERSION}.{}.spdx.json", inputs.arch.rust()));
        std::fs::write(&path, doc)?;
        check_binary_sbom(inputs, bin, doc)?;
        written.push(path);
    }
    for (name, package) in p.named() {
        let unpacked = tempfile::tempdir()?;
        let is_deb = package.extension().is_some_and(|e| e == "deb");
        if is_deb {
            output(
                Command::new("dpkg-deb")
                    .arg("-x")
                    .arg(package)
                    .arg(unpacked.path()),
            )?;
        } else {
            output(
                Command::new("sh")
                    .current_dir(unpacked.path())
                    .args(["-c", "rpm2cpio \"$0\" | cpio -idm --quiet"])
                    .arg(package),
            )?;
        }
        let mut doc = sbom::Document::new()?;
        let subject = doc.package(name, package, unpacked.path(), &inputs.crates)?;
        let file_name = package.file_name().context("a package's name")?;
        let path = out.join(format!("{}.spdx.json", file_name.to_string_lossy()));
        std::fs::write(
            &path,
            doc.finish(&file_name.to_string_lossy(), &subject, &inputs.epoch)?,
        )?;
        check_package_sbom(&path, package, is_deb)?;
        written.push(path);
    }
    let paths: Vec<&Path> = written.iter().map(PathBuf::as_path).collect();
    sbom::validate(&paths)?;
    Ok(written)
}

/// A binary's SBOM names its checksum, and every crate whose source paths the binary carries
/// (in its panic messages, under the build's /crates) is among the crates it lists.
fn check_binary_sbom(inputs: &Inputs, bin: &str, doc: &str) -> Result<()> {
    let doc: serde_json::Value = serde_json::from_str(doc)?;
    let data = std::fs::read(inputs.bins.join(bin))?;
    let sha256 = &sbom::file_sums(&[&inputs.bins.join(bin)])?[0].1;
    let described = doc["packages"]
        .as_array()
        .context("packages")?
        .iter()
        .find(|p| p["SPDXID"] == format!("SPDXRef-Binary-{bin}"))
        .context("the binary's own element")?;
    ensure!(
        described["checksums"][1]["checksumValue"].as_str() == Some(sha256),
        "{bin}'s SBOM names another file"
    );
    let listed: BTreeSet<String> = doc["packages"]
        .as_array()
        .context("packages")?
        .iter()
        .filter_map(|p| {
            Some(format!(
                "{}-{}",
                p["name"].as_str()?,
                p["versionInfo"].as_str()?
            ))
        })
        .collect();
    // `/crates/<name>-<version>/`, as scripts/build.sh writes cargo's registry sources
    let text = String::from_utf8_lossy(&data);
    let mut seen = BTreeSet::new();
    for piece in text.split("/crates/").skip(1) {
        if let Some(krate) = piece.split('/').next().filter(|k| !k.is_empty()) {
            seen.insert(krate.to_owned());
        }
    }
    ensure!(
        seen.len() >= 20,
        "{bin} names only {} crates' sources: did the build's path remapping change?",
        seen.len()
    );
    let missing: Vec<&String> = seen.difference(&listed).collect();
    ensure!(
        missing.is_empty(),
        "{bin} holds crates its SBOM leaves out: {missing:?}"
    );
    Ok(())
}

/// A package's SBOM names the package's checksum and exactly its regular files.
fn check_package_sbom(sbom_path: &Path, package: &Path, is_deb: bool) -> Result<()> {
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(sbom_path)?)?;
    let sha256 = &sbom::file_sums(&[package])?[0].1;
    let subject = &doc["packages"]
        .as_array()
        .context("packages")?
        .iter()
        .find(|p| p["primaryPackagePurpose"] == "INSTALL")
        .context("the package's own element")?;
    ensure!(
        subject["checksums"][1]["checksumValue"].as_str() == Some(sha256),
        "{} names another file than {}",
        sbom_path.display(),
        package.display()
    );
    let files: BTreeSet<String> = doc["files"]
        .as_array()
        .context("files")?
        .iter()
        .filter_map(|f| Some(f["fileName"].as_str()?.trim_start_matches('.').to_owned()))
        .collect();
    let listing = if is_deb {
        deb_listing(package)?
    } else {
        rpm_listing(package)?
    };
    let regular: BTreeSet<String> = listing
        .iter()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.rsplit(' ').next().map(str::to_owned))
        .collect();
    ensure!(
        files == regular,
        "{}: the files differ from the package's: {:?} / {:?}",
        sbom_path.display(),
        files.symmetric_difference(&regular).collect::<Vec<_>>(),
        regular.len()
    );
    Ok(())
}

/// Writes `out/SHA256SUMS` for `artifacts` (files in `out`), as `sha256sum` does, and checks
/// it with `sha256sum -c`.
fn write_sums(out: &Path, artifacts: &[PathBuf]) -> Result<()> {
    let names: Vec<&std::ffi::OsStr> = artifacts
        .iter()
        .map(|a| a.file_name().context("an artifact's name"))
        .collect::<Result<_>>()?;
    let sums = output(Command::new("sha256sum").current_dir(out).args(&names))?;
    std::fs::write(out.join("SHA256SUMS"), &sums)?;
    output(Command::new("sha256sum").current_dir(out).args([
        "--check",
        "--strict",
        "--quiet",
        "SHA256SUMS",
    ]))?;
    println!(
        "{} ({} files)",
        out.join("SHA256SUMS").display(),
        names.len()
    );
    Ok(())
}

/// packaging/rpm/multus-rs.spec with the release's facts above it, as %global lines: what the
/// source RPM carries, so that `rpmbuild --rebuild` needs no `--define`.
fn spec_text(inputs: &Inputs, release: u32) -> Result<String> {
    let digest = |arch: Arch| {
        inputs
            .digests
            .get(arch.oci())
            .cloned()
            .with_context(|| format!("the image index has no {arch:?} image"))
    };
    let globals = [
        ("version", VERSION.to_owned()),
        ("release", release.to_string()),
        ("plugins_version", PLUGINS_VERSION.to_owned()),
        ("plugins_next", PLUGINS_NEXT.to_owned()),
        ("commit", inputs.commit.clone()),
        ("maintainer", MAINTAINER.to_owned()),
        ("source_date", inputs.epoch.clone()),
        ("changelog_date", epoch_as(&inputs.epoch, "%a %b %d %Y")?),
        ("image", inputs.image.clone()),
        ("digest_amd64", digest(Arch::X86_64)?),
        ("digest_arm64", digest(Arch::Aarch64)?),
    ];
    let mut text: String = globals
        .iter()
        .map(|(k, v)| format!("%global {k} {v}\n"))
        .collect();
    text.push_str(&read("packaging/rpm/multus-rs.spec")?);
    Ok(text)
}

/// Runs `rpmbuild VERB FILE` for `arch`: its work under `top`, the RPMs into `rpms` by their
/// plain names and the source RPM into `srpms`, with `defines` besides. --nodeps: BuildRequires
/// names Fedora's packages, which Debian's rpm database lacks.
fn rpmbuild(
    verb: &str,
    file: &Path,
    arch: Arch,
    [top, rpms, srpms]: [&Path; 3],
    defines: &[(&str, String)],
    epoch: &str,
) -> Result<()> {
    let dirs = [
        ("_topdir", top.display().to_string()),
        ("_rpmdir", rpms.display().to_string()),
        ("_srcrpmdir", srpms.display().to_string()),
        (
            "_build_name_fmt",
            "%%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm".to_owned(),
        ),
    ];
    output(
        Command::new("rpmbuild")
            .args([verb, "--quiet", "--nodeps", "--target", arch.rust()])
            .args(
                dirs.iter()
                    .chain(defines)
                    .flat_map(|(k, v)| ["--define".to_owned(), format!("{k} {v}")]),
            )
            .arg(file)
            .env("SOURCE_DATE_EPOCH", epoch),
    )
    .with_context(|| format!("rpmbuild {verb} {} (Debian's rpm package)", file.display()))
    .map(drop)
}

/// The source RPM of this release into `out`: the spec with the release's facts, the source
/// tree and the vendored crates (srpm.rs).
fn source_rpm(inputs: &Inputs, out: &Path) -> Result<PathBuf> {
    let work = tempfile::tempdir()?;
    let top = work.path().join("rpmbuild");
    let sources = top.join("SOURCES");
    std::fs::create_dir_all(&sources)?;
    crate::srpm::write(&sources, &inputs.epoch)?;
    let spec = work.path().join("multus-rs.spec");
    std::fs::write(&spec, spec_text(inputs, 1)?)?;
    rpmbuild(
        "-bs",
        &spec,
        inputs.arch,
        [&top, out, out],
        &[],
        &inputs.epoch,
    )?;
    let srpm = out.join(format!("multus-rs-{VERSION}-1.src.rpm"));
    let kb = std::fs::metadata(&srpm)?.len().div_ceil(1024);
    println!("{} ({kb} KB)", srpm.display());
    Ok(srpm)
}

/// The source RPM, rebuilt for `inputs.arch` as a distribution's builder would (`rpmbuild
/// --rebuild`: the binaries compiled from its sources, offline, in rpmbuild's own directory
/// with a CARGO_HOME of its own), gives the RPMs `p` holds, byte for byte: the same commit
/// makes the same binaries whatever the checkout's path and cargo's home.
fn rebuilt_from_source(inputs: &Inputs, p: &Packages, srpm: &Path) -> Result<()> {
    let work = tempfile::tempdir()?;
    let out = work.path().join("rpms");
    rpmbuild(
        "--rebuild",
        srpm,
        inputs.arch,
        [&work.path().join("rpmbuild"), &out, &out],
        &[],
        &inputs.epoch,
    )?;
    for built in [&p.node_rpm, &p.microshift_rpm, &p.release_info_rpm] {
        let again = out.join(built.file_name().context("an RPM's name")?);
        ensure!(
            std::fs::read(built)? == std::fs::read(&again)?,
            "{} differs when rebuilt from {}: compare `rpm -qp --dump` of both",
            built.display(),
            srpm.display()
        );
    }
    Ok(())
}

/// Builds the four packages into `out`, with rpm release `release`.
fn build(inputs: &Inputs, out: &Path, release: u32) -> Result<Packages> {
    let work = tempfile::tempdir()?;
    std::fs::create_dir_all(out)?;

    // The RPMs: one staged tree, one spec, three packages.
    let staged = work.path().join("staged");
    stage_rpm(inputs, &staged)?;
    let spec = work.path().join("multus-rs.spec");
    std::fs::write(&spec, spec_text(inputs, release)?)?;
    // Built as a distribution's builder builds them, by `rpmbuild --rebuild` of a source RPM,
    // which stamps them with its cookie (build host and time): the same bytes as a rebuild of
    // the real source RPM. With `staged` defined nothing is compiled, so this source RPM's
    // sources are empty files.
    let sources = work.path().join("sources");
    std::fs::create_dir(&sources)?;
    for name in crate::srpm::names() {
        std::fs::write(sources.join(name), "")?;
    }
    let defines = [
        ("_sourcedir", sources.display().to_string()),
        ("staged", staged.display().to_string()),
    ];
    let top = |name: &str| work.path().join(name);
    rpmbuild(
        "-bs",
        &spec,
        inputs.arch,
        [&top("srpm"), out, &sources],
        &defines,
        &inputs.epoch,
    )?;
    rpmbuild(
        "--rebuild",
        &sources.join(format!("multus-rs-{VERSION}-{release}.src.rpm")),
        inputs.arch,
        [&top("rpmbuild"), out, &sources],
        &defines,
        &inputs.epoch,
    )?;
    let rpm = |name: &str, arch: &str| out.join(format!("{name}-{VERSION}-{release}.{arch}.rpm"));

    // The .deb.
    let deb_root = work.path().join("deb");
    stage_node(inputs, &deb_root, DEB_CNI_DIR, "lib/systemd/system")?;
    let size_kb: u64 = ["multus", "cni-plugins"]
        .iter()
        .map(|b| std::fs::metadata(inputs.bins.join(b)).map(|m| m.len().div_ceil(1024)))
        .sum::<std::io::Result<u64>>()?;
    put(
        &deb_root,
        "DEBIAN/control",
        read("packaging/deb/control")?
            .replace("@VERSION@", VERSION)
            .replace("@ARCH@", deb_arch(inputs.arch))
            .replace("@PLUGINS_VERSION@", PLUGINS_VERSION)
            .replace("@PLUGINS_NEXT@", PLUGINS_NEXT)
            .replace("@SIZE_KB@", &size_kb.to_string())
            .replace("@MAINTAINER@", MAINTAINER)
            .as_bytes(),
        0o644,
    )?;
    for script in ["postinst", "prerm", "postrm"] {
        put(
            &deb_root,
            &format!("DEBIAN/{script}"),
            read(&format!("packaging/deb/{script}"))?.as_bytes(),
            0o755,
        )?;
    }
    put(
        &deb_root,
        DEB_LINTIAN_OVERRIDES,
        read("packaging/deb/lintian-overrides")?.as_bytes(),
        0o644,
    )?;
    put(
        &deb_root,
        &format!("{DOC_DIR}/copyright"),
        read("packaging/deb/copyright")?.as_bytes(),
        0o644,
    )?;
    let changelog = read("packaging/deb/changelog")?
        .replace("@VERSION@", VERSION)
        .replace("@COMMIT@", &inputs.commit)
        .replace("@MAINTAINER@", MAINTAINER)
        .replace(
            "@DATE@",
            &epoch_as(&inputs.epoch, "%a, %d %b %Y %H:%M:%S +0000")?,
        );
    let gz = work.path().join("changelog");
    std::fs::write(&gz, changelog)?;
    output(Command::new("gzip").args(["-9n"]).arg(&gz))?;
    put(
        &deb_root,
        &format!("{DOC_DIR}/changelog.gz"),
        &std::fs::read(gz.with_extension("gz"))?,
        0o644,
    )?;
    settle_times(&deb_root, &inputs.epoch)?;
    let deb = out.join(format!("multus-rs_{VERSION}_{}.deb", deb_arch(inputs.arch)));
    output(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&deb_root)
            .arg(&deb)
            .env("SOURCE_DATE_EPOCH", &inputs.epoch),
    )?;
    Ok(Packages {
        node_rpm: rpm("multus-rs", inputs.arch.rust()),
        microshift_rpm: rpm("multus-rs-microshift", inputs.arch.rust()),
        release_info_rpm: rpm("multus-rs-microshift-release-info", "noarch"),
        deb,
    })
}

/// Debian's name for the architecture (rpm's is Rust's).
fn deb_arch(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "amd64",
        Arch::Aarch64 => "arm64",
    }
}

/// `mode owner:group path` lines, the way the checks compare file lists.
type Listing = BTreeSet<String>;

/// What `rpm -qlp` says the package holds.
fn rpm_listing(package: &Path) -> Result<Listing> {
    let text = output(
        Command::new("rpm")
            .args([
                "-qp",
                "--qf",
                "[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\\n]",
            ])
            .arg(package),
    )?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// What `dpkg-deb -c` says the package holds (directories left out).
fn deb_listing(package: &Path) -> Result<Listing> {
    let text = output(Command::new("dpkg-deb").arg("-c").arg(package))?;
    let mut listing = Listing::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        ensure!(fields.len() >= 6, "dpkg-deb -c line {line:?}");
        let (perms, owner, path) = (fields[0], fields[1].replace('/', ":"), fields[5]);
        if perms.starts_with('d') {
            continue;
        }
        listing.insert(format!("{perms} {owner} {}", path.trim_start_matches('.')));
    }
    Ok(listing)
}

/// The listing the node binaries must have under `cni_dir`.
fn expected_node(inputs: &Inputs, cni_dir: &str, unit_dir: &str) -> Listing {
    let mut want = Listing::new();
    for bin in ["multus", "cni-plugins"] {
        want.insert(format!("-rwxr-xr-x root:root /{cni_dir}/{bin}"));
    }
    for name in inputs
        .plugins
        .iter()
        .map(String::as_str)
        .chain(MULTUS_PLUGINS.iter().copied())
    {
        want.insert(format!("lrwxrwxrwx root:root /{cni_dir}/{name}"));
    }
    want.insert("lrwxrwxrwx root:root /usr/bin/multus".into());
    want.insert(format!("-rw-r--r-- root:root /{}", crate::manual::PATH));
    for bin in inputs.sboms.keys() {
        want.insert(format!("-rw-r--r-- root:root /{DOC_DIR}/{bin}.spdx.json"));
    }
    for unit in ["cni-dhcp.socket", "cni-dhcp.service"] {
        want.insert(format!("-rw-r--r-- root:root /{unit_dir}/{unit}"));
    }
    want
}

fn check_listings(inputs: &Inputs, p: &Packages) -> Result<()> {
    let mut node = expected_node(inputs, RPM_CNI_DIR, "usr/lib/systemd/system");
    for dir in [
        RPM_CNI_DIR,
        "opt/cni",
        "opt/cni/bin",
        DOC_DIR,
        "usr/share/licenses/multus-rs",
    ] {
        node.insert(format!("drwxr-xr-x root:root /{dir}"));
    }
    node.insert(format!("-rw-r--r-- root:root /{RPM_LICENSE}"));
    for name in inputs.opt_cni_bin_names() {
        node.insert(format!("lrwxrwxrwx root:root /opt/cni/bin/{name}"));
    }
    let mut microshift: Listing = [
        "-rw-r--r-- root:root /etc/crio/crio.conf.d/12-microshift-multus.conf".to_owned(),
        "-rw-r--r-- root:root /etc/microshift/config.d/00-enable-multus.yaml".to_owned(),
        format!("drwxr-xr-x root:root /{MANIFESTS}"),
        format!("drwxr-xr-x root:root /{MANIFESTS}/base"),
        format!("-rw-r--r-- root:root /{MANIFESTS}/kustomization.yaml"),
        format!("-rw-r--r-- root:root /{MANIFESTS}/scc.yaml"),
    ]
    .into_iter()
    .collect();
    for e in std::fs::read_dir(crate::workspace_root().join("deploy/base"))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        microshift.insert(format!("-rw-r--r-- root:root /{MANIFESTS}/base/{name}"));
    }
    let release_info: Listing = ["x86_64", "aarch64"]
        .map(|a| {
            format!("-rw-r--r-- root:root /usr/share/microshift/release/release-multus-{a}.json")
        })
        .into_iter()
        .collect();
    for (package, want) in [
        (&p.node_rpm, node),
        (&p.microshift_rpm, microshift),
        (&p.release_info_rpm, release_info),
    ] {
        let got = rpm_listing(package)?;
        ensure!(
            got == want,
            "{}: files differ\n  missing: {:?}\n  unexpected: {:?}",
            package.display(),
            want.difference(&got).collect::<Vec<_>>(),
            got.difference(&want).collect::<Vec<_>>()
        );
    }
    let mut want_deb = expected_node(inputs, DEB_CNI_DIR, "lib/systemd/system");
    for doc in ["copyright", "changelog.gz"] {
        want_deb.insert(format!("-rw-r--r-- root:root /{DOC_DIR}/{doc}"));
    }
    want_deb.insert(format!("-rw-r--r-- root:root /{DEB_LINTIAN_OVERRIDES}"));
    let got = deb_listing(&p.deb)?;
    ensure!(
        got == want_deb,
        "{}: files differ\n  missing: {:?}\n  unexpected: {:?}",
        p.deb.display(),
        want_deb.difference(&got).collect::<Vec<_>>(),
        got.difference(&want_deb).collect::<Vec<_>>()
    );
    // The config file is the admin's once installed, the CRI-O drop-in is not.
    let configs = output(Command::new("rpm").args(["-qcp"]).arg(&p.microshift_rpm))?;
    ensure!(
        configs.trim() == "/etc/microshift/config.d/00-enable-multus.yaml",
        "config files of the MicroShift package: {configs:?}"
    );
    let deps = output(
        Command::new("rpm")
            .args(["-qp", "--provides", "--obsoletes"])
            .arg(&p.microshift_rpm),
    )?;
    ensure!(
        deps.contains("microshift-multus = ")
            && deps.lines().any(|l| l.trim() == "microshift-multus"),
        "the MicroShift package must provide and obsolete microshift-multus: {deps}"
    );
    let fields = output(Command::new("dpkg-deb").args(["-f"]).arg(&p.deb).args([
        "Depends",
        "Conflicts",
        "Replaces",
        "Provides",
        "Version",
    ]))?;
    let want = [
        "Depends: iptables | nftables".to_owned(),
        format!("Conflicts: containernetworking-plugins (<< {PLUGINS_NEXT})"),
        format!("Replaces: containernetworking-plugins (<< {PLUGINS_NEXT})"),
        format!("Provides: containernetworking-plugins (= {PLUGINS_VERSION}), container-network-stack (= 1)"),
        format!("Version: {VERSION}"),
    ];
    ensure!(
        fields.lines().eq(want.iter().map(String::as_str)),
        "the .deb's relations: {fields}"
    );
    let rpm_deps = output(
        Command::new("rpm")
            .args(["-qp", "--provides", "--obsoletes", "--conflicts"])
            .arg(&p.node_rpm),
    )?;
    for line in [
        format!("containernetworking-plugins = {PLUGINS_VERSION}"),
        format!("containernetworking-plugins < {PLUGINS_NEXT}"),
    ] {
        ensure!(
            rpm_deps.lines().any(|l| l.trim() == line),
            "the node RPM must provide and obsolete containernetworking-plugins ({line}): {rpm_deps}"
        );
    }
    let deb_arch_field = output(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&p.deb)
            .arg("Architecture"),
    )?;
    let rpm_arch = output(
        Command::new("rpm")
            .args(["-qp", "--qf", "%{ARCH}"])
            .arg(&p.node_rpm),
    )?;
    ensure!(
        deb_arch_field.trim() == deb_arch(inputs.arch) && rpm_arch == inputs.arch.rust(),
        "packages of {:?} say {} and {rpm_arch}",
        inputs.arch,
        deb_arch_field.trim()
    );
    // apt installs only this machine's architecture.
    if inputs.arch == Arch::X86_64 {
        replaces_the_reference_under_podman(&p.deb)?;
    }
    Ok(())
}

/// apt installs the .deb for real where podman and Debian's containernetworking-plugins are,
/// and podman then runs a container through its plugins (deb_under_podman.sh). All of it
/// happens on an overlay of this machine's root in namespaces of its own, and goes with them.
fn replaces_the_reference_under_podman(deb: &Path) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let out = Command::new("unshare")
        .args(["--mount", "--pid", "--net", "--fork", "sh", "-c"])
        .arg(include_str!("deb_under_podman.sh"))
        .arg("deb_under_podman.sh")
        .arg(scratch.path())
        .arg(deb)
        .output()
        .context("running deb_under_podman.sh in namespaces of its own (unshare)")?;
    ensure!(
        out.status.success(),
        "the .deb on a podman host ({}): {}{}",
        deb.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Installs the RPMs into a new scratch root, as `rpm --root` does on an image build (no
/// scriptlets: the root has no shell), whatever their architecture: aarch64's binaries run
/// here under qemu-user.
fn rpm_install(root: &Path, args: &[&str], packages: &[&Path]) -> Result<()> {
    output(
        Command::new("rpm")
            .arg("--root")
            .arg(root)
            .args(["--dbpath", "/var/lib/rpm", "--nodeps", "--ignorearch"])
            .args(args)
            .args(packages),
    )
    .map(drop)
}

/// A scratch root where the packages' scriptlets run, chrooted by rpm and dpkg: busybox as
/// /bin/sh, /dev/null, systemd taken as running (/run/systemd/system), and stand-ins for
/// systemctl and Debian's deb-systemd-helper and deb-systemd-invoke that write each call to
/// /scriptlets.log (systemctl is-active says no).
fn scriptlet_root() -> Result<tempfile::TempDir> {
    let root = tempfile::tempdir()?;
    let r = root.path();
    put(r, "bin/sh", &std::fs::read("/bin/busybox")?, 0o755)?;
    for tool in ["systemctl", "deb-systemd-helper", "deb-systemd-invoke"] {
        let script =
            format!("#!/bin/sh\necho \"{tool} $*\" >>/scriptlets.log\n[ \"$1\" != is-active ]\n");
        put(r, &format!("usr/bin/{tool}"), script.as_bytes(), 0o755)?;
    }
    for dir in [
        "run/systemd/system",
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "dev",
        "tmp",
    ] {
        std::fs::create_dir_all(r.join(dir))?;
    }
    for file in ["var/lib/dpkg/status", "var/lib/dpkg/available"] {
        std::fs::write(r.join(file), "")?;
    }
    output(
        Command::new("mknod")
            .arg(r.join("dev/null"))
            .args(["c", "1", "3"]),
    )?;
    Ok(root)
}

/// The scriptlets' calls since the last look are `want`, in any order.
fn expect_scriptlets(root: &Path, when: &str, want: &[&str]) -> Result<()> {
    let log = root.join("scriptlets.log");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::write(&log, "")?;
    let mut got: Vec<&str> = text.lines().collect();
    let mut want = want.to_vec();
    got.sort_unstable();
    want.sort_unstable();
    ensure!(
        got == want,
        "{when}: the scriptlets called {got:?}, not {want:?}"
    );
    Ok(())
}

/// dpkg on the scratch root `root` (its maintainer scripts run chrooted there); the
/// dependencies are not there, nor is the package's architecture always this machine's.
fn dpkg(root: &Path, args: &[&str], package: Option<&Path>) -> Result<()> {
    output(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["--force-depends", "--force-architecture"])
            .args(args)
            .args(package),
    )
    .map(drop)
}

/// Every `image:` the rendered manifests name.
fn images_of(yaml: &str) -> BTreeSet<String> {
    yaml.lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .map(|i| i.trim_matches('"').to_owned())
        .collect()
}

fn check_microshift_root(inputs: &Inputs, root: &Path) -> Result<()> {
    let rendered = output(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(root.join(MANIFESTS)),
    )
    .context("rendering the installed manifests")?;
    testkit::manifests::validate(&rendered).context("the installed manifests")?;
    let images = images_of(&rendered);
    ensure!(
        images == BTreeSet::from([inputs.image_ref(inputs.arch)]),
        "the installed manifests name {images:?}, not {}",
        inputs.image_ref(inputs.arch)
    );
    ensure!(
        rendered.contains("namespace: openshift-multus"),
        "the installed manifests are not MicroShift's"
    );
    // Each architecture's release info names that architecture's image; this one's is the
    // image the manifests run.
    for arch in Arch::ALL {
        let path = root.join(format!(
            "usr/share/microshift/release/release-multus-{}.json",
            arch.rust()
        ));
        let info: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)
            .with_context(|| format!("parsing {}", path.display()))?;
        ensure!(
            info["release"]["base"] == VERSION,
            "{}: {info}",
            path.display()
        );
        let listed: BTreeSet<String> = info["images"]
            .as_object()
            .context("images")?
            .values()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let want = BTreeSet::from([inputs.image_ref(arch)]);
        ensure!(
            listed == want && (arch != inputs.arch || listed == images),
            "{} lists {listed:?}, not {want:?} (the manifests use {images:?})",
            path.display()
        );
    }
    Ok(())
}

/// The installed binaries say this version and commit, every link leads to them, and the
/// units pass systemd-analyze.
fn check_node_root(inputs: &Inputs, root: &Path, cni_dir: &str, unit_dir: &str) -> Result<()> {
    for bin in ["multus", "cni-plugins"] {
        let said = output(Command::new(root.join(cni_dir).join(bin)).arg("--version"))?;
        let want = format!("{bin} {VERSION} (commit {})", inputs.commit);
        ensure!(
            said.trim() == want,
            "{bin} --version said {said:?}, not {want:?}"
        );
    }
    for name in &inputs.plugins {
        let at = root.join(cni_dir).join(name);
        ensure!(
            std::fs::read_link(&at)? == Path::new("cni-plugins"),
            "{} does not lead to cni-plugins",
            at.display()
        );
    }
    for name in MULTUS_PLUGINS {
        let at = root.join(cni_dir).join(name);
        ensure!(
            std::fs::read_link(&at)? == Path::new("multus"),
            "{} does not lead to multus",
            at.display()
        );
        // Through the link, the binary is that plugin.
        let about = output(Command::new(&at).arg("--help"))?;
        ensure!(
            about.contains(&format!("Usage: {name}")),
            "{name} --help said {about:?}"
        );
    }
    ensure!(
        std::fs::canonicalize(root.join("usr/bin/multus"))?
            == std::fs::canonicalize(root.join(cni_dir).join("multus"))?,
        "/usr/bin/multus does not lead to /{cni_dir}/multus"
    );
    let units = root.join(unit_dir);
    // systemd's own units (the targets ours are ordered against), as on a node: this
    // machine's, but for the cni-dhcp units a containernetworking-plugins package left here.
    let system = root.join("etc/systemd/system");
    std::fs::create_dir_all(&system)?;
    for entry in std::fs::read_dir("/lib/systemd/system")? {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("cni-dhcp.") {
            output(
                Command::new("cp")
                    .arg("-a")
                    .arg(entry.path())
                    .arg(system.join(&name)),
            )?;
        }
    }
    let service = std::fs::read_to_string(units.join("cni-dhcp.service"))?;
    ensure!(
        service.contains(&format!("\nExecStart=/{cni_dir}/dhcp daemon\n")),
        "cni-dhcp.service does not start /{cni_dir}/dhcp: {service}"
    );
    let verify = Command::new("systemd-analyze")
        .arg(format!("--root={}", root.display()))
        .arg("verify")
        .arg(units.join("cni-dhcp.socket"))
        .arg(units.join("cni-dhcp.service"))
        .output()
        .context("running systemd-analyze")?;
    let said = String::from_utf8_lossy(&verify.stderr);
    // Only what concerns our units counts: the scratch root has no other units.
    let ours: Vec<&str> = said.lines().filter(|l| l.contains("cni-dhcp")).collect();
    ensure!(
        verify.status.success() && ours.is_empty(),
        "systemd-analyze verify: {said}"
    );
    Ok(())
}

fn check(inputs: &Inputs, p: &Packages) -> Result<()> {
    check_listings(inputs, p)?;
    lint(p)?;

    // Installed with their scriptlets, which run in the scratch root as on a host with systemd.
    let rpm_root = scriptlet_root()?;
    rpm_install(
        rpm_root.path(),
        &["-i"],
        &[&p.node_rpm, &p.microshift_rpm, &p.release_info_rpm],
    )?;
    expect_scriptlets(
        rpm_root.path(),
        "the RPMs' first install",
        &[
            "systemctl daemon-reload",
            "systemctl preset cni-dhcp.socket",
            // CRI-O is not running: not restarted.
            "systemctl is-active --quiet crio",
        ],
    )?;
    check_node_root(
        inputs,
        rpm_root.path(),
        RPM_CNI_DIR,
        "usr/lib/systemd/system",
    )?;
    check_microshift_root(inputs, rpm_root.path())?;
    for name in &inputs.plugins {
        let at = rpm_root.path().join("opt/cni/bin").join(name);
        ensure!(
            std::fs::read_link(&at)? == Path::new("/").join(RPM_CNI_DIR).join(name),
            "{} does not lead to /{RPM_CNI_DIR}/{name}",
            at.display()
        );
    }

    let deb_root = scriptlet_root()?;
    dpkg(deb_root.path(), &["-i"], Some(&p.deb))?;
    expect_scriptlets(
        deb_root.path(),
        "the .deb's first install",
        &[
            "deb-systemd-helper enable cni-dhcp.socket",
            "systemctl --system daemon-reload",
            "deb-systemd-invoke start cni-dhcp.socket",
        ],
    )?;
    check_node_root(inputs, deb_root.path(), DEB_CNI_DIR, "lib/systemd/system")?;
    // Installed again, as an upgrade is: the admin's choice about the socket stands.
    dpkg(deb_root.path(), &["-i"], Some(&p.deb))?;
    expect_scriptlets(deb_root.path(), "the .deb's upgrade", &[])?;
    dpkg(deb_root.path(), &["-r", "multus-rs"], None)?;
    expect_scriptlets(
        deb_root.path(),
        "the .deb's removal",
        &[
            "deb-systemd-invoke stop cni-dhcp.socket cni-dhcp.service",
            "deb-systemd-helper mask cni-dhcp.socket",
        ],
    )?;
    dpkg(deb_root.path(), &["-P", "multus-rs"], None)?;
    expect_scriptlets(
        deb_root.path(),
        "the .deb's purge",
        &[
            "deb-systemd-helper purge cni-dhcp.socket",
            "deb-systemd-helper unmask cni-dhcp.socket",
        ],
    )?;
    ensure!(
        !deb_root.path().join(DEB_CNI_DIR).join("multus").exists(),
        "the .deb's removal left its files"
    );

    // Upgrade: the next release over this one keeps the admin's edit of the config drop-in.
    let config = rpm_root
        .path()
        .join("etc/microshift/config.d/00-enable-multus.yaml");
    let edited = "network:\n  multusStatus: Enabled\n# edited on this node\n";
    std::fs::write(&config, edited)?;
    let next_dir = tempfile::tempdir()?;
    let next = build(inputs, next_dir.path(), 2)?;
    rpm_install(
        rpm_root.path(),
        &["-U"],
        &[&next.node_rpm, &next.microshift_rpm],
    )?;
    // An upgrade leaves the socket and CRI-O as they are.
    expect_scriptlets(rpm_root.path(), "the RPMs' upgrade", &[])?;
    let installed = output(
        Command::new("rpm")
            .arg("--root")
            .arg(rpm_root.path())
            .args(["--dbpath", "/var/lib/rpm", "-q", "multus-rs-microshift"]),
    )?;
    ensure!(
        installed.trim() == format!("multus-rs-microshift-{VERSION}-2.{}", inputs.arch.rust()),
        "after the upgrade: {installed}"
    );
    ensure!(
        std::fs::read_to_string(&config)? == edited,
        "the upgrade replaced the edited {}",
        config.display()
    );
    let flags = output(
        Command::new("rpm")
            .args(["-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\\n]"])
            .arg(&p.microshift_rpm),
    )?;
    ensure!(
        flags
            .lines()
            .any(|l| l == "cn /etc/microshift/config.d/00-enable-multus.yaml"),
        "00-enable-multus.yaml is not %config(noreplace): {flags}"
    );
    output(
        Command::new("rpm")
            .arg("--root")
            .arg(rpm_root.path())
            .args([
                "--dbpath",
                "/var/lib/rpm",
                "--nodeps",
                "-e",
                "multus-rs",
                "multus-rs-microshift",
                "multus-rs-microshift-release-info",
            ]),
    )?;
    expect_scriptlets(
        rpm_root.path(),
        "the RPMs' removal",
        &["systemctl --no-reload disable --now cni-dhcp.socket cni-dhcp.service"],
    )?;
    // The edited config is kept aside, as %config files are; nothing else of the packages stays.
    ensure!(
        std::fs::read_to_string(config.with_extension("yaml.rpmsave"))? == edited,
        "the removal did not keep the edited {}",
        config.display()
    );
    ensure!(
        !rpm_root.path().join(RPM_CNI_DIR).join("multus").exists(),
        "the RPMs' removal left their files"
    );

    let again_dir = tempfile::tempdir()?;
    let again = build(inputs, again_dir.path(), 1)?;
    for (first, second) in p.all().into_iter().zip(again.all()) {
        ensure!(
            std::fs::read(first)? == std::fs::read(second)?,
            "{} differs when built again",
            first.display()
        );
    }
    Ok(())
}
