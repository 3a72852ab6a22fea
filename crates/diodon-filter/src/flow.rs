//! Which agent a frame goes to: a symmetric flow key (both directions of a
//! conversation give the same key), its hash, and rendezvous
//! (highest-random-weight) hashing over the agents' names.
//!
//! ```text
//!  Headers ─► FlowKey (canonical: the smaller endpoint first)
//!             TCP/UDP/SCTP…, not a fragment:  VLAN, proto, (addr, port) pair
//!             other IP, fragments:            VLAN, proto, address pair
//!             (FlowMode::IpPair: always       VLAN, address pair)
//!             not IP / malformed:             VLAN, EtherType, MAC pair
//!        ─► hash (64 bit, specified here, stable across versions)
//!        ─► Rendezvous: agent = argmax_i mix(hash ^ seed_i), seed_i = hash(name_i)
//! ```
//!
//! Rendezvous hashing keeps no per-flow state and moves only the flows the
//! new agent wins when one is added (about 1/(N+1) of them); removing an
//! agent moves only its own flows. Fragments of a datagram carry no ports,
//! so in the default 5-tuple mode every fragment (the first included) is
//! keyed by its address pair: all fragments of one datagram reach the same
//! agent. `IpPair` mode keys every IP frame by its address pair, so a host
//! pair's whole traffic (fragmented or not) stays on one agent.

use crate::frame::{Headers, L3};

/// How IP frames are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowMode {
    /// Protocol and both (address, port) endpoints where there are ports.
    #[default]
    FiveTuple,
    /// The address pair only.
    IpPair,
}

/// A canonical, direction-free flow key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Outer VLAN id (4096 untagged).
    pub vlan: u16,
    /// IP protocol, or the EtherType for non-IP frames (with bit 16 set).
    pub kind: u32,
    /// The smaller endpoint: address (IPv4 in the low 32 bits, MAC in the
    /// low 48) and port.
    pub a: (u128, u16),
    /// The larger endpoint.
    pub b: (u128, u16),
}

impl FlowKey {
    /// The key of a frame.
    #[expect(
        clippy::many_single_char_names,
        reason = "h, x, y, a, b as in the diagram above"
    )]
    pub fn of(h: &Headers, mode: FlowMode) -> FlowKey {
        let vlan = h.vlan.unwrap_or(4096);
        let (x, y, kind) = match h.l3 {
            L3::V4 { .. } | L3::V6 { .. } => {
                let (s, d) = h.l3.addrs();
                // IPv6 addresses and IPv4 ones share the integer space: the
                // kind keeps them apart.
                let fam = u32::from(h.l3.kind()) << 8;
                match (mode, h.ports, h.is_fragment()) {
                    (FlowMode::FiveTuple, Some((sp, dp)), false) => {
                        let p = u32::from(h.proto.unwrap_or(0));
                        ((s, sp), (d, dp), fam | p)
                    }
                    (FlowMode::FiveTuple, _, _) => {
                        ((s, 0), (d, 0), fam | u32::from(h.proto.unwrap_or(0)))
                    }
                    (FlowMode::IpPair, _, _) => ((s, 0), (d, 0), fam),
                }
            }
            L3::NonIp | L3::Malformed => (
                (u128::from(h.src_mac.to_u64()), 0),
                (u128::from(h.dst_mac.to_u64()), 0),
                0x1_0000 | u32::from(h.ethertype),
            ),
        };
        let (a, b) = if x <= y { (x, y) } else { (y, x) };
        FlowKey { vlan, kind, a, b }
    }

    /// The key's 64-bit hash.
    pub fn hash(&self) -> u64 {
        let mut h = Hasher::new();
        h.word(u64::from(self.vlan) << 32 | u64::from(self.kind));
        h.word(self.a.0 as u64);
        h.word((self.a.0 >> 64) as u64);
        h.word(u64::from(self.a.1) << 16 | u64::from(self.b.1));
        h.word(self.b.0 as u64);
        h.word((self.b.0 >> 64) as u64);
        h.finish()
    }
}

/// A small specified hash: multiply-rotate over 64-bit words, then the
/// MurmurHash3 finalizer. Its values are pinned by tests so that agent
/// assignment stays the same across versions.
#[derive(Debug, Clone, Copy)]
pub struct Hasher(u64);

