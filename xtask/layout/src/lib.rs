//! The files of the release's packages, laid out as the packages hold them, with their SBOMs
//! and manual page: what `cargo xtask package` builds the RPMs and the .deb from, and what the
//! source RPM's `%build` runs (`package-layout`, src/main.rs). A crate of its own, with few
//! dependencies, so that a rebuild of the source RPM compiles little beyond the binaries.

pub mod manual;
pub mod sbom;

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

/// The machines the release is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The name in Rust's target triple and in scripts/build.sh's argument.
    pub fn rust(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Rust's target triple.
    pub fn triple(self) -> String {
        format!("{}-unknown-linux-gnu", self.rust())
    }

    /// The name in OCI platforms and in the Containerfile's TARGETARCH.
    pub fn oci(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }
}

/// The time of the commit being built (or SOURCE_DATE_EPOCH, when the caller sets it), in
/// seconds: what goes into packages and images instead of the build's time.
pub fn source_date_epoch() -> Result<String> {
    if let Some(epoch) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .filter(|e| !e.is_empty())
    {
        return Ok(epoch);
    }
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace_root())
        .args(["log", "-1", "--format=%ct"])
        .output()
        .context("running git log")?;
    if !out.status.success() {
        bail!("git log failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)
        .context("git log printed non-UTF-8")?
        .trim()
        .to_owned())
}

/// The cargo that runs xtask (`CARGO`), so that its children use the same toolchain.
pub fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The repository's root, two above this crate's directory (xtask/layout).
pub fn workspace_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The name deploy/base's kustomization gives the image, which the MicroShift tree rewrites.
pub const BASE_IMAGE: &str = "localhost/multus-rs";
pub const MANIFESTS: &str = "usr/lib/microshift/manifests.d/003-microshift-multus";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Where the rpm node package puts the binaries, and the .deb.
pub const RPM_CNI_DIR: &str = "usr/libexec/cni";
/// The node package's documentation: the binaries' SBOMs (and, in the .deb, its copyright and
/// changelog).
pub const DOC_DIR: &str = "usr/share/doc/multus-rs";
/// The node RPM's `%license` file.
pub const RPM_LICENSE: &str = "usr/share/licenses/multus-rs/LICENSE";

/// What goes into one build: the binaries, their architecture and the facts the packages
/// carry.
pub struct Inputs {
    pub arch: Arch,
    pub bins: PathBuf,
    pub plugins: Vec<String>,
    pub commit: String,
    pub epoch: String,
    pub image: String,
    /// Each architecture's image manifest digest (by OCI architecture name), from the index
    /// `cargo xtask image` saved.
    pub digests: BTreeMap<String, String>,
    /// The crates of each binary, by its name.
    pub crates: BTreeMap<&'static str, Vec<sbom::Crate>>,
    /// Each binary's SBOM, by its name.
    pub sboms: BTreeMap<&'static str, String>,
    /// multus(1), compressed.
    pub manual: Vec<u8>,
}

pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `cmd` writes with `input` on its stdin; it must succeed.
pub fn filter(cmd: &mut Command, input: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cmd:?}"))?;
    child
        .stdin
        .take()
        .context("the child's stdin")?
        .write_all(input)?;
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?} failed");
    Ok(out.stdout)
}

impl Inputs {
    /// `bins` holds `arch`'s binaries; aarch64's run here under qemu-user (binfmt_misc).
    pub fn new(
        arch: Arch,
        bins: PathBuf,
        image: &str,
        digests: BTreeMap<String, String>,
        commit: String,
        epoch: String,
    ) -> Result<Inputs> {
        let plugins = output(Command::new(bins.join("cni-plugins")).arg("--list"))?
            .lines()
            .map(str::to_owned)
            .collect();
        let crates = sbom::crates(arch)?;
        let mut sboms = BTreeMap::new();
        for (bin, _) in sbom::BINARIES {
            let mut doc = sbom::Document::new()?;
            let subject = doc.binary(bin, &bins.join(bin), &crates[bin])?;
            let name = format!("{bin}-{VERSION}.{}", arch.rust());
            sboms.insert(bin, doc.finish(&name, &subject, &epoch)?);
        }
        let manual = crate::manual::page(&bins.join("multus"), &epoch)?;
        Ok(Inputs {
            arch,
            manual,
            bins,
            plugins,
            commit,
            epoch,
            image: image.to_owned(),
            digests,
            crates,
            sboms,
        })
    }

