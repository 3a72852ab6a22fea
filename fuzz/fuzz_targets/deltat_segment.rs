//! Fuzz target: `diodon_deltat::fuzzing::deltat_segment` (see that function for the invariants).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diodon_deltat::fuzzing::deltat_segment(data));
