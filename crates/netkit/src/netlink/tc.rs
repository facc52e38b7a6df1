//! Traffic control for the bandwidth plugin, over rtnetlink: token-bucket (tbf) qdiscs, and
//! the ingress qdisc with a u32 filter redirecting a link's incoming traffic to an ifb device,
//! made with the same parameters as the reference's netlink library sends.

use netlink_packet_core::{DefaultNla, Nla, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirrorOption, TcActionOption,
    TcActionType, TcAttribute, TcFilterU32Option, TcHandle, TcMessage, TcMirror,
    TcMirrorActionType, TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Netlink;
use crate::error::{Error, Result};

/// The queueing latency a tbf allows, as the reference plugin sets it.
pub const LATENCY_USEC: u64 = 25_000;
const TIME_UNITS_PER_SEC: u64 = 1_000_000;

const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// `ETH_P_ALL`, in network order as `tcm_info` carries it.
const ETH_P_ALL_BE: u32 = 0x0300;

/// A token bucket: `rate` and `burst` in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub rate: u64,
    pub burst: u64,
}

impl Bucket {
    /// The queue limit in bytes: what `rate` sends in [`LATENCY_USEC`], plus the burst.
    pub fn limit(&self) -> u32 {
        let queued =
            u128::from(self.rate) * u128::from(LATENCY_USEC) / u128::from(TIME_UNITS_PER_SEC);
        u32::try_from(queued + u128::from(self.burst)).unwrap_or(u32::MAX)
    }

    /// The burst as the kernel holds it, in scheduler ticks: the time `rate` takes to send it.
    /// Computed with the reference's floating point and truncations, so both make the same
    /// qdisc.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    pub fn buffer(&self, ticks_per_usec: f64) -> u32 {
        let usec = (self.burst as f64 * TIME_UNITS_PER_SEC as f64 / self.rate as f64) as u32;
        (f64::from(usec) * ticks_per_usec) as u32
    }
}

/// A root tbf's parameters as the kernel reports them: rate in bytes, buffer in ticks, limit
/// in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    pub rate: u64,
    pub buffer: u32,
    pub limit: u32,
}

/// Scheduler ticks per microsecond, from `/proc/net/psched` as the reference reads it.
pub fn ticks_per_usec() -> Result<f64> {
    let path = "/proc/net/psched";
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {path}"), e))?;
    let vals: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| u64::from_str_radix(w, 16).ok())
        .collect();
    let [mut t2us, us2t, clock_res, ..] = vals[..] else {
        return Err(Error::Decode {
            op: format!("reading {path}"),
            msg: format!("{text:?} is not four hex numbers"),
        });
    };
    if clock_res == 1_000_000_000 {
        t2us = us2t;
    }
    if us2t == 0 {
        return Err(Error::Decode {
            op: format!("reading {path}"),
            msg: "a zero divisor".into(),
        });
    }
    #[allow(clippy::cast_precision_loss)]
    let ticks = t2us as f64 / us2t as f64 * (clock_res as f64 / TIME_UNITS_PER_SEC as f64);
    Ok(ticks)
}

fn message(index: u32, handle: TcHandle, parent: TcHandle, info: u32) -> Result<TcMessage> {
    let mut msg = TcMessage::default();
    msg.header.index = i32::try_from(index)
        .map_err(|_| Error::Invalid(format!("link index {index} is out of range")))?;
    msg.header.handle = handle;
    msg.header.parent = parent;
    msg.header.info = info;
    Ok(msg)
}