    /// What the RPM links in /opt/cni/bin: every binary and every plugin name.
    pub fn opt_cni_bin_names(&self) -> impl Iterator<Item = &str> {
        self.plugins
            .iter()
            .map(String::as_str)
            .chain(["multus", "cni-plugins"])
            .chain(MULTUS_PLUGINS.iter().copied())
    }

    /// The image of this release for `arch`, by repository and digest.
    pub fn image_ref(&self, arch: Arch) -> String {
        let digest = self.digests.get(arch.oci()).map_or("", String::as_str);
        format!("{}@{digest}", self.image)
    }
}

/// Writes `data` at `root/path` with `mode`, making the directories.
pub fn put(root: &Path, path: &str, data: &[u8], mode: u32) -> Result<()> {
    let file = root.join(path);
    std::fs::create_dir_all(file.parent().context("parent")?)?;
    std::fs::write(&file, data).with_context(|| format!("writing {}", file.display()))?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

pub fn link(root: &Path, path: &str, target: &str) -> Result<()> {
    let at = root.join(path);
    std::fs::create_dir_all(at.parent().context("parent")?)?;
    symlink(target, &at).with_context(|| format!("linking {}", at.display()))
}

pub fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(workspace_root().join(path)).with_context(|| format!("reading {path}"))
}

/// The plugins the `multus` binary carries, run through links to it (as `multus install` makes
/// them).
pub const MULTUS_PLUGINS: &[&str] = &["whereabouts"];

/// The node binaries under `cni_dir`: multus, cni-plugins, a link per plugin, /usr/bin/multus
/// and the dhcp daemon's units in `unit_dir`. Returns the paths it made.
pub fn stage_node(
    inputs: &Inputs,
    root: &Path,
    cni_dir: &str,
    unit_dir: &str,
) -> Result<Vec<String>> {
    let mut made = Vec::new();
    for bin in ["multus", "cni-plugins"] {
        let data = std::fs::read(inputs.bins.join(bin))?;
        put(root, &format!("{cni_dir}/{bin}"), &data, 0o755)?;
        made.push(format!("{cni_dir}/{bin}"));
    }
    for name in &inputs.plugins {
        link(root, &format!("{cni_dir}/{name}"), "cni-plugins")?;
        made.push(format!("{cni_dir}/{name}"));
    }
    for name in MULTUS_PLUGINS {
        link(root, &format!("{cni_dir}/{name}"), "multus")?;
        made.push(format!("{cni_dir}/{name}"));
    }
    // The shortest relative path, as Debian's policy asks: both lie under /usr.
    let under_usr = cni_dir
        .strip_prefix("usr/")
        .context("the CNI directory is under /usr")?;
    link(root, "usr/bin/multus", &format!("../{under_usr}/multus"))?;
    made.push("usr/bin/multus".into());
    put(root, crate::manual::PATH, &inputs.manual, 0o644)?;
    made.push(crate::manual::PATH.into());
    for (bin, doc) in &inputs.sboms {
        let path = format!("{DOC_DIR}/{bin}.spdx.json");
        put(root, &path, doc.as_bytes(), 0o644)?;
        made.push(path);
    }
    for unit in ["cni-dhcp.socket", "cni-dhcp.service"] {
        let text = read(&format!("packaging/systemd/{unit}"))?
            .replace("@CNI_DIR@", &format!("/{cni_dir}"));
        put(root, &format!("{unit_dir}/{unit}"), text.as_bytes(), 0o644)?;
        made.push(format!("{unit_dir}/{unit}"));
    }
    Ok(made)
}

