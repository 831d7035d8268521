#![no_main]
//! Fuzz target: see `egress_proxy::fuzzing::request_path`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| egress_proxy::fuzzing::request_path(data));