/// `struct tc_tbf_qopt`: rate and peak-rate specs (only the rate set), limit, buffer, mtu.
fn tbf_parms(rate: u64, limit: u32, buffer: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(36);
    // tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, then the rate.
    b.extend_from_slice(&[0u8; 8]);
    b.extend_from_slice(&u32::try_from(rate).unwrap_or(u32::MAX).to_ne_bytes());
    b.extend_from_slice(&[0u8; 12]);
    b.extend_from_slice(&limit.to_ne_bytes());
    b.extend_from_slice(&buffer.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The attributes (kind, value) in a nested attribute's value.
fn nested(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        // The top bits are the nested and byte-order flags.
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((kind, &b[4..len]));
        b = b.get(len.div_ceil(4) * 4..).unwrap_or_default();
    }
    out
}

fn nla_value(nla: &DefaultNla) -> Vec<u8> {
    let mut v = vec![0u8; nla.value_len()];
    nla.emit_value(&mut v);
    v
}

impl Netlink {
    /// A root tbf (handle `1:`) of `bucket` on link `index`.
    pub fn add_tbf(&self, index: u32, bucket: Bucket, ticks_per_usec: f64) -> Result<()> {
        let mut msg = message(index, TcHandle { major: 1, minor: 0 }, TcHandle::ROOT, 0)?;
        let mut options = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            tbf_parms(bucket.rate, bucket.limit(), bucket.buffer(ticks_per_usec)),
        ))];
        if bucket.rate > u64::from(u32::MAX) {
            options.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                bucket.rate.to_ne_bytes().to_vec(),
            )));
        }
        msg.attributes = vec![
            TcAttribute::Kind("tbf".into()),
            TcAttribute::Options(options),
        ];
        self.ack(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("adding a tbf qdisc to link {index}"),
        )
    }

    /// The ingress qdisc (`ffff:`) on link `index`, and a u32 filter there sending every packet
    /// to link `to` (a mirred egress redirect, class `1:1`).
    pub fn add_redirect(&self, index: u32, to: u32) -> Result<()> {
        let mut qdisc = message(
            index,
            TcHandle {
                major: 0xffff,
                minor: 0,
            },
            TcHandle::INGRESS,
            0,
        )?;
        qdisc.attributes = vec![TcAttribute::Kind("ingress".into())];
        self.ack(
            RouteNetlinkMessage::NewQueueDiscipline(qdisc),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("adding the ingress qdisc to link {index}"),
        )?;
        let parent = TcHandle {
            major: 0xffff,
            minor: 0,
        };
        // Priority 1, every protocol.
        let mut filter = message(index, TcHandle::UNSPEC, parent, (1 << 16) | ETH_P_ALL_BE)?;
        // The structs are non-exhaustive: default, then set.
        let mut selector = TcU32Selector::default();
        selector.flags = TcU32SelectorFlags::Terminal;
        selector.nkeys = 1;
        selector.keys = vec![TcU32Key::default()];
        let mut generic = TcActionGeneric::default();
        generic.action = TcActionType::Stolen;
        let mut mirred = TcMirror::default();
        mirred.generic = generic;
        mirred.eaction = TcMirrorActionType::EgressRedir;
        mirred.ifindex = to;
        let mut action = TcAction::default();
        action.tab = 1;
        action.attributes = vec![
            TcActionAttribute::Kind("mirred".into()),
            TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
                mirred,
            ))]),
        ];
        filter.attributes = vec![
            TcAttribute::Kind("u32".into()),
            TcAttribute::Options(vec![
                TcOption::U32(TcFilterU32Option::ClassId(TcHandle { major: 1, minor: 1 })),
                TcOption::U32(TcFilterU32Option::Selector(selector)),
                TcOption::U32(TcFilterU32Option::Action(vec![action])),
            ]),
        ];
        self.ack(
            RouteNetlinkMessage::NewTrafficFilter(filter),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("adding a redirect from link {index} to link {to}"),
        )
    }

    /// Removes link `index`'s root and ingress qdiscs (with their filters); ones it has not
    /// got are no error.
    pub fn del_qdiscs(&self, index: u32) -> Result<()> {
        for parent in [TcHandle::ROOT, TcHandle::INGRESS] {
            let msg = message(index, TcHandle::UNSPEC, parent, 0)?;
            match self.ack(RouteNetlinkMessage::DelQueueDiscipline(msg), 0, || {
                format!("deleting a qdisc of link {index}")
            }) {
                Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::EINVAL)) => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// The links the filters on link `index`'s ingress redirect its traffic to (mirred egress
    /// redirects, as [`Netlink::add_redirect`] makes them).
    pub fn ingress_redirects(&self, index: u32) -> Result<Vec<u32>> {
        let parent = TcHandle {
            major: 0xffff,
            minor: 0,
        };
        let request = message(index, TcHandle::UNSPEC, parent, 0)?;
        let replies = self.dump(RouteNetlinkMessage::GetTrafficFilter(request), || {
            format!("listing the ingress filters of link {index}")
        })?;
        let mut to = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewTrafficFilter(msg) = reply else {
                continue;
            };
            let options = msg.attributes.into_iter().filter_map(|a| match a {
                TcAttribute::Options(options) => Some(options),
                _ => None,
            });
            let actions = options.flatten().filter_map(|o| match o {
                TcOption::U32(TcFilterU32Option::Action(actions)) => Some(actions),
                _ => None,
            });
            for attribute in actions.flatten().flat_map(|a| a.attributes) {
                let TcActionAttribute::Options(action_options) = attribute else {
                    continue;
                };
                for option in action_options {
                    if let TcActionOption::Mirror(TcActionMirrorOption::Parms(m)) = option {
                        if m.eaction == TcMirrorActionType::EgressRedir {
                            to.push(m.ifindex);
                        }
                    }
                }
            }
        }
        Ok(to)
    }

    /// The kinds of link `index`'s qdiscs, and its root tbf if it has one.
    pub fn qdiscs(&self, index: u32) -> Result<(Vec<String>, Option<Tbf>)> {
        let replies = self.dump(
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
            || format!("listing the qdiscs of link {index}"),
        )?;
        let mut kinds = Vec::new();
        let mut tbf = None;
        for reply in replies {
            let RouteNetlinkMessage::NewQueueDiscipline(msg) = reply else {
                continue;
            };
            if u32::try_from(msg.header.index).ok() != Some(index) {
                continue;
            }
            let root = msg.header.parent == TcHandle::ROOT;
            let mut kind = String::new();
            let mut parms = None;
            let mut rate64 = None;
            for attr in msg.attributes {
                match attr {
                    TcAttribute::Kind(k) => kind = k,
                    // The library keeps a kind it does not know (tbf) as one attribute
                    // holding the nested ones.
                    TcAttribute::Options(options) => {
                        for o in options {
                            let TcOption::Other(nla) = o else { continue };
                            let value = nla_value(&nla);
                            for (kind, data) in nested(&value) {
                                match kind {
                                    TCA_TBF_PARMS => parms = Some(data.to_vec()),
                                    TCA_TBF_RATE64 => {
                                        rate64 = data.try_into().ok().map(u64::from_ne_bytes)
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
            if kind == "tbf" && root {
                if let Some(p) = parms {
                    tbf = Some(Tbf {
                        rate: rate64.unwrap_or(u64::from(u32_at(&p, 8).unwrap_or(0))),
                        limit: u32_at(&p, 24).unwrap_or(0),
                        buffer: u32_at(&p, 28).unwrap_or(0),
                    });
                }
            }
            kinds.push(kind);
        }
        Ok((kinds, tbf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_as_the_reference_computes_them() {
        let b = Bucket {
            rate: 125_000,
            burst: 12_500,
        };
        assert_eq!(b.limit(), 15_625);
        // 100 ms at 15.625 ticks per microsecond.
        assert_eq!(b.buffer(15.625), 1_562_500);
        let parms = tbf_parms(125_000, 15_625, 1_562_500);
        assert_eq!(parms.len(), 36);
        assert_eq!(u32_at(&parms, 8), Some(125_000));
        assert_eq!(u32_at(&parms, 24), Some(15_625));
        assert_eq!(u32_at(&parms, 28), Some(1_562_500));
    }
}