impl Hasher {
    const SEED: u64 = 0x9e37_79b9_7f4a_7c15;
    const MUL: u64 = 0xff51_afd7_ed55_8ccd;

    /// A fresh hasher.
    pub fn new() -> Hasher {
        Hasher(Self::SEED)
    }

    /// Feeds one word.
    pub fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(Self::MUL).rotate_left(29);
    }

    /// Feeds bytes (8 at a time, the tail zero-padded, then the length).
    pub fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
        let mut w = [0u8; 8];
        w[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.word(u64::from_le_bytes(w));
        self.word(b.len() as u64);
    }

    /// The hash.
    pub fn finish(&self) -> u64 {
        mix(self.0)
    }
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher::new()
    }
}

/// MurmurHash3's 64-bit finalizer.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Rendezvous hashing over named agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    seeds: Vec<u64>,
}

impl Rendezvous {
    /// Agents by name, in order (the index is the agent number).
    pub fn new<S: AsRef<str>>(names: &[S]) -> Rendezvous {
        Rendezvous {
            seeds: names
                .iter()
                .map(|n| {
                    let mut h = Hasher::new();
                    h.bytes(n.as_ref().as_bytes());
                    h.finish()
                })
                .collect(),
        }
    }

    /// Number of agents.
    pub fn len(&self) -> usize {
        self.seeds.len()
    }

    /// Whether there are no agents.
    pub fn is_empty(&self) -> bool {
        self.seeds.is_empty()
    }

    /// The agent for a flow hash (0 when there are no agents).
    #[inline]
    pub fn pick(&self, flow: u64) -> usize {
        let mut best = (0u64, 0usize);
        for (i, &s) in self.seeds.iter().enumerate() {
            let w = mix(flow ^ s);
            if i == 0 || w > best.0 {
                best = (w, i);
            }
        }
        best.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Fragment, Mac};

    fn tcp(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Headers {
        Headers {
            dst_mac: Mac([2, 0, 0, 0, 0, 2]),
            src_mac: Mac([2, 0, 0, 0, 0, 1]),
            vlan: None,
            tags: 0,
            ethertype: 0x0800,
            l3: L3::V4 { src, dst },
            proto: Some(6),
            fragment: Fragment::No,
            ports: Some((sp, dp)),
        }
    }

    #[test]
    fn the_hash_is_pinned() {
        // Agent assignment must not change between versions: these values
        // are part of the behaviour.
        let k = FlowKey::of(
            &tcp([10, 0, 0, 1], 1234, [10, 0, 1, 1], 80),
            FlowMode::FiveTuple,
        );
        assert_eq!(k.hash(), 0xa468_16eb_7ff3_cb30, "{:#x}", k.hash());
        let r = Rendezvous::new(&["a", "b", "c"]);
        assert_eq!(r.pick(k.hash()), 1);
    }

    #[test]
    fn both_directions_share_a_key() {
        let a = FlowKey::of(
            &tcp([10, 0, 0, 1], 1234, [10, 0, 1, 1], 80),
            FlowMode::FiveTuple,
        );
        let b = FlowKey::of(
            &tcp([10, 0, 1, 1], 80, [10, 0, 0, 1], 1234),
            FlowMode::FiveTuple,
        );
        assert_eq!(a, b);
        let c = FlowKey::of(
            &tcp([10, 0, 0, 1], 1235, [10, 0, 1, 1], 80),
            FlowMode::FiveTuple,
        );
        assert_ne!(a, c);
        let p = FlowKey::of(
            &tcp([10, 0, 0, 1], 1235, [10, 0, 1, 1], 80),
            FlowMode::IpPair,
        );
        assert_eq!(
            p,
            FlowKey::of(&tcp([10, 0, 1, 1], 1, [10, 0, 0, 1], 2), FlowMode::IpPair)
        );
    }

    #[test]
    fn fragments_follow_their_address_pair() {
        let mut first = tcp([10, 0, 0, 1], 1234, [10, 0, 1, 1], 80);
        first.fragment = Fragment::First;
        let mut later = first;
        later.fragment = Fragment::Later;
        later.ports = None;
        assert_eq!(
            FlowKey::of(&first, FlowMode::FiveTuple),
            FlowKey::of(&later, FlowMode::FiveTuple)
        );
    }
}
