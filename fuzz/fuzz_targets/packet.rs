//! Fuzz target: `diodon_packet::fuzz` (a TUN read with the virtio-net
//! header: header parsing, IP validation, checksum completion, GSO
//! segmentation; see that function for the invariants).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diodon_packet::fuzz(data));
