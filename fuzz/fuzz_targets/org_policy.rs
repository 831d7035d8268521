#![no_main]
//! Fuzz target: see `egress_proxy::fuzzing::org_policy`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| egress_proxy::fuzzing::org_policy(data));