/// The MicroShift files: the kustomize tree (deploy/microshift over deploy/base, made one tree,
/// with this release's image appended), the two drop-ins and the release info.
pub fn stage_microshift(inputs: &Inputs, root: &Path) -> Result<Vec<String>> {
    let mut made = Vec::new();
    let base = workspace_root().join("deploy/base");
    let mut names: Vec<String> = std::fs::read_dir(&base)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    names.sort();
    for name in names {
        let data = std::fs::read(base.join(&name))?;
        put(root, &format!("{MANIFESTS}/base/{name}"), &data, 0o644)?;
        made.push(format!("{MANIFESTS}/base/{name}"));
    }
    let scc = std::fs::read(workspace_root().join("deploy/microshift/scc.yaml"))?;
    put(root, &format!("{MANIFESTS}/scc.yaml"), &scc, 0o644)?;
    made.push(format!("{MANIFESTS}/scc.yaml"));
    let kustomization = read("deploy/microshift/kustomization.yaml")?;
    ensure!(
        kustomization.contains("\n  - ../base\n") && !kustomization.contains("\nimages:"),
        "deploy/microshift/kustomization.yaml no longer has the shape packaging rewrites"
    );
    let kustomization = format!(
        "{}\n# This release's image for this architecture, by digest, appended by the package.\nimages:\n  - name: {BASE_IMAGE}\n    newName: {}\n    digest: {}\n",
        kustomization.replace("\n  - ../base\n", "\n  - base\n").trim_end(),
        inputs.image,
        inputs.digests[inputs.arch.oci()]
    );
    put(
        root,
        &format!("{MANIFESTS}/kustomization.yaml"),
        kustomization.as_bytes(),
        0o644,
    )?;
    made.push(format!("{MANIFESTS}/kustomization.yaml"));
    put(
        root,
        "etc/microshift/config.d/00-enable-multus.yaml",
        read("packaging/microshift/00-enable-multus.yaml")?.as_bytes(),
        0o644,
    )?;
    put(
        root,
        "etc/crio/crio.conf.d/12-microshift-multus.conf",
        read("deploy/microshift/crio/12-multus.conf")?.as_bytes(),
        0o644,
    )?;
    // One file per architecture, each naming that architecture's image.
    for arch in Arch::ALL {
        let info = serde_json::to_string_pretty(&serde_json::json!({
            "release": { "base": VERSION },
            "images": { "multus-rs": inputs.image_ref(arch) },
        }))? + "\n";
        let arch = arch.rust();
        put(
            root,
            &format!("usr/share/microshift/release/release-multus-{arch}.json"),
            info.as_bytes(),
            0o644,
        )?;
    }
    Ok(made)
}

/// Every staged path's time set to `epoch`, so what the tools read from the tree is the same
/// in every build.
pub fn settle_times(root: &Path, epoch: &str) -> Result<()> {
    output(
        Command::new("find")
            .arg(root)
            .args(["-exec", "touch", "-h", "-d"])
            .arg(format!("@{epoch}"))
            .args(["{}", "+"]),
    )
    .map(drop)
}

/// The rpm `%files` lines for `paths` and the directories only they use: what is under
/// [`DOC_DIR`] is `%doc`, and [`RPM_LICENSE`] is `%license`.
pub fn file_list(paths: &[String], own_dirs: &[&str]) -> String {
    let mut lines: Vec<String> = own_dirs.iter().map(|d| format!("%dir /{d}")).collect();
    lines.extend(paths.iter().map(|p| {
        if p == RPM_LICENSE {
            format!("%license /{p}")
        } else if p.starts_with(DOC_DIR) {
            format!("%doc /{p}")
        } else {
            format!("/{p}")
        }
    }));
    lines.join("\n") + "\n"
}

/// The time `epoch` (seconds), as `format` (date(1)'s) gives it.
pub fn epoch_as(epoch: &str, format: &str) -> Result<String> {
    Ok(output(
        Command::new("date")
            .env("LC_ALL", "C")
            .args(["-u", "-d"])
            .arg(format!("@{epoch}"))
            .arg(format!("+{format}")),
    )?
    .trim()
    .to_owned())
}

/// The RPMs' files under `dir/root`, and their `%files` lists beside it (`files-node`,
/// `files-microshift`), as the spec's %install and %files take them.
pub fn stage_rpm(inputs: &Inputs, dir: &Path) -> Result<()> {
    let root = dir.join("root");
    let node = stage_node(inputs, &root, RPM_CNI_DIR, "usr/lib/systemd/system")?;
    let mut node_all = node.clone();
    for name in inputs.opt_cni_bin_names() {
        link(
            &root,
            &format!("opt/cni/bin/{name}"),
            &format!("/{RPM_CNI_DIR}/{name}"),
        )?;
        node_all.push(format!("opt/cni/bin/{name}"));
    }
    put(&root, RPM_LICENSE, read("LICENSE")?.as_bytes(), 0o644)?;
    node_all.push(RPM_LICENSE.into());
    let microshift = stage_microshift(inputs, &root)?;
    settle_times(&root, &inputs.epoch)?;
    std::fs::write(
        dir.join("files-node"),
        file_list(
            &node_all,
            &[
                RPM_CNI_DIR,
                "opt/cni",
                "opt/cni/bin",
                DOC_DIR,
                "usr/share/licenses/multus-rs",
            ],
        ),
    )?;
    let manifests: Vec<String> = microshift
        .iter()
        .filter(|p| p.starts_with(MANIFESTS))
        .cloned()
        .collect();
    std::fs::write(
        dir.join("files-microshift"),
        file_list(&manifests, &[MANIFESTS, &format!("{MANIFESTS}/base")]),
    )?;
    Ok(())
}
