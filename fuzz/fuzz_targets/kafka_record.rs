//! Fuzz target: `diodon_proto::fuzzing::kafka_record` (see that function for the invariants).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diodon_proto::fuzzing::kafka_record(data));
