//! Fuzzing the receive path: every datagram the kernel could send, and any other bytes, are
//! walked as [`Netlink::exchange`] walks a reply (message by message, each decoded by
//! netlink-packet-route, an error's extended-ack text looked for) without a panic. Seeds are
//! replies this kernel sent (tests/corpus/netlink): link, address, route and neighbour dumps,
//! acks, and errors with and without the ext-ack text and the capped echo.

use std::path::Path;

use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use proptest::prelude::*;
use testkit::fuzz::{self, check_corpus, junk, mutated, seeds};

use super::ext_ack_text;

fn corpus() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/netlink")
}

/// What the receive loop makes of one datagram: the replies, errnos and ext-ack texts, or the
/// decode error that ends it.
fn walk(rx: &[u8]) -> Result<(), String> {
    let mut offset = 0;
    while offset < rx.len() {
        let raw = &rx[offset..];
        let Ok(nl) = NetlinkBuffer::new_checked(raw) else {
            return Ok(());
        };
        let len = nl.length() as usize;
        let flags = nl.flags();
        if !(16..=raw.len()).contains(&len) {
            return Err(format!(
                "a checked buffer of length {len} in {} bytes",
                raw.len()
            ));
        }
        offset += (len + 3) & !3;
        let raw = &raw[..len];
        let Ok(parsed) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw) else {
            return Ok(());
        };
        match parsed.payload {
            NetlinkPayload::Error(e) => {
                let _ = e.code.map(|c| c.get().abs());
                if let Some(text) = ext_ack_text(raw, flags) {
                    fuzz::short("an ext-ack text", &text, raw.len())?;
                }
                return Ok(());
            }
            NetlinkPayload::Done(_) | NetlinkPayload::Overrun(_) => return Ok(()),
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn kernel_replies_and_their_mutants() {
    check_corpus(&corpus(), walk);
}

#[test]
fn the_kernel_s_ext_ack_text_is_found() {
    let raw = std::fs::read(corpus().join("error-ext-ack-0")).unwrap_or_default();
    let flags = NetlinkBuffer::new_checked(&raw[..])
        .map(|b| b.flags())
        .unwrap_or(0);
    assert_eq!(
        ext_ack_text(&raw, flags).as_deref(),
        Some("Unknown device type")
    );
}

proptest! {
    #![proptest_config(fuzz::config(512))]

    #[test]
    fn arbitrary_datagrams(rx in junk(2048)) {
        walk(&rx).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn mutated_kernel_replies(rx in mutated(seeds(&corpus()))) {
        walk(&rx).map_err(TestCaseError::fail)?;
    }

    /// A reply header the kernel could send in front of arbitrary bytes: the length field
    /// right, the type any of the route family's or the control messages.
    #[test]
    fn framed_arbitrary_messages(
        kind in prop_oneof![0u16..=4, 16u16..=100],
        flags in any::<u16>(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut rx = Vec::with_capacity(16 + body.len());
        rx.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_ne_bytes());
        rx.extend_from_slice(&kind.to_ne_bytes());
        rx.extend_from_slice(&flags.to_ne_bytes());
        rx.extend_from_slice(&[0; 8]);
        rx.extend_from_slice(&body);
        walk(&rx).map_err(TestCaseError::fail)?;
    }
}
