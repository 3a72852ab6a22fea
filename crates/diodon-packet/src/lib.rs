//! Pure IP packet logic for Diodon's tunnel: no IO, no protocol, no
//! `unsafe`. What a TUN hands over is untrusted bytes; this crate says
//! whether they are an IP packet, finishes what the kernel left to the
//! reader (a partial checksum) and cuts GSO super-packets into packets that
//! fit the receiving side's MTU.
//!
//! ```text
//!  TUN read ──► [virtio_net_hdr] ──► vnet::VnetHdr::parse
//!                     │ gso_type NONE: csum::complete (NEEDS_CSUM)
//!                     │ TCPV4/TCPV6/UDP_L4: gso::segment ─► packets ≤ hdr + gso_size
//!                     ▼
//!               ip::inspect (version, header and total lengths) ─► record
//! ```
//!
//! Modules: [`ip`] (header validation of IPv4 and IPv6 packets), [`vnet`]
//! (the virtio-net header), [`csum`] (Internet checksum, pseudo-headers),
//! [`gso`] (segmentation and checksum completion).
#![forbid(unsafe_code)]

pub mod csum;
pub mod gso;
pub mod ip;
pub mod vnet;

pub use gso::{segment, GsoError};
pub use ip::{inspect, IpInfo, PacketError};
pub use vnet::{VnetHdr, VNET_HDR_LEN};

/// The fuzz target's body: `data` is a virtio-net header and what follows
/// it in one TUN read. Never panics; whatever comes out is a valid IP packet
/// no longer than the input's headers plus one segment.
pub fn fuzz(data: &[u8]) {
    let Some(hdr) = VnetHdr::parse(data) else {
        let _ = inspect(data);
        return;
    };
    let packet = &data[VNET_HDR_LEN..];
    let _ = inspect(packet);
    let mut scratch = Vec::new();
    let limit = packet.len().max(1);
    let _ = segment(&hdr, packet, &mut scratch, |p| {
        assert!(inspect(p).is_ok(), "segment() produced an invalid packet");
        assert!(p.len() <= limit, "a segment longer than its super-packet");
    });
}
