//! Traffic control for the bandwidth plugin: token-bucket (tbf) qdiscs, and the ingress qdisc
//! with a u32 filter that redirects a link's incoming traffic to an ifb device, where a tbf
//! shapes it. Changes go to iproute2's `tc` in one `-batch` run (it computes the rate tables
//! the kernel's tbf wants); listings are `tc -j`. Everything runs in the caller's namespace.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::netlink::validate_ifname;
use crate::tool;

/// The queueing latency a tbf allows, as the reference plugin sets it.
pub const LATENCY_USEC: u64 = 25_000;

/// `TIME_UNITS_PER_SEC` of the kernel's packet scheduler.
const TIME_UNITS_PER_SEC: u128 = 1_000_000;

/// A token bucket: `rate` and `burst` in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub rate: u64,
    pub burst: u64,
}

impl Bucket {
    /// The queue limit in bytes: what `rate` sends in [`LATENCY_USEC`], plus the burst.
    pub fn limit(&self) -> u64 {
        let queued = u128::from(self.rate) * u128::from(LATENCY_USEC) / TIME_UNITS_PER_SEC;
        u64::try_from(queued)
            .unwrap_or(u64::MAX)
            .saturating_add(self.burst)
    }
}

/// A qdisc as `tc -j qdisc show` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub kind: String,
    /// `1:`, `ffff:`.
    pub handle: String,
    pub root: bool,
    /// For a tbf: rate and burst in bytes, latency in microseconds.
    pub tbf: Option<(u64, u64, u64)>,
}

/// The tc commands that shape traffic *to* `dev` (packets the node sends out of it): a root
/// tbf.
fn tbf_command(dev: &str, bucket: Bucket) -> String {
    format!(
        "qdisc add dev {dev} root handle 1: tbf rate {}bps burst {} limit {}\n",
        bucket.rate,
        bucket.burst,
        bucket.limit()
    )
}

/// Shapes what leaves `dev` at `bucket` (a root tbf on `dev`).
pub fn shape(dev: &str, bucket: Bucket) -> Result<()> {
    validate_ifname(dev)?;
    batch(&tbf_command(dev, bucket), || format!("shaping {dev}"))
}

/// Shapes what arrives on `dev` at `bucket`: an ingress qdisc on `dev` whose u32 filter
/// redirects every packet to `ifb`, and a root tbf on `ifb`.
pub fn shape_arriving(dev: &str, ifb: &str, bucket: Bucket) -> Result<()> {
    validate_ifname(dev)?;
    validate_ifname(ifb)?;
    let script = format!(
        "qdisc add dev {dev} handle ffff: ingress\n\
         filter add dev {dev} parent ffff: protocol all prio 1 u32 match u32 0 0 flowid 1:1 \
         action mirred egress redirect dev {ifb}\n{}",
        tbf_command(ifb, bucket)
    );
    batch(&script, || {
        format!("shaping traffic arriving on {dev} through {ifb}")
    })
}

/// Removes `dev`'s root and ingress qdiscs; ones it has not got are no error.
pub fn unshape(dev: &str) -> Result<()> {
    validate_ifname(dev)?;
    for (qdisc, args) in [("root", &["root"][..]), ("ingress", &["ingress"][..])] {
        let mut cmd = vec!["qdisc", "del", "dev", dev];
        cmd.extend(args);
        match tool::run_installed("tc", &cmd, None) {
            Err(Error::Command { msg, .. })
                if msg.contains("No such file") || msg.contains("Invalid handle") => {}
            Err(Error::Command { op, msg }) => {
                return Err(Error::Command {
                    op: format!("{op} ({qdisc} qdisc)"),
                    msg,
                })
            }
            other => other.map(drop)?,
        }
    }
    Ok(())
}

fn batch(script: &str, op: impl Fn() -> String) -> Result<()> {
    tool::run_installed("tc", &["-batch", "-"], Some(script))
        .map(drop)
        .map_err(|e| match e {
            Error::Command { msg, .. } => Error::Command { op: op(), msg },
            other => other,
        })
}

/// The qdiscs of `dev`.
pub fn qdiscs(dev: &str) -> Result<Vec<Qdisc>> {
    validate_ifname(dev)?;
    let out = tool::run_installed("tc", &["-j", "qdisc", "show", "dev", dev], None)?;
    let listed: Value = serde_json::from_str(&out).map_err(|e| Error::Decode {
        op: format!("listing the qdiscs of {dev}"),
        msg: e.to_string(),
    })?;
    Ok(listed
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            let options = &q["options"];
            let tbf = (q["kind"] == "tbf").then(|| {
                let n = |k: &str| options[k].as_u64().unwrap_or(0);
                (n("rate"), n("burst"), n("lat"))
            });
            Qdisc {
                kind: q["kind"].as_str().unwrap_or_default().to_owned(),
                handle: q["handle"].as_str().unwrap_or_default().to_owned(),
                root: q["root"] == true,
                tbf,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_as_the_reference_computes_them() {
        let b = Bucket {
            rate: 125_000,
            burst: 12_500,
        };
        assert_eq!(b.limit(), 15_625);
        assert_eq!(
            tbf_command("veth0", b),
            "qdisc add dev veth0 root handle 1: tbf rate 125000bps burst 12500 limit 15625\n"
        );
    }
}
