//! Fuzz target: `diodon_filter::fuzzing::rules` (the rule parser, printing
//! back, and the compiled classifier against the reference).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diodon_filter::fuzzing::rules(data));
