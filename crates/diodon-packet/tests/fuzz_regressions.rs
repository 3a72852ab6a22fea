//! Inputs the fuzz target once crashed on, replayed on every test run.

/// A header that asks for a checksum at offset 0, inside the IP header:
/// completing it there broke the packet. Now refused as bad offsets.
#[test]
fn a_checksum_inside_the_ip_header_is_refused() {
    let input = include_bytes!("../../../fuzz/seeds/packet/checksum-in-ip-header");
    diodon_packet::fuzz(input);
}
