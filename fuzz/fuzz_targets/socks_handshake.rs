#![no_main]
//! Fuzz target: see `egress_proxy::fuzzing::socks_handshake`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| egress_proxy::fuzzing::socks_handshake(data));
