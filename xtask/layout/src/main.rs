//! `package-layout`: the RPMs' staged tree and file lists, as the source RPM's %build runs it
//! (packaging/rpm/multus-rs.spec).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use package_layout::Arch;

/// `package-layout --arch A --bins DIR --out DIR --commit C --image REPO --digest OCIARCH=D...`:
/// the RPMs' staged tree and file lists from binaries built before, as the spec's %build runs it
/// when it builds from the source RPM. SOURCE_DATE_EPOCH gives the time.
fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "package-layout --arch x86_64|aarch64 --bins DIR --out DIR --commit C --image REPO --digest OCIARCH=DIGEST...";
    let (mut arch, mut bins, mut out, mut commit, mut image) = (None, None, None, None, None);
    let mut digests = BTreeMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value: {usage}"))?;
        match flag.as_str() {
            "--arch" => {
                arch = Some(
                    Arch::ALL
                        .into_iter()
                        .find(|a| a.rust() == value)
                        .with_context(|| format!("no architecture {value:?}: {usage}"))?,
                )
            }
            "--bins" => bins = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--commit" => commit = Some(value.clone()),
            "--image" => image = Some(value.clone()),
            "--digest" => {
                let (oci_arch, digest) = value
                    .split_once('=')
                    .with_context(|| format!("--digest {value:?}: {usage}"))?;
                digests.insert(oci_arch.to_owned(), digest.to_owned());
            }
            other => bail!("unknown flag {other:?}: {usage}"),
        }
    }
    let (Some(arch), Some(bins), Some(out), Some(commit), Some(image)) =
        (arch, bins, out, commit, image)
    else {
        bail!("{usage}");
    };
    let inputs = package_layout::Inputs::new(
        arch,
        bins,
        &image,
        digests,
        commit,
        package_layout::source_date_epoch()?,
    )?;
    package_layout::stage_rpm(&inputs, &out)
}
