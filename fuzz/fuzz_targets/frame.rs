//! Fuzz target: `diodon_filter::fuzzing::frame` (frame views, flow-key
//! symmetry, decapsulation, packet records; see that function).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diodon_filter::fuzzing::frame(data));
